"""BGR -> 8-bit palette conversion for GIF output.

A fixed 6x7x6 colour cube (252 colours) is used for every frame: it needs no
second pass over the video (the writer is streaming) and quantizes with a
few numpy operations, which matters more here than GIF colour fidelity.
"""

from __future__ import annotations

import numpy as np

_LEVELS = np.array([6, 7, 6])  # red, green, blue steps; 6*7*6 = 252 <= 256


def _build_palette() -> np.ndarray:
    """(256, 4) uint8 ARGB palette, the layout PyAV expects for pal8."""
    r, g, b = np.meshgrid(*(np.arange(n) for n in _LEVELS), indexing="ij")
    rgb = np.stack([r, g, b], axis=-1).reshape(-1, 3) * 255 / (_LEVELS - 1)
    palette = np.zeros((256, 4), dtype=np.uint8)
    palette[:, 0] = 255
    palette[: len(rgb), 1:] = np.round(rgb).astype(np.uint8)
    return palette


PALETTE = _build_palette()


def quantize(image_bgr: np.ndarray) -> np.ndarray:
    """Palette indices [H, W] uint8 of the nearest cube colour per pixel."""
    rgb = image_bgr[..., ::-1].astype(np.uint16)
    steps = [(rgb[..., i] * (_LEVELS[i] - 1) + 127) // 255 for i in range(3)]
    index = (steps[0] * _LEVELS[1] + steps[1]) * _LEVELS[2] + steps[2]
    return index.astype(np.uint8)
