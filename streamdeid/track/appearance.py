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

At the frame's edge: a face the edge cuts keeps the part of it inside the frame as its template, and a
guess whose search would leave the frame is matched with the part of the template that stays inside
it wherever the match may lie (at least MIN_INSIDE of the template). On a camera panning over a crowd,
faces enter and leave through the edges all the time: before, every guess there was widened (on the
parade pan of benchmarks/precision.py, 0.96 of the 2.24% of the frame covered off every reference face).
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
MIN_INSIDE = 0.3  # share of a face's box (a template's pixels) that must be inside the frame to be used
REJOIN_SEARCH = 0.2  # same_face: the reach of its search, in the box's size, each way ...
REJOIN_SCALES = (1.0, 0.87, 1.15)  # ... and the template's scales tried, relative to the box's size


@dataclass
class Template:
    pixels: np.ndarray  # [h, w] uint8 grey, at ``scale`` x frame pixels
    scale: float  # template px per frame px (<= 1)
    # Frame px from the face box's top-left to the pixels' top-left: (0, 0) but for a face the frame's
    # left or top edge cut when it was detected (only the part inside the frame was kept).
    offset: tuple[float, float] = (0.0, 0.0)
    whole: bool = True  # the pixels are the whole box (no edge cut it)
    height: float = 0.0  # frame px: the face box's height when the pixels were taken (0: unknown)


def template_of(image: np.ndarray, box: np.ndarray) -> Template | None:
    """The grey pixels of ``box`` ([4] x1, y1, x2, y2) in ``image`` ([H, W, 3] uint8 BGR), or None
    when too little of the box is inside the image (MIN_INSIDE, MIN_SIDE) or it has too little
    contrast to be matched."""
    cut = _crop(image, box)
    return None if cut is None else _template(cut)


def _crop(image: np.ndarray, box: np.ndarray) -> tuple[np.ndarray, tuple[int, int], bool, float] | None:
    """A copy of the pixels of ``box`` inside the image (the frame goes on to be painted over), their
    offset from the box's top-left, whether they are the whole box and the box's height; None (see
    template_of)."""
    x1, y1, x2, y2 = (int(round(v)) for v in np.asarray(box, np.float64).tolist())
    h, w = image.shape[:2]
    cx1, cy1, cx2, cy2 = max(x1, 0), max(y1, 0), min(x2, w), min(y2, h)
    if min(cx2 - cx1, cy2 - cy1) < MIN_SIDE or (cx2 - cx1) * (cy2 - cy1) < MIN_INSIDE * (x2 - x1) * (y2 - y1):
        return None
    return image[cy1:cy2, cx1:cx2].copy(), (cx1 - x1, cy1 - y1), (cx1, cy1, cx2, cy2) == (x1, y1, x2, y2), \
        float(y2 - y1)


def _template(cut: tuple[np.ndarray, tuple[int, int], bool, float]) -> Template | None:
    crop, offset, whole, height = cut
    scale = min(1.0, TEMPLATE_PX / crop.shape[0])
    grey = _grey(crop, scale)
    return Template(grey, scale, (float(offset[0]), float(offset[1])), whole, height) \
        if _contrast(grey) >= MIN_CONTRAST else None


def find(image: np.ndarray, template: Template, box: np.ndarray, search: float = SEARCH) -> np.ndarray | None:
    """Where ``template`` lies in ``image`` within ``search`` of ``box``'s size: the box moved onto the match
    ([4] float64), or None when nothing there correlates MATCH or more."""
    x1, y1, x2, y2 = (float(v) for v in box)
    bw, bh = x2 - x1, y2 - y1
    if min(bw, bh) < MIN_SIDE:
        return None
    reach = max(2.0, search * max(bw, bh))
    h, w = image.shape[:2]
    wx1, wy1 = math.floor(x1 - reach), math.floor(y1 - reach)
    wx2, wy2 = math.ceil(x2 + reach), math.ceil(y2 + reach)
    if not template.whole or wx1 < 0 or wy1 < 0 or wx2 > w or wy2 > h:
        return _find_at_edge(image, template, box, reach)
    found = _match(image, template.pixels, template.scale, (wx1, wy1, wx2, wy2))
    if found is None:
        return None
    # the match's top-left in frame pixels; the box keeps the guess's size
    nx, ny = found
    return np.array([nx, ny, nx + bw, ny + bh])


def same_face(image: np.ndarray, template: Template, box: np.ndarray) -> bool:
    """Whether the face at ``box`` (a detection) shows ``template``'s pixels: the template, brought to
    the box's size and to REJOIN_SCALES around it (two detections of one face differ in scale), found
    within REJOIN_SEARCH of the box. The check before a track lost for long is handed a detection
    (track/tracker.py, rejoin): a face that left and came back correlates with its own pixels, another
    person's face at the same place does not. On the marching band's pan (in process, every rejoin
    checked against the photo's truth): 93 of 115 faces that came back taken, none of 11 neighbours; at
    the held faces' SEARCH and one scale, 73 of 122."""
    bh = float(box[3] - box[1])
    if template.height <= 0 or bh <= 0:
        return False
    k = bh / template.height  # the face is k times its size at the template's detection
    if not 0.5 <= k <= 2.0:
        return False
    for m in REJOIN_SCALES:
        resized = Template(template.pixels, template.scale / (k * m),
                           (template.offset[0] * k * m, template.offset[1] * k * m), template.whole, bh)
        if find(image, resized, box, REJOIN_SEARCH) is not None:
            return True
    return False


def _find_at_edge(image: np.ndarray, template: Template, box: np.ndarray, reach: float) -> np.ndarray | None:
    """``find`` for a template cut by the frame's edge or a guess whose search leaves the frame: the part
    of the template that stays inside the frame wherever a match within ``reach`` lies is matched, if it
    is at least MIN_INSIDE of the template; the box moves as that part moved."""
    h, w = image.shape[:2]
    s = template.scale
    th, tw = template.pixels.shape
    # the template's pixels at the guess, in frame px, and the part of them kept inside the frame
    px1, py1 = float(box[0]) + template.offset[0], float(box[1]) + template.offset[1]
    px2, py2 = px1 + tw / s, py1 + th / s
    cx1, cy1, cx2, cy2 = max(px1, reach), max(py1, reach), min(px2, w - reach), min(py2, h - reach)
    if min(cx2 - cx1, cy2 - cy1) < MIN_SIDE or (cx2 - cx1) * (cy2 - cy1) < MIN_INSIDE * (px2 - px1) * (py2 - py1):
        return None
    sx1, sy1 = math.ceil((cx1 - px1) * s), math.ceil((cy1 - py1) * s)
    sx2, sy2 = math.floor((cx2 - px1) * s), math.floor((cy2 - py1) * s)
    part = template.pixels[sy1:sy2, sx1:sx2]
    if min(part.shape) < 2 or _contrast(part) < MIN_CONTRAST:
        return None
    gx, gy = px1 + sx1 / s, py1 + sy1 / s  # the part's top-left at the guess (frame px)
    window = (max(0, math.floor(gx - reach)), max(0, math.floor(gy - reach)),
              min(w, math.ceil(gx + part.shape[1] / s + reach)), min(h, math.ceil(gy + part.shape[0] / s + reach)))
    found = _match(image, part, s, window)
    if found is None:
        return None
    dx, dy = found[0] - gx, found[1] - gy
    return np.asarray(box, np.float64) + np.array([dx, dy, dx, dy])


def _match(image: np.ndarray, pixels: np.ndarray, scale: float,
           window: tuple[int, int, int, int]) -> tuple[float, float] | None:
    """The top-left (frame px) of the best match of ``pixels`` (grey, at ``scale``) in ``window`` (x1, y1,
    x2, y2 of ``image``), or None when it correlates under MATCH or lands on a flat patch."""
    wx1, wy1, wx2, wy2 = window
    grey = _grey(image[wy1:wy2, wx1:wx2], scale)
    th, tw = pixels.shape
    if grey.shape[0] < th or grey.shape[1] < tw:
        return None
    scores = cv2.matchTemplate(grey, pixels, cv2.TM_CCOEFF_NORMED)
    _, best, _, (mx, my) = cv2.minMaxLoc(scores)
    if not best >= MATCH:
        return None
    if _contrast(grey[my:my + th, mx:mx + tw]) < MIN_CONTRAST:
        return None  # a flat patch (a wall, a passer-by's coat) correlates with anything
    return wx1 + mx / scale, wy1 + my / scale


def moved_to(face: TrackedFace, box: np.ndarray, state: str | None = None) -> TrackedFace:
    """``face`` (its box not widened) put on ``box`` (same size), as ``state`` (default: its own),
    marked as found by its template."""
    shift = (box[:2] + box[2:]) / 2 - (face.box[:2] + face.box[2:]) / 2
    return TrackedFace(face.track_id, box, face.landmarks + shift, face.score, state or face.state, matched=True)


class TemplateStore:
    """Each track's template from its latest detection (the tracker's faces in, templates kept).
    The detection's pixels are copied on every detector run (a crowd has hundreds of faces) and
    made into a template only when one is asked for. ``keep_frames``: a track no longer reported
    keeps its template this many frames (the tracker's rejoin: a face lost for long is taken back only
    by a detection its pixels match); 0: forgotten at once."""

    def __init__(self, keep_frames: int = 0) -> None:
        self._crops: dict[int, tuple | Template | None] = {}  # _crop's pixels until asked for
        self.keep_frames = int(keep_frames)
        self._unseen: dict[int, int] = {}  # track -> frames since it was last reported (kept ones only)

    def get(self, track_id: int) -> Template | None:
        kept = self._crops.get(track_id)
        if isinstance(kept, tuple):
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
            self._unseen[tid] = self._unseen.get(tid, 0) + 1
            if self._unseen[tid] > self.keep_frames:
                del self._crops[tid], self._unseen[tid]
        for tid in live & self._unseen.keys():
            del self._unseen[tid]


def _grey(bgr: np.ndarray, scale: float) -> np.ndarray:
    """[h, w] uint8 grey of a BGR patch (a view into the frame is fine), scaled by ``scale`` (above 1 only
    for same_face: a small face whose template was taken at its own size, found smaller)."""
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    if scale != 1.0:
        grey = cv2.resize(grey, (max(1, round(grey.shape[1] * scale)), max(1, round(grey.shape[0] * scale))),
                          interpolation=cv2.INTER_AREA if scale < 1.0 else cv2.INTER_LINEAR)
    return grey


def _contrast(grey: np.ndarray) -> float:
    """Standard deviation of a grey patch (cv2: numpy's std costs 40 us on a face-sized patch)."""
    return float(cv2.meanStdDev(grey)[1][0, 0])
