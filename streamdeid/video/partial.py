"""Crash-safe output files: the partial file beside the output, its lock, the final move, and stills.

An output is written to ``<stem>.partial<ext>`` next to the final path and moved there only on
success, so a half-written file never masquerades as a finished one (``VideoWriter`` for videos,
``write_image`` for stills).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import cv2
import numpy as np

from streamdeid.files import unfinished_copy
from streamdeid.types import StreamdeidError
from streamdeid.video import heif

OWN_TAG = "streamdeid"  # the start of the comment tag of every video streamdeid writes (VIDEO_ID_PREFIX too)
HEADER_BYTES = 1 << 20  # where that tag lies in a partial file: an MP4's moov, Matroska's and AVI's headers


def partial_path_for(path: Path) -> Path:
    """``out.mp4`` -> ``out.partial.mp4``: same directory, so the final
    rename is atomic, and the same extension, so players still open it."""
    return unfinished_copy(path)


def left_by_a_run(partial: Path) -> bool:
    """Whether an existing ``partial`` is one a run of ours left (killed outright): empty, or a video whose
    header holds the comment tag every VideoWriter writes. Read as bytes: a Matroska file killed before its
    first cluster has its tags but no frame, and does not open as a video. A file of the user's that only
    happens to have the name is not ours, and a run must not write over it."""
    try:
        with open(partial, "rb") as f:
            head = f.read(HEADER_BYTES)
    except OSError:
        return False
    return not head or OWN_TAG.encode() in head


def _refuse_foreign(partial: Path, final: Path, ours) -> None:
    if partial.is_symlink() or (partial.exists() and not ours(partial)):
        raise StreamdeidError(f"{partial} exists and is not an unfinished output of streamdeid; {final} is written "
                              "there first: move it away or choose another output name")


def final_path_for(path: Path) -> Path | None:
    """The inverse of ``partial_path_for``: ``out.partial.mp4`` -> ``out.mp4``; None for another name."""
    if not path.stem.endswith(".partial"):
        return None
    return path.with_name(f"{path.stem[: -len('.partial')]}{path.suffix}")


def claim_partial(partial: Path, final: Path, *, private: bool = False) -> int:
    """Create or open ``partial`` and hold an exclusive lock on it for this run (an fd to close when
    done). Two runs writing one output name would otherwise write one file and both "finish" it: the
    second is told at once instead. A partial file left by a run that died is not locked, and is
    reused. Filesystem errors read as what they are. ``private``: readable by its owner only (mode 0600, a
    recovered video of the original faces), set before anything is written into it."""
    import fcntl

    _refuse_foreign(partial, final, left_by_a_run)
    try:
        fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o600 if private else 0o644)
        if private:
            os.fchmod(fd, 0o600)  # a partial file left by an earlier run keeps its mode otherwise
    except OSError as exc:
        raise StreamdeidError(f"cannot create {partial}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StreamdeidError(f"another run is writing {final} (it holds {partial})") from None
    return fd


def publish(finished: Path, final: Path, overwrite: bool) -> None:
    """Move ``finished`` to ``final``. Without ``overwrite`` it never replaces a file that appeared
    there meanwhile (a hard link fails on an existing name: no window between test and rename)."""
    try:
        if overwrite:
            os.replace(finished, final)
            return
        try:
            os.link(finished, final)
        except FileExistsError:
            raise StreamdeidError(f"{final} appeared while this run was writing it; this run's result "
                                  f"is kept at {finished}") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            if final.exists():  # no hard links on this filesystem: test, then rename
                raise StreamdeidError(f"{final} appeared while this run was writing it; this run's "
                                      f"result is kept at {finished}") from None
            os.replace(finished, final)
            return
        finished.unlink()
    except OSError as exc:
        raise StreamdeidError(f"cannot move {finished} to {final}: {exc.strerror}") from None


def check_overwrite(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise StreamdeidError(f"output exists: {path} (pass --overwrite to replace it)")
    if path.is_dir():
        raise StreamdeidError(f"output path is a directory: {path}")
    if path.parent.exists() and not path.parent.is_dir():
        raise StreamdeidError(f"{path.parent} is a file, not a folder the output can go in")
    if not path.parent.is_dir():
        raise StreamdeidError(f"output folder does not exist: {path.parent}")


def write_image(path: str | os.PathLike[str], image: np.ndarray, overwrite: bool = False) -> Path:
    """Write a still image (format from the extension) via a partial file."""
    target = Path(path)
    check_overwrite(target, overwrite)
    ext = target.suffix.lower()
    if ext in heif.EXTENSIONS:  # HEIC and AVIF through Pillow (video/heif.py)
        data = heif.encode(image, ext, target)
    else:
        params = [cv2.IMWRITE_JPEG_QUALITY, 95] if ext in (".jpg", ".jpeg") else []
        try:
            ok, data = cv2.imencode(ext, image, params)
        except cv2.error:
            ok = False
        if not ok:
            raise StreamdeidError(f"cannot encode an image as {ext or 'no extension'}: {target}")
    partial = partial_path_for(target)
    # a still's partial lives for one write: an existing one is the user's (or the input: `run a.partial.jpg
    # -o a.jpg` moved the input onto the output), and only an empty one is taken
    _refuse_foreign(partial, target, lambda p: p.is_file() and p.stat().st_size == 0)
    try:
        partial.write_bytes(data if isinstance(data, bytes) else data.tobytes())
        os.replace(partial, target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise StreamdeidError(f"cannot write {target}: {exc.strerror}") from None
    return target
