"""Reference photos for ``--keep`` / ``--only``: one face each, as SFace embeddings.

A reference is a photo (or a folder of photos) of one person. Each photo must
show exactly one face (counting faces at least a third the size of the
largest: a tiny face in the background is ignored, two people are refused),
so a photo can never make a second person's face a reference by accident.
Embeddings are cached by file content under ``~/.cache/streamdeid/references``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..types import StreamdeidError
from ..video.images import decode_image, is_image

#: Faces smaller than this fraction of the largest face in a reference photo are not counted.
BACKGROUND_FACE = 1 / 3


@dataclass(frozen=True)
class Reference:
    """One reference photo's face."""

    path: str
    embedding: np.ndarray  # [128] float32, unit norm (SFace)


def reference_files(specs: list[str]) -> list[Path]:
    """Files named on the command line; a folder contributes every image in it (sorted)."""
    files: list[Path] = []
    for spec in specs:
        p = Path(spec)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if is_image(f))
            if not found:
                raise StreamdeidError(f"{spec}: no images in this reference folder")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise StreamdeidError(f"{spec}: no such reference photo or folder")
    return files


def _cache_path(data: bytes, model_tag: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streamdeid" / "references"
    return root / f"{hashlib.sha256(model_tag.encode() + data).hexdigest()[:32]}.npy"


def load_references(specs: list[str], finder, sface, *, model_tag: str = "sface-2021dec") -> list[Reference]:
    """Embed every reference photo (``finder``: a FaceFinder, ``sface``: an SFace)."""
    refs = []
    for path in reference_files(specs):
        try:
            data = path.read_bytes()
        except OSError as e:
            raise StreamdeidError(f"{path}: cannot read reference photo: {e.strerror}") from None
        cache = _cache_path(data, model_tag)
        if cache.is_file():
            refs.append(Reference(str(path), np.load(cache)))
            continue
        image = decode_image(data, path)
        emb = sface.embed_face(image, _one_face(path, finder.find(image, scan=True)))
        _save(cache, emb)
        refs.append(Reference(str(path), emb))
    return refs


def _one_face(path: Path, dets) -> np.ndarray:
    """The landmarks [5, 2] of the photo's only face; StreamdeidError naming the file otherwise."""
    if len(dets.boxes) == 0:
        raise StreamdeidError(f"{path}: no face found in this reference photo")
    heights = dets.boxes[:, 3] - dets.boxes[:, 1]
    big = np.flatnonzero(heights >= BACKGROUND_FACE * heights.max())
    if len(big) > 1:
        raise StreamdeidError(f"{path}: {len(big)} faces in this reference photo; use a photo of one person")
    return dets.landmarks[int(big[0])]


def _save(cache: Path, emb: np.ndarray) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, emb.astype(np.float32))
        os.replace(tmp, cache)
    except OSError:
        pass  # a cache that cannot be written only costs time
