"""Reconstruction quality over a run, from its sample grids: ``python -m training.curve STAGE_DIR [STAGE_DIR ...]``.

Every ``sample_every`` steps the trainer writes ``samples/step_N.png``: row 0 holds the
fixed batch (the first 8 training crops), row 1 the EMA generator's reconstruction
(reconstruct / e4e stages). For each grid this prints the PSNR of row 1 against row 0
at ``--at`` px (both resized with INTER_AREA, so runs at 64 and 128 px compare on the
same pixels) and the mean SFace cosine between each input and its reconstruction
(whole crop resized to 112 px: a relative identity score, not SFace's aligned
protocol). Used to pick the cpu-small resolution (docs/MODEL_CARD.md); ``--json``
writes the rows.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import cv2
import numpy as np

from evaluation.pixels import psnr
from streamdeid.identity.sface import cosine


def grid_rows(path: Path, n_rows: int) -> list[np.ndarray]:
    """A sample grid -> its rows as [cols, R, R, 3] uint8 BGR stacks."""
    img = cv2.imread(str(path))
    if img is None:
        raise ValueError(f"cannot read {path}")
    r = img.shape[0] // n_rows
    cols = img.shape[1] // r
    return [np.stack([img[i * r:(i + 1) * r, c * r:(c + 1) * r] for c in range(cols)]) for i in range(n_rows)]


def resize_all(x: np.ndarray, size: int) -> np.ndarray:
    return np.stack([cv2.resize(c, (size, size), interpolation=cv2.INTER_AREA if c.shape[0] > size
                                else cv2.INTER_LINEAR) for c in x])


def curve(stage_dir: Path, at: int, sface) -> list[dict]:
    rows = []
    for path in sorted((stage_dir / "samples").glob("step_*.png")):
        step = int(re.findall(r"\d+", path.stem)[0])
        x, y = grid_rows(path, 2)
        xa, ya = resize_all(x, at), resize_all(y, at)
        emb = sface.embed(np.concatenate([resize_all(x, 112), resize_all(y, 112)]))
        n = len(x)
        cos = float(np.mean(cosine(emb[:n], emb[n:])))
        rows.append({"run": str(stage_dir), "resolution": x.shape[1], "step": step,
                     "psnr": round(psnr(xa, ya), 2), "sface_cos": round(cos, 3)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage_dirs", nargs="+", type=Path, help="e.g. RUN/reconstruct")
    ap.add_argument("--at", type=int, default=64, help="compare at this size (px)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    from streamdeid.identity import SFace

    sface = SFace()
    out = []
    for d in args.stage_dirs:
        if not (d / "samples").is_dir():
            ap.error(f"{d} has no samples/ folder")
        rows = curve(d, args.at, sface)
        for r in rows:
            print(f"{d}  {r['resolution']:>3} px  step {r['step']:>6}  PSNR@{args.at} {r['psnr']:6.2f} dB  "
                  f"SFace cos {r['sface_cos']:.3f}")
        out += rows
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
