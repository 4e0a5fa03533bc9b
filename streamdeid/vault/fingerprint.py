"""What a vault remembers of the video it was made beside: a small grey thumbnail of every EVERY-th frame of the
anonymized output, kept in its END record (format 4, under the master key).

``recover`` knows a vault's video by the video id tag the output carries. A remux or an upload may strip the tag,
and then another video's vault at least as large and as long was applied with a warning: its faces pasted into
this video (a security review, 2026-11-27). Where the tag is missing, ``recover`` compares these thumbnails with
the video's own frames and refuses a video they do not match (restore/video.py). A thumbnail is the frame
brought to THUMB_SIZE grey pixels, so a re-encode at another quality or size still matches; a copy whose frames
moved (another frame rate, a cut at the start) does not, and its faces would land on the wrong frames anyway.

Samples: frame index -> [THUMB_SIZE[1], THUMB_SIZE[0]] uint8 grey.
"""

from __future__ import annotations

import struct

import cv2
import numpy as np

THUMB_SIZE = (16, 9)  # width, height: 144 bytes a sample
EVERY = 50  # frames between samples (2 s at 25 fps) ...
MAX_SAMPLES = 4096  # ... doubled whenever more would be kept (an hour at 25 fps: 1,800 samples, 270 KB)
# Two thumbnails show one frame when their mean absolute difference is under MATCH_LEVELS grey levels, and a video
# is the vault's when at least MATCH_SHARE of the frames both sampled match. Measured on the default (x264) outputs
# of short_hamilton_clip.mp4 and the two-person head-pose clip: the output itself 1.0-1.3 levels from its vault's
# thumbnails, the output re-encoded at crf 35 and half its size 2.2-3.2, three other shared clips brought to the
# same size 35-125. A still camera's two recordings of one empty scene would match: the check tells scenes apart,
# not takes of one scene.
MATCH_LEVELS = 8.0
MATCH_SHARE = 0.8

_HEAD = struct.Struct("<II")  # every, count
_SAMPLE = struct.Struct("<Q")  # frame index, then the thumbnail's bytes


def thumbnail(image: np.ndarray) -> np.ndarray:
    """[H, W, 3] uint8 BGR -> [9, 16] uint8 grey."""
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
    return cv2.resize(grey, THUMB_SIZE, interpolation=cv2.INTER_AREA)


class OutputSamples:
    """The thumbnails of an output's frames, taken as they are written (VaultWriter.note_output)."""

    def __init__(self) -> None:
        self.every = EVERY
        self.samples: dict[int, np.ndarray] = {}

    def add(self, index: int, image: np.ndarray) -> None:
        if index % self.every:
            return
        self.samples[index] = thumbnail(image)
        if len(self.samples) > MAX_SAMPLES:
            self.every *= 2
            self.samples = {i: t for i, t in self.samples.items() if i % self.every == 0}

    def pack(self) -> bytes:
        return _HEAD.pack(self.every, len(self.samples)) + b"".join(
            _SAMPLE.pack(i) + np.ascontiguousarray(t, np.uint8).tobytes() for i, t in sorted(self.samples.items()))


def unpack(data: bytes) -> dict[int, np.ndarray]:
    """``OutputSamples.pack``'s bytes -> samples; ValueError when they are malformed."""
    if len(data) < _HEAD.size:
        raise ValueError("no output samples")
    _, count = _HEAD.unpack_from(data)
    size = _SAMPLE.size + THUMB_SIZE[0] * THUMB_SIZE[1]
    if len(data) != _HEAD.size + count * size:
        raise ValueError("malformed output samples")
    out = {}
    for k in range(count):
        at = _HEAD.size + k * size
        (index,) = _SAMPLE.unpack_from(data, at)
        out[index] = np.frombuffer(data, np.uint8, THUMB_SIZE[0] * THUMB_SIZE[1], at + _SAMPLE.size).reshape(
            THUMB_SIZE[1], THUMB_SIZE[0])
    return out


def differing(expected: dict[int, np.ndarray], seen: dict[int, np.ndarray]) -> tuple[int, int]:
    """(frames whose thumbnails differ, frames both hold): ``seen`` is the video's own (every EVERY-th frame)."""
    both = sorted(expected.keys() & seen.keys())
    off = sum(float(np.abs(expected[i].astype(np.int16) - seen[i]).mean()) >= MATCH_LEVELS for i in both)
    return off, len(both)
