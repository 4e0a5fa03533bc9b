"""Pipeline pieces on synthetic data: look-ahead, scene cuts, rendering, fail-closed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from streamdeid.anonymizers import AnonymizerBase
from streamdeid.anonymizers.classic import BlurAnonymizer, SolidAnonymizer
from streamdeid.config import PipelineConfig, TrackConfig
from streamdeid.lookahead import DECIDE_WAIT, LookaheadBuffer
from streamdeid.stages import FaceStage
from streamdeid.summary import StageTimes
from streamdeid.render import FrameRenderer
from streamdeid.scenecut import SceneCutDetector
from streamdeid.types import Frame, FrameResult, TrackedFace

LM = np.array([[140, 110], [180, 110], [160, 135], [145, 160], [175, 160]], np.float32)  # a 40 px face
BOX = np.array([120, 80, 200, 180], np.float32)


def _result(i: int, faces: list[TrackedFace] | None = None, cut: bool = False, image=None) -> FrameResult:
    img = image if image is not None else np.full((240, 320, 3), 100, np.uint8)
    return FrameResult(Frame(i, img, i, None), faces or [], scene_cut=cut)


def _face(tid: int, dx: float = 0.0) -> TrackedFace:
    return TrackedFace(tid, BOX + [dx, 0, dx, 0], LM + [dx, 0], 0.9)


def test_lookahead_backfills_frames_before_first_detection() -> None:
    buf = LookaheadBuffer(3)
    out = []
    for i in range(5):
        out += list(buf.push(_result(i, [_face(7)] if i == 4 else [])))
    out += list(buf.drain())
    assert [r.frame.index for r in out] == [0, 1, 2, 3, 4]
    states = [[f.state for f in r.faces] for r in out]
    # Frame 0 had left the 3-frame buffer before the face was first seen.
    assert states == [[], ["backfilled"], ["backfilled"], ["backfilled"], ["detected"]]


def _backfilled_boxes(moves: list[float], grow: list[float] | None = None) -> list[np.ndarray]:
    """A face first detected on frame 6 of 12 and again on frames 8 and 10, moved ``moves[k]`` px right (and
    ``grow[k]`` px larger on each side) on the k-th of those: the boxes of its back-filled covers on frames
    0-5 as rendered."""
    buf = LookaheadBuffer(8)
    out = []
    seen = {6: 0, 8: 1, 10: 2}
    grow = grow or [0.0] * 3
    for i in range(12):
        faces = []
        if i in seen:
            g = grow[seen[i]]
            faces = [TrackedFace(7, BOX + [moves[seen[i]] - g, -g, moves[seen[i]] + g, g], LM + [moves[seen[i]], 0], 0.9)]
        result = _result(i, faces)
        result.searched = i % 2 == 0  # the detector runs on every 2nd frame and found no face before frame 6
        out += list(buf.push(result))
    out += list(buf.drain())
    back = [f for r in out[:6] for f in r.faces]
    assert [f.state for f in back] == ["backfilled"] * 6
    return [f.box.astype(float) for f in back]


def test_lookahead_redraws_a_still_face_back_fill_unwidened() -> None:
    """A face its next detections show where it was first found sat there before too: its back-filled covers
    are redrawn at its box (drawn with the between-runs margin), not widened with every frame back."""
    still = _backfilled_boxes([0.0, 1.0, 0.0])
    assert [b[2] - b[0] for b in still] == [80.0] * 6  # BOX is 80 px wide


def test_lookahead_redraws_a_moving_face_back_fill_along_its_way() -> None:
    """A face its next detections show moving right (6 px a frame) at its size came from the left: each
    back-filled cover spans its first box and that box carried back along its way, within the widened cover it
    replaces (1 + 0.05 of its size a frame back, about its centre), so it is widened towards where the face came
    from only. A face whose size changed keeps the widened covers."""
    moving = _backfilled_boxes([0.0, 12.0, 24.0])
    for k, box in zip(range(6, 0, -1), moving):  # frame 0 is 6 frames before the first detection
        widened_left = 160.0 - 40.0 * (1 + 0.05 * k)
        assert box[0] == pytest.approx(max(BOX[0] - 6.0 * k, widened_left))
        assert box[2] == pytest.approx(BOX[2])  # not widened away from its way
        assert (box[1], box[3]) == pytest.approx((BOX[1], BOX[3]))  # it moved along x alone
    growing = _backfilled_boxes([0.0, 12.0, 24.0], grow=[0.0, 15.0, 30.0])  # 100 -> 130 px tall
    assert all(b[2] - b[0] > 80.0 and b[2] > BOX[2] for b in growing)


def _weak_backfill(after: dict[int, TrackedFace | str | None], wait: int = 0) -> list[int]:
    """A track first detected weakly (0.4) on frame 10 of a 10-frame buffer (frames with pending back-fill
    wait ``wait`` frames more for the decision), then shown as ``after`` gives ({frame: its face there};
    frames not given show it held between runs; None: closer looks found it gone there, "ended": its hold
    ended otherwise, neither shown from there on): the frames before 10 its back-fill covers, as rendered."""
    from streamdeid.lookahead import CONFIRM_SHORT

    assert CONFIRM_SHORT == 2
    buf = LookaheadBuffer(10, confirm_below=0.6, decide_wait=wait)
    out, gone = [], False
    for i in range(16):
        looked_gone = i in after and after[i] is None
        gone = gone or (i in after and (after[i] is None or after[i] == "ended"))
        face = None if gone or i < 10 else after.get(i, replace(_face(7), state="held", between_runs=True))
        if i == 10:
            face = replace(_face(7), score=0.4)
        result = _result(i, [face] if face is not None else [])
        out += list(buf.push(replace(result, looked_gone=frozenset({7}) if looked_gone else frozenset())))
    out += list(buf.drain())
    return [r.frame.index for r in out[:10] if r.faces]


def test_lookahead_back_fills_a_weak_first_detection_deeper_once_found_again() -> None:
    """A track first detected weakly is back-filled CONFIRM_SHORT frames at once; the frames before wait for
    its next detection (then drawn), or for its end inside the picture (then left: a box seen once, most
    likely no face). Undecided, gone at the frame's edge, or gone without a look that found no face there, they
    are drawn (fails closed). A file run holds a frame with pending back-fill DECIDE_WAIT frames past the
    buffer's capacity for the decision."""
    full, short = list(range(10)), [0, 8, 9]  # frame 0 leaves the buffer as frame 10 comes: drawn
    assert _weak_backfill({12: replace(_face(7), score=0.5)}) == full  # found again by the next run
    assert _weak_backfill({14: None}) == [0, 1, 2, 3, 8, 9]  # frames 1-3 left the buffer before it ended
    assert _weak_backfill({11: None}) == short  # ended inside the picture one frame on
    assert _weak_backfill({}) == full  # held to the end: undecided
    assert _weak_backfill({11: "ended"}) == full  # its hold ended (a copy, or over): no look said "no face"
    edge = TrackedFace(7, [280, 80, 330, 180], LM, 0.4, "held", between_runs=True)  # past the 320 px frame's edge
    assert _weak_backfill({11: edge, 12: None}) == full
    inside = replace(_face(7), state="held", between_runs=True)
    assert _weak_backfill({11: inside, 12: None}) == [0, 1, 8, 9]  # gone inside the picture
    # a file run's frames wait DECIDE_WAIT frames for the decision: the deepest ones are taken off too
    assert _weak_backfill({11: None}, wait=6) == [8, 9]
    assert _weak_backfill({14: None}, wait=6) == [8, 9]
    assert _weak_backfill({12: replace(_face(7), score=0.5)}, wait=6) == full
    assert _weak_backfill({}, wait=6) == full  # still undecided when the wait is over: drawn
    assert _weak_backfill({11: edge, 12: None}, wait=6) == full
    out = []  # the wait holds frames back, but a back-fill goes no deeper than the buffer's capacity
    waiting = LookaheadBuffer(10, confirm_below=0.6, decide_wait=6)
    for i in range(14):
        faces = [replace(_face(7), score=0.4)] if i == 10 else \
            [replace(_face(7), state="held", between_runs=True)] if i > 10 else []
        out += list(waiting.push(_result(i, faces + ([replace(_face(8), score=0.9)] if i == 13 else []))))
    assert out == [] and len(waiting) == 14  # frames 0-5 wait for track 7's decision, 6-13 for the buffer
    out = list(waiting.drain())
    assert [r.frame.index for r in out if any(f.track_id == 8 for f in r.faces)] == list(range(3, 14))
    assert LookaheadBuffer.for_run(10, TrackConfig()).decide_wait == DECIDE_WAIT
    assert LookaheadBuffer.for_run(10, TrackConfig(), live=True).decide_wait == 0  # a live run's latency bound
    strong = LookaheadBuffer(10, confirm_below=0.6)  # a sure first detection: back-filled whole at once
    out = [r for i in range(11) for r in strong.push(_result(i, [_face(7)] if i == 10 else []))]
    assert [r.frame.index for r in out + list(strong.drain()) if r.faces] == list(range(11))


def test_lookahead_stops_at_scene_cut() -> None:
    buf = LookaheadBuffer(5)
    out = []
    for i in range(5):
        out += list(buf.push(_result(i, [_face(1)] if i == 4 else [], cut=(i == 2))))
    out += list(buf.drain())
    covered = [i for i, r in enumerate(out) if r.faces]
    assert covered == [2, 3, 4]  # frames of the previous shot stay untouched


def test_lookahead_zero_capacity_passes_through() -> None:
    buf = LookaheadBuffer(0)
    assert [r.frame.index for r in buf.push(_result(0, [_face(1)]))] == [0]


def test_scene_cut_detector() -> None:
    det = SceneCutDetector()
    grey = np.full((90, 160, 3), 80, np.uint8)
    assert det(grey) is False
    assert det(grey + 2) is False
    assert det(np.full_like(grey, 220)) is True


def test_a_fast_pan_over_a_busy_picture_is_not_a_cut(media) -> None:
    """The marching band photo panned 15 px right and 30 px down a frame (faster than benchmarks/precision.py's
    pan): the plain picture difference calls that a cut, the camera's motion explains it; a real
    cut (another picture) stays one whatever motion is passed."""
    import cv2

    from streamdeid.track.camera_motion import CameraMotion

    photo = cv2.resize(cv2.imread(str(media / "crowd_marching_band.jpg")), (1920, 1372), interpolation=cv2.INTER_CUBIC)
    frames = [np.ascontiguousarray(photo[30 * t:30 * t + 720, 15 * t:15 * t + 1280]) for t in range(12)]
    plain, moved, camera = SceneCutDetector(), SceneCutDetector(), CameraMotion()
    plain_cuts, moved_cuts = [], []
    for t, frame in enumerate(frames):
        plain_cuts.append(plain(frame))
        moved_cuts.append(moved(frame, camera(frame)))
    assert any(plain_cuts)  # the case the motion is needed for
    assert not any(moved_cuts)
    other = np.ascontiguousarray(cv2.imread(str(media / "crowd_parade.jpg"))[:720 // 2 * 2, :1024])
    other = cv2.resize(other, (1280, 720))
    assert moved(other, camera(other)) is True
    shift = np.array([[1.0, 0.0, -15.0], [0.0, 1.0, -30.0]])
    assert moved(frames[0], shift) is True  # back to the band: a change no motion explains


def _renderer(anonymizer, cfg: PipelineConfig | None = None) -> FrameRenderer:
    cfg = cfg or PipelineConfig()
    return FrameRenderer(anonymizer, align=cfg.align, blend=cfg.blend, anonymize=cfg.anonymize)


def test_render_changes_face_region_only() -> None:
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)
    before = img.copy()
    pasted = _renderer(BlurAnonymizer()).render(_result(0, [_face(1)], image=img))
    assert len(pasted) == 1 and pasted[0].method == "blur"
    changed = (img != before).any(-1)
    x, y, w, h = pasted[0].roi
    outside = changed.copy()
    outside[y:y + h, x:x + w] = False
    assert not outside.any()  # nothing outside the paste rectangle moved
    # Between the eyes and the mouth every pixel changed (noise blurred away).
    assert changed[110:160, 145:175].mean() > 0.95
    # The record holds the original pixels of exactly what changed.
    own = pasted[0].owned
    assert np.array_equal(pasted[0].original[own], before[y:y + h, x:x + w][own])
    assert own[changed[y:y + h, x:x + w]].all()


class _Broken(AnonymizerBase):
    name = "broken"

    def __call__(self, crops, contexts):
        raise RuntimeError("generator exploded")


def test_render_fails_closed_with_solid_fill(caplog: pytest.LogCaptureFixture) -> None:
    img = np.random.default_rng(1).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    renderer = _renderer(_Broken())
    pasted = renderer.render(_result(0, [_face(1), _face(2, dx=100)], image=img))
    assert [p.method for p in pasted] == ["solid-fallback"] * 2
    assert renderer.fallbacks == 2
    assert "generator exploded" in caplog.text
    grey = PipelineConfig().anonymize.solid_color
    assert np.array_equal(img[135, 160], grey)  # the nose is now the solid colour


def test_render_overlapping_faces_own_disjoint_pixels() -> None:
    img = np.random.default_rng(2).integers(0, 255, (240, 320, 3), dtype=np.uint8)
    before = img.copy()
    pasted = _renderer(SolidAnonymizer()).render(_result(0, [_face(1), _face(2, dx=25)], image=img))
    canvas = np.zeros(img.shape[:2], int)
    for p in pasted:
        x, y, w, h = p.roi
        canvas[y:y + h, x:x + w] += p.owned
    assert canvas.max() == 1  # no pixel owned twice
    changed = (img != before).any(-1)
    assert (canvas[changed] == 1).all()  # every changed pixel owned by one face


def test_render_face_outside_frame_is_skipped() -> None:
    face = TrackedFace(1, BOX + [1000, 0, 1000, 0], LM + [1000, 0], 0.9)
    assert _renderer(BlurAnonymizer()).render(_result(0, [face])) == []


class _CountingFinder:
    """Stands in for FaceStage.finder: records the frames it ran on and which of them had the scan."""

    def __init__(self, faces: bool) -> None:
        self.calls: list[int] = []
        self.scans: list[int] = []
        self.faces = faces
        self.frame = 0

    def find(self, image, *, scan: bool, turns=None, cut: bool = False):
        from streamdeid.types import Detections

        self.calls.append(self.frame)
        if scan:
            self.scans.append(self.frame)
        if self.faces:
            return Detections(BOX[None], np.array([0.9]), LM[None])
        return Detections.empty()

    def smallest_face(self, width: int, height: int) -> float:
        return 12.0

    def fast_floor(self, width: int, height: int) -> float:
        return 24.0


def _counting_stage(faces: bool, every: int | None = 2, guarded: bool = False, fps: float = 25):
    """A FaceStage (detect every ``every``-th frame, every 4th while idle) whose finder counts its calls.
    Its frames are flat grey, where no closer look could see the scripted faces: the closer looks at
    weak boxes, odd boxes and held faces are off (tests/test_closer.py has them on real pictures)."""
    cfg = PipelineConfig()
    cfg.detect.every, cfg.detect.idle_every = every, 4
    cfg.track.verify_guesses = cfg.track.look_at_weak = cfg.track.look_at_odd = False
    stage = FaceStage(cfg, fps=fps, guarded=guarded)
    stage.finder = _CountingFinder(faces)
    return stage


def _detected_frames(stage, n: int = 12) -> list[int]:
    for i in range(n):
        stage.finder.frame = i
        stage(Frame(i, np.full((240, 320, 3), 100, np.uint8), i, None), StageTimes())
    return stage.finder.calls


@pytest.mark.parametrize("faces, expected", [(False, [0, 4, 8]), (True, [0, 2, 4, 6, 8, 10])])
def test_detection_cadence_idle_and_tracking(faces: bool, expected: list[int]) -> None:
    stage = _counting_stage(faces)
    for i in range(12):
        stage.finder.frame = i
        result = stage(Frame(i, np.full((240, 320, 3), 100, np.uint8), i, None), StageTimes())
        assert bool(result.faces) == faces
    assert stage.finder.calls == expected


@pytest.mark.parametrize("every, guarded, expected", [(None, False, [0, 2, 4, 6, 8]), (None, True, list(range(10))),
                                                     (3, True, [0, 3, 6, 9])])
def test_default_cadence_detects_every_frame_under_the_leak_guard(every, guarded, expected) -> None:
    """The guard compares faces at their landmarks, so by default they are measured on every frame;
    an explicit --detect-every still wins."""
    assert _detected_frames(_counting_stage(True, every, guarded), 10) == expected


@pytest.mark.parametrize("method, leak_guard, leak_every", [("blur", True, 1), ("dbaf", True, 1), ("dbaf", False, 1),
                                                          ("dbaf", True, 3), ("composite", True, 1)])
def test_guard_cadence_is_known_without_building_the_anonymizer(method, leak_guard, leak_every) -> None:
    """The review replays a run's tracking without an anonymizer (review/tracks.py): the guard cadence it
    reads from the method's class is the one the run's renderer builds, so the replay detects on the
    same frames (a guard on every frame makes the detector run on every frame)."""
    from streamdeid.anonymizers import anonymizer_type, guard_every
    from streamdeid.pipeline import build_renderer

    cfg = PipelineConfig()
    cfg.anonymize.method, cfg.anonymize.leak_guard, cfg.anonymize.leak_every = method, leak_guard, leak_every
    guard = build_renderer(cfg).guard
    assert guard_every(cfg.anonymize, anonymizer_type(method)) == (guard.every if guard is not None else None)
    assert (guard is not None and guard.every == 1) == (method == "dbaf" and leak_guard and leak_every == 1)


def test_scene_cut_forces_detection() -> None:
    stage = _counting_stage(False)
    for i in range(4):
        stage.finder.frame = i
        value = 20 if i < 2 else 230  # the picture changes wholesale at frame 2
        result = stage(Frame(i, np.full((240, 320, 3), value, np.uint8), i, None), StageTimes())
    assert stage.finder.calls == [0, 2]
    assert stage.finder.scans == [0, 2]  # a cut also gets the small-face scan
    assert result.scene_cut is False


@pytest.mark.parametrize("fps, scans", [(25, [0, 6, 12, 18]), (10, [0, 2, 4, 6, 8, 10, 12, 14, 16, 18])])
def test_small_face_scan_every_quarter_second_on_a_detector_run(fps: float, scans: list[int]) -> None:
    """DetectConfig.scan_every = 0.25 s: 6 frames at 25 fps; at 10 fps 2.5 frames round to 2 (and a small
    face's track, held 5 frames there, is refreshed before it expires)."""
    stage = _counting_stage(True, fps=fps)
    _detected_frames(stage, 20)
    assert stage.finder.scans == scans
    assert set(stage.finder.scans) <= set(stage.finder.calls)


class _CountingBlur(BlurAnonymizer):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def __call__(self, crops, contexts):
        self.batches.append(len(crops))
        return super().__call__(crops, contexts)


def test_render_many_batches_frames_and_matches_render() -> None:
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 255, (240, 320, 3), dtype=np.uint8) for _ in range(3)]
    one, many = _CountingBlur(), _CountingBlur()
    singles = [_renderer(one).render(_result(i, [_face(1), _face(2, dx=100)], image=img.copy()))
               for i, img in enumerate(images)]
    copies = [img.copy() for img in images]
    batched = _renderer(many).render_many([_result(i, [_face(1), _face(2, dx=100)], image=c)
                                           for i, c in enumerate(copies)])
    assert one.batches == [2, 2, 2] and many.batches == [6]  # one call for all faces of 3 frames
    for s, b in zip(singles, batched):
        assert [p.roi for p in s] == [p.roi for p in b]
        assert all(np.array_equal(x.original, y.original) for x, y in zip(s, b))


def test_pipeline_batches_frames_for_batching_anonymizers(media) -> None:
    """process_frames hands ``batch_frames`` frames at once to a generator that asks for it."""
    from conftest import face_frames
    from streamdeid.pipeline import process_frames
    from streamdeid.summary import RunSummary

    anon = _CountingBlur()
    anon.batch_frames = 4
    anon.scale_free = False  # stands in for a generator: one crop size, so one batch per call
    frames = [Frame(i, img, i, None) for i, img in enumerate(face_frames(media, 10))]
    emitted = []
    cfg = PipelineConfig()
    process_frames(frames, cfg, _renderer(anon, cfg), fps=25, emit=emitted.append, summary=RunSummary())
    assert [f.index for f in emitted] == list(range(10))  # order kept
    assert len(anon.batches) == 3 and sum(anon.batches) >= 10  # 4 + 4 + 2 frames' faces


def test_scan_gate_skips_due_scans_but_never_the_scan_of_a_cut() -> None:
    """A live run asks before each due scan (live/runner.py: is there time?); a refused scan is counted
    and the next detector run asks again; a scene cut scans regardless."""
    stage = _counting_stage(True)
    stage.scan_gate = lambda: False
    _detected_frames(stage, 12)
    assert stage.finder.scans == [] and stage.scans_skipped == len(stage.finder.calls)  # due from the start
    stage.finder.frame = 12
    stage(Frame(12, np.full((240, 320, 3), 230, np.uint8), 12, None), StageTimes())  # the picture changes
    assert stage.finder.scans == [12]


def _run_pipeline(media, render_thread: bool, emit) -> None:
    from conftest import face_frames
    from streamdeid.pipeline import Pipeline
    from streamdeid.summary import RunSummary

    cfg = PipelineConfig()
    cfg.anonymize.method = "blur"
    frames = [Frame(i, img, i, None) for i, img in enumerate(face_frames(media, 12))]
    pipeline = Pipeline(cfg, _renderer(BlurAnonymizer(), cfg), fps=25, emit=emit, summary=RunSummary(),
                        render_thread=render_thread)
    pipeline.run(frames, lambda item: None)


def test_render_thread_emits_the_same_frames_in_order_from_its_own_thread(media) -> None:
    """A file run renders on a thread of its own (api.py): the frames, their order and their pixels are
    the same as when the caller's thread renders."""
    import threading

    out: dict[bool, list] = {False: [], True: []}
    threads: dict[bool, set[str]] = {False: set(), True: set()}
    for threaded in (False, True):
        def emit(result, pasted, threaded=threaded):
            threads[threaded].add(threading.current_thread().name)
            out[threaded].append((result.frame.index, result.frame.image.copy(), len(pasted)))
        _run_pipeline(media, threaded, emit)
    assert [i for i, _, _ in out[True]] == list(range(12))
    assert sum(n for _, _, n in out[True]) > 0  # faces were pasted
    for (i, a, n), (j, b, m) in zip(out[False], out[True]):
        assert (i, n) == (j, m) and np.array_equal(a, b)
    assert threads == {False: {threading.current_thread().name}, True: {"streamdeid-render"}}


def test_render_thread_error_reaches_the_caller_as_raised(media) -> None:
    """An error on the render thread (here the emit: an encoder queue that is gone) ends the run on the
    caller's thread with the same exception, not a wrapped one and not a hang."""
    from streamdeid.types import OutputClosed

    def emit(result, pasted):
        if result.frame.index == 3:
            raise OutputClosed("the reader went away")

    with pytest.raises(OutputClosed, match="went away"):
        _run_pipeline(media, True, emit)


def test_lookahead_backfills_the_gap_of_a_track_found_again() -> None:
    buf = LookaheadBuffer(3)
    out = []
    for i in range(9):  # track 7 reported on frames 0-1 and 7-8; remembered, unreported, on 2-6
        out += list(buf.push(_result(i, [_face(7)] if i in (0, 1, 7, 8) else [])))
    out += list(buf.drain())
    states = [[f.state for f in r.faces] for r in out]
    assert states == [["detected"]] * 2 + [[]] * 2 + [["backfilled"]] * 3 + [["detected"]] * 2


class _ScriptedFinder(_CountingFinder):
    """A finder that returns the detections given for each frame (none for the others)."""

    def __init__(self, script: dict) -> None:
        super().__init__(faces=False)
        self.script = script

    def find(self, image, *, scan: bool, turns=None, cut: bool = False):
        from streamdeid.types import Detections

        super().find(image, scan=scan)
        boxes, scores = self.script.get(self.frame, ([], []))
        if not boxes:
            return Detections.empty()
        boxes = np.array(boxes, np.float32)
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        return Detections(boxes, np.array(scores, np.float32), np.repeat(centres[:, None], 5, axis=1))


@pytest.mark.parametrize("seen_again", [False, True])
def test_a_weak_box_over_another_face_waits_for_a_second_run(seen_again: bool) -> None:
    """From the fast pass's floor up (24 px here), a box scoring under WEAK_SCORE that holds another box's
    centre (a box over a cluster of faces) is reported from its second detector run; a weak box over no
    other face is reported at once, as is a sure one over another face."""
    from streamdeid.stages import WEAK_SCORE

    weak = WEAK_SCORE - 0.1
    small = [100, 100, 120, 120]  # a face's box; the cluster box holds its centre
    cluster = [90, 90, 150, 150]
    alone = [200, 40, 250, 90]
    sure_over = [95, 95, 140, 145]  # sure, over the small face too (first frame only)
    script = {0: ([small, cluster, alone], [0.9, weak, weak]), 2: ([small], [0.9]), 4: ([small], [0.9])}
    if seen_again:
        script[2] = ([small, cluster], [0.9, weak])
    stage = _counting_stage(True)
    stage.finder = _ScriptedFinder(script)
    frames_of: dict[tuple, set] = {}  # box where the track was first reported -> frames it was reported
    first_box: dict[int, tuple] = {}
    for i in range(6):
        stage.finder.frame = i
        for f in stage(Frame(i, np.full((240, 320, 3), 100, np.uint8), i, None), StageTimes()).faces:
            key = first_box.setdefault(f.track_id, tuple(int(v) for v in f.box[:2]))
            frames_of.setdefault(key, set()).add(i)
    assert 0 in frames_of[(200, 40)] and 0 in frames_of[(100, 100)]  # at once
    assert ((90, 90) in frames_of) == seen_again  # the cluster box: only once a second run repeats it ...
    assert not seen_again or min(frames_of[(90, 90)]) == 2  # ... and from that run (the look-ahead covers before)
    # a sure box over another face's centre is no cluster artefact: reported at once
    stage = _counting_stage(True)
    stage.finder = _ScriptedFinder({0: ([small, sure_over], [0.9, 0.9])})
    stage.finder.frame = 0
    result = stage(Frame(0, np.full((240, 320, 3), 100, np.uint8), 0, None), StageTimes())
    assert len(result.faces) == 2


def test_camera_steps_worked_out_ahead_give_the_same_results_as_inline(media) -> None:
    """Pipeline.run works out each frame's camera motion and scene cut on a thread of its own, ahead of
    detection (FaceStage.step); pushing frame by frame works them out inline. A pan over the marching
    band photo with a cut to another photo: the same motions, cuts and tracked faces either way."""
    import threading

    import cv2

    from streamdeid.pipeline import Pipeline
    from streamdeid.summary import RunSummary

    photo = cv2.resize(cv2.imread(str(media / "crowd_marching_band.jpg")), (960, 686), interpolation=cv2.INTER_AREA)
    other = cv2.resize(cv2.imread(str(media / "crowd_parade.jpg")), (640, 360), interpolation=cv2.INTER_AREA)
    images = [np.ascontiguousarray(photo[8 * t:8 * t + 360, 12 * t:12 * t + 640]) for t in range(10)] + [other] * 3
    cfg = PipelineConfig()
    cfg.anonymize.method = "solid"
    runs: dict[str, list] = {"inline": [], "ahead": []}
    for how in runs:
        steppers: set[str] = set()
        pipeline = Pipeline(cfg, _renderer(SolidAnonymizer(), cfg), fps=25, summary=RunSummary(),
                            emit=lambda result, _pasted, how=how: runs[how].append(result), render_thread=False)
        step = pipeline.faces.step

        def watched(image, last=False, *, step=step, steppers=steppers):  # records which thread works it out
            steppers.add(threading.current_thread().name)
            return step(image, last)
        pipeline.faces.step = watched
        frames = [Frame(i, img.copy(), i, None) for i, img in enumerate(images)]
        if how == "ahead":
            pipeline.run(frames, lambda item: None)
        else:
            for frame in frames:
                pipeline.push(frame)
            pipeline.finish()
        assert steppers == {"streamdeid-camera" if how == "ahead" else threading.current_thread().name}
    inline, ahead = runs["inline"], runs["ahead"]
    assert [r.frame.index for r in ahead] == list(range(len(images)))
    assert [r.scene_cut for r in ahead] == [r.scene_cut for r in inline] and ahead[10].scene_cut
    assert sum(r.motion is not None for r in ahead) >= 8  # the pan was followed
    for a, b in zip(inline, ahead):
        assert (a.motion is None) == (b.motion is None)
        assert a.motion is None or np.array_equal(a.motion, b.motion)
        assert [(f.track_id, f.state, tuple(f.box)) for f in a.faces] == [(f.track_id, f.state, tuple(f.box)) for f in b.faces]
    assert sum(len(r.faces) for r in ahead) > 50  # the band's faces were tracked
