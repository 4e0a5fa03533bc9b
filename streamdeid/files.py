"""Small file helpers the layers share: the checksum of model files and one-line read errors."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .types import StreamdeidError


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks (weights files run to hundreds of MB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_error(exc: OSError, what: str, path: str) -> StreamdeidError:
    """The one-line error for a ``what`` (key file, vault) at ``path`` that could not be read."""
    if isinstance(exc, FileNotFoundError):
        return StreamdeidError(f"{what} not found: {path}")
    if isinstance(exc, IsADirectoryError):
        return StreamdeidError(f"{what} is a directory: {path}")
    if isinstance(exc, PermissionError):
        return StreamdeidError(f"cannot read {what} (permission denied): {path}")
    return StreamdeidError(f"cannot read {what} {path}: {exc.strerror}")


def refuse_same_file(src: str | Path, out: Path) -> None:
    """The output must not be the input (or a link to it), whatever --overwrite says: the only copy of
    the source would be replaced by an irreversible one."""
    if str(src) == "-" or not out.exists():
        return
    try:
        same = os.path.samefile(src, out)
    except OSError:
        return
    if same:
        raise StreamdeidError(f"the output {out} is the input itself; choose another -o (the source would be lost)")
