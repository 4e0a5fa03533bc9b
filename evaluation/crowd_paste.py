"""Pasting one aligned face crop into a crowd canvas (:mod:`evaluation.crowd`).

The crop is grown by a painted forehead, neck and sides, cut out with a soft
head-shaped mask (no square patch edge), scaled so that its face box
(:data:`FACE_BOX`) has the asked height, tilted about that box's centre and
placed sub-pixel, optionally blurred and darkened.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

# Face box inside an aligned UTKFace crop, as fractions of the crop side
# (x1, y1, x2, y2). Measured with YuNet at native resolution
# (DetectConfig(input_size=0), see crowd.crop_face_box) on 300 random crops
# (default_rng(0).choice(9780, 300)), each rendered the way make_crowd pastes
# it (forehead painted back, head mask, 1:1 scale, grey surround): the
# per-coordinate median. The crops are tight, the forehead cut off, so the box
# starts above the crop (y1 < 0). Spread over the 300 (interquartile range, crop
# fractions): x1 0.06, y1 0.06, x2 0.09, y2 0.04; IoU of a crop's own box with
# this one: 10th percentile 0.75, median 0.87, about 5% below 0.7 (face_pool can drop
# those). On the bare crops framed in black the median is 0.051, -0.146, 0.933,
# 0.966: YuNet puts the top of the box higher when it sees the painted forehead.
FACE_BOX = (0.059, -0.232, 0.922, 0.970)

# Extension of a crop before pasting (fractions of its side): the forehead and
# the top of the head above the crop, the chin and neck below, the sides.
_PAD_TOP, _PAD_BOTTOM, _PAD_SIDE = 0.45, 0.15, 0.12
# Head ellipse in crop fractions (centre x, y, semi-axes x, y): cheek to cheek,
# from above the hairline (y -0.37) to just past the chin. Fixed in crop
# coordinates, so FACE_BOX (measured on faces pasted with it) does not feed back.
_HEAD = (0.49, 0.33, 0.51, 0.70)
_FEATHER = 0.055  # Gaussian feather of the head mask, in crop sides


def box_in_crop(w: int, h: int, flipped: bool) -> np.ndarray:
    """[4] the face box in crop pixels (mirrored for a flipped crop)."""
    x1, y1, x2, y2 = FACE_BOX
    if flipped:
        x1, x2 = 1 - x2, 1 - x1
    return np.array([x1 * w, y1 * h, x2 * w, y2 * h], np.float64)


def _extend(crop: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """The crop [h, w, 3] grown by the head margins, the margins painted from its border rows and
    columns and smoothed: [h', w', 3] float32, and the (x, y) offset of the crop inside it."""
    h, w = crop.shape[:2]
    t, b, s = round(_PAD_TOP * h), round(_PAD_BOTTOM * h), round(_PAD_SIDE * w)
    grown = cv2.copyMakeBorder(crop, t, b, s, s, cv2.BORDER_REPLICATE).astype(np.float32)
    smooth = cv2.GaussianBlur(grown, (0, 0), 0.05 * h)
    inner = np.zeros(grown.shape[:2], np.float32)
    e = max(1, round(0.02 * h))
    inner[t + e:t + h - e, s + e:s + w - e] = 1
    inner = cv2.GaussianBlur(inner, (0, 0), 0.015 * h)[..., None]
    return inner * grown + (1 - inner) * smooth, (s, t)


def _head_mask(shape: tuple[int, int], crop_wh: tuple[int, int], offset: tuple[int, int],
               flipped: bool) -> np.ndarray:
    """[h, w] float32 feathered head ellipse (:data:`_HEAD`) of a crop of size ``crop_wh`` placed at
    ``offset`` (x, y) in an image of ``shape``."""
    cw, ch = crop_wh
    cx, cy, ax, ay = _HEAD
    if flipped:
        cx = 1 - cx
    mask = np.zeros(shape, np.float32)
    k = 16  # sub-pixel precision of cv2.ellipse (4 fractional bits)
    cv2.ellipse(mask, (round((offset[0] + cx * cw) * k), round((offset[1] + cy * ch) * k)),
                (round(ax * cw * k), round(ay * ch * k)), 0, 0, 360, 1.0, -1, cv2.LINE_AA, 4)
    return cv2.GaussianBlur(mask, (0, 0), _FEATHER * ch)


def paste_face(canvas: np.ndarray, crop: np.ndarray, flipped: bool, upright_h: float, centre: tuple[float, float],
           angle: float, sigma: float, tone: tuple[float, float, float] | None) -> float:
    """Paste ``crop`` (mirrored if ``flipped``) into ``canvas`` (in place) so that its face box is
    ``upright_h`` px high, tilted by ``angle`` about its centre, centred at ``centre``. ``sigma``
    blurs the face (the mask too: a blurred foreground over a sharp background), ``tone`` = (gain,
    gamma, contrast) darkens it. Returns the brightness ratio after / before darkening."""
    if flipped:
        crop = crop[:, ::-1]
    # Work at 4x the final scale at most (5x faster for a 200-face crowd; the boxes and the mask are
    # in crop fractions, so unchanged; YuNet finds the same faces in the result as at full scale).
    work = 4 * upright_h / ((FACE_BOX[3] - FACE_BOX[1]) * crop.shape[0])
    if work < 1:
        size = (max(8, round(crop.shape[1] * work)), max(8, round(crop.shape[0] * work)))
        crop = cv2.resize(crop, size, interpolation=cv2.INTER_AREA)
    src, (ox, oy) = _extend(crop)
    box = box_in_crop(crop.shape[1], crop.shape[0], flipped) + (ox, oy, ox, oy)
    alpha = _head_mask(src.shape[:2], (crop.shape[1], crop.shape[0]), (ox, oy), flipped)
    # Downscale first (INTER_AREA: no aliasing from 200 px to 10 px), then tilt and place sub-pixel.
    s = upright_h / (box[3] - box[1])
    size = (max(1, round(src.shape[1] * s)), max(1, round(src.shape[0] * s)))
    sx, sy = size[0] / src.shape[1], size[1] / src.shape[0]
    interp = cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR
    src, alpha = cv2.resize(src, size, interpolation=interp), cv2.resize(alpha, size, interpolation=interp)
    c = ((box[0] + box[2]) / 2 * sx, (box[1] + box[3]) / 2 * sy)  # face box centre in the scaled patch
    M = cv2.getRotationMatrix2D(c, angle, 1.0)
    M[:, 2] += (centre[0] - c[0], centre[1] - c[1])
    # Canvas region the patch (plus the blur's reach) lands on.
    corners = np.array([[0, 0, 1], [size[0], 0, 1], [0, size[1], 1], [size[0], size[1], 1]], np.float64) @ M.T
    m = 3 * sigma + 2
    H, W = canvas.shape[:2]
    x0, y0 = max(0, math.floor(corners[:, 0].min() - m)), max(0, math.floor(corners[:, 1].min() - m))
    x1, y1 = min(W, math.ceil(corners[:, 0].max() + m)), min(H, math.ceil(corners[:, 1].max() + m))
    if x1 <= x0 or y1 <= y0:
        return 1.0
    M[:, 2] -= (x0, y0)
    roi = (x1 - x0, y1 - y0)
    color = cv2.warpAffine(src, M, roi, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    alpha = cv2.warpAffine(alpha, M, roi, flags=cv2.INTER_LINEAR, borderValue=0)
    light = 1.0
    if tone is not None:
        color, light = _darken(color, alpha, *tone)
    premult = color * alpha[..., None]
    if sigma > 0:
        premult = cv2.GaussianBlur(premult, (0, 0), sigma)
        alpha = cv2.GaussianBlur(alpha, (0, 0), sigma)
    region = canvas[y0:y1, x0:x1].astype(np.float32)
    out = premult + (1 - alpha[..., None]) * region
    canvas[y0:y1, x0:x1] = np.clip(out + 0.5, 0, 255).astype(np.uint8)
    return light


def _darken(color: np.ndarray, alpha: np.ndarray, gain: float, gamma: float,
            contrast: float) -> tuple[np.ndarray, float]:
    """Poor light on a face patch [h, w, 3] float32 0..255: lower contrast around its mean, a gamma
    (darker mid-tones) and a gain. Returns the patch and its mean brightness after / before."""
    weight = alpha[..., None] / max(float(alpha.sum()), 1e-6)
    before = float((color * weight).sum()) / 3
    x = color / 255.0
    mean = (x * weight).sum((0, 1))
    x = np.clip(mean + contrast * (x - mean), 0, 1) ** gamma * gain
    out = (x * 255.0).astype(np.float32)
    return out, float((out * weight).sum()) / 3 / max(before, 1e-6)
