"""The soft face mask in canonical crop coordinates.

Privacy first: the mask is exactly 1.0 over the whole face (forehead to chin,
cheek to cheek, grown by ``BlendConfig.margin``); the soft edge of width
``BlendConfig.feather * S`` lies entirely *outside* that zone, so blending
never lets original face pixels through.
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from ..config import AlignConfig, BlendConfig
from ..align.aligner import ARCFACE_112 as ARCFACE_112_TEMPLATE
from ..types import StreamdeidError

# Face proportions in units of d = |eye midpoint - mouth midpoint| (about
# 7 cm on an adult): the hairline is ~1.15 d above the eye line, the chin
# ~0.8 d below the mouth, the cheeks ~1.0 d either side of the face axis.
_ABOVE_EYES = 1.15
_BELOW_MOUTH = 0.8
_HALF_WIDTH = 1.0


def canonical_landmarks(size: int, margin: float = AlignConfig.margin) -> np.ndarray:
    """Where the 5 landmarks land in a crop made by ``streamdeid.align``:
    the ArcFace 112 template scaled to ``size`` and shrunk toward the centre
    by ``1 - margin``. [5, 2] float64."""
    try:
        from ..align.aligner import canonical_template
    except ImportError:  # align not available: the same formula
        t = ARCFACE_112_TEMPLATE / 112.0
        return ((t - 0.5) * (1.0 - margin) + 0.5) * size
    return np.asarray(canonical_template(size, margin), dtype=np.float64)


def _face_frame(lm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    lm = np.asarray(lm, dtype=np.float64).reshape(5, 2)
    eyes = lm[:2].mean(0)
    mouth = lm[3:5].mean(0)
    down = mouth - eyes
    d = float(np.hypot(*down))
    if d < 1e-6:
        # Degenerate (e.g. profile-collapsed) landmarks: use the eye distance.
        d = max(float(np.hypot(*(lm[1] - lm[0]))), 1.0)
        down = np.array([0.0, d])
    v = down / np.hypot(*down)
    u = np.array([-v[1], v[0]])  # image "right" when the face is upright
    return eyes, mouth, np.stack([u, v]), d


def _ellipse_core(size: int, lm: np.ndarray, margin: float) -> np.ndarray:
    eyes, mouth, (u, v), d = _face_frame(lm)
    top = eyes - _ABOVE_EYES * d * v
    bottom = mouth + _BELOW_MOUTH * d * v
    centre = (top + bottom) / 2.0
    half_h = float(np.hypot(*(bottom - top))) / 2.0
    half_w = _HALF_WIDTH * d
    grow = margin * half_h  # the face's extent grows by margin x its height
    axes = (half_w + grow, half_h + grow)
    angle = float(np.degrees(np.arctan2(u[1], u[0])))
    core = np.zeros((size, size), np.uint8)
    sh = 4  # sub-pixel precision for cv2.ellipse
    cv2.ellipse(core, (int(round(centre[0] * 16)), int(round(centre[1] * 16))),
                (int(round(axes[0] * 16)), int(round(axes[1] * 16))), angle, 0, 360, 255, -1,
                lineType=cv2.LINE_8, shift=sh)
    return core


def _hull_core(size: int, lm: np.ndarray, margin: float) -> np.ndarray:
    lm = np.asarray(lm, dtype=np.float64).reshape(5, 2)
    eyes, mouth, (u, v), d = _face_frame(lm)
    pts = [*lm]
    # Extrapolate the outline the 5 points cannot see: forehead, temples, jaw, chin.
    for a, b in [(-0.8, -_ABOVE_EYES), (0.0, -_ABOVE_EYES), (0.8, -_ABOVE_EYES),
                 (-_HALF_WIDTH, 0.0), (_HALF_WIDTH, 0.0)]:
        pts.append(eyes + a * d * u + b * d * v)
    for a, b in [(-0.9, 0.0), (0.9, 0.0), (-0.55, 0.6), (0.55, 0.6), (0.0, _BELOW_MOUTH)]:
        pts.append(mouth + a * d * u + b * d * v)
    pts = np.array(pts)
    hull = cv2.convexHull(np.round(pts * 16).astype(np.int32))
    core = np.zeros((size, size), np.uint8)
    cv2.fillConvexPoly(core, hull, 255, lineType=cv2.LINE_8, shift=4)
    half_h = (_ABOVE_EYES + 1.0 + _BELOW_MOUTH) * d / 2.0
    grow = margin * half_h
    if grow > 0.5:
        # Grow the hull by a disc of radius ``grow`` (exact Euclidean offset).
        dist = cv2.distanceTransform(255 - core, cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
        core = np.where(dist <= grow, 255, 0).astype(np.uint8)
    return core


def _feathered(core: np.ndarray, feather_px: float) -> np.ndarray:
    if feather_px <= 0.5:
        return (core > 0).astype(np.float32)
    # Distance of every outside pixel to the full-coverage zone.
    dist = cv2.distanceTransform(np.where(core > 0, 0, 255).astype(np.uint8), cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
    t = np.clip(1.0 - dist / np.float32(feather_px), 0.0, 1.0)
    alpha = t * t * (3.0 - 2.0 * t)  # smoothstep: monotone, soft at both ends
    alpha[core > 0] = 1.0
    return alpha.astype(np.float32)


def _check(size: int, cfg: BlendConfig) -> None:
    if int(size) < 8:
        raise StreamdeidError(f"crop size must be >= 8, got {size}")
    if cfg.mask not in ("ellipse", "hull"):
        raise StreamdeidError(f"unknown blend mask {cfg.mask!r} (choose ellipse or hull)")
    if cfg.feather is None:
        raise ValueError("BlendConfig.feather is unset: pass BlendConfig.resolved(...)")
    if cfg.margin < 0 or cfg.feather < 0:
        raise StreamdeidError("blend margin and feather must be >= 0")


# The soft edge is drawn at this many times the crop's side and area-reduced: a large face's crop is warped
# up to 4-5x (a 128 px crop on a 400-600 px face in a photo), and an edge drawn on the crop's own pixels
# showed their steps along the whole outline. Only crops of SUPERSAMPLE_FROM px or more: the smaller ones
# (render.SMALL_CROPS) are drawn for small faces at 2 crop pixels per frame pixel or more, never enlarged.
EDGE_SUPERSAMPLE = 4
SUPERSAMPLE_FROM = 128


@lru_cache(maxsize=32)
def _canonical_mask(size: int, kind: str, margin: float, feather: float, align_margin: float) -> np.ndarray:
    draw = _ellipse_core if kind == "ellipse" else _hull_core
    core = draw(size, canonical_landmarks(size, align_margin), margin)
    if size < SUPERSAMPLE_FROM or feather * size <= 0.5:  # (no feather: a hard edge, as asked)
        out = _feathered(core, feather * size)
        out.setflags(write=False)
        return out
    ss = EDGE_SUPERSAMPLE
    # a quarter of a crop pixel less feather: the area-reduced edge then covers what the stepped one did
    # (128 px, a cover's feather: 5,390 against 5,398 pixels of weight), so no more of the frame changes
    fine = _feathered(draw(size * ss, canonical_landmarks(size * ss, align_margin), margin),
                      (feather * size - 0.25) * ss)
    out = cv2.resize(fine, (size, size), interpolation=cv2.INTER_AREA)
    out[core > 0] = 1.0  # the face zone is covered whole, as drawn at the crop's own size
    out.setflags(write=False)
    return out


def face_mask(size: int, cfg: BlendConfig | None = None, landmarks_in_crop: np.ndarray | None = None,
              *, align_margin: float = AlignConfig.margin) -> np.ndarray:
    """Soft face mask ``[size, size]`` float32 in [0, 1] for an aligned crop. ``cfg`` must have its
    feather set (``BlendConfig.resolved``); None: a generated face's.

    ``landmarks_in_crop`` ([5, 2], crop pixels) places the face; ``None`` uses
    the canonical template of an aligned crop made with ``align_margin``
    (cached). The face zone is exactly 1.0; the feather is outside it.
    """
    cfg = cfg or BlendConfig().resolved(generated=True)
    size = int(size)
    _check(size, cfg)
    if landmarks_in_crop is None:
        return _canonical_mask(size, cfg.mask, float(cfg.margin), float(cfg.feather), float(align_margin)).copy()
    lm = np.asarray(landmarks_in_crop, dtype=np.float64).reshape(5, 2)
    core = (_ellipse_core if cfg.mask == "ellipse" else _hull_core)(size, lm, cfg.margin)
    return _feathered(core, cfg.feather * size)
