"""``run_live``: anonymize a never-ending source with bounded latency.

Threads: the reader (LiveSource -> FreshQueue, never blocks), the caller's
thread (detect, track, look-ahead, render: the expensive part) and the encoder
(ThreadedSink -> SegmentRecorder). Frames that could no longer be emitted
within ``max_latency`` are dropped whole before detection; every emitted frame
went through the renderer, so nothing unanonymized is ever written.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from streamdeid.anonymize import create_anonymizer
from streamdeid.config import PipelineConfig
from streamdeid.lookahead import LookaheadBuffer
from streamdeid.pipeline import FaceStage, FrameObserver, RenderStage, RunSummary, ThreadedSink
from streamdeid.render import FrameRenderer
from streamdeid.types import Frame, FrameResult, StreamdeidError
from streamdeid.video.reader import AudioPacket

from .config import LiveConfig
from .fresh import END, FreshQueue, start_reader
from .outputs import RenderedFrame, SegmentHook, SegmentRecorder, VaultFactory
from .source import Discontinuity, LiveSource, LiveSourceLost, Outage
from .stats import LiveStats

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1  # how often the processing loop wakes when no frame arrives
MAX_LOOPS = 10**12  # hard bound on processing-loop iterations (years at 30 fps)
EMA_ALPHA = 0.1  # smoothing of the per-frame processing time estimate
SCAN_MAX_LOAD = 0.6  # the small-face scan runs while processing takes at most this share of a frame interval


@dataclass
class LiveSummary(RunSummary):
    """A ``RunSummary`` plus what only a live run has."""

    frames_in: int = 0  # frames decoded from the source
    dropped: int = 0  # frames dropped whole (latency bound), never emitted
    reconnects: int = 0
    outages: list[Outage] = field(default_factory=list)
    segments: list[Path] = field(default_factory=list)
    stop_reason: str = "end"  # end | signal | stop_after | source_lost | error
    latency_mean: float = 0.0  # seconds from frame arrival to hand-off to the encoder
    latency_p95: float = 0.0
    latency_max: float = 0.0
    lookahead_frames: int = 0

    @property
    def exit_code(self) -> int:
        """0: clean end (including SIGINT/SIGTERM); 3: source lost after all retries."""
        return LiveSourceLost.exit_code if self.stop_reason == "source_lost" else 0

    def line(self) -> str:
        text = super().line()
        text += (f", {self.dropped} dropped, {self.reconnects} reconnects, "
                 f"latency mean {self.latency_mean * 1000:.0f} ms / p95 {self.latency_p95 * 1000:.0f} ms")
        if self.segments:
            text += f", {len(self.segments)} segment(s)"
        return text


def live_lookahead_frames(config: PipelineConfig, live: LiveConfig, fps: float) -> int:
    """File mode's look-ahead, shrunk to a fraction of the latency bound."""
    wanted = round(max(0.0, config.lookahead_seconds) * fps)
    allowed = math.floor(max(0.0, live.lookahead_fraction) * live.max_latency * fps)
    return max(0, min(wanted, allowed))


def default_renderer(config: PipelineConfig) -> FrameRenderer:
    return FrameRenderer(create_anonymizer(config.anonymize), align=config.align,
                         blend=config.blend, anonymize=config.anonymize)


class _Signals:
    """SIGINT/SIGTERM set ``stop`` (finish cleanly); a second one aborts."""

    def __init__(self, stop: threading.Event, summary: LiveSummary) -> None:
        self.stop, self.summary = stop, summary
        self._saved: dict[int, object] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        if self.stop.is_set() and self.summary.stop_reason == "signal":
            raise KeyboardInterrupt  # second signal: stop waiting for a clean end
        log.warning("%s: finishing the current segment and stopping", signal.Signals(signum).name)
        self.summary.stop_reason = "signal"
        self.stop.set()

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)


def run_live(
    source: str,
    output: str,
    config: PipelineConfig,
    live: LiveConfig | None = None,
    *,
    observers: Iterable[FrameObserver] = (),
    renderer: FrameRenderer | None = None,
    on_segment_open: SegmentHook | None = None,
    on_segment_close: SegmentHook | None = None,
    vault_factory: VaultFactory | None = None,
    stop: threading.Event | None = None,
) -> LiveSummary:
    """Anonymize ``source`` (``rtsp://...``, ``/dev/videoN``, ``-``) into ``output``.

    ``output`` is a file (rotated into segments when ``live.segment_time`` is
    set), ``-`` (stdout, MPEG-TS/Matroska) or a push URL (``rtsp://...``).
    Returns when the source ends (stdin), on SIGINT/SIGTERM, when ``stop`` is
    set or after ``live.stop_after`` seconds, always with the open segment
    finished. Raises ``LiveSourceLost`` (``exit_code`` 3, ``.summary``
    attached) when the source stays unreachable through all retries.
    ``observers`` see every rendered frame (vault, audit), ``renderer``
    replaces the default one (e.g. with per-track keys), ``vault_factory``
    opens one recovery vault per recorded segment.
    """
    live = live or LiveConfig()
    stop = stop or threading.Event()
    summary = LiveSummary()
    with _Signals(stop, summary):
        try:
            _run(source, output, config, live, summary, stop, list(observers), renderer,
                 on_segment_open, on_segment_close, vault_factory)
        except LiveSourceLost as exc:
            summary.stop_reason = "source_lost"
            exc.summary = summary  # type: ignore[attr-defined]
            raise
        except KeyboardInterrupt:
            summary.stop_reason = "signal"
            summary.interrupted = True
    return summary


def _run(source, output, config, live, summary, stop, observers, renderer,
         on_segment_open, on_segment_close, vault_factory) -> None:
    src = LiveSource(source, live, stop)
    try:
        src.connect()
    except LiveSourceLost:
        if stop.is_set():  # signalled while still waiting for the camera
            return
        raise
    fps = src.fps
    stats = LiveStats(live.stats_interval, live.stats_json)
    renderer = renderer or default_renderer(config)
    summary.lookahead_frames = live_lookahead_frames(config, live, fps)
    state = {"proc": 1.0 / fps, "cut": False, "late": 0}
    # The small-face scan costs several fast passes at once: on a live feed it runs only while the
    # smoothed processing time per frame is at most SCAN_MAX_LOAD of the frame interval, so a slow machine
    # skips scans (counted in the summary) rather than dropping frames. On this 2-core machine a 30 fps
    # 640x360 feed dropped 142 of 260 frames with every scan run.
    stage = FaceStage(config, fps, guarded=renderer.guard is not None, lookahead_frames=summary.lookahead_frames,
                      scan_gate=lambda: state["proc"] * fps <= SCAN_MAX_LOAD)
    buffer = LookaheadBuffer(summary.lookahead_frames)
    render = RenderStage(renderer, observers, summary)
    stream_options = {"rtsp_transport": live.transport} if output.lower().startswith("rtsp") else None
    recorder = SegmentRecorder(output, src, config.output, segment_time=live.segment_time,
                               stream_container=live.stream_container, stream_options=stream_options,
                               on_segment_open=on_segment_open, on_segment_close=on_segment_close,
                               vault_factory=vault_factory)
    sink = ThreadedSink(recorder.write, summary.times)
    queue = FreshQueue(capacity=max(8, math.ceil(2 * fps * live.max_latency)))
    arrivals: dict[int, float] = {}
    lookahead_wait = summary.lookahead_frames / fps

    def budget() -> float:
        # A frame taken now is emitted after its own processing plus the
        # look-ahead wait; it must still be within max_latency then.
        proc = state["proc"]
        wait = summary.lookahead_frames * max(1.0 / fps, proc)
        return max(0.0, live.max_latency - proc - wait)

    def finish(result: FrameResult) -> None:
        arrived = arrivals.get(result.frame.index)
        if arrived is not None and time.monotonic() - arrived > live.max_latency:
            # Late after detection (burst, stall, slow encoder): still dropped
            # whole before anonymization, so the bound holds for every emitted frame.
            arrivals.pop(result.frame.index, None)
            state["late"] += 1
            return
        pasted = render(result)
        sink.put(RenderedFrame(result.frame, pasted) if vault_factory else result.frame)
        arrived = arrivals.pop(result.frame.index, None)
        latency = time.monotonic() - arrived if arrived is not None else 0.0
        stats.frame_out(len(result.faces), latency)

    def track(frame: Frame) -> FrameResult:
        cut, state["cut"] = state["cut"], False
        return stage(frame, summary.times, force_cut=cut)

    def on_item(item: object) -> None:
        if isinstance(item, Frame):
            stats.frame_in()

    reader = start_reader(src, queue, stop, on_item)
    started = time.monotonic()
    ok = False
    try:
        for _ in range(MAX_LOOPS):
            now = time.monotonic()
            if live.stop_after is not None and now - started >= live.stop_after and not stop.is_set():
                summary.stop_reason = "stop_after"
                stop.set()
            if stop.is_set():
                break
            stats.maybe_report(queue.dropped + state["late"], src.counters.reconnects, src.counters.connected)
            got = queue.take(POLL_SECONDS, budget)
            if got is None:
                # Input stalled (outage): do not hold processed frames past the
                # look-ahead wait, their back-fill chance is over anyway.
                if len(buffer):
                    oldest = min(arrivals.values(), default=now)
                    if time.monotonic() - oldest > lookahead_wait + POLL_SECONDS:
                        for ready in buffer.drain():
                            finish(ready)
                continue
            if got is END:
                if queue.error is not None:
                    raise queue.error
                break
            item = got.item
            if isinstance(item, Discontinuity):
                for ready in buffer.drain():  # no back-fill across a gap
                    finish(ready)
                state["cut"] = True  # detect on the first frame after the gap, no back-fill
                continue
            if isinstance(item, AudioPacket):
                sink.put(item)
                continue
            t0 = time.perf_counter()
            arrivals[item.index] = got.arrived
            for ready in buffer.push(track(item)):
                finish(ready)
            spent = time.perf_counter() - t0
            state["proc"] += EMA_ALPHA * (spent - state["proc"])
        ok = True
    finally:
        stop.set()
        try:
            for ready in buffer.drain():
                finish(ready)
        finally:
            try:
                sink.close()
            finally:
                summary.segments = recorder.close(success=ok or isinstance(queue.error, StreamdeidError))
                reader.join(timeout=live.connect_timeout + live.read_timeout + 1.0)
                if reader.is_alive():
                    log.warning("reader thread still blocked in FFmpeg; leaving it (daemon)")
                else:
                    src.close()
                summary.frames_in = src.counters.frames_in
                summary.dropped = queue.dropped + state["late"]
                summary.reconnects = src.counters.reconnects
                summary.outages = list(src.counters.outages)
                render.close()
                summary.smallest_face, summary.scans_skipped = stage.smallest_face, stage.scans_skipped
                summary.seconds = time.monotonic() - started
                lat = sorted(stats.latencies)
                if lat:
                    summary.latency_mean = sum(lat) / len(lat)
                    summary.latency_p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
                    summary.latency_max = lat[-1]
                stats.maybe_report(queue.dropped + state["late"], src.counters.reconnects, src.counters.connected, force=True)
                stats.close()
