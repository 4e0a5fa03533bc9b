"""Is the face still where we think it is? A template check for covers the detector did not confirm.

A held cover (a face a detector run missed) and a back-filled one (a face on the frames before its
first detection) are guesses, so they are widened with every frame unseen (TrackedFace.widened) and
drawn with a wider margin (cover_size.py). On a camera panning over a crowd those guesses
were most of the covered area: a face the small-face scan misses once is still there, in plain view,
at the position the camera motion predicts. This module looks: the face's grey pixels at its last
detection (the template) are matched (normalised cross-correlation, ``cv2.matchTemplate``) in a
small window around the guessed box. When they are found there, the cover is put on the match and
drawn as a face seen a frame ago is; when they are not (the face moved, turned, left, or is hidden),
the guess stays widened as before. So a match can only move a cover onto the face's own pixels,
never shrink one off a face that went elsewhere.

Sizes: templates are kept at most TEMPLATE_PX tall (larger faces are downscaled, which also bounds
the cost: about 30 us a check); the search window reaches SEARCH of the box's size each way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from streamdeid.types import TrackedFace

TEMPLATE_PX = 32  # template height cap (px)
SEARCH = 0.15  # the match may lie this share of the box's size off the guess, each way
MATCH = 0.85  # normalised cross-correlation needed (a still face through H.264: 0.95 and more)
MIN_CONTRAST = 6.0  # grey standard deviation a template needs: a flat patch matches anything
MIN_SIDE = 8  # px: a box smaller than this in the frame is not checked


@dataclass
class Template:
    pixels: np.ndarray  # [h, w] uint8 grey, at ``scale`` x frame pixels
    scale: float  # template px per frame px (<= 1)


def template_of(image: np.ndarray, box: np.ndarray) -> Template | None:
    """The grey pixels of ``box`` ([4] x1, y1, x2, y2) in ``image`` ([H, W, 3] uint8 BGR), or None
    when the box is too small, leaves the image or has too little contrast to be matched."""
    crop = _crop(image, box)
    return None if crop is None else _template(crop)


def _crop(image: np.ndarray, box: np.ndarray) -> np.ndarray | None:
    """A copy of the pixels in ``box`` (the frame goes on to be painted over), or None (see template_of)."""
    x1, y1, x2, y2 = (int(round(v)) for v in np.asarray(box, np.float64).tolist())
    h, w = image.shape[:2]
    if x1 < 0 or y1 < 0 or x2 > w or y2 > h or min(x2 - x1, y2 - y1) < MIN_SIDE:
        return None
    return image[y1:y2, x1:x2].copy()


def _template(crop: np.ndarray) -> Template | None:
    scale = min(1.0, TEMPLATE_PX / crop.shape[0])
    grey = _grey(crop, scale)
    return Template(grey, scale) if _contrast(grey) >= MIN_CONTRAST else None


def find(image: np.ndarray, template: Template, box: np.ndarray) -> np.ndarray | None:
    """Where ``template`` lies in ``image`` within SEARCH of ``box``: the box moved onto the match
    ([4] float64), or None when nothing there correlates MATCH or more."""
    x1, y1, x2, y2 = (float(v) for v in box)
    bw, bh = x2 - x1, y2 - y1
    if min(bw, bh) < MIN_SIDE:
        return None
    reach = max(2.0, SEARCH * max(bw, bh))
    h, w = image.shape[:2]
    wx1, wy1 = math.floor(x1 - reach), math.floor(y1 - reach)
    wx2, wy2 = math.ceil(x2 + reach), math.ceil(y2 + reach)
    if wx1 < 0 or wy1 < 0 or wx2 > w or wy2 > h:
        return None  # at the frame edge: leave the guess as it is
    window = _grey(image[wy1:wy2, wx1:wx2], template.scale)
    th, tw = template.pixels.shape
    if window.shape[0] < th or window.shape[1] < tw:
        return None
    scores = cv2.matchTemplate(window, template.pixels, cv2.TM_CCOEFF_NORMED)
    _, best, _, (mx, my) = cv2.minMaxLoc(scores)
    if not best >= MATCH:
        return None
    if _contrast(window[my:my + th, mx:mx + tw]) < MIN_CONTRAST:
        return None  # a flat patch (a wall, a passer-by's coat) correlates with anything
    # the match's top-left in frame pixels; the box keeps the guess's size
    nx, ny = wx1 + mx / template.scale, wy1 + my / template.scale
    return np.array([nx, ny, nx + bw, ny + bh])


def moved_to(face: TrackedFace, box: np.ndarray, state: str | None = None) -> TrackedFace:
    """``face`` (its box not widened) put on ``box`` (same size), as ``state`` (default: its own),
    marked as found by its template."""
    shift = (box[:2] + box[2:]) / 2 - (face.box[:2] + face.box[2:]) / 2
    return TrackedFace(face.track_id, box, face.landmarks + shift, face.score, state or face.state, matched=True)


class TemplateStore:
    """Each track's template from its latest detection (the tracker's faces in, templates kept).
    The detection's pixels are copied on every detector run (a crowd has hundreds of faces) and
    made into a template only when one is asked for."""

    def __init__(self) -> None:
        self._crops: dict[int, np.ndarray | Template | None] = {}  # [h, w, 3] uint8 until asked for

    def get(self, track_id: int) -> Template | None:
        kept = self._crops.get(track_id)
        if isinstance(kept, np.ndarray):
            kept = self._crops[track_id] = _template(kept)
        return kept

    def update(self, image: np.ndarray, faces: list[TrackedFace]) -> None:
        """Keep this frame's detected faces' pixels (None where they cannot be a template: the old
        one may show another view); forget the tracks no longer reported."""
        live = {f.track_id for f in faces}
        for f in faces:
            if f.state == "detected":
                self._crops[f.track_id] = _crop(image, f.box)
        for tid in [t for t in self._crops if t not in live]:
            del self._crops[tid]


def _grey(bgr: np.ndarray, scale: float) -> np.ndarray:
    """[h, w] uint8 grey of a BGR patch (a view into the frame is fine), scaled by ``scale`` (<= 1)."""
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    if scale < 1.0:
        grey = cv2.resize(grey, (max(1, round(grey.shape[1] * scale)), max(1, round(grey.shape[0] * scale))),
                          interpolation=cv2.INTER_AREA)
    return grey


def _contrast(grey: np.ndarray) -> float:
    """Standard deviation of a grey patch (cv2: numpy's std costs 40 us on a face-sized patch)."""
    return float(cv2.meanStdDev(grey)[1][0, 0])
