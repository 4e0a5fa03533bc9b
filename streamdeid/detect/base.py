"""Shared pieces of the detector backends: the protocol and image helpers."""

from __future__ import annotations

import os
from typing import Callable, Protocol, runtime_checkable

import cv2
import numpy as np

from streamdeid.types import Detections, StreamdeidError


@runtime_checkable
class Detector(Protocol):
    """Finds faces in one BGR frame; coordinates are in that frame's pixels.

    Boxes are not clipped to the frame: a face cut by the border keeps the
    part of its box that lies outside the image.
    """

    def detect(self, image_bgr: np.ndarray) -> Detections: ...


def model_file(cfg, bundled: Callable[[], str], name: str) -> str:
    """The model file a backend loads (``cfg.model_path``, else its bundled one), checked with ``cfg``."""
    if cfg.input_size < 0:
        raise StreamdeidError(f"detector input size must be >= 0, got {cfg.input_size}")
    path = cfg.model_path or bundled()
    if not os.path.isfile(path):
        raise StreamdeidError(f"{name} model file not found: {path}")
    return path


def as_bgr(image: np.ndarray) -> np.ndarray:
    """Return a contiguous uint8 BGR ``[H, W, 3]`` view/copy of ``image``."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise StreamdeidError(f"detector expects a uint8 image, got {image.dtype}")
    if image.ndim == 2:
        image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    elif image.ndim == 3 and image.shape[2] == 4:
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    elif image.ndim != 3 or image.shape[2] != 3:
        raise StreamdeidError(f"detector expects a BGR image, got shape {image.shape}")
    return np.ascontiguousarray(image)


def scaled_size(width: int, height: int, longest: int) -> tuple[int, int]:
    """(w, h) with the longest side equal to ``longest`` (0: unchanged)."""
    if longest <= 0:
        return width, height
    scale = longest / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def resize_to(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    h, w = image.shape[:2]
    if (w, h) == size:
        return image
    shrinking = size[0] * size[1] < w * h
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Indices kept by greedy non-maximum suppression, best score first."""
    x1, y1, x2, y2 = boxes.T
    areas = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
    order = np.argsort(-scores, kind="stable")
    keep = []
    while len(order):
        i, rest = order[0], order[1:]
        keep.append(i)
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        iou = inter / np.maximum(areas[i] + areas[rest] - inter, 1e-9)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)
