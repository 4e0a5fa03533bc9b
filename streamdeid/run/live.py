"""A live feed (an RTSP camera, a device, a live pipe) recorded into a file, segments, stdout or a push."""

from __future__ import annotations

from pathlib import Path

from ..config import PipelineConfig
from ..live import LiveConfig, run_live
from ..render import FrameRenderer
from ..types import StreamdeidError
from ..vault import vault_path_for
from .result import RunResult, track_observers


def run_live_feed(src: str, out: str, config: PipelineConfig, live: LiveConfig, renderer: FrameRenderer, *,
                  stream: bool, vault_factory) -> RunResult:
    """Record until the feed ends, ``live.stop_after`` seconds or SIGINT (``LiveSourceLost`` when it stays
    unreachable). ``vault_factory``: one vault per recorded segment, None for none (the runner decides)."""
    observers, closers = track_observers(config)  # --export-tracks
    try:
        summary = run_live(src, out, config, live, renderer=renderer, vault_factory=vault_factory,
                           observers=observers)
    finally:
        for close in closers:
            close()
    vaults = [vault_path_for(p) for p in summary.segments] if vault_factory is not None else []
    return RunResult(out if stream else Path(out), summary, segment_vaults=vaults)


def check_live_output(dst) -> str:
    if dst is None:
        raise StreamdeidError("a live input needs an output: -o FILE, -o rtsp://..., or -o - for stdout")
    return str(dst)
