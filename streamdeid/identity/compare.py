"""What a leak verdict is made of: shared by the runtime guard (leakguard.py) and the offline check of a
finished video (leakcheck.py), so both judge a face the same way. Runtime code: no evaluation imports.
"""

from __future__ import annotations

import cv2
import numpy as np

# SFace sees 112 px crops: below this face height (pixels, from brow to chin of
# YuNet's box) the crop is an upsampled blur and its verdicts are noise (a 17 px
# face blurred beyond recognition still "matched" on its hair and shirt).
# Such faces are checked by pixels instead: their inner region must have changed.
MIN_SFACE_HEIGHT = 24
CHANGED_LEVELS = 2  # grey levels a pixel must move to count as changed


def _blank_ellipse() -> np.ndarray:
    m = np.zeros((112, 112), np.uint8)
    cv2.ellipse(m, (56, 64), (36, 46), 0, 0, 360, 1, -1)  # brows to chin of the ArcFace crop
    return m.astype(bool)


_BLANK = _blank_ellipse()


def blank_face(crop112: np.ndarray) -> np.ndarray:
    """The crop with its face region replaced by its mean colour (no identity left)."""
    out = crop112.copy()
    out[_BLANK] = crop112[_BLANK].mean(axis=0)
    return out


def changed_share(src: np.ndarray, out: np.ndarray, landmarks: np.ndarray) -> float:
    """Share of pixels in the landmarks' bounding box (eyes to mouth) that changed."""
    h, w = src.shape[:2]
    x0, y0 = np.floor(landmarks.min(0)).astype(int)
    x1, y1 = np.ceil(landmarks.max(0)).astype(int) + 1
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    if x1 <= x0 or y1 <= y0:
        return 1.0  # landmarks outside the frame: nothing of the face to see
    diff = np.abs(src[y0:y1, x0:x1].astype(np.int16) - out[y0:y1, x0:x1]).max(axis=2)
    return float((diff > CHANGED_LEVELS).mean())
