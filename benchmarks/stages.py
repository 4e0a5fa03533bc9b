#!/usr/bin/env python3
"""Where each millisecond of a frame goes at 640x360, 1280x720 and 1920x1080, beside the transcode ceiling.

    python benchmarks/stages.py                                   # every medium at every size (slow)
    python benchmarks/stages.py --media hamilton --sizes 720,1080 --repeat 1
    python benchmarks/stages.py --frames 30 --media hamilton,store,pan --sizes 360,1080    # a quick try
    python benchmarks/stages.py --vs-deface --json /tmp/stages.json

The same footage at several sizes (built once with PyAV, libx264 yuv420p crf 18, and kept in --cache):
  hamilton  ../shared/media/short_hamilton_clip.mp4 (640x360, 275 frames: a stage, an audience, close-ups)
            as it is at 360 and scaled to 1280x720 and 1920x1080 (benchmarks/fps.py's make_scaled_clip)
  store     ../shared/media/store-aisle-detection.mp4 (480x270, 67 frames: surveillance, small faces)
            scaled to 640x360, 1280x720 and 1920x1080
  worker    ../shared/media/worker-zone-detection.mp4 (480x270, 71 frames: a fixed camera, one worker)
            scaled likewise
  pan       a camera panning over ../shared/media/crowd_parade.jpg (evaluation.pan, 75 frames, 25 fps),
            the photo scaled to 1.5x the frame width, at 1280x720 and 1920x1080 only
``--frames N`` cuts every clip to its first N frames (the cut is a clip of its own in the cache).

For each clip: the transcode ceiling (decode and re-encode with the same settings, no face work:
fps.transcode_fps) and the pipeline in process with the default blur (streamdeid.api.anonymize:
fps.pipeline_run), each the median of --repeat runs. Prints one row per clip: medium, size, frames,
faces covered, fps, ceiling fps, the share of the ceiling reached, wall ms per frame (1000 / fps), then
the ms per frame of each stage the run summary reports (decode, detect, track, anonymize, paste,
encode, ...). Stages run on threads that overlap, so they may add up to more than the wall ms.
``--vs-deface`` also runs deface (CPU execution provider, its own venv: ``--deface-bin``, default
``deface`` on PATH or ~/venv-deface/bin/deface) and streamdeid as command lines on each clip,
alternating (fps.compare_deface), and adds deface's fps and the ratio (streamdeid fps / deface fps).
Every figure goes to --json (default stages.json in the current directory). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last: evaluation/

from fps import compare_deface, make_scaled_clip, pipeline_run, transcode_fps  # noqa: E402

from streamdeid.config import PipelineConfig  # noqa: E402

MEDIA = Path(__file__).resolve().parents[2] / "shared" / "media"
SIZES = {360: (640, 360), 720: (1280, 720), 1080: (1920, 1080)}
VIDEOS = {"hamilton": MEDIA / "short_hamilton_clip.mp4", "store": MEDIA / "store-aisle-detection.mp4",
          "worker": MEDIA / "worker-zone-detection.mp4"}
PAN_PHOTO = MEDIA / "crowd_parade.jpg"
PAN_SIZES = (720, 1080)
PAN_FRAMES = 75  # as benchmarks/precision.py's pans
PAN_CANVAS = 1.5  # the photo's width over the frame's (precision.py: 1920 px for 1280x720 frames)
ALL_FRAMES = 1 << 30


# ---- clips ---------------------------------------------------------------------------------------


def native_size(path: Path) -> tuple[int, int]:
    import av

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return s.width, s.height


def cached_clip(cache: Path, name: str, build) -> Path:
    """``cache/name``, built by ``build(path)`` into a temporary name first (an interrupted build leaves
    no half clip behind)."""
    target = cache / name
    if not target.exists():
        part = cache / f"part-{name}"
        build(part)
        part.rename(target)
    return target


def video_clip(medium: str, size: tuple[int, int], frames: int | None, cache: Path) -> Path:
    """``medium``'s video at ``size``: the shared file itself when it is that size and not cut."""
    src = VIDEOS[medium]
    if frames is None and native_size(src) == size:
        return src
    name = f"{medium}_{size[0]}x{size[1]}_{frames or 'all'}.mp4"
    return cached_clip(cache, name, lambda p: make_scaled_clip(p, frames or ALL_FRAMES, size, src))


def pan_clip(size: tuple[int, int], frames: int | None, cache: Path) -> Path:
    """The pan over the crowd photo at ``size``, its first ``frames`` frames (default all 75)."""
    import cv2
    import numpy as np

    from evaluation.pan import make_pan, write_pan

    def build(path: Path) -> None:
        photo = cv2.imread(str(PAN_PHOTO))
        width = round(size[0] * PAN_CANVAS)
        canvas = cv2.resize(photo, (width, round(photo.shape[0] * width / photo.shape[1])),
                            interpolation=cv2.INTER_CUBIC)
        pan = make_pan(SimpleNamespace(image=canvas, boxes=np.zeros((0, 4))), size, frames=PAN_FRAMES)
        write_pan(dataclasses.replace(pan, offsets=pan.offsets[:frames or PAN_FRAMES]), path)

    return cached_clip(cache, f"pan_{PAN_PHOTO.stem}_{size[0]}x{size[1]}_{frames or 'all'}.mp4", build)


def clips(media: list[str], sizes: list[int], frames: int | None, cache: Path) -> list[tuple[str, int, Path]]:
    """(medium, size, clip) for every medium at every size it comes in."""
    out = []
    for medium in media:
        for h in sizes:
            if medium == "pan":
                if h in PAN_SIZES:
                    out.append((medium, h, pan_clip(SIZES[h], frames, cache)))
            else:
                out.append((medium, h, video_clip(medium, SIZES[h], frames, cache)))
    return out


# ---- measures ------------------------------------------------------------------------------------


def config() -> PipelineConfig:
    c = PipelineConfig()
    c.anonymize.method = "blur"
    c.progress = False
    c.output.overwrite = True
    return c


def measure(clip: Path, repeat: int, work: Path) -> dict:
    """The transcode ceiling and the pipeline's median run (fps and ms per frame per stage) on ``clip``."""
    cfg = config()
    ceiling = statistics.median(transcode_fps(str(clip), work / f"t{i}.mp4", cfg) for i in range(repeat))
    runs = [pipeline_run(str(clip), work / f"s{i}.mp4", cfg) for i in range(repeat)]
    best = sorted(runs, key=lambda r: r["fps"])[len(runs) // 2]
    return {"transcode_fps": ceiling, "pipeline": best, "share_of_ceiling": best["fps"] / ceiling,
            "wall_ms_per_frame": 1000.0 / best["fps"] if best["fps"] else None}


def vs_deface(clip: Path, args: argparse.Namespace, work: Path) -> dict:
    ns = argparse.Namespace(clip=str(clip), anonymizer="blur", deface_bin=args.deface_bin, repeat=args.repeat)
    return compare_deface(ns, work, ".mp4", config())


# ---- report --------------------------------------------------------------------------------------


def stage_names(rows: list[dict]) -> list[str]:
    names: list[str] = []
    for r in rows:
        names += [k for k in r["pipeline"]["ms_per_frame"] if k not in names]
    return names


def print_table(rows: list[dict]) -> None:
    stages = stage_names(rows)
    deface = any("vs_deface" in r for r in rows)
    head = (f"{'medium':9s} {'size':>9s} {'frames':>6s} {'faces':>6s} {'fps':>7s} {'ceiling':>8s} {'share':>6s} "
            f"{'wall ms':>8s} " + " ".join(f"{s:>9s}" for s in stages)
            + (f" {'deface':>7s} {'ratio':>6s}" if deface else ""))
    print(head)
    print("-" * len(head))
    for r in rows:
        p = r["pipeline"]
        ms = p["ms_per_frame"]
        line = (f"{r['medium']:9s} {r['size']:>9s} {p['frames']:>6d} {p['faces']:>6d} {p['fps']:>7.1f} "
                f"{r['transcode_fps']:>8.1f} {100 * r['share_of_ceiling']:>5.0f}% {r['wall_ms_per_frame']:>8.1f} "
                + " ".join(f"{ms[s]:>9.1f}" if s in ms else f"{'-':>9s}" for s in stages))
        if "vs_deface" in r:
            d = r["vs_deface"]
            line += f" {d['deface_fps']:>7.1f} {d['ratio']:>5.2f}x"
        print(line)
    print("fps, ceiling: frames per second (ceiling = decode + re-encode, no face work); share = fps / ceiling;")
    print("wall ms = 1000 / fps; stage columns: ms per frame from the run summary (threads overlap)"
          + ("; deface: its CLI fps, ratio = streamdeid CLI fps / deface CLI fps" if deface else ""))


# ---- main ----------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--media", default="hamilton,store,worker,pan", help="comma-separated: hamilton, store, worker, pan")
    ap.add_argument("--sizes", default="360,720,1080", help="comma-separated frame heights: 360, 720, 1080")
    ap.add_argument("--frames", type=int, default=None, help="cut every clip to its first N frames")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measure; the median is reported")
    ap.add_argument("--vs-deface", action="store_true", help="also time deface's CLI against ours on each clip")
    ap.add_argument("--deface-bin", default=None)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "streamdeid-stages-clips")
    ap.add_argument("--json", type=Path, default=Path("stages.json"))
    args = ap.parse_args()
    args.media = [m.strip() for m in args.media.split(",") if m.strip()]
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    bad = [m for m in args.media if m not in (*VIDEOS, "pan")] + [str(s) for s in args.sizes if s not in SIZES]
    if bad:
        ap.error(f"unknown media or sizes: {', '.join(bad)}")
    return args


def run_one(medium: str, h: int, clip: Path, args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="streamdeid-stages-"))
    try:
        row = {"medium": medium, "size": "x".join(map(str, SIZES[h])), "clip": str(clip)}
        row.update(measure(clip, args.repeat, work))
        if args.vs_deface:
            row["vs_deface"] = vs_deface(clip, args, work)
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    args = parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    result = {"cpu_count": os.cpu_count(), "anonymizer": "blur", "repeat": args.repeat, "frames": args.frames,
              "rows": []}
    for medium, h, clip in clips(args.media, args.sizes, args.frames, args.cache):
        print(f"measuring {medium} at {SIZES[h][0]}x{SIZES[h][1]} ({clip})", file=sys.stderr, flush=True)
        result["rows"].append(run_one(medium, h, clip, args))
        args.json.write_text(json.dumps(result, indent=2))  # after each clip: a stopped run keeps its figures
    print_table(result["rows"])
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
