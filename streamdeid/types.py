"""Typed, validated values passed between pipeline stages.

Conventions: images are numpy uint8 BGR ``[H, W, 3]`` (OpenCV order), boxes are
``x1, y1, x2, y2`` in frame pixels (float32), landmarks are YuNet's 5 points in
the order right eye, left eye, nose tip, right mouth corner, left mouth corner
(the subject's right/left), ``[5, 2]`` float32 ``(x, y)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from .cover_size import unseen_scale


class StreamdeidError(Exception):
    """An error with a one-line message meant for the user (no traceback)."""


class UsageError(StreamdeidError):
    """Options that do not go together, or do not fit the input (exit code 2, as click's own usage errors)."""


class OutputClosed(StreamdeidError):
    """The reader of the output pipe (``-o -``) hung up: the run stops, as Unix tools do on EPIPE."""


@dataclass(frozen=True)
class Yuv420:
    """A decoded picture's (or a rectangle of it) 4:2:0 planes, as the decoder gave them, and how they
    convert to BGR. ``y`` [h, w], ``u`` and ``v`` [h/2, w/2] uint8; h and w even."""

    y: np.ndarray
    u: np.ndarray
    v: np.ndarray
    pix_fmt: str  # "yuv420p" or "yuvj420p"
    color_range: int  # FFmpeg's AVColorRange / AVColorSpace values of the source frame
    colorspace: int


@dataclass
class Frame:
    """One decoded video frame and its timing.

    ``pts`` is in ``time_base`` units and copied to the output unchanged, so
    variable frame rate survives. ``index`` counts decoded frames from 0.
    """

    index: int
    image: np.ndarray  # [H, W, 3] uint8 BGR
    pts: int | None
    time_base: Fraction | None
    # The decoder's own 4:2:0 planes of ``image`` (video/planes.py), kept only when a vault will store
    # face pixels: the vault encodes those instead of ``image``, which re-converted would cost more bits.
    # None when not asked for, or when ``image`` is not exactly their conversion (see planes.planes_of).
    yuv: Yuv420 | None = field(default=None, repr=False)
    interlaced: bool = False  # the decoder flagged it interlaced, two fields (detect/fields.py)

    def __post_init__(self) -> None:
        if self.image.ndim != 3 or self.image.shape[2] != 3 or self.image.dtype != np.uint8:
            raise ValueError(f"Frame.image must be uint8 [H,W,3], got {self.image.dtype} {self.image.shape}")

    @property
    def seconds(self) -> float | None:
        if self.pts is None or self.time_base is None:
            return None
        return float(self.pts * self.time_base)


@dataclass
class Detections:
    """Faces found in one frame (supervision's ``Detections``, cut down)."""

    boxes: np.ndarray  # [N, 4] float32 x1, y1, x2, y2
    scores: np.ndarray  # [N] float32
    landmarks: np.ndarray  # [N, 5, 2] float32

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)
        n = len(self.boxes)
        self.scores = np.asarray(self.scores, dtype=np.float32).reshape(n)
        self.landmarks = np.asarray(self.landmarks, dtype=np.float32).reshape(n, 5, 2)

    def __len__(self) -> int:
        return len(self.boxes)

    @classmethod
    def empty(cls) -> "Detections":
        return cls(np.zeros((0, 4)), np.zeros((0,)), np.zeros((0, 5, 2)))

    def __getitem__(self, idx) -> "Detections":
        idx = np.atleast_1d(np.arange(len(self))[idx])
        return Detections(self.boxes[idx], self.scores[idx], self.landmarks[idx])


@dataclass
class TrackedFace:
    """A tracked face in one frame.

    ``state`` is ``"detected"`` (matched to a detection this frame), ``"held"``
    (no detection: the track's predicted box, kept covered for ``--hold``
    seconds) or ``"backfilled"`` (added by the look-ahead buffer to frames
    before the track was first detected). ``between_runs``: held only because
    the detector skipped this frame (the last detector run found the face), or back-filled for a face its next
    detections show still (lookahead.py): drawn with the same margin.
    ``matched``: held or back-filled, and the face's pixels from its detection were found
    at this box by template matching (track/appearance.py), so it is not widened.
    ``still``: between runs, and its track moves under cover_size.STILL_SPEED of its height a
    frame (the camera's motion taken out): where a detection put it a frame ago, drawn as a matched one.
    """

    track_id: int
    box: np.ndarray  # [4] float32
    landmarks: np.ndarray  # [5, 2] float32
    score: float
    state: str = "detected"
    between_runs: bool = False
    matched: bool = False
    still: bool = False

    def __post_init__(self) -> None:
        self.box = np.asarray(self.box, dtype=np.float32).reshape(4)
        self.landmarks = np.asarray(self.landmarks, dtype=np.float32).reshape(5, 2)
        if self.state not in ("detected", "held", "backfilled"):
            raise ValueError(f"unknown TrackedFace.state {self.state!r}")

    def moved(self, motion: np.ndarray | None) -> "TrackedFace":
        """This face carried through a camera motion (a [2, 3] similarity, see track/camera_motion.py;
        None: unchanged): landmarks mapped, the box's centre mapped and its size scaled (it stays
        axis-aligned: a camera rolls a few degrees a frame at most)."""
        if motion is None:
            return self
        m = np.asarray(motion, np.float64)
        scale = float(np.sqrt(abs(np.linalg.det(m[:, :2]))))
        centre = (self.box[:2] + self.box[2:]) / 2 @ m[:, :2].T + m[:, 2]
        half = (self.box[2:] - self.box[:2]) / 2 * scale
        landmarks = self.landmarks @ m[:, :2].T + m[:, 2]
        return TrackedFace(self.track_id, np.concatenate([centre - half, centre + half]), landmarks, self.score,
                           self.state, self.between_runs)

    def widened(self, frames_unseen: int, state: str) -> "TrackedFace":
        """This face at a frame ``frames_unseen`` away from its last (or first) detection, as ``state``:
        box and landmarks scaled about the box centre by cover_size.unseen_scale, because where the face
        is grows less certain with every frame unseen."""
        x1, y1, x2, y2 = self.box.tolist()
        size = max(x2 - x1, y2 - y1, 1.0)
        factor = unseen_scale(size, frames_unseen)
        box, landmarks = scaled_about_centre(self.box, self.landmarks, factor)
        return TrackedFace(self.track_id, box, landmarks, self.score, state)


def longest_sides(boxes: np.ndarray) -> np.ndarray:
    """[N] float64: the longest side of each box ([N, 4] x1 y1 x2 y2), a face box's size."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])


def box_centres(boxes: np.ndarray) -> np.ndarray:
    """float64 centres of x1 y1 x2 y2 boxes: [N, 2] for [N, 4], [2] for one box [4]."""
    b = np.asarray(boxes, np.float64)
    return (b[..., :2] + b[..., 2:]) / 2


def scaled_about_centre(box: np.ndarray, landmarks: np.ndarray, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """``box`` ([4] x1, y1, x2, y2) and ``landmarks`` ([5, 2]) scaled by ``factor`` about the box centre;
    or N faces at once: boxes [N, 4], landmarks [N, 5, 2], factors [N]. One box in plain floats:
    numpy's per-call overhead on four numbers showed in a crowd's tracking."""
    if np.ndim(box) == 2:
        b, f = np.asarray(box, np.float64), np.asarray(factor, np.float64)[:, None]  # [N, 4], [N, 1]
        c = np.stack([(b[:, 0] + b[:, 2]) * 0.5, (b[:, 1] + b[:, 3]) * 0.5], 1)  # [N, 2] centres
        grown = np.concatenate([c + (b[:, :2] - c) * f, c + (b[:, 2:] - c) * f], 1)
        return grown, np.asarray(landmarks, np.float64) * f[:, None] + ((1.0 - f) * c)[:, None]
    x1, y1, x2, y2 = np.asarray(box, np.float64).reshape(4).tolist()
    cx, cy = (x1 + x2) * 0.5, (y1 + y2) * 0.5
    grown = np.array([cx + (x1 - cx) * factor, cy + (y1 - cy) * factor, cx + (x2 - cx) * factor,
                      cy + (y2 - cy) * factor])
    return grown, np.asarray(landmarks, np.float64) * factor + ((1.0 - factor) * cx, (1.0 - factor) * cy)


@dataclass
class AlignedFace:
    """A face crop at model resolution and the warp that made it.

    ``matrix`` maps frame coordinates to crop coordinates ([2, 3], for
    ``cv2.warpAffine``); ``inverse`` maps crop back to frame.
    """

    crop: np.ndarray  # [S, S, 3] uint8 BGR
    matrix: np.ndarray  # [2, 3] float64, frame -> crop
    inverse: np.ndarray  # [2, 3] float64, crop -> frame


@dataclass
class FaceContext:
    """What an anonymizer may know about each crop in a batch."""

    track_id: int
    frame_index: int
    key: bytes | None = None  # per-track key material (32 bytes) when a key file is in use
    # [2, 3] steady crop -> this crop (align/steady.py), for anonymizers that ask (``steadied``); None: identity
    steady: np.ndarray | None = None
    # a detection of this track has scored TrackConfig.high_score or more (so far in render order, or within
    # the look-ahead: FrameResult.sure_ahead); False: a weak track (a dark face, a hand, a shoulder), which an
    # anonymizer that draws a face may cover otherwise
    sure: bool = True


@dataclass
class FrameResult:
    """A frame after tracking, waiting in the look-ahead buffer."""

    frame: Frame
    faces: list[TrackedFace] = field(default_factory=list)
    scene_cut: bool = False  # the picture changed wholesale since the previous frame
    # [2, 3] camera motion from the previous frame to this one (track/camera_motion.py); None: none known
    motion: np.ndarray | None = None
    motion_unsure: bool = False  # no motion known, though the camera may have moved (camera_motion.py)
    # tracks whose hold closer looks ended on this frame: looks in a row found no face at their place (tracker.py)
    looked_gone: frozenset[int] = frozenset()
    kept: list[TrackedFace] = field(default_factory=list)  # --keep/--only: faces left visible (not rendered)
    # tracks the detector was sure of (score >= TrackConfig.high_score) by the time this frame left the
    # look-ahead buffer, the frames after it included (Pipeline._take): a weak track that turns out to be a
    # face within the look-ahead is treated as one on its earlier frames too (FaceContext.sure)
    sure_ahead: frozenset[int] = frozenset()
    searched: bool = False  # the detector ran on this frame (a frame it skipped relies on a later run's back-fill)
