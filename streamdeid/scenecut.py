"""Scene-cut detection: a cheap global picture difference between frames.

The look-ahead buffer must not carry a face back across a cut (it would
cover a random region of the previous shot), and the tracker drops the faces
no detection continues at a cut. A camera panning fast over a busy picture
changes every pixel too: on a 1280x720 pan over a marching band (18 px a frame,
benchmarks/precision.py) 15 of 75 frames read as cuts, and each cut dropped
every held face and started new tracks for all of them (1,536 tracks for about
150 faces). So when the camera's motion between the two frames is known
(track/camera_motion.py: a similarity most followed points agree on), the
previous picture is first moved by it and only the part both frames show is
compared: a cut is a change the camera's motion does not explain.
"""

from __future__ import annotations

import cv2
import numpy as np

THUMB = (32, 18)  # width, height of the grey thumbnail compared between frames
CUT_THRESHOLD = 20.0  # mean absolute grey-level difference (0-255) that counts as a cut


# The previous picture is moved by the camera's motion at FINE x the thumbnail's size and then reduced
# to it: a 32x18 thumbnail moved by bilinear interpolation is not the thumbnail of the moved picture
# (the marching band's pan: 14-21 levels apart after the move at 1x, under 11 at 4x).
FINE = 4


class SceneCutDetector:
    def __init__(self, threshold: float = CUT_THRESHOLD) -> None:
        self.threshold = threshold
        self._prev: np.ndarray | None = None  # [FINE * h, FINE * w] float32 grey of the previous frame

    def __call__(self, image: np.ndarray, motion: np.ndarray | None = None) -> bool:
        """True when ``image`` ([H, W, 3] uint8 BGR) starts a new shot. ``motion``: the camera's motion
        from the previous frame to this one ([2, 3], frame pixels; track/camera_motion.py), or None."""
        tw, th = THUMB
        fine = cv2.cvtColor(cv2.resize(image, (tw * FINE, th * FINE), interpolation=cv2.INTER_AREA),
                            cv2.COLOR_BGR2GRAY).astype(np.float32)
        prev, self._prev = self._prev, fine
        if prev is None or _difference(prev, fine) <= self.threshold:
            return False
        return motion is None or _moved_difference(prev, fine, motion, image.shape) > self.threshold


def _thumb(fine: np.ndarray) -> np.ndarray:
    return cv2.resize(fine, THUMB, interpolation=cv2.INTER_AREA)


def _difference(prev: np.ndarray, fine: np.ndarray) -> float:
    """Mean absolute grey difference of the two pictures' thumbnails."""
    return float(np.abs(_thumb(fine) - _thumb(prev)).mean())


def _moved_difference(prev: np.ndarray, fine: np.ndarray, motion: np.ndarray, shape: tuple[int, ...]) -> float:
    """Mean absolute difference of the thumbnails after moving ``prev`` by ``motion`` (frame pixels, for
    a frame of ``shape``), over the thumbnail pixels both frames show wholly (inf when under a quarter
    of them: too little left to tell)."""
    h, w = shape[:2]
    fh, fw = fine.shape
    to_fine = np.diag([fw / w, fh / h])
    m = np.asarray(motion, np.float64)
    # the motion in fine pixels: S M S^-1 (S scales frame -> fine on each axis)
    moved_m = np.hstack([to_fine @ m[:, :2] @ np.linalg.inv(to_fine), (to_fine @ m[:, 2])[:, None]])
    moved = cv2.warpAffine(prev, moved_m, (fw, fh), flags=cv2.INTER_LINEAR)
    seen = cv2.warpAffine(np.ones_like(prev), moved_m, (fw, fh), flags=cv2.INTER_LINEAR)
    seen = _thumb(seen) > 0.999  # thumbnail pixels made only of pixels the previous frame showed
    if seen.sum() < 0.25 * seen.size:
        return float("inf")
    return float(np.abs(_thumb(fine) - _thumb(moved))[seen].mean())
