"""What a batch does: files, folders (recursive) and manifests -> one Task per file; shards of them."""

from __future__ import annotations

import csv
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from ..types import StreamdeidError
from ..video.images import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, is_image, list_media, say_unread, unread_files
from ..run.options import manifest_options

MANIFEST_SUFFIXES = (".txt", ".list", ".lst", ".csv")


@dataclass(frozen=True)
class Task:
    """One file of a batch. ``key``: its output path relative to OUT_DIR (posix), the same on every
    machine that sees the same inputs; shards and reports are keyed by it."""

    input: str
    output: str
    key: str
    options: dict[str, Any] = field(default_factory=dict)  # a manifest row's per-file options
    refused: str = ""  # why this file is not run (reported as its failure; the other files go on)

    @property
    def is_image(self) -> bool:
        return is_image(self.input)


def collect_tasks(sources: list[str], out_dir: str | Path, run_params: list[click.Parameter] | None = None
                  ) -> list[Task]:
    """Every input file of ``sources`` (files, folders walked recursively, manifests), sorted by key.
    A folder's files keep their relative paths under ``out_dir``; a file (or a manifest line) goes to
    ``out_dir/<name>`` unless the manifest names an output. Two inputs for one output are refused."""
    out = Path(out_dir)
    entries: list[tuple[Path, str, dict[str, Any]]] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            entries += [(f, f.relative_to(p).as_posix(), {}) for f in _walk(p, skip=out)]
        elif p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES:
            entries += _manifest(p, run_params or [])
        elif p.is_file():
            entries.append((p, p.name, {}))
        else:
            raise StreamdeidError(f"{src}: no such file or folder")
    tasks: dict[str, Task] = {}
    for path, rel, opts in entries:
        if rel in tasks:
            if tasks[rel].input == str(path):
                raise StreamdeidError(f"{path} is listed twice")
            raise StreamdeidError(f"two inputs would write {out / rel}: {tasks[rel].input} and {path} "
                                  "(give them distinct names, or outputs in a CSV manifest)")
        tasks[rel] = Task(str(path), str(out / rel), rel, opts, refused=_outside(out, rel))
    if not tasks:
        raise StreamdeidError("no images or videos in " + ", ".join(sources))
    return [tasks[k] for k in sorted(tasks)]


def _outside(out: Path, rel: str) -> str:
    """Why ``out / rel`` is refused: it resolves outside OUT_DIR (``..``, an absolute path, a symlink that
    leads out). A manifest may come from another system or person; it names files, not places. "" if inside."""
    root, target = out.resolve(), (out / rel).resolve()
    if target == root or not target.is_relative_to(root):
        return f"refused: output {rel!r} is outside the output folder {out}"
    return ""


def _walk(root: Path, skip: Path) -> list[Path]:
    skip = skip.resolve()
    found: list[Path] = []
    unread: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and (here / d).resolve() != skip)
        found += list_media(here)
        unread += unread_files(here)
    say_unread(unread, root)
    return found


def _manifest(path: Path, run_params: list[click.Parameter]) -> list[tuple[Path, str, dict[str, Any]]]:
    """One path per line (``#`` comments), or a CSV with an ``input`` column, an optional ``output``
    (relative to OUT_DIR) and per-file option columns. Relative paths are relative to the manifest."""
    base = path.parent
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: the byte-order mark spreadsheets write
    except (OSError, UnicodeDecodeError) as exc:
        raise StreamdeidError(f"{path}: cannot read the manifest: {exc}") from None
    out = []
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        if rows and "input" not in rows[0]:
            raise StreamdeidError(f"{path}: a CSV manifest needs an 'input' column")
        for n, row in enumerate(rows, start=2):
            src = base / row["input"].strip()
            rel = (row.get("output") or "").strip() or src.name
            out.append((_media(src, f"{path}:{n}"), rel, manifest_options(run_params, row, f"{path}:{n}")))
        return out
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line and not line.startswith("#"):
            src = base / line
            out.append((_media(src, f"{path}:{n}"), src.name, {}))
    return out


def _media(src: Path, where: str) -> Path:
    if src.suffix.lower() not in IMAGE_EXTENSIONS | VIDEO_EXTENSIONS:
        raise StreamdeidError(f"{where}: {src} is not an image or video file")
    return src  # a missing file is reported as that file's failure, not the whole batch's


def shard_of(key: str, count: int) -> int:
    """The shard of a task: a hash of its key, so it does not depend on the listing order, the machine,
    or on which other files exist (adding a file never moves another one to another shard)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


def shard(tasks: list[Task], index: int, count: int) -> list[Task]:
    """The tasks of shard ``index`` of ``count`` (0-based); the shards partition ``tasks``."""
    if count < 1 or not 0 <= index < count:
        raise StreamdeidError(f"--shard-index must be in 0..{count - 1} for --shard-count {count}")
    return [t for t in tasks if shard_of(t.key, count) == index]
