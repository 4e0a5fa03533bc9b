#!/usr/bin/env python3
"""Where a crowd pan's covered area goes: split by the kind of cover that owns each pixel.

    python benchmarks/cover_area.py                     # the pan of benchmarks/crowd.py, defaults
    python benchmarks/cover_area.py --no-match          # guesses widened, not matched (TrackConfig)
    python benchmarks/cover_area.py --json area.json

The pipeline runs in process (detect, track, look-ahead, render with ``--anonymizer solid``) on the
pan's exact frames (no codec), and every pixel a cover changed is counted once, for the cover that
owns it (render.PastedFace.owned). A cover is put in one of these kinds:
  detected        a detection on this frame
  between runs    a face the detector skipped this frame (found at its last run)
  held            a face a detector run that could see it missed (the tracker's guess)
  back-filled     a face before its first detection (the look-ahead's guess)
and, for held and back-filled, whether the guess was matched to the face's pixels
(track/appearance.py) or widened, or (back-filled) "settled": redrawn for a face its next detections
show still or moving at its size (lookahead.py). A cover is "on a face" when its box's centre lies in a pasted
face's box grown by a quarter of its size each way (any pasted face, also those mostly out of the
picture), "at the edge" when it is on no face and its box leaves the picture, else "on no face".
Also printed: a detected cover's owned pixels over its box's area (median), i.e. how much larger
than the face box a cover is. Nothing is asserted. crowd.py measures the CLI's output; this splits it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last (a --code tree stays first): evaluation/
from crowd import add_clip_args, make_clip  # noqa: E402

from streamdeid.config import PipelineConfig  # noqa: E402
from evaluation.pan import PanClip  # noqa: E402
from streamdeid.pipeline import build_renderer, process_frames  # noqa: E402
from streamdeid.render import PastedFace  # noqa: E402
from streamdeid.summary import RunSummary  # noqa: E402
from streamdeid.types import Frame, FrameResult, TrackedFace  # noqa: E402


def kind(face: TrackedFace) -> str:
    if face.state == "detected":
        return "detected"
    if face.state == "held" and face.between_runs:
        return "between runs"
    if face.state == "backfilled" and face.between_runs:
        return "back-filled, settled"  # redrawn for a face its next detections show still or moving (lookahead.py)
    state = "held" if face.state == "held" else "back-filled"
    return f"{state}, {'matched' if face.matched else 'widened'}"


def place(face: TrackedFace, faces: np.ndarray, size: tuple[int, int]) -> str:
    """``faces``: [N, 4] the pasted faces' boxes in this frame's pixels."""
    box = np.asarray(face.box, np.float64)
    centre = (box[:2] + box[2:]) / 2
    grow = (faces[:, 2:] - faces[:, :2]) * 0.25
    if np.all((centre >= faces[:, :2] - grow) & (centre <= faces[:, 2:] + grow), axis=1).any():
        return "on a face"
    w, h = size
    return "at the edge" if box[0] < 0 or box[1] < 0 or box[2] > w or box[3] > h else "on no face"


class AreaCounter:
    """A pipeline observer: owned pixels and covers per (kind, place)."""

    def __init__(self, pan: PanClip) -> None:
        self.pan = pan
        self.pixels: dict[tuple[str, str], int] = {}
        self.covers: dict[tuple[str, str], int] = {}
        self.detected_ratio: list[float] = []

    def __call__(self, result: FrameResult, pasted: list[PastedFace]) -> None:
        t = result.frame.index
        faces = self.pan.crowd.boxes - np.tile(self.pan.offsets[t], 2)
        for p in pasted:
            key = (kind(p.face), place(p.face, faces, self.pan.size))
            owned = int(p.owned.sum())
            self.pixels[key] = self.pixels.get(key, 0) + owned
            self.covers[key] = self.covers.get(key, 0) + 1
            if p.face.state == "detected":
                x1, y1, x2, y2 = p.face.box.tolist()
                self.detected_ratio.append(owned / max((x2 - x1) * (y2 - y1), 1.0))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_clip_args(ap)  # the pan of benchmarks/crowd.py
    ap.add_argument("--no-match", action="store_true", help="TrackConfig.match_templates off")
    ap.add_argument("--feather", type=float, default=None, help="BlendConfig.feather (default: the run's)")
    ap.add_argument("--json", type=Path, default=None, help="write the split here")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    pan = make_clip(args)
    config = PipelineConfig()
    config = replace(config, anonymize=replace(config.anonymize, method="solid"),
                     track=replace(config.track, match_templates=not args.no_match))
    if args.feather is not None:
        config = replace(config, blend=replace(config.blend, feather=args.feather))
    counter = AreaCounter(pan)
    t0 = time.perf_counter()
    process_frames((Frame(t, np.ascontiguousarray(pan.frame(t)), t, None) for t in range(len(pan))), config,
                   build_renderer(config), fps=pan.fps, emit=lambda _frame: None, observers=[counter],
                   summary=RunSummary())
    seconds = time.perf_counter() - t0
    frame_px = pan.size[0] * pan.size[1] * len(pan)
    share = {f"{k} / {p}": round(100 * v / frame_px, 2) for (k, p), v in sorted(counter.pixels.items())}
    total = 100 * sum(counter.pixels.values()) / frame_px
    print(f"{len(pan)} frames in {seconds:.1f} s; frame area changed (owned pixels): {total:.1f}%")
    print(f"{'cover':28s} {'place':12s} {'area':>7s} {'covers':>7s}")
    for (k, p), v in sorted(counter.pixels.items()):
        print(f"{k:28s} {p:12s} {100 * v / frame_px:6.2f}% {counter.covers[(k, p)]:7d}")
    by_place = {p: 0.0 for p in ("on a face", "on no face", "at the edge")}
    for (_, p), v in counter.pixels.items():
        by_place[p] += 100 * v / frame_px
    print("by place: " + ", ".join(f"{p} {v:.1f}%" for p, v in by_place.items()))
    ratio = float(np.median(counter.detected_ratio)) if counter.detected_ratio else None
    if ratio is not None:
        print(f"a detected cover owns {ratio:.2f}x its box's area (median of {len(counter.detected_ratio)})")
    if args.json:
        args.json.write_text(json.dumps({"total": round(total, 2), "split": share, "by_place": by_place,
                                         "detected_cover_over_box": ratio, "seconds": round(seconds, 1),
                                         "match_templates": not args.no_match}, indent=1))


if __name__ == "__main__":
    main()
