"""``run_live``: anonymize a never-ending source with bounded latency.

Threads: the reader (LiveSource -> FreshQueue, never blocks), the caller's
thread (the ``Pipeline``: detect, track, look-ahead, render: the expensive part) and the encoder
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

from streamdeid.config import PipelineConfig
from streamdeid.pipeline import Pipeline, build_renderer
from streamdeid.stages import FrameObserver
from streamdeid.summary import RunSummary
from streamdeid.threads import ThreadedSink
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
PROBE_SECONDS = 2.0  # a feed whose every frame is dropped gets one processed this often, to time it again
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


class _Signals:
    """SIGINT/SIGTERM set ``stop`` (finish cleanly); a second one is said and ignored."""

    def __init__(self, stop: threading.Event, summary: LiveSummary) -> None:
        self.stop, self.summary = stop, summary
        self._saved: dict[int, object] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        if self.stop.is_set() and self.summary.stop_reason == "signal":
            # a second signal while the run finishes its segment: raised here it landed anywhere, and closing an
            # encoder the encode thread still fed hung the run (1 in 10) or left an unfinished file reported as
            # written (3 in 10). Finishing takes a second or two; SIGKILL still ends it at once.
            log.warning("%s: already stopping (finishing the segment)", signal.Signals(signum).name)
            return
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


@dataclass
class LiveHooks:
    """What the caller plugs into a live run, besides the config (see ``run_live``)."""

    observers: list[FrameObserver] = field(default_factory=list)
    renderer: FrameRenderer | None = None  # None: build_renderer(config), no per-track keys
    on_segment_open: SegmentHook | None = None
    on_segment_close: SegmentHook | None = None
    vault_factory: VaultFactory | None = None


@dataclass
class _Pacing:
    """How the processing loop keeps up with the feed (the caller's thread only)."""

    proc: float  # smoothed seconds of processing per frame (EMA_ALPHA)
    cut: bool = False  # the next frame follows a gap: detect on it, no back-fill across the gap
    late: int = 0  # frames dropped whole after detection, already past the latency bound
    last_taken: float = field(default_factory=time.monotonic)  # when a frame was last taken to process


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
    hooks = LiveHooks(list(observers), renderer, on_segment_open, on_segment_close, vault_factory)
    with _Signals(stop, summary):
        try:
            _run(source, output, config, live, summary, stop, hooks)
        except LiveSourceLost as exc:
            summary.stop_reason = "source_lost"
            exc.summary = summary  # type: ignore[attr-defined]
            raise
        except KeyboardInterrupt:
            summary.stop_reason = "signal"
            summary.interrupted = True
    return summary


def _run(source: str, output: str, config: PipelineConfig, live: LiveConfig, summary: LiveSummary,
         stop: threading.Event, hooks: LiveHooks) -> None:
    if output != "-" and "://" not in output and not Path(output).parent.is_dir():  # before the camera's wait
        raise StreamdeidError(f"output folder does not exist: {Path(output).parent}")
    src = LiveSource(source, live, stop, keep_planes=hooks.vault_factory is not None)  # segment vaults: planes
    try:
        src.connect()
    except LiveSourceLost:
        if stop.is_set():  # signalled while still waiting for the camera
            return
        raise
    run = _LiveRun(src, output, config, live, summary, stop, hooks)
    ok = False
    try:
        run.loop()
        ok = True
    finally:
        run.close(ok)


class _LiveRun:
    """One connected live run: the reader thread feeds ``queue``, ``loop`` pushes its frames through the
    ``Pipeline`` on the caller's thread, and the encoder thread (``sink``) writes them to ``recorder``."""

    def __init__(self, src: LiveSource, output: str, config: PipelineConfig, live: LiveConfig,
                 summary: LiveSummary, stop: threading.Event, hooks: LiveHooks) -> None:
        fps = src.fps
        self.src, self.live, self.summary, self.stop, self.fps = src, live, summary, stop, fps
        self.stats = LiveStats(live.stats_interval, live.stats_json)
        summary.lookahead_frames = live_lookahead_frames(config, live, fps)
        # (a guess until frames are timed: a frame interval, but at most a quarter of the latency bound; at 1 fps
        # and --max-latency 1 it left no time for any frame, so none was taken to correct it)
        self.pacing = _Pacing(proc=min(1.0 / fps, live.max_latency / 4))
        self.keep_pasted = hooks.vault_factory is not None  # the segment vaults record each paste
        self.arrivals: dict[int, float] = {}  # frame index -> when the reader took it
        # The small-face scan costs several fast passes at once: on a live feed it runs only while the
        # smoothed processing time per frame is at most SCAN_MAX_LOAD of the frame interval, so a slow machine
        # skips scans (counted in the summary) rather than dropping frames. On this 2-core machine a 30 fps
        # 640x360 feed dropped 142 of 260 frames with every scan run.
        # Each frame is rendered as it leaves the look-ahead (batch 1): batching would add latency.
        self.pipeline = Pipeline(config, hooks.renderer or build_renderer(config), fps=fps, emit=self._emit,
                                 summary=summary, observers=hooks.observers,
                                 lookahead_frames=summary.lookahead_frames, batch_frames=1, admit=self._admit,
                                 scan_gate=lambda: self.pacing.proc * fps <= SCAN_MAX_LOAD)
        # Pushing to an RTSP server: "auto" leaves the order to FFmpeg's muxer (UDP, then TCP where the server
        # answers 461), since the muxer connects on its first packet, past where a retry could go.
        pushing = output.lower().startswith("rtsp") and live.transport != "auto"
        stream_options = {"rtsp_transport": live.transport} if pushing else None
        self.recorder = SegmentRecorder(output, src, config.output, segment_time=live.segment_time,
                                        stream_container=live.stream_container, stream_options=stream_options,
                                        on_segment_open=hooks.on_segment_open,
                                        on_segment_close=hooks.on_segment_close, vault_factory=hooks.vault_factory)
        self.sink = ThreadedSink(self.recorder.write, summary.times)
        self.queue = FreshQueue(capacity=max(8, math.ceil(2 * fps * live.max_latency)))
        self.reader = start_reader(src, self.queue, stop, self._on_read)
        self.started = time.monotonic()

    def loop(self) -> None:
        """Take frames until the source ends, ``stop`` is set or ``live.stop_after`` has passed."""
        for _ in range(MAX_LOOPS):
            now = time.monotonic()
            after = self.live.stop_after
            if after is not None and now - self.started >= after and not self.stop.is_set():
                self.summary.stop_reason = "stop_after"
                self.stop.set()
            if self.stop.is_set():
                break
            self._report()
            got = self.queue.take(POLL_SECONDS, self._budget)
            if got is None:
                self._stalled(now)
                continue
            if got is END:
                if self.queue.error is not None:
                    raise self.queue.error
                break
            self._take(got.item, got.arrived)

    def _take(self, item: object, arrived: float) -> None:
        if isinstance(item, Discontinuity):
            self._drop_unsearched()  # no back-fill across a gap
            self.pacing.cut = True  # detect on the first frame after the gap, no back-fill
            return
        if isinstance(item, AudioPacket):
            self.sink.put(item)
            return
        t0 = time.perf_counter()
        self.pacing.last_taken = time.monotonic()
        self.arrivals[item.index] = arrived
        cut, self.pacing.cut = self.pacing.cut, False
        self.pipeline.push(item, force_cut=cut)
        spent = time.perf_counter() - t0
        self.pacing.proc += EMA_ALPHA * (spent - self.pacing.proc)

    def _drop_unsearched(self) -> None:
        """Render the look-ahead up to the newest detector run; the frames after it are dropped whole (a gap or the
        feed's end: no run will back-fill them; Pipeline.drop_unsearched) and counted with the late ones."""
        for result in self.pipeline.drop_unsearched():
            self.arrivals.pop(result.frame.index, None)
            self.pacing.late += 1

    def _stalled(self, now: float) -> None:
        """Input stalled (an outage, or a feed that comes in bursts): render what the look-ahead holds once its
        oldest frame could wait no longer within the latency bound, up to the newest frame the detector ran on.
        The frames after it wait for the next run's back-fill (a face new on them was seen by no detector), and are
        dropped whole by _admit if that comes too late. (Drained whole after the look-ahead's own time, a 5 fps
        pipe that came in bursts was drained 3 times in 60 frames and left such a face bare on 2 of 150.)"""
        if len(self.pipeline.buffer) and self.arrivals:
            oldest = min(self.arrivals.values())
            patience = max(self.summary.lookahead_frames / self.fps,
                           self.live.max_latency - self.pacing.proc - 2 * POLL_SECONDS)
            if time.monotonic() - oldest > patience:
                self.pipeline.drain_searched()

    def _budget(self) -> float:
        # A frame taken now is emitted after its own processing plus the
        # look-ahead wait; it must still be within max_latency then.
        proc = self.pacing.proc
        if time.monotonic() - self.pacing.last_taken > PROBE_SECONDS:
            # nothing taken for a while: take one to time it (_admit still drops it whole if it ends up late),
            # else an estimate that leaves no time is never corrected and the run records nothing
            return self.live.max_latency
        wait = self.summary.lookahead_frames * max(1.0 / self.fps, proc)
        return max(0.0, self.live.max_latency - proc - wait)

    def _admit(self, result: FrameResult) -> bool:
        arrived = self.arrivals.get(result.frame.index)
        if arrived is not None and time.monotonic() - arrived > self.live.max_latency:
            # Late after detection (burst, stall, slow encoder): still dropped
            # whole before anonymization, so the bound holds for every emitted frame.
            self.arrivals.pop(result.frame.index, None)
            self.pacing.late += 1
            return False
        return True

    def _emit(self, result: FrameResult, pasted: list) -> None:
        self.sink.put(RenderedFrame(result.frame, pasted) if self.keep_pasted else result.frame)
        arrived = self.arrivals.pop(result.frame.index, None)
        latency = time.monotonic() - arrived if arrived is not None else 0.0
        self.stats.frame_out(len(result.faces), latency)

    def _on_read(self, item: object) -> None:
        if isinstance(item, Frame):
            self.stats.frame_in()

    def _dropped(self) -> int:
        return self.queue.dropped + self.pacing.late

    def _report(self, force: bool = False) -> None:
        counters = self.src.counters
        self.stats.maybe_report(self._dropped(), counters.reconnects, counters.connected, force=force)

    def close(self, ok: bool) -> None:
        """Render what the look-ahead holds, finish the open segment, stop the reader, fill the summary."""
        self.stop.set()
        try:
            try:
                self._drop_unsearched()  # (a failed run too: what no detector saw is not written)
            finally:
                self.pipeline.finish()
        finally:
            try:
                self.sink.close()
            finally:
                self.summary.segments = self.recorder.close(
                    success=ok or isinstance(self.queue.error, StreamdeidError))
                self._join_reader()
                self._summarize()

    def _join_reader(self) -> None:
        self.reader.join(timeout=self.live.connect_timeout + self.live.read_timeout + 1.0)
        if self.reader.is_alive():
            log.warning("reader thread still blocked in FFmpeg; leaving it (daemon)")
        else:
            self.src.close()

    def _summarize(self) -> None:
        s, counters = self.summary, self.src.counters
        s.frames_in = counters.frames_in
        s.dropped = self._dropped()
        s.reconnects = counters.reconnects
        s.outages = list(counters.outages)
        s.seconds = time.monotonic() - self.started
        lat = sorted(self.stats.latencies)
        if lat:
            s.latency_mean = sum(lat) / len(lat)
            s.latency_p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
            s.latency_max = lat[-1]
        self._report(force=True)
        self.stats.close()
