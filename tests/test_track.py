import itertools

import numpy as np
import pytest

from streamdeid.config import TrackConfig
from streamdeid.cover_size import UNSEEN_GROWTH
from streamdeid.track import FaceTracker, KalmanFilter, hungarian, iou_matrix, linear_assignment
from streamdeid.types import Detections

TEMPLATE_LM = np.array([[0.34, 0.46], [0.66, 0.46], [0.5, 0.64], [0.37, 0.82], [0.63, 0.82]])  # in box units


def face(cx, cy, h=40.0, w=None):
    w = 0.8 * h if w is None else w
    return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], np.float32)


def landmarks_for(box):
    x1, y1, x2, y2 = box
    return TEMPLATE_LM * (x2 - x1, y2 - y1) + (x1, y1)


def dets(boxes, scores=None):
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    scores = np.full(len(boxes), 0.9) if scores is None else scores
    return Detections(boxes, scores, np.array([landmarks_for(b) for b in boxes]).reshape(-1, 5, 2))


def by_id(faces):
    return {f.track_id: f for f in faces}


def assert_all_detections_reported(d, out):
    detected = [f for f in out if f.state == "detected"]
    assert len(detected) == len(d)
    for box in d.boxes:
        assert any(np.array_equal(f.box, box) for f in detected)
    assert len({f.track_id for f in out}) == len(out)


def test_ids_stable_for_moving_faces():
    tracker = FaceTracker(fps=25, config=TrackConfig())
    ids = None
    for t in range(40):
        d = dets([face(50 + 3 * t, 100), face(300 - 2 * t, 120 + t), face(200, 300, h=20)])
        out = tracker.update(d)
        assert_all_detections_reported(d, out)
        # output order follows tracks; map each detection to its track id
        cur = [next(f.track_id for f in out if np.array_equal(f.box, b)) for b in d.boxes]
        ids = ids or cur
        assert cur == ids
    assert sorted(ids) == [1, 2, 3]


def test_a_close_up_the_detector_loses_is_held_over_the_whole_frame_for_longer():
    """A face spanning most of the frame that the detector loses has come closer than it can frame (a zoom, a
    doorbell camera): held three seconds over the whole frame, whatever the closer looks say, unless a cut."""
    from streamdeid.track.tracker import CLOSE_UP_HOLD_SECONDS

    fps, size = 10.0, (480, 270)
    never = lambda box: (True, None)  # noqa: E731  a look that finds no face
    for close, cut_at in ((True, None), (False, None), (True, 12)):
        tracker = FaceTracker(fps=fps, config=TrackConfig(hold_seconds=0.5))
        h = 260.0 if close else 200.0  # 0.96 and 0.74 of the frame's height
        for _ in range(3):
            tracker.update(dets([face(240, 135, h=h)]), frame_size=size)
        held = []
        for k in range(int(CLOSE_UP_HOLD_SECONDS * fps) + 5):
            out = tracker.update(Detections.empty(), verify=never, blind_below=1.0, frame_size=size,
                                 cut=k == cut_at)
            held.append(out[0].box if out else None)
        covered = [b for b in held if b is not None]
        if not close:  # the usual hold, ended early by two looks that find nothing
            assert len(covered) <= 5
        elif cut_at is not None:
            assert len(covered) == cut_at
        else:
            assert len(covered) == int(CLOSE_UP_HOLD_SECONDS * fps)
            # from the second held frame on (the first is drawn at its last box, widened)
            assert all(b[0] < 0 and b[1] < 0 and b[2] > size[0] and b[3] > size[1] for b in covered[1:])


def test_a_close_up_found_weakly_is_drawn_over_the_frame_until_a_sure_detection():
    """A close-up a run boxes weakly by part of it (off its middle, under high_score), or boxes past the frame's
    edge, is drawn over the frame on that frame and between runs, also when that weak box is smaller than the frame;
    a sure detection inside it draws it at its own box again. A weak detection of a face that was no close-up is
    drawn at its box."""
    size = (480, 270)
    tracker = FaceTracker(fps=10.0, config=TrackConfig())
    (f,) = tracker.update(dets([face(240, 135, h=260.0)]), frame_size=size)  # sure: its own box
    assert f.state == "detected" and f.box[0] > 0
    (f,) = tracker.update(dets([face(200, 135, h=250.0)], np.array([0.35])), frame_size=size)  # weak, off-centre
    over = f.box[0] < 0 and f.box[1] < 0 and f.box[2] > size[0] and f.box[3] > size[1]
    assert over and f.track_id == 1
    (f,) = tracker.update(None, frame_size=size)  # between runs
    assert f.box[0] < 0 and f.box[2] > size[0]
    (f,) = tracker.update(dets([face(240, 135, h=260.0)]), frame_size=size)  # sure again
    assert f.state == "detected" and f.box[0] > 0 and f.box[2] < size[0]
    # sure, but boxed 13% past the frame's left and bottom edges (part of a face that goes on beyond the frame)
    (f,) = tracker.update(dets([np.array([-40, 1, 268, 309], np.float32)]), frame_size=size)
    assert f.box[0] < -40 and f.box[2] > size[0] and f.track_id == 1
    # sure and 3% past the top and bottom (a close talking head the frame holds whole): at its box
    (f,) = tracker.update(dets([np.array([144, -8, 356, 278], np.float32)]), frame_size=size)
    assert f.state == "detected" and f.box[0] == 144
    # a weak box on a face that was no close-up: at its box; one that spans the frame: at its box on a track never
    # sure, over the frame on a face once found surely (it grew into a close-up, boxed weakly by part of it)
    tracker = FaceTracker(fps=10.0, config=TrackConfig())
    tracker.update(dets([face(240, 135, h=150.0)]), frame_size=size)
    (f,) = tracker.update(dets([face(240, 135, h=200.0)], np.array([0.35])), frame_size=size)
    assert f.state == "detected" and f.box[0] > 0 and f.box[2] < size[0]
    (f,) = tracker.update(dets([face(230, 135, h=250.0)], np.array([0.35])), frame_size=size)
    assert f.box[0] < 0 and f.box[2] > size[0] and f.track_id == 1
    tracker = FaceTracker(fps=10.0, config=TrackConfig())
    tracker.update(dets([face(240, 135, h=150.0)], np.array([0.35])), frame_size=size)
    (f,) = tracker.update(dets([face(240, 135, h=250.0)], np.array([0.35])), frame_size=size)
    assert f.state == "detected" and f.box[0] > 0 and f.box[2] < size[0]
    # a weak box smaller than the frame on a close-up (part of the face, as on noisy encodings of the zoom centred
    # on the man, whose face box was then half bare): over the frame until a sure detection, then at its box
    tracker = FaceTracker(fps=10.0, config=TrackConfig())
    tracker.update(dets([face(240, 135, h=260.0)]), frame_size=size)
    (f,) = tracker.update(dets([face(240, 135, h=120.0)], np.array([0.35])), frame_size=size)
    assert f.box[0] < 0 and f.box[2] > size[0] and f.track_id == 1
    (f,) = tracker.update(None, frame_size=size)
    assert f.box[0] < 0 and f.box[2] > size[0]
    (f,) = tracker.update(dets([face(240, 135, h=120.0)]), frame_size=size)
    assert f.state == "detected" and f.box[0] > 0 and f.box[2] < size[0]


def test_missed_detection_is_held_at_predicted_box_then_dropped():
    fps, hold = 10.0, 0.5  # 5 held frames
    tracker = FaceTracker(fps=fps, config=TrackConfig(hold_seconds=hold))
    vx = 4.0
    for t in range(15):
        (f,) = tracker.update(dets([face(100 + vx * t, 100)]))
        assert f.state == "detected" and f.track_id == 1
    for k in range(1, 6):
        out = tracker.update(Detections.empty())
        assert len(out) == 1
        f = out[0]
        assert f.state == "held" and f.track_id == 1
        expected = face(100 + vx * (14 + k), 100)  # the prediction, widened by k frames unseen
        grow = 1 + UNSEEN_GROWTH * k
        assert np.abs((f.box[:2] + f.box[2:]) / 2 - (expected[:2] + expected[2:]) / 2).max() < 2.0
        np.testing.assert_allclose(f.box[2:] - f.box[:2], (expected[2:] - expected[:2]) * grow, rtol=0.05)
        np.testing.assert_allclose(f.landmarks, landmarks_for(f.box), atol=1e-3)  # landmarks follow the box
    assert tracker.update(Detections.empty()) == []
    assert tracker.num_tracks == 0


def test_reacquired_after_short_miss_keeps_id():
    tracker = FaceTracker(fps=25, config=TrackConfig())
    for t in range(10):
        tracker.update(dets([face(100 + 2 * t, 100)]))
    tracker.update(Detections.empty())
    tracker.update(Detections.empty())
    (f,) = tracker.update(dets([face(100 + 2 * 12, 100)]))
    assert f.track_id == 1 and f.state == "detected"


def test_crossing_faces_keep_distinct_ids():
    tracker = FaceTracker(fps=25, config=TrackConfig())
    first = None
    for t in range(60):
        a, b = face(40 + 5 * t, 100, h=50), face(340 - 5 * t, 115, h=50)  # they overlap around t = 30
        out = tracker.update(dets([a, b]))
        id_a = next(f.track_id for f in out if np.array_equal(f.box, a))
        id_b = next(f.track_id for f in out if np.array_equal(f.box, b))
        first = first or (id_a, id_b)
        assert (id_a, id_b) == first and id_a != id_b
    assert tracker.num_tracks == 2


def test_every_detection_is_reported_even_low_scores_and_duplicates():
    """With confirm_hits=1 (a live run whose look-ahead cannot back-fill a confirmation) nothing waits."""
    rng = np.random.default_rng(1)
    tracker = FaceTracker(fps=30, config=TrackConfig(high_score=0.6, confirm_hits=1))
    for _ in range(60):
        n = int(rng.integers(0, 6))
        centers = rng.uniform(0, 400, (n, 2))
        boxes = [face(x, y, h=rng.uniform(8, 80)) for x, y in centers]
        if n:
            boxes.append(boxes[0] + 1.0)  # near-duplicate detection
        d = dets(boxes, rng.uniform(0.3, 1.0, len(boxes)))
        out = tracker.update(d)
        assert_all_detections_reported(d, out)


def test_low_score_detection_continues_track():
    tracker = FaceTracker(fps=25, config=TrackConfig(high_score=0.6))
    for t in range(5):
        tracker.update(dets([face(100 + t, 100)], np.array([0.9])))
    (f,) = tracker.update(dets([face(105, 100)], np.array([0.4])))
    assert f.track_id == 1 and f.state == "detected" and f.score == pytest.approx(0.4)


def test_high_score_detections_are_matched_first():
    tracker = FaceTracker(fps=25, config=TrackConfig(high_score=0.6, match_iou=0.2, confirm_hits=1))
    tracker.update(dets([face(100, 100)]))
    # a low-score detection overlaps the track better, but the confident one wins it
    out = tracker.update(dets([face(101, 100), face(108, 100)], np.array([0.5, 0.9])))
    ids = {f.track_id: f for f in out}
    assert np.array_equal(ids[1].box, face(108, 100))
    assert np.array_equal(ids[2].box, face(101, 100))


def test_a_detection_continues_a_reported_track_before_a_doubtful_one():
    """A second, weak box on a head (lower, on the chin) starts a track the next runs miss, never confirmed.
    When the face moves onto that stale box, its detection overlaps that doubtful track more than the face's
    own, but continues its own: before, the doubtful track took it and the face's own track ended as a copy."""
    tracker = FaceTracker(fps=25, config=TrackConfig(high_score=0.6, confirm_hits=2, hold_seconds=0.5))
    out = tracker.update(dets([face(100, 100, h=100), face(100, 140, h=100)], np.array([0.9, 0.35])))
    assert [f.track_id for f in out] == [1]  # the weak box's track 2 waits for a second run
    for _ in range(3):
        tracker.update(None)
        tracker.update(dets([face(100, 100, h=100)]))  # track 2 missed, held unreported
    moved = face(100, 135, h=100)  # IoU 0.48 with track 1's box, 0.9 with track 2's
    tracker.update(None)
    out = by_id(tracker.update(dets([moved])))
    assert sorted(out) == [1]
    assert out[1].state == "detected" and np.array_equal(out[1].box, moved)


def test_update_none_holds_everything_and_never_drops_seen_tracks():
    tracker = FaceTracker(fps=10, config=TrackConfig(hold_seconds=0.2))  # 2 held frames
    tracker.update(dets([face(100, 100), face(300, 100)]))
    for _ in range(6):  # detector skipped for longer than the hold time
        out = tracker.update(None)
        assert sorted(f.track_id for f in out) == [1, 2]
        assert all(f.state == "held" for f in out)
    # next detector run misses face 2: it is held for 2 more frames, then dropped
    for _ in range(2):
        out = by_id(tracker.update(dets([face(100, 100)])))
        assert out[1].state == "detected" and out[2].state == "held"
    assert sorted(by_id(tracker.update(dets([face(100, 100)])))) == [1]


def test_lost_track_expires_during_skipped_frames():
    tracker = FaceTracker(fps=10, config=TrackConfig(hold_seconds=0.2))
    tracker.update(dets([face(100, 100)]))
    assert tracker.update(Detections.empty())[0].state == "held"
    assert tracker.update(None)[0].state == "held"
    assert tracker.update(None) == []


def test_zero_hold_drops_immediately():
    tracker = FaceTracker(fps=30, config=TrackConfig(hold_seconds=0.0))
    tracker.update(dets([face(100, 100)]))
    assert tracker.update(Detections.empty()) == []


def test_ids_start_at_one_per_instance():
    for _ in range(2):
        tracker = FaceTracker(fps=25, config=TrackConfig())
        assert [f.track_id for f in tracker.update(dets([face(50, 50), face(200, 50)]))] == [1, 2]
    tracker.update(Detections.empty())


def test_held_boxes_do_not_explode():
    tracker = FaceTracker(fps=30, config=TrackConfig(hold_seconds=100))
    rng = np.random.default_rng(2)
    for t in range(10):  # growth, motion and jitter before the face is lost
        h = 40 + 3 * t
        (f,) = tracker.update(dets([face(100 + 6 * t + rng.normal(0, 2), 100, h=h)]))
        assert f.track_id == 1
    for _ in range(300):
        (f,) = tracker.update(Detections.empty())
        w, h = f.box[2] - f.box[0], f.box[3] - f.box[1]
        assert 0.5 * 67 <= h <= 2 * 67 and 0 < w < 4 * 67
        assert np.isfinite(f.box).all() and np.isfinite(f.landmarks).all()
    # centre speed is clamped to a fraction of the face height per frame
    assert f.box[0] < 100 + 6 * 9 + 300 * 0.3 * 67


def test_invalid_fps():
    with pytest.raises(ValueError):
        FaceTracker(fps=0, config=TrackConfig())


def test_kalman_tracks_constant_velocity():
    kf = KalmanFilter()
    mean, cov = kf.initiate(np.array([0.0, 0.0, 0.8, 50.0]))
    for t in range(1, 30):
        mean, cov = kf.predict(mean, cov)
        mean, cov = kf.update(mean, cov, np.array([3.0 * t, -1.0 * t, 0.8, 50.0]))
    assert mean[4] == pytest.approx(3.0, abs=0.1) and mean[5] == pytest.approx(-1.0, abs=0.1)
    assert np.all(np.linalg.eigvalsh(cov) > 0)


def test_iou_matrix():
    a = np.array([[0, 0, 10, 10], [0, 0, 0, 0]], np.float32)
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]], np.float32)
    np.testing.assert_allclose(iou_matrix(a, b), [[1, 1 / 3, 0], [0, 0, 0]])
    assert iou_matrix(a, np.zeros((0, 4))).shape == (2, 0)


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (4, 6), (6, 4), (5, 5)])
def test_hungarian_is_optimal(shape):
    rng = np.random.default_rng(sum(shape))
    for _ in range(20):
        cost = rng.uniform(0, 1, shape)
        pairs = hungarian(cost)
        assert len(pairs) == min(shape)
        assert len({r for r, _ in pairs}) == len({c for _, c in pairs}) == min(shape)
        n, m = shape
        if n <= m:
            best = min(sum(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(m), n))
        else:
            best = min(sum(cost[p[j], j] for j in range(m)) for p in itertools.permutations(range(n), m))
        assert sum(cost[r, c] for r, c in pairs) == pytest.approx(best)


def test_linear_assignment_beats_greedy_and_gates():
    # greedy highest-IoU-first would take (0, 0) and leave row 1 unmatched
    iou = np.array([[0.9, 0.8], [0.85, 0.0]])
    matches, rows, cols = linear_assignment(iou, 0.2)
    assert sorted(matches) == [(0, 1), (1, 0)] and rows == [] and cols == []
    matches, rows, cols = linear_assignment(np.array([[0.1, 0.5]]), 0.2)
    assert matches == [(0, 1)] and rows == [] and cols == [0]
    assert linear_assignment(np.zeros((0, 3)), 0.2) == ([], [], [0, 1, 2])


def test_weak_track_is_reported_from_its_second_detection_strong_at_once():
    tracker = FaceTracker(fps=25, config=TrackConfig(high_score=0.6, confirm_hits=2))
    strong, weak = face(100, 100), face(300, 100)
    out = tracker.update(dets([strong, weak], np.array([0.9, 0.35])))
    assert [f.score for f in out] == [pytest.approx(0.9)]  # the weak one waits, unreported
    assert tracker.update(None) and len(tracker.update(None)) == 1  # frames without a detector run
    out = tracker.update(dets([strong, weak + 1.0], np.array([0.9, 0.4])))
    assert sorted(f.state for f in out) == ["detected", "detected"]
    assert {f.track_id for f in out} == {1, 2}  # the weak one kept the id it got on its first detection


def test_unconfirmed_false_positive_never_shows():
    tracker = FaceTracker(fps=10, config=TrackConfig(high_score=0.6, confirm_hits=2, hold_seconds=0.5))
    out = tracker.update(dets([face(200, 200)], np.array([0.31])))
    assert out == []
    for _ in range(10):  # never seen again: held unreported, then dropped
        assert tracker.update(Detections.empty()) == []
    assert tracker.num_tracks == 0


def test_weak_face_seen_only_by_periodic_scans_is_confirmed_by_the_next_scan():
    """A small face found by the small-face scan every 4th run and missed by the fast pass in between."""
    tracker = FaceTracker(fps=30, config=TrackConfig(high_score=0.6, confirm_hits=2, hold_seconds=0.5))
    small = face(50, 50, h=12)
    assert tracker.update(dets([small], np.array([0.4]))) == []
    for _ in range(3):
        assert tracker.update(Detections.empty()) == []
    (f,) = tracker.update(dets([small], np.array([0.45])))
    assert f.state == "detected" and f.track_id == 1
    for _ in range(3):  # confirmed: held (covered) between scans
        (f,) = tracker.update(Detections.empty())
        assert f.state == "held"


def test_scene_cut_drops_tracks_no_detection_continues():
    tracker = FaceTracker(fps=25, config=TrackConfig(hold_seconds=1.0))
    tracker.update(dets([face(100, 100), face(300, 100)]))
    assert len(tracker.update(Detections.empty())) == 2  # no cut: both held
    (f,) = tracker.update(dets([face(300, 100)]), cut=True)
    assert f.track_id == 2 and f.state == "detected"  # the face gone with the old shot is not held
    assert tracker.num_tracks == 1


def test_provisional_detection_is_reported_from_its_second_run():
    tracker = FaceTracker(fps=25, config=TrackConfig())
    d = dets([face(100, 100, h=20), face(300, 100, h=20)], scores=np.array([0.9, 0.9]))
    out = tracker.update(d, provisional=np.array([True, False]))
    assert [f.box[0] for f in out] == [d.boxes[1][0]]  # the provisional one waits, even at 0.9
    tracker.update(None)
    out = tracker.update(d, provisional=np.array([True, False]))
    assert len(out) == 2 and all(f.state == "detected" for f in out)
    # a provisional detection still continues an existing track at once
    tracker.update(None)
    out = tracker.update(dets([face(301, 100, h=20)]), provisional=np.array([True]))
    assert any(f.state == "detected" and f.box[0] > 250 for f in out)


def test_face_found_again_after_the_hold_keeps_its_track_until_remember_seconds():
    fps = 10.0  # hold 0.5 s: 5 frames; remembered until 1.0 s: 10 frames
    tracker = FaceTracker(fps=fps, config=TrackConfig(hold_seconds=0.5, remember_seconds=1.0))
    for t in range(5):
        tracker.update(dets([face(100 + 3 * t, 100)]))  # moving right before it is lost
    states = [[f.state for f in tracker.update(Detections.empty())] for _ in range(8)]
    assert states == [["held"]] * 5 + [[]] * 3  # covered for the hold, then only remembered
    assert tracker.num_tracks == 0  # nothing covered or waiting
    # found again where it was lost (a remembered track stands still: its velocity is not carried on)
    (f,) = tracker.update(dets([face(112, 100)]))
    assert f.track_id == 1 and f.state == "detected"
    np.testing.assert_allclose(f.box, face(112, 100))
    (held,) = tracker.update(Detections.empty())  # its motion restarted from the detection
    assert abs((held.box[0] + held.box[2]) / 2 - 112) < 1.0
    # lost for longer than remember_seconds: a new track
    for _ in range(12):
        tracker.update(Detections.empty())
    (g,) = tracker.update(dets([face(112, 100)]))
    assert g.track_id == 2


def test_a_track_lost_longer_than_remember_seconds_rejoins_only_its_own_face():
    """Between remember_seconds and rejoin_seconds after it was lost, a detection on the track's box
    continues it only when ``same_face`` says the detection shows its face; otherwise (or without a
    ``same_face``) it starts a new track. After rejoin_seconds: a new track whatever same_face says."""
    config = TrackConfig(hold_seconds=0.2, remember_seconds=0.5, rejoin_seconds=1.0)

    def lost_for(frames, answer):
        tracker = FaceTracker(fps=10, config=config)
        tracker.update(dets([face(100, 100)]))
        for _ in range(frames):
            tracker.update(Detections.empty())
        asked = []
        same = None if answer is None else (lambda tid, box: (asked.append(tid), answer)[1])
        (f,) = tracker.update(dets([face(100, 100)]), same_face=same)
        return f.track_id, asked

    assert lost_for(4, False) == (1, [])  # within remember_seconds: continued, nobody asked
    assert lost_for(8, True) == (1, [1])  # past it: continued because it is the same face
    assert lost_for(8, False) == (2, [1])  # another face: a new track
    assert lost_for(8, None)[0] == 2  # no way to tell: a new track
    assert lost_for(12, True) == (2, [])  # past rejoin_seconds: forgotten


def test_remembered_tracks_end_at_a_cut_and_unreported_ones_are_not_remembered():
    tracker = FaceTracker(fps=10, config=TrackConfig(hold_seconds=0.2, remember_seconds=1.0))
    tracker.update(dets([face(100, 100)]))
    for _ in range(4):
        tracker.update(Detections.empty())
    tracker.update(Detections.empty(), cut=True)
    assert tracker.update(dets([face(100, 100)]))[0].track_id == 2  # the old shot's face is forgotten
    weak = FaceTracker(fps=10, config=TrackConfig(hold_seconds=0.2, remember_seconds=1.0, confirm_hits=2))
    weak.update(dets([face(300, 100)], np.array([0.35])))  # never reported
    for _ in range(4):
        weak.update(Detections.empty())
    out = weak.update(dets([face(300, 100)], np.array([0.35])))
    assert out == []  # a new track (id 2) waiting for its own second sighting


def test_a_run_blind_to_a_small_face_holds_it_unwidened_on_the_same_clock():
    """A fast pass that cannot see faces under ``blind_below`` did not look for this one: it is carried as
    between runs (not widened), but its hold still counts from that run, so it ends when it would have."""
    def run(blind_below):
        tracker = FaceTracker(fps=10.0, config=TrackConfig(hold_seconds=0.5))
        tracker.update(dets([face(100, 100)]))
        out = [tracker.update(Detections.empty(), blind_below=blind_below) for _ in range(6)]
        return [o[0] if o else None for o in out]

    seen_by, blind_to = run(0.0), run(1000.0)
    for k, (a, b) in enumerate(zip(seen_by[:5], blind_to[:5]), start=1):
        assert a.state == b.state == "held"
        assert not a.between_runs and b.between_runs
        np.testing.assert_allclose(a.box[2:] - a.box[:2], (b.box[2:] - b.box[:2]) * (1 + UNSEEN_GROWTH * k),
                                   rtol=1e-4)
    assert seen_by[5] is None and blind_to[5] is None  # the same hold: 5 frames


def test_a_still_face_between_runs_is_drawn_as_matched_a_moving_one_with_the_between_runs_margin():
    """Between detector runs (``update(None)``) a track moving under STILL_SPEED of its height a frame is where
    its last run found it: ``still``, drawn with the matched margin; a face crossing the frame is not."""
    from streamdeid.cover_size import BETWEEN_RUNS_GROWTH, MATCHED_GROWTH, STILL_SPEED, drawn_growth

    tracker = FaceTracker(fps=25, config=TrackConfig())
    between = []
    for t in range(12):
        d = dets([face(100, 100), face(200 + 6 * t, 200)])  # 40 px tall: still, and 6 px a frame (0.15)
        out = tracker.update(d if t % 2 == 0 else None)
        if t % 2:
            between.append(sorted(out, key=lambda f: f.box[0]))
    assert 6 / 40 > STILL_SPEED
    for sitting, walking in between[2:]:  # once the filter has the walker's speed
        assert sitting.between_runs and sitting.still and walking.between_runs and not walking.still
        assert drawn_growth(sitting.state, sitting.matched, sitting.between_runs, 40.0, sitting.still) == MATCHED_GROWTH
        assert drawn_growth(walking.state, walking.matched, walking.between_runs, 40.0, walking.still) == \
            BETWEEN_RUNS_GROWTH


def test_a_closer_look_ends_a_hold_or_continues_the_track_or_leaves_it_held():
    """TrackConfig.verify_guesses: on a detector run that missed a reported track, ``verify`` looks
    closer. Nothing found by DOUBTS_TO_END looks in a row: the hold ends then (the face is remembered,
    uncovered, and a later detection continues its track). A face found: the track goes on from it,
    reported as detected. Not looked at (a small face): held as before."""
    from streamdeid.track.tracker import DOUBTS_TO_END

    box = face(100, 100)
    found = dets([box + 2])

    def run(*verdicts):
        tracker = FaceTracker(fps=10, config=TrackConfig(hold_seconds=0.8))
        tracker.update(dets([box]))
        seen, outs = [], []
        for verdict in verdicts:
            outs.append(tracker.update(dets([]), verify=lambda b, v=verdict: (seen.append(b.copy()), v)[1]))
        return tracker, outs, seen

    assert DOUBTS_TO_END == 2
    tracker, outs, seen = run((True, None), (True, None))
    assert [(f.track_id, f.state) for f in outs[0]] == [(1, "held")]  # one look that finds nothing: held
    assert outs[1] == [] and len(seen) == 2  # the second: the hold ends
    assert tracker.looked_gone == {1}  # (FrameResult.looked_gone: the look-ahead drops its pending back-fill)
    np.testing.assert_allclose(seen[0], box, atol=1.0)  # the look was at the predicted box
    assert tracker.update(None) == []  # not held on the frames after either
    assert tracker.looked_gone == set()  # said on the frame the looks ended it only
    again = tracker.update(dets([box]))
    assert [f.track_id for f in again] == [1]  # remembered: the same track when the face is back

    # a look that finds the face between two that do not: the doubts start again
    _, outs, _ = run((True, None), (True, found), (True, None))
    assert [[f.state for f in out] for out in outs] == [["held"], ["detected"], ["held"]]
    np.testing.assert_array_equal(outs[1][0].box, found.boxes[0])

    tracker, outs, _ = run((False, None), (False, None), (False, None))
    assert [[f.state for f in out] for out in outs] == [["held"]] * 3
    for _ in range(8):  # its hold runs out unlooked at: not a look's verdict
        tracker.update(dets([]), verify=lambda b: (False, None))
        assert tracker.looked_gone == set()
    assert tracker.update(dets([])) == []


def test_a_closer_look_that_finds_a_face_another_track_has_ends_the_hold():
    """Two tracks 40 px apart; the run finds only the second one's face, moved 15 px towards the first's
    held box (its IoU with that box is under COPY_IOU, so the held track is no copy by its box). The look at
    the held box finds that same face: the held track ends (gone) instead of going on as a second track on
    it. A look that finds a face no detection of this run has still continues the track."""
    a, b = face(100, 100), face(140, 100)
    moved = face(125, 100)

    def run(found_box):
        tracker = FaceTracker(fps=10, config=TrackConfig(hold_seconds=0.8))
        tracker.update(dets([a, b]))
        return tracker.update(dets([moved]), verify=lambda box: (True, dets([found_box])))

    out = run(moved + 1)
    assert [(f.track_id, f.state) for f in out] == [(2, "detected")]  # track 1's hold ended: no copy
    out = run(a + 1)  # the look finds a face where no detection of the run is
    assert sorted((f.track_id, f.state) for f in out) == [(1, "detected"), (2, "detected")]


def test_no_closer_look_between_detector_runs_or_for_a_face_seen():
    tracker = FaceTracker(fps=10, config=TrackConfig(hold_seconds=0.5))
    calls = []

    def verify(b):
        calls.append(b)
        return True, None

    tracker.update(dets([face(100, 100)]), verify=verify)
    tracker.update(None, verify=verify)
    tracker.update(dets([face(101, 100)]), verify=verify)
    assert calls == []


def test_a_guessed_cover_grows_by_a_share_of_a_small_face_and_a_bounded_margin_of_a_large_one() -> None:
    from streamdeid.cover_size import MAX_GUESS_GROWTH_PX, UNCERTAIN_GROWTH, drawn_growth

    assert drawn_growth("detected", False, False, 290.0) == 1.0
    assert drawn_growth("held", False, False, 50.0) == UNCERTAIN_GROWTH  # 15 px: under the bound
    large = drawn_growth("backfilled", False, False, 290.0)  # hamilton's performer leaving at the edge
    assert large < UNCERTAIN_GROWTH and 290.0 * (large - 1.0) == pytest.approx(MAX_GUESS_GROWTH_PX)


def test_a_held_face_leaving_through_the_edge_ends_its_hold_a_face_at_the_edge_does_not():
    """A face moving out at the right edge and then missed is held while enough of its predicted box is
    in the frame; once under DEPARTED_INSIDE of it is, its hold ends. A face standing at the edge is held."""
    from streamdeid.track.tracker import DEPARTED_INSIDE

    size = (640, 360)
    leaving, standing = FaceTracker(fps=25, config=TrackConfig()), FaceTracker(fps=25, config=TrackConfig())
    for t in range(10):  # seen moving right 8 px a frame, ending with 85% of its 80 px box inside
        leaving.update(dets([face(540 + 8 * t, 180, h=100)]), frame_size=size)
        standing.update(dets([face(620, 180, h=100)]), frame_size=size)  # 75% inside
    shares = []
    for _ in range(10):  # missed by every run from here
        held = [f for f in leaving.update(dets([]), frame_size=size) if f.state == "held"]
        if not held:
            break
        x1, _, x2, _ = held[0].box
        shares.append((min(x2, 640) - x1) / (x2 - x1))
    else:
        raise AssertionError(f"still held after 10 missed runs: {shares}")
    assert shares and all(s >= DEPARTED_INSIDE * 0.9 for s in shares), shares  # widened boxes: about
    still = [f for f in standing.update(dets([]), frame_size=size) if f.state == "held"]
    assert len(still) == 1


def test_an_added_box_off_the_schedule_moves_only_its_own_track():
    """A reviewer's added box on a frame the detector's schedule skips (FaceStage, edits/apply.py): the box
    continues the track it lies on, or starts one reported at once, and every other track advances exactly as
    between detector runs, so a re-run with edits keeps the reviewed run's other covers."""
    import copy

    tracker = FaceTracker(fps=25, config=TrackConfig())
    for t in range(4):
        tracker.update(dets([face(50 + 3 * t, 100), face(300, 120)]))
    twin = copy.deepcopy(tracker)
    between = by_id(twin.update(None))  # the reviewed run: no detector run on this frame
    added = Detections(np.array([face(400, 300)], np.float32), np.array([1.0]),
                       np.full((1, 5, 2), np.nan, np.float32))
    out = by_id(tracker.update_added(added))
    new = set(out) - set(between)
    assert len(new) == 1 and out[new.pop()].state == "detected"  # a new track, reported at once
    for tid, f in between.items():
        assert np.array_equal(out[tid].box, f.box) and out[tid].state == f.state
    # a box on a tracked face continues that track; the other track is still as between runs
    twin2 = copy.deepcopy(tracker)
    between = by_id(twin2.update(None))
    on_first = Detections(np.array([between[1].box], np.float32), np.array([1.0]),
                          np.full((1, 5, 2), np.nan, np.float32))
    out = by_id(tracker.update_added(on_first))
    assert set(out) == set(between) and out[1].state == "detected"
    assert np.array_equal(out[2].box, between[2].box)
