"""Template matching of held and back-filled faces (track/appearance.py) on a real photo."""

import cv2
import numpy as np
import pytest

from streamdeid.config import DetectConfig, TrackConfig
from streamdeid.detect.finder import FaceFinder
from streamdeid.lookahead import LookaheadBuffer
from streamdeid.track import FaceTracker
from streamdeid.track.appearance import TemplateStore, find, same_face, template_of
from streamdeid.types import Frame, FrameResult, TrackedFace

from conftest import load_image
from test_track import dets, face


@pytest.fixture(scope="module")
def obama():
    image = load_image("obama.jpg")
    found = FaceFinder(DetectConfig()).find(image, scan=False)
    assert len(found) == 1
    return image, found.boxes[0].astype(np.float64), found.landmarks[0]


def shifted(image: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """The picture moved by (dx, dy) px, as a panning camera moves it (edges replicated)."""
    m = np.float32([[1, 0, dx], [0, 1, dy]])
    return cv2.warpAffine(image, m, (image.shape[1], image.shape[0]), borderMode=cv2.BORDER_REPLICATE)


def hidden(image: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The face covered by textured background from beside it (someone walked in front)."""
    out = image.copy()
    x1, y1, x2, y2 = box.astype(int)
    w = x2 - x1
    out[y1:y2, x1:x2] = image[y1:y2, x1 - w:x1] if x1 >= w else image[y1:y2, x2:x2 + w]
    return out


def test_face_is_found_where_it_moved_and_not_where_it_left(obama):
    image, box, _ = obama
    template = template_of(image, box)
    assert template is not None and template.pixels.shape[0] <= 32
    size = box[3] - box[1]
    d = np.array([round(0.08 * size), -round(0.05 * size)])
    moved = find(shifted(image, *d), template, box)
    assert moved is not None
    # templates are at most 32 px tall: a 330 px face is placed to a template pixel, 3% of its size
    np.testing.assert_allclose(moved, box + np.tile(d, 2), atol=0.03 * size)
    # moved further than the search reaches, or hidden: not found (the cover stays widened)
    assert find(shifted(image, round(0.4 * size), 0), template, box) is None
    assert find(hidden(image, box), template, box) is None
    # a flat patch is never a template, nor a match
    grey = np.full_like(image, 128)
    assert template_of(grey, box) is None
    assert find(grey, template, box) is None


def test_a_face_the_frame_edge_cuts_is_found_by_the_part_inside(obama):
    """A face leaving through the left edge (its guess half outside the frame) is matched with the part of
    its template that stays inside; a template cut from a face the edge cut finds the face further in; a
    face mostly outside the frame, or hidden, is not found (its cover stays widened)."""
    image, box, _ = obama
    size = box[3] - box[1]
    template = template_of(image, box)
    left = round(box[0] + 0.5 * (box[2] - box[0]))  # the picture moved left: half the face is outside
    d = np.array([-left, 0])
    guess = box + np.tile(d + [round(0.06 * size), 0], 2)  # the guess lags the face a little
    moved = find(shifted(image, *d), template, guess)
    assert moved is not None
    np.testing.assert_allclose(moved, box + np.tile(d, 2), atol=0.03 * size)
    cut = template_of(shifted(image, *d), box + np.tile(d, 2))  # detected half outside the frame
    assert cut is not None and not cut.whole and cut.offset[0] > 0
    back = np.array([round(0.1 * size) - left, 0])  # the face 10% further in on another frame
    found = find(shifted(image, *back), cut, box + np.tile(d, 2))
    assert found is not None
    np.testing.assert_allclose(found, box + np.tile(back, 2), atol=0.03 * size)
    far = np.array([-round(box[0] + 0.85 * (box[2] - box[0])), 0])  # 15% of the face inside
    assert find(shifted(image, *far), template, box + np.tile(far, 2)) is None
    gone = shifted(image, *d)  # someone in front of the part inside: background from its right
    y1, y2, x2 = int(box[1]), int(box[3]), int(box[2]) + d[0]
    gone[y1:y2, :x2] = gone[y1:y2, x2:2 * x2]
    assert find(gone, template, guess) is None


def test_held_face_found_by_its_pixels_is_not_widened():
    tracker = FaceTracker(fps=25, config=TrackConfig())
    (first,) = tracker.update(dets([face(200, 150, h=40)]))
    widened = tracker.update(dets([]))[0]  # a detector run missed it: held, widened
    assert widened.state == "held" and not widened.matched
    found = np.array([205.0, 130.0, 245.0, 170.0])
    asked = []

    def locate(track_id, box):
        asked.append(track_id)
        return found
    (held,) = tracker.update(dets([]), locate=locate)
    assert asked == [first.track_id]
    assert held.state == "held" and held.matched
    np.testing.assert_allclose(held.box, found)
    (again,) = tracker.update(dets([]), locate=lambda tid, box: None)  # not found: widened again
    assert not again.matched and (again.box[2] - again.box[0]) > (widened.box[2] - widened.box[0]) > 32  # the box is 32 px wide


def test_a_large_face_between_detector_runs_is_drawn_on_its_pixels_a_small_one_is_not_looked_for():
    """Between two detector runs (update(None)) a face at least LOCATE_BETWEEN_PX tall is looked for by its
    pixels near its predicted box and drawn there, matched, when found; a smaller one is not looked for
    (a crowd has hundreds); one not found stays where it was predicted, between runs, unwidened."""
    from streamdeid.track.tracker import LOCATE_BETWEEN_PX

    def between(h, found):
        tracker = FaceTracker(fps=25, config=TrackConfig())
        tracker.update(dets([face(200, 150, h=h)]))
        asked = []
        (f,) = tracker.update(None, locate=lambda tid, box: (asked.append(tid), found)[1])
        return f, asked

    large = LOCATE_BETWEEN_PX + 36
    moved = face(206, 152, h=large)
    f, asked = between(large, moved)
    assert asked == [1] and f.state == "held" and f.matched
    np.testing.assert_allclose(f.box, moved)
    f, _ = between(large, None)
    assert f.between_runs and not f.matched
    np.testing.assert_allclose(f.box, face(200, 150, h=large), atol=1e-3)
    f, asked = between(LOCATE_BETWEEN_PX - 24, moved)
    assert asked == [] and f.between_runs and not f.matched


def test_backfill_follows_the_face_pixels_and_widens_where_they_are_gone(obama):
    image, box, lm = obama
    # the camera panned 3 px a frame: frame k shows the face (3 - k) * 3 px to the left of frame 3's;
    # in frame 0 someone stood in front of it
    frames = [shifted(image, -3 * (3 - k), 0) for k in range(4)]
    frames[0] = hidden(frames[0], box + np.array([-9, 0, -9, 0]))
    for match in (True, False):
        buf = LookaheadBuffer(5, match_templates=match)
        for k in range(3):  # no camera motion given: the template alone finds where it was
            list(buf.push(FrameResult(Frame(k, frames[k], None, None), [])))
        list(buf.push(FrameResult(Frame(3, frames[3], None, None), [TrackedFace(4, box, lm, 0.9)])))
        earlier = [r.faces[0] for r in list(buf.drain())[:3]]
        assert all(f.state == "backfilled" for f in earlier)
        width = [f.box[2] - f.box[0] for f in earlier]
        if match:
            assert [f.matched for f in earlier] == [False, True, True]
            for k in (1, 2):
                np.testing.assert_allclose(earlier[k].box, box - [3 * (3 - k), 0, 3 * (3 - k), 0],
                                           atol=0.03 * (box[3] - box[1]))
            assert width[0] > width[1] + 1
        else:
            assert not any(f.matched for f in earlier)
            assert width[0] > width[1] > width[2] > box[2] - box[0]


def test_templates_follow_detections_and_forget_dropped_tracks(obama):
    image, box, lm = obama
    store = TemplateStore()
    store.update(image, [TrackedFace(1, box, lm, 0.9)])
    assert store.get(1) is not None
    store.update(image, [TrackedFace(1, box, lm, 0.9, "held")])  # held: the detection's template stays
    assert store.get(1) is not None
    store.update(image, [])
    assert store.get(1) is None


def test_on_a_panning_crowd_matched_guesses_stay_where_their_face_was_seen(media):
    """A real pipeline (detect, track, look-ahead) over a synthetic crowd the camera pans across. The
    crowd stands still, so a guess matched to its face's pixels must lie, on the canvas, where that
    track's detections lay; and matching makes the guesses' covers smaller."""
    from dataclasses import replace

    from streamdeid.config import PipelineConfig
    from evaluation.crowd import crowd_pool, default_background, make_crowd
    from evaluation.pan import make_pan
    from streamdeid.stages import FaceStage
    from streamdeid.summary import StageTimes

    from conftest import UTK

    crowd = make_crowd(crowd_pool(UTK, limit=60), default_background(media), size=(960, 400), count=60,
                       face_px=(14, 40), seed=5)
    clip = make_pan(crowd, (640, 360), frames=30)

    def covers(match: bool) -> list[tuple[np.ndarray, TrackedFace]]:
        """(box on the canvas, face) of every face reported."""
        config = PipelineConfig()
        # closer looks off: a held face they find is reported as detected, which would shrink the
        # guesses without templates too (the two are compared below)
        config = replace(config, track=replace(config.track, match_templates=match, verify_guesses=False))
        stage = FaceStage(config, clip.fps)
        buf = LookaheadBuffer(12, match_templates=match)
        done = []
        for t in range(len(clip)):
            done += buf.push(stage(Frame(t, np.ascontiguousarray(clip.frame(t)), None, None), StageTimes()))
        done += buf.drain()
        return [(f.box + np.tile(clip.offsets[r.frame.index], 2), f) for r in done for f in r.faces]

    def guesses(faces):
        return [(c, f) for c, f in faces if f.state != "detected" and not f.between_runs]

    with_match = covers(True)
    seen: dict[int, list[np.ndarray]] = {}
    for c, f in with_match:
        if f.state == "detected":
            seen.setdefault(f.track_id, []).append(c)
    matched = [(c, f) for c, f in guesses(with_match) if f.matched]
    assert len(matched) >= 20, len(matched)
    for c, f in matched:
        centre, size = (c[:2] + c[2:]) / 2, c[3] - c[1]
        off = min(np.abs((d[:2] + d[2:]) / 2 - centre).max() for d in seen[f.track_id])
        assert off <= max(2.0, 0.1 * size), (f, off)
        # not widened: as tall as a detection of its track
        assert min(abs(size - (d[3] - d[1])) for d in seen[f.track_id]) <= 0.05 * size, f

    def area(faces):
        return sum(float((f.box[2] - f.box[0]) * (f.box[3] - f.box[1])) for _, f in guesses(faces))
    assert area(with_match) < area(covers(False))


def test_same_face_takes_a_face_back_at_another_size_and_refuses_another_face():
    """The rejoin check (same_face): a face that comes back nearer (1.12x its size) and a little off its
    box is taken for its template's face; the other person of the photo, boxed at the same size, is not."""
    image = load_image("two_people.jpg")
    found = FaceFinder(DetectConfig()).find(image, scan=False)
    assert len(found) >= 2
    a, b = found.boxes[0].astype(np.float64), found.boxes[1].astype(np.float64)
    template = template_of(image, a)
    assert template is not None and template.height == pytest.approx(a[3] - a[1], abs=1.0)
    k = 1.12
    nearer = cv2.resize(image, None, fx=k, fy=k, interpolation=cv2.INTER_LINEAR)
    size = a[3] - a[1]
    assert same_face(nearer, template, a * k + np.array([0.05, -0.04, 0.05, -0.04]) * size)
    assert same_face(image, template, a)
    centre_b, half = (b[:2] + b[2:]) / 2, (a[2:] - a[:2]) / 2
    assert not same_face(image, template, np.concatenate([centre_b - half, centre_b + half]))
    assert not same_face(hidden(image, a), template, a)


def test_template_store_keeps_a_lost_tracks_template_for_keep_frames(obama):
    image, box, landmarks = obama
    store = TemplateStore(keep_frames=2)
    store.update(image, [TrackedFace(7, box, landmarks, 0.9)])
    for _ in range(2):
        store.update(image, [])
        assert store.get(7) is not None
    store.update(image, [])
    assert store.get(7) is None
    at_once = TemplateStore()
    at_once.update(image, [TrackedFace(7, box, landmarks, 0.9)])
    at_once.update(image, [])
    assert at_once.get(7) is None
