"""Reference photos for ``--keep`` / ``--only``: one face each, as SFace embeddings.

A reference is a photo (or a folder of photos) of one person. Each photo must
show exactly one face (counting faces at least a third the size of the
largest: a tiny face in the background is ignored, two people are refused),
so a photo can never make a second person's face a reference by accident.
The embeddings are kept in memory only: an identity vector written to a cache (as earlier versions did, under
``~/.cache/streamdeid/references``, world-readable, named by the photo's hash) outlives the run and lets anyone
with a candidate photo confirm who was selected. Embedding a photo takes well under a second.
"""

from __future__ import annotations

import os
import shutil
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


def load_references(specs: list[str], finder, sface) -> list[Reference]:
    """Embed every reference photo (``finder``: a FaceFinder, ``sface``: an SFace)."""
    _forget_old_cache()
    refs = []
    for path in reference_files(specs):
        try:
            data = path.read_bytes()
        except OSError as e:
            raise StreamdeidError(f"{path}: cannot read reference photo: {e.strerror}") from None
        image = decode_image(data, path)
        emb = sface.embed_face(image, _one_face(path, finder.find(image, scan=True)))
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


def _forget_old_cache() -> None:
    """Remove the embeddings earlier versions cached (see the top): identity vectors of the people selected."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streamdeid" / "references"
    if root.is_dir():
        shutil.rmtree(root, ignore_errors=True)
