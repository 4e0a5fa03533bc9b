"""A video's display rotation: frames are worked on as they are shown, and written back as they were stored.

Phones store portrait video sideways with a display matrix saying how to turn it. Faces stored sideways are
missed or covered in the wrong place by a detector trained on upright faces, so the reader turns each frame
upright (``upright``) and the writer turns it back (``as_stored``) under the same display matrix: boxes,
the vault and the audit log are all in the upright picture's pixels, as a player shows it.
"""

from __future__ import annotations

import logging

import av
import numpy as np

from streamdeid.video.inputs import READ_ERRORS

log = logging.getLogger(__name__)


def quarter_turns(rotation: int) -> int:
    """Counter-clockwise quarter turns (0-3) that make a frame stored under ``rotation`` degrees (the display
    matrix's, counter-clockwise) upright; 0 for an angle that is not a multiple of 90 (left as stored)."""
    if rotation % 90:
        log.warning("display rotation of %d degrees is not a quarter turn: frames are worked on as stored",
                    rotation)
        return 0
    return (rotation // 90) % 4


def upright(image: np.ndarray, turns: int) -> np.ndarray:
    """A stored frame [H, W, C] as it is shown ([W, H, C] for an odd number of turns)."""
    return np.ascontiguousarray(np.rot90(image, turns)) if turns else image


def as_stored(image: np.ndarray, turns: int) -> np.ndarray:
    """The inverse of ``upright``: a shown frame as the stream stores it."""
    return np.ascontiguousarray(np.rot90(image, -turns)) if turns else image


def turned_size(width: int, height: int, turns: int) -> tuple[int, int]:
    """(width, height) of a ``width`` x ``height`` frame turned ``turns`` quarter turns, either way: the stored
    frames of an upright picture, or the upright picture of stored frames."""
    return (height, width) if turns % 2 else (width, height)


def display_rotation(frame: av.VideoFrame) -> int:
    """A decoded frame's display-matrix rotation in degrees counter-clockwise (0-359), 0 when it has none."""
    try:
        return int(round(frame.rotation)) % 360
    except READ_ERRORS + (AttributeError, TypeError):
        return 0
