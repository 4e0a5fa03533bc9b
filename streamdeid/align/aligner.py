"""5-point similarity alignment of faces to a canonical crop.

The crop is the ArcFace 112x112 template scaled to ``size`` and shrunk toward
the crop centre by ``1 - margin``: with ``margin=0.25`` the template's own
112x112 box fills the middle 75 % of the crop, leaving ``margin / 2`` of the
crop as border on every side (forehead above, chin below). Defaults come
from ``AlignConfig``.

The transform is a least-squares similarity (Umeyama 1991) rather than
``cv2.estimateAffinePartial2D`` with LMEDS: with only 5 points LMEDS fits the
best 2-3 of them and its choice flips from frame to frame, which makes the
crop jitter in video; the closed-form fit is deterministic and smooth, and
grossly inconsistent landmarks are caught by ``landmarks_usable`` instead
(callers then use ``align_box``).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from streamdeid.config import AlignConfig
from streamdeid.types import AlignedFace

# ArcFace (insightface) reference points for a 112x112 crop, in the YuNet /
# SCRFD order: eye, eye, nose tip, mouth corner, mouth corner (image-left first).
ARCFACE_112 = np.array(
    [
        [38.2946, 51.6963],
        [73.5318, 51.5014],
        [56.0252, 71.7366],
        [41.5493, 92.3655],
        [70.7299, 92.2041],
    ],
    dtype=np.float64,
)


def canonical_template(size: int, margin: float) -> np.ndarray:
    """``[5, 2]`` float64 landmark positions in a ``size`` x ``size`` crop."""
    if size <= 0:
        raise ValueError(f"crop size must be > 0, got {size}")
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    unit = ARCFACE_112 / 112.0
    return ((unit - 0.5) * (1.0 - margin) + 0.5) * size


def similarity_transform(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity ``[2, 3]`` mapping ``src`` points onto ``dst`` (Umeyama, no reflection).

    In 2D a similarity is multiplication by one complex number ``a`` (rotation and scale) after
    centring, and its least-squares value is ``sum(conj(s) * d) / sum(|s|^2)``: the same fit as
    Umeyama's SVD. In plain Python floats: for 5 points that is ten times faster than numpy's
    per-call overhead, and a crowd aligns hundreds of faces a frame."""
    sp = np.asarray(src, dtype=np.float64).reshape(-1, 2).tolist()
    dp = np.asarray(dst, dtype=np.float64).reshape(-1, 2).tolist()
    n = len(sp)
    if n == 0 or len(dp) != n:
        raise ValueError(f"need the same number of source and target points, got {n} and {len(dp)}")
    sx, sy = sum(p[0] for p in sp) / n, sum(p[1] for p in sp) / n
    dx, dy = sum(p[0] for p in dp) / n, sum(p[1] for p in dp) / n
    var = re = im = 0.0
    for (x, y), (u, v) in zip(sp, dp):
        x, y, u, v = x - sx, y - sy, u - dx, v - dy
        var += x * x + y * y
        re += x * u + y * v  # conj(x + iy) * (u + iv)
        im += x * v - y * u
    if not math.isfinite(var) or var < 1e-12 * n:
        raise ValueError("landmarks are degenerate (all points coincide)")
    a, b = re / var, im / var
    return np.array([[a, -b, dx - a * sx + b * sy], [b, a, dy - b * sx - a * sy]])


def warp_aligned(image: np.ndarray, matrix: np.ndarray, size: int, inverse: np.ndarray | None = None) -> AlignedFace:
    """The ``size`` x ``size`` crop of ``image`` through ``matrix`` (frame -> crop, [2, 3]); ``inverse``:
    the caller's inverse of ``matrix``, when it has one."""
    return _warp(image, matrix, size, inverse)


def face_matrix(landmarks: np.ndarray, size: int = AlignConfig.crop_size,
                margin: float = AlignConfig.margin) -> np.ndarray:
    """The frame -> crop similarity [2, 3] of ``align_face`` (without warping)."""
    landmarks = np.asarray(landmarks, dtype=np.float64).reshape(5, 2)
    if not np.isfinite(landmarks).all():
        raise ValueError("landmarks contain NaN/inf")
    return similarity_transform(landmarks, canonical_template(size, margin))


def box_matrix(box: np.ndarray, size: int = AlignConfig.crop_size, margin: float = AlignConfig.margin) -> np.ndarray:
    """The frame -> crop transform [2, 3] of ``align_box`` (without warping)."""
    box = np.asarray(box, dtype=np.float64).reshape(4)
    if not np.isfinite(box).all():
        raise ValueError("box contains NaN/inf")
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    return box_matrices(box[None], np.array([size]), margin)[0]


def box_matrices(boxes: np.ndarray, sizes: np.ndarray, margin: float) -> np.ndarray:
    """``box_matrix`` of N faces at once: boxes [N, 4] float64 (finite), crop sides [N] -> [N, 2, 3]."""
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    sizes = np.asarray(sizes, np.float64)
    side = np.maximum(np.maximum(x2 - x1, y2 - y1), 1.0)
    scale = sizes * (1.0 - margin) * BOX_SIZE_IN_TEMPLATE / side
    tx = ((BOX_CENTER_IN_TEMPLATE[0] - 0.5) * (1.0 - margin) + 0.5) * sizes
    ty = ((BOX_CENTER_IN_TEMPLATE[1] - 0.5) * (1.0 - margin) + 0.5) * sizes
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    zero = np.zeros_like(scale)
    return np.stack([np.stack([scale, zero, tx - scale * cx], -1), np.stack([zero, scale, ty - scale * cy], -1)], 1)


def invert_similarities(m: np.ndarray) -> np.ndarray:
    """The inverses of affine maps [..., 2, 3], as ``cv2.invertAffineTransform`` computes one (same
    formula, same rounding), for N faces in one call."""
    a11, a12, b1 = m[..., 0, 0], m[..., 0, 1], m[..., 0, 2]
    a21, a22, b2 = m[..., 1, 0], m[..., 1, 1], m[..., 1, 2]
    d = a11 * a22 - a12 * a21
    d = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    i11, i22, i12, i21 = a22 * d, a11 * d, -a12 * d, -a21 * d
    return np.stack([np.stack([i11, i12, -i11 * b1 - i12 * b2], -1),
                     np.stack([i21, i22, -i21 * b1 - i22 * b2], -1)], -2)


def _warp(image: np.ndarray, matrix: np.ndarray, size: int, inverse: np.ndarray | None = None) -> AlignedFace:
    crop = cv2.warpAffine(image, matrix, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    if inverse is None:
        inverse = cv2.invertAffineTransform(matrix)
    return AlignedFace(crop=crop, matrix=matrix, inverse=np.asarray(inverse, dtype=np.float64))


def align_face(image: np.ndarray, landmarks: np.ndarray, size: int = AlignConfig.crop_size, margin: float = AlignConfig.margin) -> AlignedFace:
    """Warp the face with these 5 landmarks onto ``canonical_template(size, margin)``.

    Landmarks may lie outside the image (faces cut by the border): missing
    pixels are filled by replicating the border.
    """
    return _warp(image, face_matrix(landmarks, size, margin), size)


# Where a YuNet box sits in ArcFace template units (112 px = 1), measured on
# the sample photos: centred horizontally, centre at 0.6 of the height, box
# height ~0.95. ``align_box`` reproduces this framing so anonymizers see
# landmark-less faces at the same place and scale as aligned ones.
BOX_CENTER_IN_TEMPLATE = (0.5, 0.6)
BOX_SIZE_IN_TEMPLATE = 0.95


def align_box(image: np.ndarray, box: np.ndarray, size: int = AlignConfig.crop_size, margin: float = AlignConfig.margin) -> AlignedFace:
    """Fallback without landmarks: an axis-aligned square crop around ``box``.

    The square of side ``max(w, h)`` is placed like a detector box is placed
    by ``align_face`` (see ``BOX_CENTER_IN_TEMPLATE``), so both crops frame a
    face the same way.
    """
    return _warp(image, box_matrix(box, size, margin), size)


def landmarks_usable(landmarks: np.ndarray, box: np.ndarray, tolerance: float = 0.65) -> bool:
    """Whether 5 landmarks look like a face consistent with its box (see ``template_fit``)."""
    return template_fit(landmarks, box, tolerance) is not None


def crop_matrix(template_matrix: np.ndarray, size: int | np.ndarray = AlignConfig.crop_size,
                margin: float = AlignConfig.margin) -> np.ndarray:
    """``face_matrix`` from the frame -> ArcFace-112 fit ``template_fit`` returned: the canonical
    template is the ArcFace one scaled by (1 - margin) * size / 112 and shifted by margin * size / 2."""
    k = (1.0 - margin) * np.asarray(size, np.float64) / 112.0  # size: a side, or [N] sides for [N, 2, 3] fits
    m = np.asarray(template_matrix, dtype=np.float64) * np.asarray(k)[..., None, None]
    m[..., 2] += 0.5 * margin * np.asarray(size, np.float64)[..., None]
    return m


def template_fit(landmarks: np.ndarray, box: np.ndarray, tolerance: float = 0.65) -> np.ndarray | None:
    """The frame -> ArcFace-112 similarity [2, 3] of 5 landmarks that look like a face consistent
    with its box, else None (``template_fits`` of one face).

    Checks: finite; the similarity fit to the template leaves every point
    within ``tolerance`` x the template eye distance (YuNet on real frames,
    3/4 and near-profile views included: <= 0.6; swapped points: >= 0.7); the face's scale implied
    by the fit is between 0.3x and 3x the box height; every landmark lies
    within the box grown by 50 %.
    """
    fits, ok = template_fits(np.asarray(landmarks, np.float64).reshape(1, 5, 2),
                             np.asarray(box, np.float64).reshape(1, 4), tolerance)
    return fits[0] if ok[0] else None


def template_fits(landmarks: np.ndarray, boxes: np.ndarray, tolerance: float = 0.65) -> tuple[np.ndarray, np.ndarray]:
    """``template_fit`` of N faces in one pass (a crowd aligns hundreds a frame): landmarks [N, 5, 2],
    boxes [N, 4] -> (fits [N, 2, 3], ok [N] bool); a fit where ``ok`` is False is meaningless.
    The least-squares similarity is ``similarity_transform``'s, summed point by point in the same
    order, so each face gets the same fit as alone."""
    lm = np.asarray(landmarks, np.float64).reshape(-1, 5, 2)
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    x1, y1, x2, y2 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    w, h = x2 - x1, y2 - y1
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ok = np.isfinite(b).all(1) & np.isfinite(lm).all((1, 2)) & (w > 0) & (h > 0)
        x, y = lm[..., 0], lm[..., 1]  # [N, 5]
        ok &= ((x >= (x1 - 0.5 * w)[:, None]) & (x <= (x2 + 0.5 * w)[:, None])
               & (y >= (y1 - 0.5 * h)[:, None]) & (y <= (y2 + 0.5 * h)[:, None])).all(1)
        sx, sy = _sum5(x) / 5, _sum5(y) / 5
        cx, cy = x - sx[:, None], y - sy[:, None]
        u, v = _ARCFACE_CENTRED[:, 0], _ARCFACE_CENTRED[:, 1]
        var, re, im = _sum5(cx * cx + cy * cy), _sum5(cx * u + cy * v), _sum5(cx * v - cy * u)
        ok &= np.isfinite(var) & (var >= 1e-12 * 5)
        var = np.where(ok, var, 1.0)
        a, c = re / var, im / var  # the similarity's rotation-scale: [[a, -c], [c, a]]
        dx, dy = _ARCFACE_MEAN
        fits = np.stack([np.stack([a, -c, dx - a * sx + c * sy], -1), np.stack([c, a, dy - c * sx - a * sy], -1)], 1)
        scale = np.hypot(a, c)  # template px per frame px; in ArcFace crops the face (box) is ~100 px tall
        implied = (100.0 / scale) / h
        ok &= (implied >= 0.3) & (implied <= 3.0)
        limit = tolerance * _ARCFACE_EYE_DISTANCE
        tx, ty = fits[:, 0, 2][:, None], fits[:, 1, 2][:, None]
        px = a[:, None] * x + (-c)[:, None] * y + tx - ARCFACE_112[:, 0]
        py = c[:, None] * x + a[:, None] * y + ty - ARCFACE_112[:, 1]
        ok &= (np.hypot(px, py) <= limit).all(1)
    return fits, ok


# The face height 5 landmarks imply (template_fits' ``implied``, in box heights) of YuNet's sure detections
# (score >= 0.8): 0.80-1.13 on hamilton, the band and the parade pans (5th-95th percentile). Weak ones
# range wider (up to 1.9 at the 95th on the band pan, a hand or a half-hidden face), and a cover drawn at
# that scale is 3.6x the area the box asks for.
IMPLIED_HEIGHT_RANGE = (0.75, 1.2)


def box_scaled_fits(fits: np.ndarray, boxes: np.ndarray, limits: tuple[float, float] = IMPLIED_HEIGHT_RANGE
                    ) -> np.ndarray:
    """``template_fits``' fits [N, 2, 3] with their scale brought within ``limits`` of the box heights
    (boxes [N, 4]): the landmarks say where the face is and how it turns, the box how large it is. Scaled
    about the landmarks' centre, which stays where it was."""
    fits = np.array(fits, np.float64)
    heights = np.maximum(np.asarray(boxes, np.float64)[:, 3] - np.asarray(boxes, np.float64)[:, 1], 1e-6)
    scale = np.maximum(np.hypot(fits[:, 0, 0], fits[:, 1, 0]), 1e-12)
    implied = (100.0 / scale) / heights  # as in template_fits: the template's face (box) is ~100 px tall
    factor = implied / np.clip(implied, *limits)  # [N] > 1: a face drawn smaller
    fits[:, :, :2] *= factor[:, None, None]
    fits[:, :, 2] = fits[:, :, 2] * factor[:, None] + (1.0 - factor[:, None]) * np.array(_ARCFACE_MEAN)
    return fits


def _sum5(v: np.ndarray) -> np.ndarray:
    """[N, 5] -> [N]: summed left to right, as a Python loop over the points sums them."""
    return (((v[:, 0] + v[:, 1]) + v[:, 2]) + v[:, 3]) + v[:, 4]


_ARCFACE_POINTS = ARCFACE_112.tolist()
_ARCFACE_EYE_DISTANCE = float(np.linalg.norm(ARCFACE_112[1] - ARCFACE_112[0]))
_ARCFACE_MEAN = tuple(sum(p[k] for p in _ARCFACE_POINTS) / 5 for k in (0, 1))  # as similarity_transform sums
_ARCFACE_CENTRED = ARCFACE_112 - np.array(_ARCFACE_MEAN)
