"""Faces turned in the picture (detect/turns.py): sideways or upside-down pixels with no display matrix to say so.

The end-to-end tests grade with dlib's HOG on the upright frames, a detector the pipeline does not run; the
outputs are turned back upright to compare. On the pan below, the session start's code (813f242) left 17 of the
dlib faces bare turned a quarter turn anticlockwise; benchmarks/turned.py has the longer cases.
"""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from conftest import decode, make_video, run_cli
from evaluation.recall import changed_share
from evaluation.recognizers import dlib_available
from streamdeid.detect.turns import LONE_SCORE, QUIET_RUNS, TURNS, TurnWatch, turned, turned_back
from streamdeid.types import Detections


@pytest.fixture(scope="module")
def hog():
    if not dlib_available():
        pytest.skip("dlib not installed (pip install 'streamdeid[eval]'): no independent reference detector")
    from evaluation.references import DlibReference

    return DlibReference("hog", upsample=2)


def _bare(upright: np.ndarray, output: np.ndarray, boxes: np.ndarray) -> int:
    """How many of ``boxes`` (faces on ``upright``) the ``output`` left as they were (mean change under 6 levels)."""
    bare = 0
    for x1, y1, x2, y2 in boxes.astype(int):
        a, b = upright[max(y1, 0):y2, max(x1, 0):x2], output[max(y1, 0):y2, max(x1, 0):x2]
        bare += a.size > 0 and float(np.abs(a.astype(int) - b).mean()) < 6.0
    return bare


def test_turned_back_puts_boxes_and_landmarks_where_they_were() -> None:
    h, w = 40, 60
    image = np.zeros((h, w, 3), np.uint8)
    image[5:15, 30:50] = 255  # a box x 30-50, y 5-15
    points = np.array([[32.0, 7.0], [48.0, 7.0], [40.0, 10.0], [34.0, 13.0], [46.0, 13.0]], np.float32)
    for angle in TURNS:
        view = turned(image, angle)
        # where the box and the points lie in the view: the inverse of the view's map back
        to_view = cv2.invertAffineTransform(view.back)
        ys, xs = np.nonzero(view.image[..., 0] > 127)
        box = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
        marks = points @ to_view[:, :2].T + to_view[:, 2]
        back = turned_back(Detections(box, [0.9], marks[None]), view.back)
        np.testing.assert_allclose(back.landmarks[0], points, atol=1e-3, err_msg=str(angle))
        if angle % 90 == 0:  # exact
            assert back.boxes[0].tolist() == [30, 5, 50, 15], angle
        else:  # a diagonal's box is the bounding box of the ellipse its view's box frames: about the face
            centre = (back.boxes[0, :2] + back.boxes[0, 2:]) / 2
            np.testing.assert_allclose(centre, [40, 10], atol=1.5)  # pixel steps of the turned box
            assert 20 <= back.boxes[0, 2] - back.boxes[0, 0] <= 26, back.boxes[0]


def test_the_watch_probes_every_turn_first_then_one_a_scan_and_keeps_a_turn_that_finds_faces() -> None:
    watch = TurnWatch()
    assert watch.due(scan=False, cut=False) == list(TURNS)  # the first run: a clip stored sideways shows at once
    for k in TURNS:
        assert not watch.take(k, np.array([LONE_SCORE - 0.05]), np.array([True]), 0).any()  # a probe wants a sure face
    assert watch.active == ()
    assert watch.due(scan=False, cut=False) == []
    probed = [watch.due(scan=True, cut=False) for _ in TURNS]
    assert sorted(k for d in probed for k in d) == sorted(TURNS)  # each turn once in a round of scans
    assert watch.due(scan=False, cut=True) == []  # a new shot: the turns once active, none yet
    assert watch.take(90, np.array([0.9, 0.4]), np.array([True, True]), 1).tolist() == [True, True]  # the picture is turned
    assert watch.active == (90,)
    assert watch.take(90, np.array([0.35]), np.array([True]), 0).tolist() == [True]  # active: weak faces count too
    # ... but in a picture standing upright, from LONE_SCORE
    assert watch.take(90, np.array([0.35, 0.7]), np.array([True, True]), 5).tolist() == [False, True]
    assert not watch.take(90, np.array([0.95]), np.array([False]), 0).any()  # a face the upright passes boxed
    for _ in range(QUIET_RUNS - 1):  # the run above found none of its own: the first quiet one
        assert watch.due(scan=False, cut=False) == [90]
        watch.take(90, np.zeros(0), np.zeros(0, bool), 0)
    assert watch.active == ()
    assert watch.due(scan=False, cut=True) == [90]  # a new shot of a clip stored sideways
    # a probe's face short of sure (CANDIDATE_SCORE, 0.7): that turn and the opposite one are looked at again
    assert not watch.take(45, np.array([0.7]), np.array([True]), 0).any()
    assert sorted(watch.due(scan=False, cut=False)) == [45, 225]
    assert sorted(watch.due(scan=False, cut=False)) == [45, 225]
    assert watch.due(scan=False, cut=False) == []


def _group_frames(media: Path, n: int = 8) -> list[np.ndarray]:
    """``n`` frames of a slow pan over group_meeting.jpg, 960x540."""
    photo = cv2.imread(str(media / "group_meeting.jpg"))
    scale = 1100 / photo.shape[1]
    photo = cv2.resize(photo, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    return [np.ascontiguousarray(photo[:540, 10 * i:10 * i + 960]) for i in range(n)]


def test_a_video_turned_in_its_pixels_is_covered_as_upright(tmp_path: Path, media: Path, hog) -> None:
    """Pixels turned with no display matrix (a phone clip whose rotation tag was stripped, a camera on its side,
    a ceiling camera upside down): every face dlib finds on the upright frames is covered, as upright."""
    frames = _group_frames(media)
    faces = hog.detect(enumerate(frames))
    assert sum(len(b) for b in faces.values()) >= 30
    for k in (0, 90, 180, 270):
        src = make_video(tmp_path / f"turned{k}.mp4", [turned(f, k).image for f in frames])
        out = tmp_path / f"out{k}.mp4"
        proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
        assert proc.returncode == 0, proc.stderr.decode()[-300:]
        shown = [turned(f, -k).image for f in decode(out)]
        assert sum(_bare(f, o, faces[i]) for i, (f, o) in enumerate(zip(frames, shown))) == 0, k


def test_a_photo_turned_in_its_pixels_is_covered(tmp_path: Path, media: Path, hog) -> None:
    """A photo turned a quarter turn with no EXIF orientation (a scan, an export that dropped it)."""
    photo = cv2.imread(str(media / "group_meeting.jpg"))
    faces = hog.detect([(0, photo)])[0]
    assert len(faces) >= 8
    src = tmp_path / "turned.png"
    cv2.imwrite(str(src), turned(photo, 90).image)
    out = tmp_path / "out.png"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()[-300:]
    assert _bare(photo, turned(cv2.imread(str(out)), -90).image, faces) == 0


def test_a_held_face_lying_down_is_looked_at_turned(media: Path) -> None:
    """A held face is checked with a closer look before its hold goes on (GuessCheck): upright alone, it finds
    no face on a face lying down and would end the hold; with the run's active turns it finds it."""
    from streamdeid.config import DetectConfig
    from streamdeid.detect.closer import GuessCheck
    from streamdeid.detect.finder import FaceFinder

    finder = FaceFinder(DetectConfig())
    photo = cv2.imread(str(media / "obama.jpg"))
    photo = cv2.resize(photo, None, fx=480 / photo.shape[1], fy=480 / photo.shape[1], interpolation=cv2.INTER_AREA)
    canvas = np.full((720, 1280, 3), 90, np.uint8)
    lying = turned(photo, 90).image
    h, w = lying.shape[:2]
    canvas[100:100 + h, 300:300 + w] = lying
    face = finder.find(canvas, scan=False, turns=TurnWatch())  # the first run probes every turn
    assert len(face) == 1
    assert finder.find(canvas, scan=False).boxes.shape[0] == 0  # upright, no face
    box = face.boxes[0]
    assert GuessCheck(finder)(canvas, box) == (True, None)
    looked, found = GuessCheck(finder, lambda: (90,))(canvas, box)
    assert looked and found is not None
    from streamdeid.track.matching import iou_matrix

    assert iou_matrix(found.boxes, face.boxes)[0, 0] > 0.5


def _lying_face(media: Path, size: int, angle: int) -> tuple[np.ndarray, np.ndarray]:
    """two_people.jpg's left face, ``size`` px tall, turned ``angle`` degrees: (patch [n, n, 3] float32, alpha
    [n, n, 1], a soft ellipse around the face)."""
    photo = cv2.imread(str(media / "two_people.jpg"))
    x0, y0, x1, y1 = 236, 47, 390, 202  # the face (by eye)
    r = int((y1 - y0) * 1.1)
    padded = cv2.copyMakeBorder(photo, r, r, r, r, cv2.BORDER_REPLICATE)
    cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
    n = int(2 * r * size / (y1 - y0)) // 2 * 2
    patch = cv2.resize(padded[cy:cy + 2 * r, cx:cx + 2 * r], (n, n), interpolation=cv2.INTER_AREA)
    alpha = np.zeros((n, n), np.float32)
    cv2.ellipse(alpha, (n // 2, int(n / 2 - 0.12 * size)), (int(0.62 * size), int(0.85 * size)), 0, 0, 360, 1, -1)
    alpha = cv2.GaussianBlur(alpha, (0, 0), 1.5)
    turn = cv2.getRotationMatrix2D((n / 2, n / 2), angle, 1.0)
    patch = cv2.warpAffine(patch, turn, (n, n), borderMode=cv2.BORDER_REPLICATE).astype(np.float32)
    return patch, cv2.warpAffine(alpha, turn, (n, n))[..., None]


def test_a_face_lying_down_is_covered_whole_not_by_the_upright_pass_s_weak_half_box(tmp_path: Path,
                                                                                    media: Path) -> None:
    """A person lying down (a red team pasted a 30 px face turned a quarter turn into the worker-zone clip):
    the upright pass boxed it weakly, narrow and off-centre (0.31-0.35), where the turned probe was sure
    (0.91-0.93). The sure turned box was not taken as a face of its own beside the weak one, and the eyes
    stayed bare. Graded on the pasted face's own box."""
    with av.open(str(media / "worker-zone-detection.mp4")) as c:
        frames = [f.to_ndarray(format="bgr24") for _, f in zip(range(40), c.decode(video=0))]
    patch, alpha = _lying_face(media, 30, 90)
    n, boxes = patch.shape[0], {}
    for i, frame in enumerate(frames):
        x, y = int(300 + 0.6 * i) - n // 2, int(140 + 0.2 * i) - n // 2
        region = frame[y:y + n, x:x + n].astype(np.float32)
        frame[y:y + n, x:x + n] = np.clip(region * (1 - alpha) + patch * alpha, 0, 255).astype(np.uint8)
        boxes[i] = np.array([x + n / 2 - 15, y + n / 2 - 15, x + n / 2 + 15, y + n / 2 + 15])
    src = make_video(tmp_path / "lying.mp4", frames, fps=17)
    out = tmp_path / "out.mp4"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()[-300:]
    with av.open(str(src)) as c:
        shown = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
    output = decode(out)
    assert [i for i, box in boxes.items() if changed_share(shown[i], output[i], box) < 0.5] == []


def test_a_clip_stored_sideways_gets_covers_that_turn_with_its_faces(tmp_path: Path, media: Path, hog) -> None:
    """The two-person head-pose clip stored a quarter turned (no display matrix). The upright passes box both
    faces on most detector runs (0.51-0.85) with an upright face's landmarks, the turned pass at 0.84-0.92 with
    the faces' own; the turned box was dropped as the same face, and the cover, laid along the upright
    landmarks, left the man's mouth and chin bare on about half the frames (3-30% of the lower third changed).
    A sure turned box that outscores an upright box whose landmarks disagree with it on the face's roll now
    stands for the face (turns.outscored). Graded on the lower third of every face dlib finds on the upright
    frames."""
    with av.open(str(media / "head-pose-face-detection-female-and-male.mp4")) as c:
        frames = [f.to_ndarray(format="bgr24") for _, f in zip(range(30), c.decode(video=0))]
    faces = hog.detect(enumerate(frames))
    assert sum(len(b) for b in faces.values()) >= 30
    src = make_video(tmp_path / "sideways.mp4", [turned(f, 90).image for f in frames])
    out = tmp_path / "out.mp4"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()[-300:]
    with av.open(str(src)) as c:  # the input as encoded, turned back: the output differs from it only by covers
        shown = [turned(f.to_ndarray(format="bgr24"), -90).image for f in c.decode(video=0)]
    output = [turned(f, -90).image for f in decode(out)]
    bare = []
    for i, boxes in faces.items():
        for x1, y1, x2, y2 in boxes:
            chin = np.array([x1, y1 + 2 * (y2 - y1) / 3, x2, y2])
            share = changed_share(shown[i], output[i], chin)
            if share < 0.5:
                bare.append((i, round(share, 2)))
    assert bare == []
