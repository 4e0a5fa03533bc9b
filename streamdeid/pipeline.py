"""Thin orchestrator: decode -> detect -> track -> look-ahead -> render -> encode.

Decoding and encoding run on their own threads, connected to the main thread
by bounded queues (FFmpeg, OpenCV and ONNX Runtime release the GIL, so on two
cores the three stages overlap). A file source waits when inference is slow;
memory stays bounded by the queue sizes plus the look-ahead buffer.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from .config import PipelineConfig, detect_cadence
from .detect.finder import FaceFinder
from .lookahead import LookaheadBuffer
from .render import FrameRenderer, PastedFace
from .scenecut import SceneCutDetector
from .track import FaceTracker
from .track.camera_motion import CameraMotion
from .types import Frame, FrameResult, OutputClosed, StreamdeidError

log = logging.getLogger(__name__)

_END = object()  # end-of-stream marker on the queues
QUEUE_FRAMES = 16  # frames in flight between threads (bounded memory)


@dataclass
class StageTimes:
    """Accumulated milliseconds per stage (for benchmarks/fps.py)."""

    ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("decode", "detect", "track", "anonymize", "paste", "encode"), 0.0))

    def add(self, stage: str, seconds: float) -> None:
        self.ms[stage] = self.ms.get(stage, 0.0) + seconds * 1000.0


@dataclass
class RunSummary:
    frames: int = 0
    faces: int = 0  # face instances covered (detected + held + backfilled)
    tracks: int = 0
    fallbacks: int = 0  # faces covered by solid fill because the anonymizer failed (or its track leaked)
    leak_fallbacks: int = 0  # tracks the leak guard switched to solid fill (dbaf)
    smallest_face: float | None = None  # face height (px) the detection passes looked for
    scans_skipped: int = 0  # detector runs at which a due small-face scan was put off (FaceStage.scan_gate)
    seconds: float = 0.0
    interrupted: bool = False
    times: StageTimes = field(default_factory=StageTimes)

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        text = f"{self.frames} frames, {self.faces} faces, {self.tracks} tracks, {self.fps:.1f} fps"
        if self.smallest_face is not None:
            text += f", looked for faces from {self.smallest_face:.0f} px"
        if self.scans_skipped:
            text += f" (small-face scan put off at {self.scans_skipped} detector runs to keep up)"
        if self.fallbacks:
            text += f", {self.fallbacks} faces fell back to solid fill"
        if self.leak_fallbacks:
            text += f", leak guard: {self.leak_fallbacks} track(s) switched to solid fill"
        return text


FrameObserver = Callable[[FrameResult, list[PastedFace]], None]


class FaceStage:
    """Detection on every N-th frame plus tracking: turns frames into FrameResults.

    A scene cut always triggers detection, whatever the cadence: the tracker's
    predictions from the previous shot say nothing about the new one, and a
    face first seen on a cut cannot be back-filled. With no face in view the
    detector runs every ``idle_every`` frames instead (the look-ahead covers
    the frames before a newcomer's first detection). The small-face scan
    (detect/finder.py) runs on a detector run every ``scan_every`` frames and
    on every cut; a small face's track is held in between, so the interval is
    kept under the hold time. The camera's motion is estimated on every frame
    (track/camera_motion.py, timed as tracking) and handed to the tracker and,
    on the FrameResult, to the look-ahead.
    """

    def __init__(self, config: PipelineConfig, fps: float, *, guarded: bool = False,
                 lookahead_frames: int | None = None, scan_gate: Callable[[], bool] | None = None) -> None:
        """``guarded``: the renderer runs a leak guard (sets the default cadence, see DetectConfig.every).
        ``lookahead_frames``: the look-ahead buffer behind this stage; when it is too short to back-fill
        the frames a weak track waits for its confirmation, weak tracks are reported at once.
        ``scan_gate``: asked before a due small-face scan (live runs: is there time for it?); each refusal
        is counted in ``scans_skipped`` and the scan is tried again at the next detector run."""
        self.finder = FaceFinder(config.detect)
        self.every = detect_cadence(config, guarded)
        self.idle_every = max(self.every, config.detect.idle_every)
        hold_frames = round(config.track.hold_seconds * fps)
        self.scan_every = max(1, min(round(config.detect.scan_every * fps), hold_frames - self.every))
        track = config.track
        # Back-fill reaches the frames before a track's second detector run: a small face the fast
        # pass alone sees between scans waits for its second sighting to be reported (see __call__).
        self.defer_small = lookahead_frames is None or lookahead_frames >= self.scan_every + self.every
        if not self.defer_small:
            track = replace(track, confirm_hits=1)  # privacy first: no frame may wait uncovered
        self.tracker = FaceTracker(fps=fps, config=track)
        self.scene_cut = SceneCutDetector()
        self.camera = CameraMotion() if config.track.camera_motion else None
        self.smallest_face: float | None = None  # set on the first frame
        self.scan_gate = scan_gate
        self.scans_skipped = 0
        self._countdown = 0  # frames until the next scheduled detection
        self._since_scan = self.scan_every  # frames since the last small-face scan (scan on the first run)

    def __call__(self, frame: Frame, times: StageTimes, *, force_cut: bool = False) -> FrameResult:
        t0 = time.perf_counter()
        cut = self.scene_cut(frame.image) or force_cut
        if self.smallest_face is None:
            h, w = frame.image.shape[:2]
            self.smallest_face = self.finder.smallest_face(w, h)
        provisional = None
        if cut or self._countdown <= 0:
            scan = cut or self._since_scan >= self.scan_every
            if scan and not cut and self.scan_gate is not None and not self.scan_gate():
                scan = False
                self.scans_skipped += 1
            dets = self.finder.find(frame.image, scan=scan)
            if not scan and self.defer_small and len(dets):
                # Under its floor the fast pass also finds "faces" in the gaps of a crowd (a camera
                # pan over a synthetic crowd: 8 of its 129 boxes on frame 0, none of them found by
                # the scan) and they flicker. A track such a box starts is reported from its second
                # detector run, and the look-ahead covers the frames before. (Not left to the scan:
                # it misses some faces the fast pass finds.)
                h, w = frame.image.shape[:2]
                provisional = (dets.boxes[:, 3] - dets.boxes[:, 1]) < self.finder.fast_floor(w, h)
            if scan:
                self._since_scan = 0
            self._countdown = (self.every if len(dets) else self.idle_every) - 1
        else:
            dets = None
            self._countdown -= 1
        self._since_scan += 1
        t1 = time.perf_counter()
        motion = self.camera(frame.image) if self.camera is not None else None
        if cut:
            motion = None  # the new shot does not continue the old one
        faces = self.tracker.update(dets, cut=cut, motion=motion, provisional=provisional)
        if self.tracker.num_tracks and self._countdown >= self.every:
            self._countdown = self.every - 1  # a tracked face: back to the tracking cadence
        times.add("detect", t1 - t0)
        times.add("track", time.perf_counter() - t1)
        return FrameResult(frame, faces, scene_cut=cut, motion=motion)


class RenderStage:
    """Render a tracked frame in place, count it into ``summary``, tell the observers."""

    def __init__(self, renderer: FrameRenderer, observers: Iterable[FrameObserver], summary: RunSummary) -> None:
        self.renderer = renderer
        self.observers = list(observers)
        self.summary = summary
        self.track_ids: set[int] = set()

    def __call__(self, result: FrameResult) -> list[PastedFace]:
        return self.many([result])[0]

    def many(self, results: list[FrameResult]) -> list[list[PastedFace]]:
        """Render frames with one anonymizer batch (``FrameRenderer.render_many``)."""
        t0, paste0 = time.perf_counter(), self.renderer.paste_seconds
        pasted = self.renderer.render_many(results)
        paste = self.renderer.paste_seconds - paste0
        self.summary.times.add("anonymize", time.perf_counter() - t0 - paste)  # align + anonymize
        self.summary.times.add("paste", paste)
        for result, p in zip(results, pasted):
            self.summary.frames += 1
            self.summary.faces += len(result.faces)
            self.track_ids.update(f.track_id for f in result.faces)
            for obs in self.observers:
                obs(result, p)
        return pasted

    def close(self) -> None:
        """Final counts into the summary."""
        self.summary.tracks = len(self.track_ids)
        self.summary.fallbacks = self.renderer.fallbacks
        self.summary.leak_fallbacks = self.renderer.leak_fallbacks


def process_frames(
    items: Iterable[object],
    config: PipelineConfig,
    renderer: FrameRenderer,
    *,
    fps: float,
    emit: Callable[[object], None],
    observers: Iterable[FrameObserver] = (),
    summary: RunSummary,
) -> None:
    """Run detect/track/look-ahead/render over ``items`` (Frames and pass-through packets).

    Non-frame items (audio packets) are handed to ``emit`` as they come; frames
    are emitted in order once rendered. Raises KeyboardInterrupt through, after
    rendering and emitting every frame already taken from ``items``.
    """
    buffer = LookaheadBuffer(round(config.lookahead_seconds * fps))
    stage = FaceStage(config, fps, guarded=renderer.guard is not None, lookahead_frames=buffer.capacity)
    render = RenderStage(renderer, observers, summary)
    # Frames leaving the look-ahead buffer are rendered together, so a batched
    # generator sees the faces of several frames in one call (1 for classic
    # anonymizers, which gain nothing from it).
    batch_frames = max(1, int(getattr(renderer.anonymizer, "batch_frames", 1)))
    pending: list[FrameResult] = []

    def flush() -> None:
        render.many(pending)
        for result in pending:
            emit(result.frame)
        pending.clear()

    def finish(result: FrameResult) -> None:
        pending.append(result)
        if len(pending) >= batch_frames:
            flush()

    try:
        for item in items:
            if not isinstance(item, Frame):
                emit(item)
                continue
            for ready in buffer.push(stage(item, summary.times)):
                finish(ready)
    finally:
        # Normal end, error or Ctrl-C: frames already decoded are still covered
        # and written, so a partial output holds everything processed so far.
        for ready in buffer.drain():
            finish(ready)
        if pending:
            flush()
        render.close()
        summary.smallest_face = stage.smallest_face
        summary.scans_skipped = stage.scans_skipped


class _Worker(threading.Thread):
    """A daemon thread that records the exception that ended it."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._target_fn = target
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._target_fn()
        except BaseException as exc:  # re-raised on the main thread
            self.error = exc


def threaded_source(source: Iterable[object], stop: threading.Event, times: StageTimes) -> Iterator[object]:
    """Decode on a background thread; yield its items on the caller's thread."""
    q: queue.Queue = queue.Queue(maxsize=QUEUE_FRAMES)

    def produce() -> None:
        try:
            it = iter(source)
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    break
                times.add("decode", time.perf_counter() - t0)
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        finally:
            q.put(_END)

    worker = _Worker(produce, "streamdeid-decode")
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                break
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass
        worker.join()
    if worker.error is not None:
        raise worker.error


class ThreadedSink:
    """Encode/mux on a background thread; ``put`` blocks when the encoder lags."""

    def __init__(self, write: Callable[[object], None], times: StageTimes) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=QUEUE_FRAMES)
        self._write = write
        self._times = times
        self._worker = _Worker(self._consume, "streamdeid-encode")
        self._worker.start()

    def _consume(self) -> None:
        while True:
            item = self._q.get()
            if item is _END:
                return
            t0 = time.perf_counter()
            self._write(item)
            self._times.add("encode", time.perf_counter() - t0)

    def put(self, item: object) -> None:
        while True:
            if self._worker.error is not None:
                if isinstance(self._worker.error, OutputClosed):
                    raise self._worker.error
                raise StreamdeidError(f"encoding failed: {self._worker.error}")
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Wait for every queued item to be written; re-raise an encoder error."""
        while self._worker.is_alive():  # the encoder may die while the queue is full
            try:
                self._q.put(_END, timeout=0.1)
                break
            except queue.Full:
                continue
        self._worker.join()
        if self._worker.error is not None:
            err = self._worker.error
            if isinstance(err, StreamdeidError):
                raise err
            if isinstance(err, OutputClosed):
                raise err
            raise StreamdeidError(f"encoding failed: {err}") from err
