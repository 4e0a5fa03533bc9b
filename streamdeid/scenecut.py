"""Scene-cut detection: a cheap global picture difference between frames.

The look-ahead buffer must not carry a face back across a cut (it would
cover a random region of the previous shot).
"""

from __future__ import annotations

import cv2
import numpy as np

THUMB = (32, 18)  # width, height of the grey thumbnail compared between frames
CUT_THRESHOLD = 20.0  # mean absolute grey-level difference (0-255) that counts as a cut


class SceneCutDetector:
    def __init__(self, threshold: float = CUT_THRESHOLD) -> None:
        self.threshold = threshold
        self._prev: np.ndarray | None = None

    def __call__(self, image: np.ndarray) -> bool:
        """True when ``image`` ([H, W, 3] uint8 BGR) starts a new shot."""
        grey = cv2.cvtColor(cv2.resize(image, THUMB, interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2GRAY)
        grey = grey.astype(np.float32)
        prev, self._prev = self._prev, grey
        return prev is not None and float(np.abs(grey - prev).mean()) > self.threshold
