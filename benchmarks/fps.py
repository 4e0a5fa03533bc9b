#!/usr/bin/env python3
"""Throughput of streamdeid on a clip: end-to-end fps, per-stage ms, transcode ceiling.

    python benchmarks/fps.py ../shared/media/short_hamilton_clip.mp4 --vs-deface --json out.json
    python benchmarks/fps.py hamilton1080 --vs-deface     # the same footage scaled to 1920x1080
    cd /tmp/base && PYTHONPATH=/tmp/base python /work/main/benchmarks/fps.py CLIP   # an older commit's
                                                          # worktree, for before/after figures

Prints a table and writes JSON. ``--vs-deface`` runs deface 1.5 (CPU execution
provider) on the same clip in the same run, alternating with streamdeid, both
as command-line processes timed wall-clock, and prints the fps ratio. deface
depends on opencv-python, which clashes with our opencv-python-headless, so it
lives in its own virtualenv (``--deface-bin``, default: ``deface`` on PATH or
``~/venv-deface/bin/deface``). Nothing here is asserted: figures are printed.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import av

from thread_cpu import ThreadCPU

from streamdeid.api import anonymize
from streamdeid.config import PipelineConfig
from streamdeid.types import Frame
from streamdeid.video.reader import open_source
from streamdeid.video.writer import VideoWriter


def transcode_fps(clip: str, out: Path, config: PipelineConfig) -> float:
    """The ceiling: decode and re-encode with the same settings, no face work."""
    t0 = time.perf_counter()
    n = 0
    with open_source(clip) as source:
        writer = VideoWriter(out, source, config.output)
        ok = False
        try:
            for item in source:
                writer.write(item)
                n += isinstance(item, Frame)
            ok = True
        finally:
            writer.close(success=ok)
    return n / (time.perf_counter() - t0)


def pipeline_run(clip: str, out: Path, config: PipelineConfig) -> dict:
    with ThreadCPU() as cpu:
        res = anonymize(clip, out, config)
    s = res.summary
    return {
        "cpu_ms_per_frame": {k: 1000 * v / max(s.frames, 1) for k, v in sorted(cpu.seconds.items(), key=lambda kv: -kv[1])},
        "fps": s.fps,
        "frames": s.frames,
        "faces": s.faces,
        "tracks": s.tracks,
        "ms_per_frame": {k: v / max(s.frames, 1) for k, v in s.times.ms.items()},
    }


def cli_seconds(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def find_deface(arg: str | None) -> str | None:
    for cand in (arg, shutil.which("deface"), str(Path.home() / "venv-deface/bin/deface")):
        if cand and Path(cand).exists():
            return cand
    return None


def make_noface_clip(path: Path, frames: int = 300, size: tuple[int, int] = (640, 360)) -> Path:
    """A 640x360 clip without faces: a moving colour gradient with texture (x264 has work to do)."""
    import numpy as np

    w, h = size
    rng = np.random.default_rng(0)
    texture = rng.integers(0, 40, (h, w * 2, 3), dtype=np.uint8)
    x = np.linspace(0, 255, w * 2, dtype=np.float32)
    base = np.stack([np.tile(x, (h, 1)), np.tile(x[::-1], (h, 1)), np.full((h, w * 2), 128.0)], -1)
    canvas = (base * 0.8).astype(np.uint8) + texture
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for i in range(frames):
            off = (i * 3) % w
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(canvas[:, off:off + w]), format="bgr24")
            c.mux(s.encode(vf))
        c.mux(s.encode())
    return path


def make_scaled_clip(path: Path, frames: int = 120, size: tuple[int, int] = (1920, 1080),
                    src: Path | None = None) -> Path:
    """The first ``frames`` of ``src`` (default: the shared short_hamilton_clip.mp4) scaled to ``size``
    (default 1920x1080: no 1080p clip is shared), H.264 crf 18, yuv420p. ``size`` must be even."""
    import cv2

    src = src or Path(__file__).resolve().parents[2] / "shared" / "media" / "short_hamilton_clip.mp4"
    with av.open(str(src)) as inp, av.open(str(path), "w") as out:
        s = out.add_stream("libx264", rate=inp.streams.video[0].average_rate, options={"crf": "18"})
        s.width, s.height, s.pix_fmt = size[0], size[1], "yuv420p"
        for i, frame in enumerate(inp.decode(video=0)):
            if i >= frames:
                break
            image = frame.to_ndarray(format="bgr24")
            shrink = size[0] < image.shape[1]  # area averaging when shrinking, cubic when enlarging
            big = cv2.resize(image, size, interpolation=cv2.INTER_AREA if shrink else cv2.INTER_CUBIC)
            out.mux(s.encode(av.VideoFrame.from_ndarray(big, format="bgr24")))
        out.mux(s.encode())
    return path


def frame_count(clip: str) -> int:
    with av.open(clip) as c:
        return sum(1 for _ in c.decode(video=0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("clip", help="a video file; 'noface' for a generated 640x360 clip without faces; "
                                 "'hamilton1080' for short_hamilton_clip.mp4's first 120 frames at 1920x1080")
    ap.add_argument("--anonymizer", default="blur")
    ap.add_argument("--detect-every", type=int, default=None, help="default: the pipeline's default")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool; the median is reported")
    ap.add_argument("--vs-deface", action="store_true")
    ap.add_argument("--deface-bin")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="do not compile streamdeid's modules before the CLI runs (see compile_package)")
    ap.add_argument("--json", type=Path, default=Path("fps.json"))
    args = ap.parse_args()

    config = PipelineConfig()
    config.anonymize.method = args.anonymizer
    if args.detect_every is not None:
        config.detect.every = args.detect_every
    config.progress = False
    config.output.overwrite = True
    tmp = Path(tempfile.mkdtemp(prefix="streamdeid-fps-"))
    if args.clip == "noface":
        args.clip = str(make_noface_clip(tmp / "noface.mp4"))
    elif args.clip == "hamilton1080":
        args.clip = str(make_scaled_clip(tmp / "hamilton1080.mp4"))
    suffix = Path(args.clip).suffix
    result: dict = {"clip": args.clip, "anonymizer": args.anonymizer, "detect_every": config.detect.every or "default",
                    "cpu_count": os.cpu_count()}
    try:
        result["transcode_fps"] = statistics.median(
            transcode_fps(args.clip, tmp / f"t{i}{suffix}", config) for i in range(args.repeat))
        runs = [pipeline_run(args.clip, tmp / f"s{i}{suffix}", config) for i in range(args.repeat)]
        best = sorted(runs, key=lambda r: r["fps"])[len(runs) // 2]
        result["pipeline"] = best
        result["fps_vs_transcode"] = best["fps"] / result["transcode_fps"]
        if args.vs_deface:
            result["vs_deface"] = compare_deface(args, tmp, suffix, config)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"clip               {args.clip}")
    print(f"transcode ceiling  {result['transcode_fps']:.1f} fps")
    p = result["pipeline"]
    print(f"streamdeid ({args.anonymizer})  {p['fps']:.1f} fps  ({p['frames']} frames, {p['faces']} faces, "
          f"{p['tracks']} tracks; {result['fps_vs_transcode']:.2f}x of transcode)")
    print("ms per frame       " + "  ".join(f"{k} {v:.1f}" for k, v in p["ms_per_frame"].items()))
    print("CPU ms per frame   " + "  ".join(f"{k} {v:.1f}" for k, v in p["cpu_ms_per_frame"].items() if v >= 0.05)
          + f"  (all {sum(p['cpu_ms_per_frame'].values()):.1f})")
    if "vs_deface" in result:
        d = result["vs_deface"]
        print(f"CLI wall-clock     streamdeid {d['streamdeid_fps']:.1f} fps, deface {d['deface_fps']:.1f} fps, "
              f"ratio {d['ratio']:.2f}x" + ("" if d["bytecode"] else " (streamdeid without compiled bytecode)"))
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")
    return 0


def compile_package() -> bool:
    """Compile the measured streamdeid's modules to bytecode first, as pip does when it installs a package
    (deface's venv has its bytecode from its install). Where PYTHONDONTWRITEBYTECODE is set (this workplace
    sets it) and the package is an editable install, every CLI run would otherwise compile every module it
    imports again: 0.15-0.2 s of each hamilton run (python -X importtime: streamdeid's own modules 230 ms
    without bytecode, 55 ms with). Python still reads bytecode where it may not write it."""
    import streamdeid

    return compileall.compile_dir(str(Path(streamdeid.__file__).parent), quiet=1)


def compare_deface(args, tmp: Path, suffix: str, config: PipelineConfig) -> dict:
    deface = find_deface(args.deface_bin)
    if deface is None:
        sys.exit("deface not found: pip install deface==1.5.0 in a separate venv and pass --deface-bin")
    n = frame_count(args.clip)
    compiled = not args.no_bytecode and compile_package()
    ours_cmd = [sys.executable, "-m", "streamdeid.cli", "run", args.clip, "-o", str(tmp / f"cli{suffix}"),
                "--overwrite", "--no-progress", "--anonymizer", args.anonymizer]
    if config.detect.every:
        ours_cmd += ["--detect-every", str(config.detect.every)]
    theirs_cmd = [deface, args.clip, "-o", str(tmp / f"deface{suffix}"), "--execution-provider",
                  "CPUExecutionProvider"]
    ours, theirs = [], []
    for _ in range(args.repeat):  # alternate so both see the same machine state
        ours.append(cli_seconds(ours_cmd))
        theirs.append(cli_seconds(theirs_cmd))
    o, t = statistics.median(ours), statistics.median(theirs)
    return {"frames": n, "bytecode": compiled, "streamdeid_seconds": o, "deface_seconds": t,
            "streamdeid_fps": n / o, "deface_fps": n / t, "ratio": t / o}


if __name__ == "__main__":
    raise SystemExit(main())
