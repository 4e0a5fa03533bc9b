#!/usr/bin/env python3
"""Recovery-vault size, fidelity and cost on the shared clips.

    python benchmarks/vault.py                              # every shared clip, every vault quality
    python benchmarks/vault.py --clips short_hamilton_clip --qualities high
    python benchmarks/vault.py --code /tmp/base --qualities default --out /tmp/vault-base   # an older commit

Per clip (each a CLI process, timed wall-clock; --repeat runs each and takes the median):
  run without a key file             the baseline speed (no vault)
  run --key-file --vault-quality Q   vault bytes, vault / source, bytes per face-second,
                                     PSNR of the vault's own crops against the decoded source
                                     (owned pixels only)
  recover (default H.264 output)     PSNR of the recovered face pixels against the decoded source
  lossless: run --codec ffv1 (the vault picks lossless itself), recover --codec ffv1: are the
  recovered frames bit-identical to the source decode?
"default" runs whatever the code under test does with no --vault-quality (for an older commit).
Writes vault.json to --out. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import av
import numpy as np

REPO = Path(__file__).resolve().parent.parent
MEDIA = REPO.parent / "shared" / "media"
CLIPS = ["classroom", "face-demographics-walking-and-pause", "head-pose-face-detection-female-and-male",
         "head-pose-face-detection-male", "one-by-one-person-detection", "short_hamilton_clip"]


def cli(code: Path, *args) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(code))
    t0 = time.perf_counter()
    quiet = ["--no-progress"] if args[0] in ("run", "recover") else []
    proc = subprocess.run([sys.executable, "-m", "streamdeid.cli", *map(str, args), *quiet],
                          capture_output=True, text=True, env=env, cwd=str(code))  # -m puts the cwd first
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"streamdeid {' '.join(map(str, args))} failed: {proc.stderr.strip()[-400:]}")
    return wall, proc.stderr


def decode(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


def psnr(se: float, n: int) -> float | None:
    return None if n == 0 else (float("inf") if se == 0 else 10 * np.log10(255 ** 2 * n / se))


def read_vault(code: Path, vault: Path, key: Path, source: list[np.ndarray]):
    """One pass over the vault with the code under test: PSNR of its crops (owned pixels) against the
    decoded source, its keyless inspect(), and each frame's owned-pixel mask [H, W] bool."""
    sys.path.insert(0, str(code))
    from streamdeid.keys import load_key
    from streamdeid.vault import VaultReader

    reader = VaultReader(vault)
    masks: dict[int, np.ndarray] = {}
    se = n = 0
    for rec in reader.records(load_key(key)):
        if rec.crop is None:
            continue
        x, y = _roi(rec.mask_params)
        h, w = rec.crop.shape[:2]
        own = rec.crop[..., 3] > 0 if rec.crop.shape[2] == 4 else np.ones((h, w), bool)
        d = rec.crop[own, :3].astype(np.float64) - source[rec.frame_index][y:y + h, x:x + w][own]
        se, n = se + float((d ** 2).sum()), n + d.size
        masks.setdefault(rec.frame_index, np.zeros(source[0].shape[:2], bool))[y:y + h, x:x + w] |= own
    sys.path.remove(str(code))
    return psnr(se, n), reader.inspect(), masks


def _roi(params) -> tuple[int, int]:
    """A record's paste position; an older commit under test stores its mask parameters as an array."""
    if hasattr(params, "roi_x"):
        return int(params.roi_x), int(params.roi_y)
    return int(params[0]), int(params[1])


def face_psnr(recovered: list[np.ndarray], source: list[np.ndarray], masks: dict[int, np.ndarray]) -> float | None:
    """Recovered against source over every owned pixel."""
    se = n = 0
    for i, m in masks.items():
        d = recovered[i][m].astype(np.float64) - source[i][m]
        se, n = se + float((d ** 2).sum()), n + d.size
    return psnr(se, n)


def fps_of(stderr: str) -> float | None:
    m = re.search(r"([\d.]+) fps", stderr)
    return float(m.group(1)) if m else None


def timed(repeat: int, fn):
    runs = [fn() for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), runs[-1][1]


def bench_clip(clip: str, args, key: Path, out: Path) -> dict:
    src = MEDIA / f"{clip}.mp4"
    source = decode(src)
    row: dict = {"clip": clip, "frames": len(source), "source_bytes": src.stat().st_size}
    plain = out / f"{clip}_plain.mp4"
    wall, err = timed(args.repeat, lambda: cli(args.code, "run", src, "-o", plain, "--overwrite"))
    row["run_no_key"] = {"wall_s": round(wall, 2), "fps": fps_of(err)}
    for q in args.qualities:
        lossless = q == "lossless"
        anon = out / f"{clip}_{q}.{'mkv' if lossless else 'mp4'}"
        extra = ["--codec", "ffv1"] if lossless else ([] if q == "default" else ["--vault-quality", q])
        wall, err = timed(args.repeat, lambda: cli(args.code, "run", src, "-o", anon, "--key-file", key,
                                                   "--overwrite", *extra))
        vault = anon.with_name(anon.name + ".sdv")
        crop_db, info, masks = read_vault(args.code, vault, key, source)
        rec = anon.with_name(f"{clip}_{q}_recovered.{'mkv' if lossless else 'mp4'}")
        rwall, _ = timed(args.repeat, lambda: cli(args.code, "recover", anon, "--key-file", key, "-o", rec,
                                                  "--overwrite", *(["--codec", "ffv1"] if lossless else [])))
        recovered = decode(rec)
        entry = {
            "run_wall_s": round(wall, 2), "run_fps": fps_of(err),
            "vault_bytes": vault.stat().st_size, "output_bytes": anon.stat().st_size,
            "vault_over_source": round(vault.stat().st_size / row["source_bytes"], 3),
            "bytes_per_face_second": info.get("bytes_per_face_second"),
            "face_frames": info["frame_records"],
            "vault_crop_psnr_db": None if crop_db is None else round(crop_db, 2),
            "recover_wall_s": round(rwall, 2), "recover_fps": round(len(source) / rwall, 1),
            "recovered_face_psnr_db": _round(face_psnr(recovered, source, masks)),
        }
        if lossless:
            entry["bit_identical"] = len(recovered) == len(source) and all(
                np.array_equal(a, b) for a, b in zip(recovered, source))
        row[q] = entry
        print(f"{clip} {q}: " + ", ".join(f"{k}={v}" for k, v in entry.items()), flush=True)
    return row


def _round(v):
    return None if v is None else (v if v == float("inf") else round(v, 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", nargs="+", default=CLIPS)
    ap.add_argument("--qualities", nargs="+", default=["high", "small", "lossless"],
                    choices=["high", "small", "lossless", "default"])
    ap.add_argument("--code", type=Path, default=REPO, help="checkout whose streamdeid is measured")
    ap.add_argument("--out", type=Path, default=Path("/tmp/streamdeid-vault"))
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    key = args.out / "bench.key"
    if not key.exists():
        cli(args.code, "keygen", key)
    rows = [bench_clip(c, args, key, args.out) for c in args.clips]
    (args.out / "vault.json").write_text(json.dumps({"code": str(args.code), "clips": rows}, indent=1))
    print(f"wrote {args.out / 'vault.json'}")


if __name__ == "__main__":
    main()
