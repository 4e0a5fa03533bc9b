"""Interlaced frames: the detector looks at one field.

An interlaced frame holds two fields, its even and its odd lines, taken 1/50 or 1/60 s apart (analog
CCTV, DV, broadcast archives). Where anything moved between them, the frame is combed: every other
line is displaced, and YuNet scores a combed face low or not at all. With the odd lines shifted 8 px,
67 of 159 dlib faces of two shared clips were left bare (red team round 5; 53 of 159 in a file flagged
interlaced). The detector (its passes and its closer looks) looks instead at the first field, stretched
back to the frame's height; the cover it places, with its margin, hides both fields.

Combing is measured, not taken from the file's flag alone: adjacent lines differ more than lines two
apart when they come from different moments (``comb_ratio``). On the shared progressive clips the ratio
is 0.52-0.71 (white noise gives about 1.0); on combed copies of them 2.1-5.8.
"""

from __future__ import annotations

import cv2
import numpy as np

COMB_RATIO = 1.3  # combed whatever the file says: above noise's 1.0, below the least combed copy's 2.1
FLAGGED_RATIO = 0.9  # combed, in a frame the decoder flags interlaced (motion in part of the picture)


def comb_ratio(image: np.ndarray) -> float:
    """Mean absolute difference of adjacent lines over that of lines two apart, on the green channel of
    every fourth column (the ratio is about lines; 0.8 ms a 1080p frame, 6.9 on the grey frame of every
    other column). [H, W, 3] uint8 BGR -> float."""
    grey = image[:, ::4, 1].astype(np.int16)  # [H, W/4]
    if grey.shape[0] < 4:
        return 0.0
    apart = float(np.abs(grey[2:] - grey[:-2]).mean())
    return float(np.abs(grey[1:] - grey[:-1]).mean()) / apart if apart > 0.5 else 0.0


def combed(image: np.ndarray, flagged: bool = False) -> bool:
    """Whether ``image`` shows two fields apart (see the module docstring); ``flagged``: the decoder said
    the frame is interlaced."""
    ratio = comb_ratio(image)
    return ratio >= COMB_RATIO or (flagged and ratio >= FLAGGED_RATIO)


def first_field(image: np.ndarray) -> np.ndarray:
    """The even lines stretched back to the frame's height: [H, W, 3] -> [H, W, 3], the same coordinates."""
    h, w = image.shape[:2]
    return cv2.resize(np.ascontiguousarray(image[0::2]), (w, h), interpolation=cv2.INTER_LINEAR)


def seen_by_detector(image: np.ndarray, flagged: bool = False) -> np.ndarray:
    """The picture the detector looks at: ``image``, or its first field where it is combed."""
    return first_field(image) if combed(image, flagged) else image
