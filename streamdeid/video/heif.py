"""Photos in the HEIF family: HEIC (a phone camera's default) and AVIF, read and written through Pillow.

OpenCV reads neither. Pillow reads and writes AVIF itself (its wheels carry libavif); HEIC needs the
``pillow-heif`` plugin (``pip install "streamdeid[heic]"``: libheif, with codecs under LGPL and GPL terms, so it
is not a default dependency). A file is told by its ``ftyp`` box, not by its name.

An iPhone stores a turned photo with an ``irot`` transform (libheif applies it, and pillow-heif sets the EXIF
orientation to 1) and AVIF writers may only set the EXIF orientation: ``ImageOps.exif_transpose`` after opening
gives the upright picture either way. The output is written without the input's metadata (EXIF can hold where
and when the photo was taken, as the other formats' outputs do not either).
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import numpy as np

from ..types import StreamdeidError

log = logging.getLogger(__name__)

HEIC_EXTENSIONS = frozenset({".heic", ".heif", ".hif"})  # .hif: Canon and Fujifilm cameras
AVIF_EXTENSIONS = frozenset({".avif"})
EXTENSIONS = HEIC_EXTENSIONS | AVIF_EXTENSIONS
# ISO base media brands (the ftyp box's major brand) of still HEIF images; AVIF's own are avif and avis
HEIC_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})
AVIF_BRANDS = frozenset({b"avif", b"avis"})
QUALITY = 90  # Pillow's and pillow-heif's 0-100 scale; the JPEG output is written at 95 on libjpeg's
INSTALL_HEIC = 'pip install "streamdeid[heic]"'


def brand(data: bytes) -> bytes | None:
    """The major brand of an ISO base media file (bytes 8-12 after an ``ftyp`` box header), else None."""
    return data[8:12] if len(data) >= 12 and data[4:8] == b"ftyp" else None


def is_heif(data: bytes) -> bool:
    return brand(data) in HEIC_BRANDS | AVIF_BRANDS


def decode(data: bytes, name: str | os.PathLike[str]) -> np.ndarray:
    """A HEIC or AVIF file's bytes as BGR uint8 [H, W, 3], upright; StreamdeidError (one line) otherwise."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    heic = brand(data) in HEIC_BRANDS
    kind = "HEIC" if heic else "AVIF"
    _ready(heic, name)
    try:
        with Image.open(io.BytesIO(data)) as im:
            frames = getattr(im, "n_frames", 1)
            if frames > 1:
                raise StreamdeidError(f"{name}: {'a' if heic else 'an'} {kind} of {frames} images; only one-image "
                                      "files are read as photos (an image sequence: convert it to a video first)")
            if "A" in im.getbands():
                log.warning("%s: its transparency is dropped; the output is opaque", Path(str(name)).name)
            upright = ImageOps.exif_transpose(im).convert("RGB")
    except StreamdeidError:
        raise
    except UnidentifiedImageError:
        raise StreamdeidError(f"{name}: not a readable {kind} image (damaged or cut short)") from None
    except (OSError, ValueError, SyntaxError) as exc:
        why = " ".join(str(exc).split())  # libheif's reasons may span lines
        raise StreamdeidError(f"{name}: not a readable {kind} image ({why})") from None
    rgb = np.asarray(upright)
    return np.ascontiguousarray(rgb[:, :, ::-1])


def encode(image: np.ndarray, ext: str, name: str | os.PathLike[str]) -> bytes:
    """``image`` (BGR uint8 [H, W, 3]) as a HEIC or AVIF file (``ext``: its extension), without metadata."""
    from PIL import Image

    heic = ext in HEIC_EXTENSIONS
    _ready(heic, name)
    out = io.BytesIO()
    try:
        Image.fromarray(np.ascontiguousarray(image[:, :, ::-1])).save(out, format="HEIF" if heic else "AVIF",
                                                                     quality=QUALITY)
    except (KeyError, OSError, ValueError) as exc:
        raise StreamdeidError(f"cannot encode an image as {ext}: {name} ({exc})") from None
    return out.getvalue()


def _ready(heic: bool, name: str | os.PathLike[str]) -> None:
    """Pillow able to read and write the format: pillow-heif's opener registered for HEIC, Pillow's own AVIF
    plugin for AVIF; a StreamdeidError saying what to install otherwise."""
    if heic:
        try:
            import pillow_heif
        except ImportError:
            raise StreamdeidError(f"{name}: a HEIC photo; reading and writing HEIC needs the heic extra "
                                  f"({INSTALL_HEIC})") from None
        pillow_heif.register_heif_opener()
        return
    from PIL import features

    if not features.check("avif"):
        raise StreamdeidError(f"{name}: an AVIF photo; this Pillow cannot read AVIF (Pillow 11.3 or later from "
                              "PyPI can: pip install -U pillow)")
