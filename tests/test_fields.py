"""Interlaced footage (analog CCTV, DV, broadcast archives): a frame whose two fields were taken apart is
combed, and YuNet scored combed faces low or not at all (detect/fields.py). Graded by dlib's HOG on the clean
frames, a detector the pipeline does not run (red team round 5)."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from conftest import decode, make_video, run_cli
from evaluation.recall import changed_share
from evaluation.recognizers import dlib_available
from streamdeid.detect.fields import COMB_RATIO, comb_ratio, first_field, seen_by_detector

CLIPS = ("face-demographics-walking-and-pause.mp4", "short_hamilton_clip.mp4", "store-aisle-detection.mp4",
         "head-pose-face-detection-female-and-male.mp4", "worker-zone-detection.mp4")


def _combed(frame: np.ndarray, shift: int = 8) -> np.ndarray:
    """The odd lines shifted ``shift`` px: the second field taken after the picture moved."""
    out = frame.copy()
    out[1::2] = np.roll(frame, shift, axis=1)[1::2]
    return out


def _frames(path: Path, count: int, step: int = 1) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="bgr24") for i, f in zip(range(count * step), c.decode(video=0)) if i % step == 0]


def test_combing_is_told_from_progressive_pictures(media: Path) -> None:
    """The shared clips are progressive: their ratio stays far under the threshold, so the detector sees them
    as they are (their detections are unchanged); combed copies lie far above it."""
    for name in CLIPS:
        for frame in _frames(media / name, 4, step=10):
            assert comb_ratio(frame) < 0.8, name
            assert seen_by_detector(frame) is frame
            # an 8 px comb measures 1.87-4.04 on these clips (a 2-4 px one 1.04-2.4: faces were found through it)
            assert comb_ratio(_combed(frame, 8)) > COMB_RATIO + 0.4, name
    noise = np.random.default_rng(0).integers(0, 256, (360, 640, 3), np.uint8)  # white noise: about 1.0
    assert comb_ratio(noise) < COMB_RATIO
    frame = _frames(media / CLIPS[0], 1)[0]
    assert first_field(_combed(frame)).shape == frame.shape


def test_faces_in_combed_footage_are_covered(tmp_path: Path, media: Path) -> None:
    if not dlib_available():
        pytest.skip("dlib not installed (pip install 'streamdeid[eval]'): no independent reference detector")
    from evaluation.references import DlibReference

    frames = _frames(media / "head-pose-face-detection-female-and-male.mp4", 24)
    faces = DlibReference("hog", upsample=1).detect(enumerate(frames))
    assert sum(len(b) for b in faces.values()) >= 25
    src = make_video(tmp_path / "combed.mkv", [_combed(f) for f in frames], codec="ffv1")
    out = tmp_path / "out.mp4"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()[-300:]
    shown = decode(src)
    bare = [(i, tuple(box)) for i, o in enumerate(decode(out)) for box in faces[i]
            if changed_share(shown[i], o, box) < 0.5]
    assert bare == []
