"""Python API mirroring the CLI: ``streamdeid.anonymize(src, dst, config)`` and ``recover(...)``.

Both are thin: ``anonymize`` is a ``Runner`` (run/runner.py) made from its arguments, or the one given.
"""

from __future__ import annotations

import os
from pathlib import Path

from .checks import PATH, ArgumentError, check_arg
from .config import PipelineConfig
from .live.config import LiveConfig
from .restore import MODEL_MODE_CAVEAT, RecoverResult, recover
from .run import RunOptions, RunResult, Runner

__all__ = ["MODEL_MODE_CAVEAT", "RecoverResult", "RunResult", "Runner", "anonymize", "recover"]


def anonymize(src: str, dst: str | Path | None = None, config: PipelineConfig | None = None, *,
              key_file: str | None = None, new_key: bool = False, vault: bool = True,
              store_crops: bool = True, skip_existing: bool = False, live: LiveConfig | None = None,
              runner: Runner | None = None) -> RunResult:
    """Anonymize a video file, image, folder of them, ``"-"`` (stdin), or a live feed.

    A live feed (``rtsp://...`` and other URLs, ``/dev/videoN``; any input when ``live`` is given, e.g.
    a live pipe on stdin) is recorded into ``dst`` (a file, rotated into segments by
    ``live.segment_time``; ``-``; or a push URL) until it ends, ``live.stop_after`` seconds or SIGINT, with
    a vault beside each segment when a key file is given; ``LiveSourceLost`` when it stays unreachable.

    With ``key_file`` (a master key; ``new_key`` creates it when missing) every
    track gets its own key and a recovery vault ``<output>.sdv`` is written
    beside a video output (``vault=False``: none). Without a key file the run
    uses an ephemeral key that is never stored: the output is irreversible.

    A folder is processed file by file: a file that fails is recorded in
    ``RunResult.files`` and the run goes on. ``skip_existing`` (folders only)
    skips a file whose output (and vault) a previous run finished, and redoes
    one it left incomplete.

    ``runner``: an existing ``Runner`` (its options and loaded models; the other arguments but ``dst`` are
    then ignored), to anonymize many inputs without loading the models again.
    """
    # wrong types are named here, before any work (``ArgumentError``: a TypeError and a StreamdeidError)
    if config is not None and not isinstance(config, PipelineConfig):
        raise ArgumentError(f"config must be a streamdeid.PipelineConfig (e.g. PipelineConfig() with "
                            f"config.detect.score_threshold = 0.5), not {type(config).__name__}")
    for name, value, hint in (("src", src, PATH), ("dst", dst, PATH | None), ("config", config, PipelineConfig | None),
                              ("key_file", key_file, PATH | None), ("new_key", new_key, bool), ("vault", vault, bool),
                              ("store_crops", store_crops, bool), ("skip_existing", skip_existing, bool),
                              ("live", live, LiveConfig | None), ("runner", runner, Runner | None)):
        check_arg(name, value, hint)
    src = os.fspath(src)
    if runner is None:
        runner = Runner(RunOptions(config or PipelineConfig(), key_file=key_file, new_key=new_key, vault=vault,
                                   store_crops=store_crops, skip_existing=skip_existing,
                                   live=live or LiveConfig(), force_live=live is not None))
    return runner.run(src, dst)
