"""Pixel fidelity of recovered crops: MSE, PSNR and SSIM.

Conventions (stated in every report):

* MSE is computed on pixels mapped to **[-1, 1]** (``x / 127.5 - 1``), the
  range the DBAF paper's MSE figures use. MSE on [0, 255] is
  ``127.5**2`` times larger.
* PSNR is ``10 log10(R**2 / MSE)`` with the range width R (2 on [-1, 1],
  255 on [0, 255]: the same number of dB). A lossless reconstruction has
  MSE 0 and PSNR ``inf`` (``float("inf")``; JSON reports carry the string
  ``"inf"``).
* SSIM is Wang et al. (2004): 11x11 Gaussian window, sigma 1.5,
  K1 = 0.01, K2 = 0.03, L = 255, computed per BGR channel on uint8 values
  and averaged; the mean over the window-valid area (5 px border excluded).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

PIXEL_RANGE = "[-1, 1] for MSE (x/127.5 - 1); PSNR in dB (peak-to-peak 2 on [-1, 1] = 255 on [0, 255]); SSIM on [0, 255]"


def to_unit(x: np.ndarray) -> np.ndarray:
    """uint8 0..255 -> float64 in [-1, 1]."""
    return np.asarray(x, dtype=np.float64) / 127.5 - 1.0


def mse(a: np.ndarray, b: np.ndarray) -> float:
    """Mean squared error of two uint8 images (or batches) on the [-1, 1] scale."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    return float(np.mean((to_unit(a) - to_unit(b)) ** 2))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two uint8 images; ``inf`` when identical."""
    m = mse(a, b)
    return math.inf if m == 0.0 else 10.0 * math.log10(4.0 / m)  # range width 2 on [-1, 1]


def ssim(a: np.ndarray, b: np.ndarray, *, sigma: float = 1.5, window: int = 11) -> float:
    """Mean SSIM of two uint8 images [H, W] or [H, W, C] (channels averaged)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    if a.ndim == 2:
        a, b = a[..., None], b[..., None]
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    pad = window // 2
    vals = []
    for ch in range(a.shape[2]):
        x = a[..., ch].astype(np.float64)
        y = b[..., ch].astype(np.float64)

        def g(img: np.ndarray) -> np.ndarray:
            return cv2.GaussianBlur(img, (window, window), sigma)[pad:-pad, pad:-pad]

        mx, my = g(x), g(y)
        vx = g(x * x) - mx * mx
        vy = g(y * y) - my * my
        cxy = g(x * y) - mx * my
        s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
        vals.append(float(s.mean()))
    return float(np.mean(vals))


def fidelity(originals: np.ndarray, others: np.ndarray) -> dict:
    """Mean MSE / PSNR / SSIM over a batch of crop pairs [B, S, S, 3].

    PSNR is averaged in dB over faces with a finite value; it is ``inf`` only
    when every face is reconstructed exactly (``lossless`` true).
    """
    if len(originals) == 0:
        return {"n": 0}
    ms = [mse(o, r) for o, r in zip(originals, others)]
    ps = [psnr(o, r) for o, r in zip(originals, others)]
    ss = [ssim(o, r) for o, r in zip(originals, others)]
    finite = [p for p in ps if math.isfinite(p)]
    lossless = all(m == 0.0 for m in ms)
    return {
        "n": len(ms),
        "mse": float(np.mean(ms)),
        "psnr": math.inf if lossless else float(np.mean(finite)),
        "ssim": float(np.mean(ss)),
        "exact": sum(m == 0.0 for m in ms),
        "lossless": lossless,
    }
