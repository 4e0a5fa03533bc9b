"""A video's display rotation: frames are worked on as they are shown, and written back as they were stored.

Phones store portrait video sideways with a display matrix saying how to turn it. Faces stored sideways are
missed or covered in the wrong place by a detector trained on upright faces, so the reader turns each frame
upright (``upright``) and the writer turns it back (``as_stored``) under the same display matrix: boxes,
the vault and the audit log are all in the upright picture's pixels, as a player shows it.

A display matrix can also mirror the picture (``ffmpeg -display_vflip``, some dashcams and front cameras).
``orientation_of`` reads the whole matrix as FFmpeg's players do; a mirrored video's frames are turned
upright the same way, and written upright with no matrix (``Orientation.mirrored``), since a writer can
only store a rotation.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Orientation:
    """How a stored frame becomes the shown picture: mirrored left-right first (if ``mirrored``), then
    ``turns`` quarter turns counter-clockwise."""

    turns: int = 0
    mirrored: bool = False

    @property
    def is_identity(self) -> bool:
        return not self.turns and not self.mirrored

    def upright(self, image: np.ndarray) -> np.ndarray:
        """A stored frame [H, W, C] as it is shown."""
        if self.mirrored:  # contiguous: a negative-stride view slowed every later stage ten times
            return np.ascontiguousarray(upright(np.fliplr(image), self.turns))
        return upright(image, self.turns)


# (theta's quarter turn, the flag FFmpeg's autorotate reads) -> Orientation, after fftools' own rule:
# theta = -rotation, 90: transpose cclock_flip if m[3] > 0 else clock; 270: clock_flip if m[3] < 0 else
# cclock; 180: hflip if m[0] < 0, then vflip if m[4] < 0; 0: vflip if m[4] < 0.
_HFLIP, _VFLIP, _BOTH = Orientation(0, True), Orientation(2, True), Orientation(2, False)


def orientation_of(frame: av.VideoFrame) -> Orientation:
    """The shown picture of a decoded frame from its display matrix (the whole matrix: rotation and mirror);
    no matrix, or an angle that is not a quarter turn, is the identity (the latter logged)."""
    rotation = display_rotation(frame)
    m = _display_matrix(frame)
    if m is None or rotation % 90:
        return Orientation(quarter_turns(rotation))
    theta = (-rotation) % 360
    if theta == 90:
        return Orientation(1, True) if m[3] > 0 else Orientation(3)
    if theta == 270:
        return Orientation(3, True) if m[3] < 0 else Orientation(1)
    if theta == 180:
        return {(True, True): _BOTH, (True, False): _HFLIP, (False, True): _VFLIP}.get(
            (m[0] < 0, m[4] < 0), Orientation())
    return _VFLIP if m[4] < 0 else Orientation()


def _display_matrix(frame: av.VideoFrame) -> tuple[int, ...] | None:
    """The frame's 3x3 display matrix as 9 int32 (a, b, u, c, d, v, x, y, w; a-d in 16.16), or None."""
    try:
        for sd in frame.side_data:
            if sd.type.name == "DISPLAYMATRIX":
                raw = bytes(sd)
                return struct.unpack("<9i", raw[:36]) if len(raw) >= 36 else None
    except READ_ERRORS + (AttributeError, TypeError, ValueError):
        return None
    return None
