"""The held-out evaluation split of UTKFace that training must never see.

The rule is deterministic and needs no state: a file belongs to the split when
the first 8 hex digits of SHA-256 of its *file name* (not its path or its
bytes), read as an integer, fall below ``HELDOUT_PER_MILLE / 1000`` of 2**32.
That is ~5 % of any folder. The resulting list for
``../shared/datasets/utkface-crops/images`` is written down in
``heldout_utkface.txt`` (file names only, one per line), which is the
authority: ``is_heldout`` answers from that list, so the split cannot drift if
the rule were ever changed.

Training code calls :func:`is_heldout` on every file and refuses those files::

    from evaluation import is_heldout
    files = [f for f in files if not is_heldout(f)]
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib.resources import files as _resources
from pathlib import Path

HELDOUT_PER_MILLE = 50  # 5 %
LIST_NAME = "heldout_utkface.txt"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def heldout_rule(name: str) -> bool:
    """The rule that made the list: sha256(file name) in the lowest 5 % of the hash space."""
    digest = hashlib.sha256(Path(name).name.encode("utf-8")).hexdigest()
    return int(digest[:8], 16) < (HELDOUT_PER_MILLE * 2**32) // 1000


@lru_cache(maxsize=1)
def heldout_names() -> frozenset[str]:
    """The file names of the held-out split (from ``heldout_utkface.txt``)."""
    text = (_resources(__package__) / LIST_NAME).read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def is_heldout(path: str | Path) -> bool:
    """True if this file (judged by its file name) is in the held-out evaluation split."""
    return Path(path).name in heldout_names()


def heldout_files(folder: str | Path) -> list[Path]:
    """The held-out images present in ``folder``, sorted by name."""
    folder = Path(folder)
    names = heldout_names()
    return sorted(p for p in folder.iterdir() if p.name in names)


def make_split_list(folder: str | Path) -> list[str]:
    """Apply :func:`heldout_rule` to the images of ``folder`` (used once to write the list)."""
    return sorted(p.name for p in Path(folder).iterdir()
                  if p.suffix.lower() in IMAGE_SUFFIXES and heldout_rule(p.name))
