"""Dark, noisy footage (a night camera): the brightening that helps YuNet see dark faces lifts the sensor's
noise with them, and YuNet scored the faces under the threshold (detect/finder.py, NOISY_SIGMA). Graded by
dlib's HOG on the clean frames, a detector the pipeline does not run."""

from __future__ import annotations

from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from conftest import decode, make_video, run_cli
from evaluation.recall import changed_share
from evaluation.recognizers import dlib_available
from streamdeid.detect.finder import NOISY_SIGMA, brighten, noise_level


def _night(frames: list[np.ndarray]) -> list[np.ndarray]:
    """``frames`` darkened (gamma 3: a dim room) with sensor noise (sigma 10 grey levels), seeded. The session
    start's code left 15 of these 40 face-frames bare (two men, on frames 8-17)."""
    rng = np.random.default_rng(0)
    lut = np.round(255 * (np.arange(256) / 255) ** 3).astype(np.uint8)
    return [np.clip(cv2.LUT(f, lut) + rng.normal(0, 10, f.shape), 0, 255).astype(np.uint8) for f in frames]


def test_noise_level_tells_a_noisy_dark_frame_from_a_clean_one(media: Path) -> None:
    with av.open(str(media / "face-demographics-walking-and-pause.mp4")) as c:
        frame = next(c.decode(video=0)).to_ndarray(format="bgr24")
    dark = _night([frame])[0]
    assert noise_level(frame) < NOISY_SIGMA / 3
    lut = np.round(255 * (np.arange(256) / 255) ** 3).astype(np.uint8)
    clean_dark = cv2.LUT(frame, lut)
    assert noise_level(brighten(clean_dark)) < NOISY_SIGMA / 2
    assert noise_level(cv2.LUT(dark, np.round(255 * (np.arange(256) / 255) ** 0.66).astype(np.uint8))) > NOISY_SIGMA


def test_faces_in_dark_noisy_footage_are_covered(tmp_path: Path, media: Path) -> None:
    if not dlib_available():
        pytest.skip("dlib not installed (pip install 'streamdeid[eval]'): no independent reference detector")
    from evaluation.references import DlibReference

    with av.open(str(media / "face-demographics-walking-and-pause.mp4")) as c:
        frames = [f.to_ndarray(format="bgr24") for _, f in zip(range(24), c.decode(video=0))][6:]
    faces = DlibReference("hog", upsample=1).detect(enumerate(frames))
    assert sum(len(b) for b in faces.values()) >= 30
    night = _night(frames)
    src = make_video(tmp_path / "night.mkv", night, codec="ffv1")  # lossless: x264 at its default quality
    # smooths much of the noise away (a camera recording at high quality keeps it)
    out = tmp_path / "out.mp4"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()[-300:]
    with av.open(str(src)) as c:  # compared with the input as encoded
        shown = [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
    bare = [i for i, o in enumerate(decode(out)) for box in faces[i] if changed_share(shown[i], o, box) < 0.5]
    assert bare == []
