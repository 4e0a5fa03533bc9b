#!/usr/bin/env python
"""Contact sheets of ``--anonymizer composite`` beside blur: original | blur | composite.

    python benchmarks/composite_sheet.py --out docs/img

Writes ``composite_video.jpg`` (frames of the shared clips) to --out, and with --group-out DIR
``composite_group_meeting.jpg`` (the WIDER FACE meeting photo, whose terms forbid shipping it: never into
docs/); each run is a plain ``streamdeid.anonymize`` call.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import av
import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streamdeid import anonymize
from streamdeid.config import PipelineConfig

MEDIA = Path(__file__).resolve().parents[2] / "shared" / "media"
# (clip, frames shown, zoom box x1, y1, x2, y2 in the frame: None for the whole frame)
CLIPS = (
    ("short_hamilton_clip.mp4", (10, 130), None),
    ("head-pose-face-detection-female-and-male.mp4", (5, 30), None),
    ("face-demographics-walking-and-pause.mp4", (38,), None),
)
METHODS = ("blur", "composite")
WIDTH = 1200  # sheet width in pixels


def _frames(path: Path, wanted) -> dict[int, np.ndarray]:
    out = {}
    with av.open(str(path)) as c:
        for i, f in enumerate(c.decode(video=0)):
            if i in wanted:
                out[i] = f.to_ndarray(format="bgr24")
    return out


def _run(src: Path, dst: Path, method: str) -> None:
    cfg = PipelineConfig()
    cfg.anonymize.method = method
    anonymize(str(src), dst, cfg, vault=False)


def _label(img: np.ndarray, text: str) -> np.ndarray:
    img = img.copy()
    cv2.putText(img, text, (6, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(img, text, (6, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 1, cv2.LINE_AA)
    return img


def _row(images: list[np.ndarray]) -> np.ndarray:
    row = np.concatenate([_label(im, name) for im, name in zip(images, ("original",) + METHODS)], axis=1)
    return cv2.resize(row, (WIDTH, row.shape[0] * WIDTH // row.shape[1]), interpolation=cv2.INTER_AREA)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--media", default=str(MEDIA))
    ap.add_argument("--group-out", type=Path, default=None,
                    help="also write the group_meeting.jpg sheet here (a WIDER FACE photo: never into docs/)")
    args = ap.parse_args(argv)
    media, out = Path(args.media), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for clip, frames, _ in CLIPS:
            outs = {}
            for m in METHODS:
                dst = Path(tmp) / f"{m}_{clip}"
                _run(media / clip, dst, m)
                outs[m] = _frames(dst, frames)
            orig = _frames(media / clip, frames)
            rows += [_row([orig[i]] + [outs[m][i] for m in METHODS]) for i in frames]
        cv2.imwrite(str(out / "composite_video.jpg"), np.concatenate(rows, axis=0), [cv2.IMWRITE_JPEG_QUALITY, 85])
        print(f"wrote {out / 'composite_video.jpg'}")
        if args.group_out is None:
            return 0
        photo = media / "group_meeting.jpg"
        images = [cv2.imread(str(photo))]
        for m in METHODS:
            dst = Path(tmp) / f"{m}_{photo.name}"
            _run(photo, dst, m)
            images.append(cv2.imread(str(dst)))
        # the photo's middle third, where the faces are, full resolution per column
        h = images[0].shape[0]
        crops = [im[h // 5:h * 3 // 5, 150:-150] for im in images]
        cv2.imwrite(str(args.group_out / "composite_group_meeting.jpg"), _row(crops), [cv2.IMWRITE_JPEG_QUALITY, 85])
    print(f"wrote {args.group_out / 'composite_group_meeting.jpg'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
