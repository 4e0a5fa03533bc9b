"""The pipeline, assembled once: detect -> track -> look-ahead -> render -> emit.

Every run goes through one ``Pipeline``: a file (run/video.py), each file of a folder, and a live feed
(live/runner.py). What differs between them is passed in, not wired again:

    source items --push--> FaceStage (detect + track) --> LookaheadBuffer (back-fill)
        --admit?--> RenderStage (align, anonymize, paste; observers: vault, audit log)
        --> emit(result, pasted) (the encoder's queue)

The caller owns the source (a decoding thread, a live queue), the renderer (anonymizer and keys),
the observers and ``emit``; decoding and encoding threads are in threads.py. A file run renders on a
thread of its own (``render_thread``), so the detector of later frames overlaps the render of earlier ones,
and ``run`` works out the camera's motion and scene cuts on another, ahead of the detector.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from .anonymizers.base import Anonymizer
from .config import PipelineConfig
from .edits.apply import EditPlan, cover_added
from .lookahead import LookaheadBuffer
from .render import FrameRenderer, PastedFace
from .selection import SelectStage
from .stages import CameraStep, FaceStage, FrameObserver, RenderStage
from .summary import RunSummary
from .threads import QUEUE_FRAMES, BackgroundQueue, prefetch
from .types import Frame, FrameResult

__all__ = ["Emit", "Pipeline", "build_renderer", "process_frames"]

# Frames whose camera step (FaceStage.step) is worked out ahead of detection (Pipeline.run), on the
# "streamdeid-camera" thread: a few keep the main thread fed, each one more holds a frame in memory.
STEP_AHEAD = 4

#: Where a rendered frame goes: called once per frame, in order, after the observers.
Emit = Callable[[FrameResult, list[PastedFace]], None]


def build_renderer(config: PipelineConfig, key_for_track: Callable[[int], bytes | None] | None = None,
                   anonymizer: Anonymizer | None = None) -> FrameRenderer:
    """``anonymizer`` (default: the one ``config`` names, loaded here: call it before any output exists) in a
    renderer. ``key_for_track``: each track's key (a run's ``RunKeys.for_track``); None: no keys (classic)."""
    if anonymizer is None:
        from .anonymizers import create_anonymizer

        anonymizer = create_anonymizer(config.anonymize)
    return FrameRenderer(anonymizer, align=config.align, blend=config.blend, anonymize=config.anonymize,
                         key_for_track=key_for_track, sure_score=config.track.high_score)


def flag_last(items: Iterable[object]) -> Iterator[tuple[object, bool]]:
    """Each item, and whether it is the input's last Frame: each Frame waits for the next one (other items,
    audio packets, pass at once). The last frame gets a detector run (CameraStep.last)."""
    held: Frame | None = None
    for item in items:
        if not isinstance(item, Frame):
            yield item, False
            continue
        if held is not None:
            yield held, False
        held = item
    if held is not None:
        yield held, True


class Pipeline:
    """One video's (or live feed's) stages, built once; ``push`` frames in, ``finish`` at the end.

    ``lookahead_frames``: None for the file default (``config.lookahead_seconds``); a live run passes
    less (its latency bound). ``batch_frames``: frames leaving the look-ahead rendered in one anonymizer
    batch, None for what the anonymizer asks (``Anonymizer.batch_frames``); a live run renders each frame
    at once (1). ``admit``: asked for each frame leaving the look-ahead; False drops it whole, unrendered
    and never emitted (a live frame already past its latency bound). ``scan_gate``: see ``FaceStage``.
    ``render_thread``: render, tell the observers and emit on a thread of the pipeline's own, in order
    (``emit`` and the observers are then called from that thread). ``edits``: a reviewer's corrections
    (--edits, edits/apply.py): added boxes go into FaceStage's detections; each removal is decided as its
    frame leaves the look-ahead (its faces final) and the removed tracks' faces are moved to ``kept`` just
    before rendering, after --keep/--only. YuNet and the encoder release the GIL,
    so on two cores the detector of later frames runs beside the render of earlier ones: the crowd pan of
    benchmarks/crowd.py went from 14.5 to 12.4 s; the frames are identical.
    """

    def __init__(self, config: PipelineConfig, renderer: FrameRenderer, *, fps: float, emit: Emit,
                 summary: RunSummary, observers: Iterable[FrameObserver] = (), lookahead_frames: int | None = None,
                 batch_frames: int | None = None, admit: Callable[[FrameResult], bool] | None = None,
                 scan_gate: Callable[[], bool] | None = None, render_thread: bool = False,
                 edits: EditPlan | None = None) -> None:
        live = lookahead_frames is not None  # (set by a live run alone: its latency bound)
        if lookahead_frames is None:
            lookahead_frames = round(config.lookahead_seconds * fps)
        self.buffer = LookaheadBuffer.for_run(lookahead_frames, config.track, live=live)
        # a guard on every frame needs measured landmarks on every frame; a sampling one waits for a detection
        self.faces = FaceStage(config, fps, guarded=renderer.guard is not None and renderer.guard.every == 1,
                               lookahead_frames=self.buffer.capacity, scan_gate=scan_gate,
                               added=edits.adds if edits is not None else None)
        self.edits = edits
        self.render = RenderStage(renderer, observers, summary)
        self.select = SelectStage(config.select, fps, finder=self.faces.finder) if config.select.mode else None
        self.summary = summary
        self.emit = emit
        self.admit = admit
        # Frames leaving the look-ahead buffer are rendered together, so a batched generator sees the
        # faces of several frames in one call (1 for classic anonymizers, which gain nothing from it).
        self.batch_frames = max(1, int(batch_frames or renderer.anonymizer.batch_frames))
        self._told_added: set[int] = set()  # tracks cover_added has logged
        self._pending: list[FrameResult] = []
        # QUEUE_FRAMES frames in flight (at least two batches), as between the other threads: the render
        # thread keeps working through a small-face scan (a crowd pan: 280 ms every sixth frame), and memory
        # stays bounded. Two batches only: the pan took 12.8 s instead of 12.4 (median of 5 alternating runs).
        in_flight = max(2, QUEUE_FRAMES // self.batch_frames)  # batches
        self._renderer = BackgroundQueue(self._render, "streamdeid-render", in_flight) if render_thread else None

    def push(self, frame: Frame, *, force_cut: bool = False, step: CameraStep | None = None) -> None:
        """Detect and track ``frame``; render and emit whatever leaves the look-ahead buffer.
        ``force_cut``: treat it as a scene cut (a live feed's first frame after a gap). ``step``: the
        frame's ``FaceStage.step``, when the caller works it out ahead (``run``) for every frame."""
        result = self.faces(frame, self.summary.times, force_cut=force_cut, step=step)
        if self.select is not None:
            t0 = time.perf_counter()
            self.select.observe(result)  # on the original pixels, before the look-ahead holds them
            self.summary.times.add("select", time.perf_counter() - t0)
        for ready in self.buffer.push(result):
            self._take(ready)

    def drain(self) -> None:
        """Render and emit every frame the look-ahead buffer holds (end of a file; a live feed's gap or end:
        drop_unsearched first)."""
        self._render_now(self.buffer.drain())

    def drain_searched(self) -> None:
        """Render and emit the frames the look-ahead holds up to the newest one the detector ran on (a live feed
        that stalls: see LookaheadBuffer.drain_searched)."""
        self._render_now(self.buffer.drain_searched())

    def drop_unsearched(self) -> list[FrameResult]:
        """A live feed's gap or end: render the look-ahead up to the newest frame the detector ran on and drop the
        frames after it whole, unrendered (returned). No later run will back-fill them, so a face new on them
        was seen by no detector; drained whole, a reconnect rendered them (bare, if a face came in there)."""
        self.drain_searched()
        return self.buffer.discard()

    def _render_now(self, leaving: Iterator[FrameResult]) -> None:
        """Render and emit ``leaving`` (frames taken off the look-ahead), the last batch too."""
        for ready in leaving:
            self._take(ready)
        if self._pending:
            self._flush()

    def finish(self) -> None:
        """``drain``, then the run's final counts into the summary."""
        try:
            self.drain()
        finally:
            try:
                if self._renderer is not None:
                    self._renderer.close()  # every batch handed over is rendered and emitted
            finally:
                self.render.close()
            self.summary.smallest_face = self.faces.smallest_face
            if self.select is not None:
                self.summary.selection = self.select.line()
                self.summary.decisions = {t: ev.summary() for t, ev in self.select.selector.tracks.items()}
            self.summary.scans_skipped = self.faces.scans_skipped
            if self.edits is not None:
                self.edits.finish()

    def run(self, items: Iterable[object], passthrough: Callable[[object], None]) -> None:
        """Push every Frame of ``items``; hand anything else (audio packets) to ``passthrough`` as it comes.
        Raises KeyboardInterrupt through, after rendering and emitting every frame already taken."""
        try:
            for item, step in prefetch(self._stepped(items), STEP_AHEAD, "streamdeid-camera"):
                if isinstance(item, Frame):
                    self.push(item, step=step)
                else:
                    passthrough(item)
        finally:
            # Normal end, error or Ctrl-C: frames already decoded are still covered
            # and written, so a partial output holds everything processed so far.
            self.finish()

    def _stepped(self, items: Iterable[object]) -> Iterator[tuple[object, CameraStep | None]]:
        """Each item with its frame's camera motion and scene cut (``FaceStage.step``; None for a packet),
        timed as "camera". Run by ``run`` on a thread of its own: on two cores the main thread (detection
        and tracking) is the run's critical path, and this was 16% of it on hamilton (py-spy)."""
        for item, last in flag_last(items):
            if not isinstance(item, Frame):
                yield item, None
                continue
            t0 = time.perf_counter()
            step = self.faces.step(item.image, last)
            self.summary.times.add("camera", time.perf_counter() - t0)
            yield item, step

    def _take(self, result: FrameResult) -> None:
        result.sure_ahead = frozenset(self.faces.tracker.sure_ids())  # the detector has seen the look-ahead
        if self.edits is not None:
            self.edits.resolve(result)  # its faces are final here: every back-fill into it is done
        if self.admit is not None and not self.admit(result):
            return
        self._pending.append(result)
        if len(self._pending) >= self.batch_frames:
            self._flush()

    def _flush(self) -> None:
        # Cleared only once emitted (or handed to the render thread): on Ctrl-C before that, ``finish``
        # renders and emits them again.
        if self.select is not None:
            for result in self._pending:
                self.select.split(result)  # with all the evidence gathered so far (look-ahead included)
                if self.faces.added_tracks:
                    cover_added(result, self.faces.added_tracks, self._told_added)
        if self.edits is not None:
            for result in self._pending:
                self.edits.apply(result)  # after split, which sets ``kept`` anew
        if self._renderer is not None:
            self._renderer.put(list(self._pending))
        else:
            self._render(self._pending)
        self._pending.clear()

    def _render(self, batch: list[FrameResult]) -> None:
        for result, pasted in zip(batch, self.render.many(batch)):
            self.emit(result, pasted)


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
    """``Pipeline.run`` over ``items`` (Frames and pass-through packets), every item to ``emit`` in order."""
    pipeline = Pipeline(config, renderer, fps=fps, emit=lambda result, _pasted: emit(result.frame),
                        observers=observers, summary=summary)
    pipeline.run(items, emit)
