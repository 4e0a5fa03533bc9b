#!/usr/bin/env python3
"""What a `kill -9` leaves: seconds after start -> decodable frames in the partial video, vault records.

    python benchmarks/kill_timeline.py 1 2 3 5      # kill after 1, 2, 3 and 5 s (default 1 2 3 5 8)
    python benchmarks/kill_timeline.py --clip ../shared/media/short_hamilton_clip.mp4 2 4

Runs `streamdeid run CLIP --key-file K` in a subprocess, kills it with SIGKILL
after each delay, then decodes `<out>.partial.mp4` and reads the vault (every
complete record, as `recover --partial` does). Prints one line per delay.
Nothing is asserted: tests/test_cli_run.py checks kill -9 + recover --partial.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import av

from streamdeid.keys import load_key
from streamdeid.vault import VaultReader

MEDIA = Path(__file__).resolve().parents[2] / "shared" / "media"


def decodable(path: Path) -> int:
    n = 0
    try:
        with av.open(str(path)) as c:
            for _ in c.decode(video=0):
                n += 1
    except (av.FFmpegError, OSError, ValueError):
        pass
    return n


def vault_span(path: Path, key: Path) -> tuple[int, int | None]:
    """(complete records, last frame) of a possibly truncated vault."""
    if not path.exists():
        return 0, None
    records, last = 0, None
    try:
        for rec in VaultReader(path).records(load_key(key)):
            records += 1
            last = rec.frame_index if last is None else max(last, rec.frame_index)
    except Exception as exc:  # a vault cut before its header: report, don't stop
        print(f"  vault unreadable: {exc}", file=sys.stderr)
    return records, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("delays", nargs="*", type=float, default=[1, 2, 3, 5, 8])
    ap.add_argument("--clip", type=Path, default=MEDIA / "one-by-one-person-detection.mp4")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kill-timeline-"))
    try:
        key = work / "k.key"
        subprocess.run([sys.executable, "-m", "streamdeid.cli", "keygen", str(key)], check=True, capture_output=True)
        for t in args.delays:
            out = work / f"out{t:g}.mp4"
            proc = subprocess.Popen([sys.executable, "-m", "streamdeid.cli", "run", str(args.clip), "-o", str(out),
                                     "--no-progress", "--key-file", str(key)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(t)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            partial = out.with_name(f"{out.stem}.partial{out.suffix}")
            size = partial.stat().st_size if partial.exists() else 0
            records, last = vault_span(Path(f"{out}.sdv"), key)
            print(f"kill -9 at {t:4.1f} s: partial {size} bytes, {decodable(partial)} frames decodable; "
                  f"vault {records} records, last frame {last}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
