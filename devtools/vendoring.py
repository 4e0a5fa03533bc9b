"""The common end of the devtools/vendor_*.py scripts: check the upstream file, write the rewrite."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path


def write_vendored(source: bytes, expected_sha256: str, what: str, rewrite: Callable[[bytes], bytes],
                   out: Path) -> None:
    """Write ``rewrite(source)`` to ``out`` after checking ``source`` is the upstream file ``what`` names
    (its sha256), so a different upstream file is noticed; print what was written."""
    digest = hashlib.sha256(source).hexdigest()
    if digest != expected_sha256:
        raise SystemExit(f"{what} has sha256 {digest}, expected {expected_sha256}")
    out.write_bytes(rewrite(source))
    print(f"wrote {out} ({out.stat().st_size} bytes, sha256 {hashlib.sha256(out.read_bytes()).hexdigest()})")
