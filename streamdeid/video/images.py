"""Tell still images from videos and list a folder of media.

Still images go through OpenCV (no container, no timing); videos through the
reader. GIF counts as video because it is usually animated.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import cv2
import numpy as np

from streamdeid.types import StreamdeidError
from streamdeid.video import heif

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".webp", ".tif", ".tiff"}) | heif.EXTENSIONS
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

    Hidden files and the unfinished outputs a run of ours left (``*.partial.*`` that it wrote) are skipped.
    """
    wanted = (IMAGE_EXTENSIONS if images else frozenset()) | (VIDEO_EXTENSIONS if videos else frozenset())
    return sorted((p for p in _visible_files(folder) if p.suffix.lower() in wanted), key=_natural_key)


def unread_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Visible files directly inside ``folder`` that ``list_media`` leaves out (a .psd image, a text file),
    which a folder run says it did not read rather than skipping them unseen."""
    media = IMAGE_EXTENSIONS | VIDEO_EXTENSIONS
    return sorted((p for p in _visible_files(folder) if p.suffix.lower() not in media), key=_natural_key)


def _visible_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Files inside ``folder``, but hidden ones and the unfinished outputs a run of ours left. A file of the
    user's named ``*.partial.*`` is read like any other: skipped, it was left bare and in no report."""
    from .partial import left_by_a_run  # (video/partial.py imports this package)

    root = Path(folder)
    if not root.is_dir():
        raise StreamdeidError(f"not a folder: {root}")
    return [p for p in root.iterdir()
            if p.is_file() and not p.name.startswith(".") and not (p.stem.endswith(".partial") and left_by_a_run(p))]


def say_unread(files: list[Path], where: str | os.PathLike[str]) -> None:
    """One warning naming up to three files a folder run did not read, and how many there are."""
    if files:
        names = ", ".join(p.name for p in files[:3]) + (", ..." if len(files) > 3 else "")
        log.warning("%s: %d file(s) not read, not a photo or video this tool reads (%s)", where, len(files), names)


def read_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a still image as BGR uint8 [H, W, 3] (alpha dropped, grey expanded, EXIF rotation applied)."""
    target = Path(path)
    if not target.is_file():
        raise StreamdeidError(f"image not found: {target}")
    try:
        data = target.read_bytes()
    except OSError as e:
        raise StreamdeidError(f"{target}: cannot read: {e.strerror}") from None
    return decode_image(data, target)


def decode_image(data: bytes, name: str | os.PathLike[str]) -> np.ndarray:
    """An image file's bytes as BGR uint8 [H, W, 3]; ``name`` only names it in errors."""
    if jpeg_is_truncated(data):
        # libjpeg would decode the part that is there, grey below, and print its own warning
        raise StreamdeidError(f"{name}: truncated JPEG (the file ends before its image does)")
    if heif.is_heif(data):  # HEIC and AVIF: OpenCV reads neither (video/heif.py)
        return heif.decode(data, name)
    buf = np.frombuffer(data, np.uint8)
    if data[:4] in (b"II*\x00", b"MM\x00*"):  # a TIFF may hold pages that imdecode would not read
        ok, pages = cv2.imdecodemulti(buf, cv2.IMREAD_COLOR)
        if ok and len(pages) > 1:
            raise StreamdeidError(f"{name}: a TIFF of {len(pages)} pages; only one-page images are read "
                                  "(split it into one file per page first)")
    frames = animation_frames(data)
    if frames > 1:  # imdecode reads the first frame alone: the output would be that one picture
        raise StreamdeidError(f"{name}: an animation of {frames} frames; only still images are read as photos "
                              "(convert it to a video, such as .mp4 or .gif, first)")
    image = cv2.imdecode(buf, cv2.IMREAD_COLOR) if data else None  # (empty: cv2 asserts)
    if image is None:
        raise StreamdeidError(f"{name}: not a readable image")
    if has_alpha(data):
        log.warning("%s: its transparency is dropped; the output is opaque (transparent pixels show the colour "
                    "stored under them)", Path(str(name)).name)
    return image


def has_alpha(data: bytes) -> bool:
    """Whether a PNG (colour type 4 or 6: grey or RGB with alpha) or a WebP (its VP8X header's alpha flag, or
    a lossless VP8L header's alpha bit, bit 28 after its signature byte) has a transparency channel, read
    from the header alone."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) > 25:
        return data[25] in (4, 6)
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP" or len(data) < 25:
        return False
    if data[12:16] == b"VP8X":
        return bool(data[20] & 0x10)
    return data[12:16] == b"VP8L" and data[20] == 0x2F and bool(int.from_bytes(data[21:25], "little") >> 28 & 1)


def animation_frames(data: bytes) -> int:
    """The frame count of an animated PNG (its acTL chunk, before the image data) or WebP (its VP8X header's
    animation flag; the count of its ANMF frame chunks); 1 for anything else. Chunks are walked by their
    lengths, so pixel data that happens to spell a chunk name does not count."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        at = 8
        while at + 12 <= len(data):
            length, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
            if kind == b"acTL" and length >= 8:
                return max(1, int.from_bytes(data[at + 8:at + 12], "big"))
            if kind in (b"IDAT", b"IEND"):
                return 1
            at += 12 + length
        return 1
    if data[:4] == b"RIFF" and data[8:16] == b"WEBPVP8X" and len(data) > 20 and data[20] & 0x02:
        count, at = 0, 12
        while at + 8 <= len(data):
            kind, length = data[at:at + 4], int.from_bytes(data[at + 4:at + 8], "little")
            count += kind == b"ANMF"
            at += 8 + length + (length & 1)  # chunks are padded to an even size
        return max(count, 1)
    return 1


def jpeg_is_truncated(data: bytes) -> bool:
    """True for a JPEG whose image data has no end-of-image marker (FFD9) after its first scan.

    The marker segments before the scan are walked by their lengths, so an EXIF thumbnail's own FFD9 does
    not count; in the scan data an FF byte is followed by 00 or a restart marker, so FFD9 there is the end.
    Not a JPEG, or one too damaged to walk: False (the decoder judges it)."""
    if data[:2] != b"\xff\xd8":
        return False
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return False
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        length = int.from_bytes(data[at + 2:at + 4], "big")
        if marker == 0xDA:  # start of scan: the image data follows its header
            return data.find(b"\xff\xd9", at + 2 + length) < 0
        at += 2 + length
    return True  # the file ends among its headers
