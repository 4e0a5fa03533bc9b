"""Faces turned in the picture (detect/turns.py): sideways or upside-down pixels with no display matrix to say so.

The end-to-end tests grade with dlib's HOG on the upright frames, a detector the pipeline does not run; the
outputs are turned back upright to compare. Without the turned passes, 39 of the 66 faces HOG finds on the
group pan below stayed bare turned a quarter turn anticlockwise, 13 the other way and 20 upside down.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import decode, make_video, run_cli
from evaluation.recognizers import dlib_available
from streamdeid.detect.turns import ACTIVATE_SCORE, QUIET_RUNS, TURNS, TurnWatch, turned, turned_back
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
    points = np.array([[[32.0, 7.0], [48.0, 7.0], [40.0, 10.0], [34.0, 13.0], [46.0, 13.0]]], np.float32)
    for k in TURNS:
        view = turned(image, k)
        ys, xs = np.nonzero(view[..., 0])
        box = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
        # the landmarks as they lie in the turned view: mark each and read it back
        marks = []
        for x, y in points[0]:
            dot = np.zeros((h, w, 3), np.uint8)
            dot[int(y), int(x)] = 255
            vy, vx = np.argwhere(turned(dot, k)[..., 0])[0]
            marks.append([vx + 0.5, vy + 0.5])
        back = turned_back(Detections(box, [0.9], np.array([marks], np.float32)), k, w, h)
        assert back.boxes[0].tolist() == [30, 5, 50, 15], k
        np.testing.assert_allclose(back.landmarks[0], points[0] + 0.5, atol=1e-4, err_msg=str(k))


def test_the_watch_probes_every_turn_first_then_one_a_scan_and_keeps_a_turn_that_finds_faces() -> None:
    watch = TurnWatch()
    assert watch.due(scan=False, cut=False) == list(TURNS)  # the first run: a clip stored sideways shows at once
    for k in TURNS:
        assert not watch.take(k, np.array([ACTIVATE_SCORE - 0.05]), np.array([True])).any()  # a probe wants a sure face
    assert watch.active == ()
    assert watch.due(scan=False, cut=False) == []
    probed = [watch.due(scan=True, cut=False) for _ in TURNS]
    assert sorted(k for d in probed for k in d) == sorted(TURNS)  # each turn once in three scans
    assert watch.due(scan=False, cut=True) == list(TURNS)
    assert watch.take(1, np.array([0.9, 0.4]), np.array([True, True])).tolist() == [True, True]
    assert watch.active == (1,)
    assert watch.take(1, np.array([0.35]), np.array([True])).tolist() == [True]  # active: weak faces count too
    assert not watch.take(1, np.array([0.95]), np.array([False])).any()  # a face the upright passes boxed
    for _ in range(QUIET_RUNS - 1):  # the run above found none of its own: the first quiet one
        assert watch.due(scan=False, cut=False) == [1]
        watch.take(1, np.zeros(0), np.zeros(0, bool))
    assert watch.active == ()


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
    for k in (0, *TURNS):
        src = make_video(tmp_path / f"turned{k}.mp4", [turned(f, k) for f in frames])
        out = tmp_path / f"out{k}.mp4"
        proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
        assert proc.returncode == 0, proc.stderr.decode()[-300:]
        shown = [turned(f, -k) for f in decode(out)]
        assert sum(_bare(f, o, faces[i]) for i, (f, o) in enumerate(zip(frames, shown))) == 0, k


def test_a_photo_turned_in_its_pixels_is_covered(tmp_path: Path, media: Path, hog) -> None:
    """A photo turned a quarter turn with no EXIF orientation (a scan, an export that dropped it)."""
    photo = cv2.imread(str(media / "group_meeting.jpg"))
    faces = hog.detect([(0, photo)])[0]
    assert len(faces) >= 8
    src = tmp_path / "turned.png"
    cv2.imwrite(str(src), turned(photo, 1))
    out = tmp_path / "out.png"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()[-300:]
    assert _bare(photo, turned(cv2.imread(str(out)), -1), faces) == 0
