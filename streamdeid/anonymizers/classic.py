"""Classic, irreversible anonymizers (blur, mosaic, solid) and the registry.

All strengths are relative to the crop size ``S`` so a face does not leak
identity just because it is large in the frame (and therefore its crop is
large, if a caller uses big crops): a fixed 15 px kernel would barely touch a
512 px crop.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Sequence

import cv2
import numpy as np

from ..config import AnonymizeConfig
from ..types import FaceContext, StreamdeidError
from .base import Anonymizer, AnonymizerBase, check_batch


def _batch_out(fn: Callable[[np.ndarray], np.ndarray], crops: np.ndarray,
               contexts: Sequence[FaceContext] | None) -> np.ndarray:
    single = np.ndim(crops) == 3
    batch = check_batch(crops, contexts)
    out = np.empty_like(batch)
    for i, crop in enumerate(batch):
        out[i] = fn(crop)
    return out[0] if single else out


def strong_blur(crop: np.ndarray, sigma_px: float) -> np.ndarray:
    """Gaussian blur of standard deviation ``sigma_px`` through a low-resolution
    bottleneck: area-downscale so the remaining blur is ~2 px, blur there, then
    upscale bilinearly. Same look as a plain Gaussian of ``sigma_px`` but the
    detail is really gone (quantized at the low resolution, so the blur cannot
    be deconvolved), and it costs the same for any sigma."""
    s = crop.shape[0]
    sigma_px = float(sigma_px)
    if sigma_px <= 0:
        return crop.copy()
    factor = max(1.0, sigma_px / 2.0)
    n = max(2, int(round(s / factor)))
    if n < s:
        small = cv2.resize(crop, (n, n), interpolation=cv2.INTER_AREA)
        f = s / n
        # The area filter already blurred by ~f/sqrt(12) (in source pixels).
        rest = math.sqrt(max(sigma_px**2 - f * f / 12.0, 0.0)) / f
    else:
        small, f, rest = crop, 1.0, sigma_px
    if rest > 0.3:
        k = 2 * math.ceil(3.0 * rest) + 1
        small = cv2.GaussianBlur(small, (k, k), rest, borderType=cv2.BORDER_REFLECT_101)
    if small.shape[0] != s:
        return cv2.resize(small, (s, s), interpolation=cv2.INTER_LINEAR)
    return small


def mosaic(crop: np.ndarray, cells: int) -> np.ndarray:
    """Pixelate to ``cells`` x ``cells`` blocks (area mean per block)."""
    s = crop.shape[0]
    cells = int(min(max(cells, 1), s))
    small = cv2.resize(crop, (cells, cells), interpolation=cv2.INTER_AREA)
    return cv2.resize(small, (s, s), interpolation=cv2.INTER_NEAREST)


class BlurAnonymizer(AnonymizerBase):
    """Gaussian blur with sigma = ``cfg.blur_sigma`` x crop size (see :func:`strong_blur`)."""

    name = "blur"
    scale_free = True  # the same look at any crop size (FrameRenderer gives small faces small crops)

    def __init__(self, cfg: AnonymizeConfig | None = None, *, sigma: float | None = None) -> None:
        cfg = cfg or AnonymizeConfig()
        self.sigma = float(cfg.blur_sigma if sigma is None else sigma)
        if not self.sigma > 0:
            raise StreamdeidError(f"blur sigma must be > 0 (fraction of the crop size), got {self.sigma}")

    def __call__(self, crops: np.ndarray, contexts: Sequence[FaceContext] | None = None) -> np.ndarray:
        return _batch_out(lambda c: strong_blur(c, self.sigma * c.shape[0]), crops, contexts)


class MosaicAnonymizer(AnonymizerBase):
    """Pixelation into ``cfg.mosaic_cells`` cells per side of the crop."""

    name = "mosaic"
    scale_free = True  # the same look at any crop size (FrameRenderer gives small faces small crops)

    def __init__(self, cfg: AnonymizeConfig | None = None, *, cells: int | None = None) -> None:
        cfg = cfg or AnonymizeConfig()
        self.cells = int(cfg.mosaic_cells if cells is None else cells)
        if self.cells < 1:
            raise StreamdeidError(f"mosaic cells must be >= 1, got {self.cells}")

    def __call__(self, crops: np.ndarray, contexts: Sequence[FaceContext] | None = None) -> np.ndarray:
        return _batch_out(lambda c: mosaic(c, self.cells), crops, contexts)


class SolidAnonymizer(AnonymizerBase):
    """Constant fill with ``cfg.solid_color`` (BGR)."""

    name = "solid"
    scale_free = True  # the same look at any crop size (FrameRenderer gives small faces small crops)

    def __init__(self, cfg: AnonymizeConfig | None = None, *, color: tuple[int, int, int] | None = None) -> None:
        cfg = cfg or AnonymizeConfig()
        col = tuple(cfg.solid_color if color is None else color)
        if len(col) != 3 or not all(0 <= int(v) <= 255 for v in col):
            raise StreamdeidError(f"solid colour must be three values 0-255 (BGR), got {col!r}")
        self.color = np.array([int(v) for v in col], dtype=np.uint8)

    def __call__(self, crops: np.ndarray, contexts: Sequence[FaceContext] | None = None) -> np.ndarray:
        single = np.ndim(crops) == 3
        batch = check_batch(crops, contexts)
        out = np.empty_like(batch)
        # One [S, S, 3] tile broadcast over the batch: numpy copies whole rows then, where broadcasting
        # the 3 colour bytes themselves goes byte triple by triple (36x slower on a crowd's [57, 96, 96, 3]).
        side = batch.shape[1]
        out[...] = np.tile(self.color, side * side).reshape(side, side, 3)
        return out[0] if single else out


#: method name -> factory(AnonymizeConfig) -> Anonymizer: the names of ``streamdeid.registry.METHODS``
#: (registered by the package, anonymize/__init__.py), and any added with :func:`register_anonymizer`.
REGISTRY: dict[str, Callable[[AnonymizeConfig], Anonymizer]] = {}


def register_anonymizer(name: str, factory: Callable[[AnonymizeConfig], Anonymizer]) -> None:
    """Make ``create_anonymizer`` build ``factory(cfg)`` for ``cfg.method == name``."""
    REGISTRY[name] = factory


def create_anonymizer(cfg: AnonymizeConfig | None = None) -> Anonymizer:
    """The anonymizer named by ``cfg.method``; a StreamdeidError for unknown names."""
    cfg = cfg or AnonymizeConfig()
    return _factory(cfg.method)(cfg)


def anonymizer_type(method: str) -> type:
    """The class ``create_anonymizer`` builds for ``method``, without building it (its flags, such as
    ``needs_leak_guard``, are class attributes): the factory itself, or the type its return annotation
    names (``create_dbaf``)."""
    factory = _factory(method)
    return factory if isinstance(factory, type) else typing.get_type_hints(factory)["return"]


def _factory(method: str) -> Callable[[AnonymizeConfig], Anonymizer]:
    """The registered factory for ``method``; a StreamdeidError for unknown names."""
    try:
        return REGISTRY[method]
    except KeyError:
        raise StreamdeidError(
            f"unknown anonymization method {method!r} (choose from {', '.join(sorted(REGISTRY))})"
        ) from None
