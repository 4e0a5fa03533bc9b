"""A camera panning over a still crowd, with exact ground truth per frame.

A crowd from :func:`evaluation.crowd.make_crowd` is composed on a canvas
larger than the frame; a frame-sized window slides over it (left to right
once, down and back up once), as a bodycam, drone or phone sweeping over a
crowd. Nobody moves: every change between frames is camera motion, so each
pasted face should keep one track from the frame it enters to the frame it
leaves. The clip is written with PyAV (H.264, crf 18) so it goes through the
real decoder like any user's file.

    pan = make_pan(crowd, (1280, 720), frames=75)
    write_pan(pan, "pan.mp4")
    ids, boxes = pan.faces_in(10)  # the faces visible in frame 10, frame pixels
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # no package import at run time: benchmarks/crowd.py loads this file into older trees
    from .crowd import CrowdImage

# A face counts as in view when this share of its box lies inside the frame.
IN_VIEW = 0.5


@dataclass
class PanClip:
    crowd: "CrowdImage"  # the canvas and its face boxes (canvas pixels)
    size: tuple[int, int]  # frame W, H
    offsets: np.ndarray  # [T, 2] int: the window's top-left corner (x, y) on the canvas, per frame
    fps: float

    def __len__(self) -> int:
        return len(self.offsets)

    def frame(self, t: int) -> np.ndarray:
        """Frame ``t`` as [H, W, 3] uint8 BGR (a view of the canvas)."""
        x, y = self.offsets[t]
        w, h = self.size
        return self.crowd.image[y:y + h, x:x + w]

    def frames(self) -> Iterator[np.ndarray]:
        for t in range(len(self)):
            yield self.frame(t)

    def faces_in(self, t: int, min_px: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Faces in view in frame ``t`` (at least :data:`IN_VIEW` of the box inside, height >=
        ``min_px``): their indices [M] into ``crowd.boxes`` and their boxes [M, 4] in frame pixels."""
        w, h = self.size
        boxes = self.crowd.boxes - np.tile(self.offsets[t], 2)
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        iw = np.clip(np.minimum(boxes[:, 2], w) - np.maximum(boxes[:, 0], 0), 0, None)
        ih = np.clip(np.minimum(boxes[:, 3], h) - np.maximum(boxes[:, 1], 0), 0, None)
        keep = np.flatnonzero((iw * ih >= IN_VIEW * area) & (boxes[:, 3] - boxes[:, 1] >= min_px))
        return keep, boxes[keep]

    def distinct_faces(self, min_px: float = 0.0) -> int:
        """Faces in view in at least one frame."""
        return len(set().union(*(self.faces_in(t, min_px)[0].tolist() for t in range(len(self)))))

    def speed(self) -> float:
        """Mean camera speed, px per frame."""
        return float(np.linalg.norm(np.diff(self.offsets, axis=0), axis=1).mean()) if len(self) > 1 else 0.0


def make_pan(crowd: "CrowdImage", size: tuple[int, int] = (1280, 720), *, frames: int = 75,
             fps: float = 25.0) -> PanClip:
    """Slide a ``size`` window over ``crowd.image``: x from the left edge to the right edge, y down to
    the bottom edge and back up, over ``frames`` frames (integer offsets: whole-pixel camera steps)."""
    W, H = size
    ch, cw = crowd.image.shape[:2]
    if cw < W or ch < H:
        raise ValueError(f"the {cw}x{ch} canvas is smaller than a {W}x{H} frame")
    s = np.linspace(0.0, 1.0, frames)
    x = np.round(s * (cw - W))
    y = np.round((1 - np.abs(2 * s - 1)) * (ch - H))  # 0 -> bottom -> 0
    return PanClip(crowd, (W, H), np.stack([x, y], axis=1).astype(np.int64), float(fps))


def write_pan(pan: PanClip, path: str | Path, crf: int = 18) -> Path:
    """Encode the clip as H.264 (yuv420p) in an MP4 or MKV file."""
    import av

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = pan.size
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=Fraction(pan.fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "medium"}
        for image in pan.frames():
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path
