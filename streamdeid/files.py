"""Small file helpers the layers share: the checksum of model files and one-line read errors."""

from __future__ import annotations

import hashlib
import json
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


def unfinished_copy(path: Path) -> Path:
    """Where an output is written before it is finished: ``out.mp4`` -> ``out.partial.mp4`` (video/partial.py)."""
    return path.with_name(f"{path.stem}.partial{path.suffix}")


def _same(a: str | Path, b: Path) -> bool:
    try:
        return b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def refuse_same_file(src: str | Path, out: Path) -> None:
    """The output must not be the input (or a link to it), whatever --overwrite says: the only copy of
    the source would be replaced by an irreversible one. Nor may its unfinished copy be the input
    (`recover out.partial.mp4 -o out.mp4`, a run's own advice after Ctrl-C, wrote over its input)."""
    if str(src) == "-":
        return
    if _same(src, out):
        raise StreamdeidError(f"the output {out} is the input itself; choose another -o (the source would be lost)")
    _refuse_unfinished_copy_read(out, [("input", src)])


def _refuse_unfinished_copy_read(out: Path, reads: list[tuple[str, str | Path | None]]) -> None:
    """An output is written first to its unfinished copy, beside it: that copy must be none of ``reads``."""
    for read_what, r in reads:
        if r is not None and str(r) != "-" and _same(r, unfinished_copy(out)):
            raise ClobberError(f"the output {out} is first written to {unfinished_copy(out)}, which is the "
                               f"{read_what} itself; choose another path (the {read_what} would be lost)")


class ClobberError(StreamdeidError):
    """A run would write over a file it reads or another of its outputs (refuse_clobbering)."""


def refuse_clobbering(reads: list[tuple[str, str | Path | None]], writes: list[tuple[str, str | Path | None]],
                      overwrite: bool, rewritten: tuple[str, ...] = ()) -> None:
    """Before a run writes anything. ``reads``, ``writes``: (what, path) pairs (None or ``-``: none), the
    files it reads (its key file, edits file) and the files it writes (output, vault, audit log, report).
    Whatever --overwrite says, it writes none of the files it reads (the key file is the only way back to
    the originals) and no two of its outputs are one file; without --overwrite it replaces no file but
    those ``rewritten`` names where they hold a run's report (a --report is rewritten by every run of a
    folder it resumes; is_report)."""
    seen: dict[str, str] = {}
    for what, w in writes:
        if w is None or str(w) == "-":
            continue
        path = Path(w)
        where = os.path.abspath(path)
        if where in seen:
            raise ClobberError(f"{path} is given as both the {seen[where]} and the {what}; choose another path")
        seen[where] = what
        if what == "output":
            _refuse_unfinished_copy_read(path, reads)
        if not path.exists():
            continue
        for read_what, r in reads:
            if r is None or str(r) == "-":
                continue
            try:
                same = os.path.samefile(r, path)
                inside = not same and Path(r).is_dir() and os.path.samefile(Path(r), path.parent)
            except OSError:
                continue
            if same:
                raise ClobberError(f"the {what} {path} is the {read_what} itself; choose another path "
                                   f"(the {read_what} would be lost)")
            if inside:  # a folder of inputs or reference photos: the file is one of them
                raise ClobberError(f"the {what} {path} is a file of the {read_what} folder {r}; choose another path")
        if not overwrite and not (what in rewritten and is_report(path)) and not path.is_dir():
            raise ClobberError(f"{what} exists: {path} (pass --overwrite to replace it)")


def is_report(path: Path) -> bool:
    """Whether ``path`` holds a report a run wrote (run/outcome.py write_report: a JSON object with "files"
    and "totals"; a batch's CSV report): only such a file is rewritten without --overwrite. A --report
    pointed at a video by mistake replaced it with 400 bytes of JSON."""
    try:
        if path.stat().st_size > 64 * 2**20:
            return False
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".csv":  # a batch's CSV twin (batch/driver.py): its header
            return text.startswith("input,output,vault,status")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and "files" in data and "totals" in data

