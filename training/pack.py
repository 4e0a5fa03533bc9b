"""Carry a prepared dataset to another machine in a quarter of the bytes:
``python -m training.pack pack PREPARED FILE.npz [--quality 95]`` and ``... unpack FILE.npz PREPARED``.

``crops.npy`` (uint8 [N, R, R, 3], 111 MB for 9,062 crops at 64 px) becomes one JPEG per crop,
concatenated into a single byte array with offsets; ``train.txt`` and ``prepared.json`` travel
verbatim. Made for a lent GPU machine that receives at most 64 MiB per call. JPEG is lossy: the
source UTKFace files are JPEGs already, and quality 95 changes a crop by about 1 level per pixel.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np

from .data import CROPS_FILE, PREPARED_FILE, TRAIN_LIST


def pack(prepared: Path, out: Path, quality: int = 95) -> dict:
    crops = np.load(prepared / CROPS_FILE, mmap_mode="r")  # [N, R, R, 3] RGB
    blobs = []
    for crop in crops:
        ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(crop[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError("JPEG encoding failed")
        blobs.append(buf.tobytes())
    offsets = np.cumsum([0] + [len(b) for b in blobs]).astype(np.int64)
    np.savez(out, jpeg=np.frombuffer(b"".join(blobs), dtype=np.uint8), offsets=offsets,
             train=np.frombuffer((prepared / TRAIN_LIST).read_bytes(), dtype=np.uint8),
             prepared=np.frombuffer((prepared / PREPARED_FILE).read_bytes(), dtype=np.uint8))
    return {"crops": len(blobs), "bytes": out.stat().st_size, "quality": quality}


def unpack(packed: Path, out: Path) -> dict:
    z = np.load(packed)
    jpeg, offsets = z["jpeg"], z["offsets"]
    crops = np.stack([cv2.imdecode(jpeg[offsets[i]:offsets[i + 1]], cv2.IMREAD_COLOR)[:, :, ::-1]
                      for i in range(len(offsets) - 1)])
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / CROPS_FILE, np.ascontiguousarray(crops))
    (out / TRAIN_LIST).write_bytes(z["train"].tobytes())
    (out / PREPARED_FILE).write_bytes(z["prepared"].tobytes())
    return {"crops": len(crops), "shape": list(crops.shape)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.pack", description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=("pack", "unpack"))
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--quality", type=int, default=95, help="pack: JPEG quality")
    args = ap.parse_args(argv)
    info = pack(args.src, args.dst, args.quality) if args.action == "pack" else unpack(args.src, args.dst)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
