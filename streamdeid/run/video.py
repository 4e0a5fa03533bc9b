"""One video (a file, or stdin) into a file or a stream (stdout, a push URL), with its vault.

Four threads: decode, the ``Pipeline`` (detect and track; render on its own thread), encode. The runner
decides everything around it (renderer, keys, whether and where a vault is written) and passes it in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from pathlib import Path

from tqdm import tqdm

from .. import stages
from ..anonymizers import reversible_method
from ..config import PipelineConfig, SelectConfig
from ..edits import EditPlan
from ..keys import RunKeys
from ..pipeline import Pipeline
from ..redact import redact
from ..render import FrameRenderer
from ..summary import RunSummary
from ..threads import ThreadedSink, threaded_source
from ..types import StreamdeidError
from ..vault import vault_path_for, video_id_tag
from .recording import VaultRecorder, open_vault_writer, pipeline_meta, vault_quality
from ..video.reader import open_source
from ..video.stream_writer import StreamWriter
from ..video.writer import VideoWriter
from .outcome import output_video_id, vault_video_id
from .result import RunResult, track_observers

log = logging.getLogger(__name__)


def run_video(src: str, out: Path | str, config: PipelineConfig, renderer: FrameRenderer, keys: RunKeys, *,
              vault_path: Path | None, store_crops: bool, edits: EditPlan | None = None) -> RunResult:
    """``out``: a file path, or ``-``/a URL (stdout or a push, never with a vault). ``renderer`` is built
    (its model loaded) before this is called, so a missing model fails before any output exists.
    ``edits``: a reviewer's corrections (--edits), its removals decided by ``track_pass``."""
    if vault_path is not None and vault_path.exists() and not config.output.overwrite:
        raise StreamdeidError(f"{vault_path} exists; pass --overwrite to replace it")
    replacing = isinstance(out, Path) and out.is_file()  # with --overwrite (the writer refuses it otherwise)
    replaced_id = output_video_id(out) if replacing else None
    reversible = reversible_method(renderer.anonymizer)
    if vault_path is not None and not store_crops and reversible is None:
        raise StreamdeidError(f"--no-crops stores no face pixels, so only a reversible anonymizer (dbaf) can be "
                              f"recovered from its vault, not {renderer.anonymizer.name}")
    # a vault of face pixels stores the decoder's own planes (video/planes.py)
    with open_source(src, keep_planes=vault_path is not None and store_crops) as source:
        writer = _open_writer(out, source, config, keys, edits.edits.digest() if edits is not None else None)
        if isinstance(out, Path):
            _drop_stale_vault(vault_path_for(writer.partial_path), "an interrupted run's partial output, "
                              "which this run writes over")
        # the vault is written beside the partial output and moved beside the output once that is in place:
        # an earlier output's vault (--overwrite) stays until then, whatever stops this run
        writing = vault_path_for(writer.partial_path) if vault_path is not None and isinstance(out, Path) \
            else vault_path
        vault_writer = None
        try:
            summary = RunSummary()
            observers, closers = track_observers(config, summary, keys.video_id)
            if vault_path is not None:
                vault_writer = open_vault_writer(writing, keys, source=src, output=out,
                                                 store_crops=store_crops, overwrite=config.output.overwrite,
                                                 pipeline=pipeline_meta(config, renderer.anonymizer),
                                                 quality=vault_quality(config.output),
                                                 fps=float(source.average_rate or 25))
                observers.append(VaultRecorder(vault_writer, reversible))
        except BaseException:
            writer.close(success=False)
            raise
        ok = False
        try:
            ok = _run_pipeline(src, source, writer.write, config, renderer, observers, summary, edits)
            if summary.interrupted:
                kept = writer.abort_keep_partial()  # None for a stream: what was sent is sent
                out = out if kept is None else Path(kept)
                log.warning("interrupted: %d frames written to %s", summary.frames, redact(str(out)))
        finally:
            for close in closers:  # the audit log replaces an earlier one only with the output
                close(publish=ok and not summary.interrupted, discard=not ok and not summary.interrupted)
            # the vault is sealed before the output is published: a vault that cannot be finished (a full disk)
            # leaves no output that looks complete, and an output that cannot be finished leaves no vault
            try:
                sealed = _seal_vault(vault_writer, writing, ok or summary.interrupted)
            except BaseException:
                if not summary.interrupted:
                    writer.close(success=False)
                raise
            if not summary.interrupted:
                try:
                    writer.close(success=ok)
                except BaseException:
                    if sealed:
                        writing.unlink(missing_ok=True)
                    raise
            vault_path = _place_vault(sealed, writing, vault_path, summary.interrupted, out)
    if ok and isinstance(out, Path) and vault_path is None and not summary.interrupted:
        _settle_old_vault(out, replaced_id)
    return RunResult(out, summary, vault_path)


def _settle_old_vault(out: Path, replaced_id: str | None) -> None:
    """A run that wrote ``out`` and no vault, and a vault beside it. The replaced output's (--overwrite; its
    video id ``replaced_id``) belongs to an output that no longer exists and would only make ``recover`` fail
    on the new one: removed, once the new output is in place (a failed run leaves both as they were). Any
    other vault is another video's, the only way back to that video's faces: kept, and said (it was removed
    as the replaced output's)."""
    beside = vault_path_for(out)
    if not beside.is_file():
        return
    if replaced_id is not None and vault_video_id(beside) == replaced_id:
        _drop_stale_vault(beside, "the output this run replaced (this output has none)")
    else:
        log.warning("%s is not this output's vault (another video's, or unreadable): left as it was", beside)


def _drop_stale_vault(stale: Path, whose: str) -> None:
    if stale.is_file():
        stale.unlink()
        log.warning("removed %s: the vault of %s", stale, whose)


def _open_writer(out: Path | str, source, config: PipelineConfig, keys: RunKeys, edits: str | None) -> VideoWriter:
    """A file output is tagged with the run's video id (recover checks it against the vault's) and the digest of
    the edits it applies (``edits``; the review checks it)."""
    if isinstance(out, Path):
        return VideoWriter(out, source, config.output, metadata=video_id_tag(keys.video_id, edits))
    return StreamWriter(out, source, config.output)


def _run_pipeline(src: str, source, write, config: PipelineConfig, renderer: FrameRenderer,
                  observers: list, summary: RunSummary, edits: EditPlan | None = None) -> bool:
    """Decode, the ``Pipeline`` and encode on four threads. True: every frame was written; False: Ctrl-C
    (``summary.interrupted``; the frames already taken are written, the caller keeps the partial output)."""
    bar = tqdm(total=source.frame_count, unit="frame", disable=not config.progress,
               desc=Path(src).name if src != "-" else "stdin", dynamic_ncols=True)
    sink = ThreadedSink(write, summary.times)

    def emit(result, _pasted) -> None:
        sink.put(result.frame)
        bar.update(1)

    t0 = time.perf_counter()
    try:
        pipeline = Pipeline(config, renderer, fps=source.pace, emit=emit,
                            observers=observers, summary=summary, render_thread=True, edits=edits)
        pipeline.run(threaded_source(source, summary.times), sink.put)
        sink.close()
        return True
    except KeyboardInterrupt:
        summary.interrupted = True
        sink.close()
        return False
    finally:
        summary.seconds = time.perf_counter() - t0
        bar.close()


def track_pass(src: str, config: PipelineConfig, renderer: FrameRenderer, edits: EditPlan) -> None:
    """``src`` through the pipeline ``run_video`` builds, detecting and tracking only: every frame is dropped
    as it leaves the look-ahead (``admit``), after ``edits`` decided its removals (--edits: the output run then
    knows every removed track from its first frame). Nothing is rendered, written or judged (--keep/--only
    do not change tracks). Ctrl-C stops it before any output exists."""
    quiet = dataclasses.replace(config, select=SelectConfig(), export_tracks=None)
    t0 = time.perf_counter()
    with open_source(src) as source, _said_by_the_output_run(stages.log):
        summary = RunSummary()
        pipeline = Pipeline(quiet, renderer, fps=source.pace, emit=lambda _r, _p: None,
                            summary=summary, admit=lambda _r: False, edits=edits)
        pipeline.run(threaded_source(source, summary.times), lambda _item: None)
    log.info("edits: removals decided in a tracking pass over %s (%.1f s)", redact(src), time.perf_counter() - t0)


@contextlib.contextmanager
def _said_by_the_output_run(logger: logging.Logger):
    """Warnings ``logger`` gives on this thread are dropped while the block runs: the tracking pass meets the
    same video as the output run after it, which says them (--min-face against the picture was said twice)."""
    here = threading.get_ident()

    def keep(record: logging.LogRecord) -> bool:
        return record.thread != here or record.levelno > logging.WARNING

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def _seal_vault(vault_writer, writing: Path | None, keep: bool) -> bool:
    """Finish the vault at ``writing`` when the run's output is kept (it finished, or Ctrl-C left it partial);
    else abort it and delete it. A vault that cannot be finished is deleted. True when one was sealed."""
    if vault_writer is None or writing is None:
        return False
    if not keep:
        vault_writer.abort()
        writing.unlink(missing_ok=True)
        return False
    try:
        vault_writer.close()
    except BaseException:
        writing.unlink(missing_ok=True)
        raise
    return True


def _place_vault(sealed: bool, writing: Path | None, vault_path: Path | None, interrupted: bool,
                 out: Path) -> Path | None:
    """Put the sealed vault beside the published output (``vault_path``, replacing an earlier one) or, on
    Ctrl-C, beside the partial one."""
    if not sealed or vault_path is None or writing is None:
        return None
    target = vault_path_for(out) if interrupted else vault_path
    if writing != target:
        os.replace(writing, target)
    return target
