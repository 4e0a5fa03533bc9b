"""Global camera motion between consecutive frames (camera-motion compensation, as BoT-SORT's GMC).

A panning, tilting or zooming camera moves every face in the frame at once.
Without compensation a track's Kalman prediction stays where the face was, the
next detection lands beside it, a second track starts there and the first is
held, as a ghost cover, where nobody is any more. :class:`CameraMotion`
estimates the frame-to-frame motion as a 4-degree-of-freedom similarity
(translation, rotation, uniform scale): corners of the previous frame
(cv2.goodFeaturesToTrack) are followed into the new one by pyramidal
Lucas-Kanade optical flow on a downscaled grey image, and
cv2.estimateAffinePartial2D fits the motion with RANSAC, so the few points on
moving people are outvoted by the background. The tracker warps its track
states with it before association, the held covers move with the camera, and
the look-ahead buffer carries back-filled covers back along it.

Costs about 3 ms a frame at WORK_WIDTH on this project's 2-core machine.
An estimate that is not trustworthy (too few points followed, too few RANSAC
inliers, an implausible scale) is reported as no motion (None): the tracker
then behaves exactly as without compensation. ``unsure`` then says the motion is
unknown rather than none (a still camera, the first frame): on hamilton's dim
audience shots, while the performer's head crossed the frame, the camera panned a
few px a frame unseen, and the look-ahead widens and keeps a back-fill that crosses
such frames (lookahead.py).
"""

from __future__ import annotations

import cv2
import numpy as np

WORK_WIDTH = 320  # the grey image is downscaled to this width (no upscaling); 480 cost 7 ms a frame here, 320 3 ms
MAX_CORNERS = 300
MIN_POINTS = 20  # points followed and inliers needed to trust an estimate
MIN_INLIER_SHARE = 0.5  # of the points followed
MAX_SCALE_STEP = 0.1  # a frame-to-frame zoom beyond +-10% is not a camera
STILL_PX = 0.25  # motion under this (full-resolution px at the frame corners) is reported as none


class CameraMotion:
    """Call once per frame with the frame's image; returns the previous -> this frame motion."""

    def __init__(self, work_width: int = WORK_WIDTH) -> None:
        self.work_width = int(work_width)
        self._prev: np.ndarray | None = None  # [h, w] uint8 grey, downscaled
        self._points: np.ndarray | None = None  # [N, 1, 2] float32 corners of _prev
        self._scale = 1.0  # downscale factor (work px per frame px)
        self.unsure = False  # the last call's None was no trustworthy estimate (motion unknown), not a still camera

    def reset(self) -> None:
        """Forget the previous frame (a scene cut: the next frame is not a continuation)."""
        self._prev = self._points = None

    def __call__(self, image: np.ndarray) -> np.ndarray | None:
        """[2, 3] float64 affine mapping previous-frame pixels to ``image`` ([H, W, 3] uint8 BGR)
        pixels, or None (first frame, after reset, still camera, or no trustworthy estimate)."""
        h, w = image.shape[:2]
        self._scale = min(1.0, self.work_width / w)
        small = image if self._scale == 1.0 else cv2.resize(
            image, (round(w * self._scale), round(h * self._scale)), interpolation=cv2.INTER_AREA)
        grey = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
        prev, points = self._prev, self._points
        self._prev = grey
        self._points = cv2.goodFeaturesToTrack(grey, MAX_CORNERS, 0.01, 5, blockSize=3)
        self.unsure = False
        if prev is None or prev.shape != grey.shape:
            return None
        if points is None or len(points) < MIN_POINTS:
            self.unsure = True  # too little texture to follow (a dark frame): the motion is unknown
            return None
        m = self._estimate(prev, grey, points)
        if m is None:
            self.unsure = True
            return None
        corners = np.array([[0, 0], [w, 0], [0, h], [w, h]], np.float64)
        return None if np.abs(apply(m, corners) - corners).max() < STILL_PX else m  # a still camera: known

    def _estimate(self, prev: np.ndarray, grey: np.ndarray, points: np.ndarray) -> np.ndarray | None:
        """The motion in frame pixels, or None where no estimate is trustworthy."""
        moved, status, _ = cv2.calcOpticalFlowPyrLK(prev, grey, points, None, winSize=(21, 21), maxLevel=3)
        ok = status.reshape(-1).astype(bool)
        if int(ok.sum()) < MIN_POINTS:
            return None
        src, dst = points[ok].reshape(-1, 2), moved[ok].reshape(-1, 2)
        m, inliers = cv2.estimateAffinePartial2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=1.0)
        if m is None or int(inliers.sum()) < max(MIN_POINTS, MIN_INLIER_SHARE * len(src)):
            return None
        scale = float(np.sqrt(abs(np.linalg.det(m[:, :2]))))
        if abs(scale - 1.0) > MAX_SCALE_STEP:
            return None
        m = m.astype(np.float64)
        m[:, 2] /= self._scale  # work pixels -> frame pixels (the linear part is scale-free)
        return m


def apply(m: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``points`` [..., 2] mapped through the [2, 3] affine ``m``."""
    points = np.asarray(points, np.float64)
    return points @ m[:, :2].T + m[:, 2]


def invert(m: np.ndarray) -> np.ndarray:
    """The inverse of a [2, 3] affine."""
    return cv2.invertAffineTransform(np.asarray(m, np.float64))
