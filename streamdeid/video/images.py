"""Tell still images from videos and list a folder of media.

Still images go through OpenCV (no container, no timing); videos through the
reader. GIF counts as video because it is usually animated.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import cv2
import numpy as np

from streamdeid.types import StreamdeidError

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp"})
VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".m4v", ".mkv", ".mov", ".avi", ".webm", ".gif", ".ts", ".mts", ".mpg", ".mpeg", ".wmv", ".flv"}
)


def is_image(path: str | os.PathLike[str]) -> bool:
    """True for still-image extensions (case-insensitive)."""
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


is_image_path = is_image


def is_video_path(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in VIDEO_EXTENSIONS


def _natural_key(path: Path) -> list[object]:
    """Sort ``img2`` before ``img10``, as a person numbering frames expects."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", path.name)]


def list_media(folder: str | os.PathLike[str], images: bool = True, videos: bool = True) -> list[Path]:
    """Images and/or videos directly inside ``folder``, naturally sorted.

    Hidden files and our own ``*.partial.*`` leftovers are skipped.
    """
    root = Path(folder)
    if not root.is_dir():
        raise StreamdeidError(f"not a folder: {root}")
    wanted = (IMAGE_EXTENSIONS if images else frozenset()) | (VIDEO_EXTENSIONS if videos else frozenset())
    found = [
        p
        for p in root.iterdir()
        if p.is_file()
        and p.suffix.lower() in wanted
        and not p.name.startswith(".")
        and not p.stem.endswith(".partial")
    ]
    return sorted(found, key=_natural_key)


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a still image as BGR uint8 [H, W, 3] (alpha dropped, grey expanded)."""
    target = Path(path)
    if not target.is_file():
        raise StreamdeidError(f"image not found: {target}")
    data = np.fromfile(target, dtype=np.uint8)
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise StreamdeidError(f"not a readable image: {target}")
    return image
