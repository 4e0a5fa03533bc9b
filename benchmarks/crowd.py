#!/usr/bin/env python3
"""A camera panning over a crowd: speed, recall, covered area and tracks per face, against deface.

    python benchmarks/crowd.py                          # build the clip, run streamdeid and deface
    python benchmarks/crowd.py --code /tmp/base --no-deface --out /tmp/crowd-base   # an older commit
    python benchmarks/crowd.py --faces 200 --canvas 1600x900 --frames 50            # a lighter clip
    python benchmarks/crowd.py --frame 1920x1080 --canvas 2880x1620 --faces 800 --no-deface   # recall at 1080p

The clip (evaluation.pan): a synthetic crowd of UTKFace faces (12-60 px,
exact boxes) on a face-free frame of the shared media, composed on a canvas
larger than the frame; a 1280x720 window (``--frame``) pans over it, left to right and down
and back up, at 25 fps. The crowd stands still, so every face should keep one
track while it is in view.

Both tools run as command-line processes on the same clip, timed wall-clock
(--repeat runs each, alternating; the median),
both with a solid fill (``--anonymizer solid``, deface ``--replacewith solid``:
a fill changes every pixel it covers, so coverage can be judged by pixels).
Figures:
  fps              frames / wall-clock seconds of the whole command
  recall           reference faces covered (at least half of the inner box
                   changed, evaluation.recall), by size bucket; references:
                   deface's CenterFace at full resolution (score >= 0.5) and the
                   faces we pasted (synthetic, exact)
  covered area     mean share of the frame's pixels changed
  tracks           the CLI's track count / faces in view at >= --min-px
  tracking pass    detection and tracking in-process (no render), each reported
                   box matched to a pasted face (IoU >= 0.3): tracks per face
                   tracked, reported boxes matching no face (ghosts) and
                   boxes on a face another box already covers (duplicates)
  where the area   the covered area split into pasted faces' boxes, a ring of
    goes           0.4 box sizes around them, and farther from every face (held,
                   back-filled and false covers off their faces land there)
  deface --thresh  deface run once more at each --deface-thresholds value
                   (under its default 0.2): its covered area where its
                   recall comes near streamdeid's, for a fair area comparison
Writes crowd.json, misses.png (every missed face) and sheet.png (the same
frames: input, streamdeid, deface) to --out. Nothing is asserted.
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
from typing import TYPE_CHECKING

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repo root, last (a --code tree stays first): evaluation/
from recall import MEDIA, REPO, UTK, cached, table  # noqa: E402

from evaluation.recall import (  # noqa: E402
    CenterFaceReference,
    changed_pixels,
    contact_sheet,
    deface_python,
    evaluate,
    frame_pairs,
    merge_references,
    python_has_deface,
    read_frames,
)

if TYPE_CHECKING:
    from evaluation.pan import PanClip

SUMMARY = re.compile(r"(\d+) frames?, (\d+) faces?, (\d+) tracks?")


def add_clip_args(ap: argparse.ArgumentParser) -> None:
    """The options that make the pan (shared with benchmarks/cover_area.py)."""
    ap.add_argument("--faces", type=int, default=360, help="faces in the crowd")
    ap.add_argument("--canvas", default="1920x1080", help="crowd canvas WxH (larger than --frame)")
    ap.add_argument("--frame", default="1280x720", help="the camera's frame WxH (1920x1080 with --canvas 2880x1620: "
                                                        "recall at 1080p)")
    ap.add_argument("--frames", type=int, default=75)
    ap.add_argument("--seed", type=int, default=0)


def make_clip(args) -> PanClip:
    """The pan the clip options describe (frames in memory, exact)."""
    from evaluation.crowd import crowd_pool, default_background, make_crowd
    from evaluation.pan import make_pan

    W, H = (int(v) for v in args.canvas.split("x"))
    crowd = make_crowd(crowd_pool(UTK), default_background(MEDIA), size=(W, H), count=args.faces,
                       face_px=(12, 60), seed=args.seed)
    frame = tuple(int(v) for v in args.frame.split("x"))
    return make_pan(crowd, (frame[0], frame[1]), frames=args.frames)


def build_clip(args) -> tuple[Path, PanClip]:
    """make_clip, written to --out as H.264 (once: an existing file is reused)."""
    from evaluation.pan import write_pan

    pan = make_clip(args)
    path = args.out / f"crowd_pan_{args.canvas}_{args.faces}_{args.frames}_s{args.seed}.mp4"
    if not path.exists():
        write_pan(pan, path)
    return path, pan


def load_truth(path: Path):
    """The PanClip saved by tracking_pass_of, with this repository's pan.py (older trees lack it)."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("_pan", REPO / "evaluation" / "pan.py")
    pan = importlib.util.module_from_spec(spec)
    sys.modules["_pan"] = pan  # dataclasses look their module up
    spec.loader.exec_module(pan)
    z = np.load(path)
    crowd = SimpleNamespace(image=z["image"], boxes=z["boxes"])
    return pan.PanClip(crowd, tuple(int(v) for v in z["size"]), z["offsets"], float(z["fps"]))


def run_cli(cmd: list[str], code: Path | None = None) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(code)} if code is not None else None
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=code)
    seconds = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {res.stderr.strip()[-2000:]}")
    return seconds, res.stderr


def covered_area(original: Path, output: Path) -> float:
    """Mean share of frame pixels changed (same rule as the recall check)."""
    shares = [float(changed_pixels(a, b).mean()) for _, a, b in frame_pairs(original, output)]
    return float(np.mean(shares))


# Zones of a frame around the pasted faces, for where_area: a face's box, a ring out to RING box widths
# (heights) around it, where a cover of that face still belongs, and everything farther from every face.
RING = 0.4


def where_area(original: Path, output: Path, pan: PanClip) -> dict[str, float]:
    """Mean share of the frame changed inside pasted faces' boxes, in the ring around them and farther
    (the three sum to covered_area): a cover that follows its face changes the first two; held,
    back-filled or false covers off every face change the third."""
    sums = np.zeros(3)
    frames = 0
    for t, a, b in frame_pairs(original, output):
        changed = changed_pixels(a, b)
        inside, near = np.zeros(changed.shape, bool), np.zeros(changed.shape, bool)
        for x0, y0, x1, y1 in pan.faces_in(t)[1]:
            dx, dy = RING * (x1 - x0), RING * (y1 - y0)
            inside[max(0, int(y0)):max(0, int(np.ceil(y1))), max(0, int(x0)):max(0, int(np.ceil(x1)))] = True
            near[max(0, int(y0 - dy)):max(0, int(np.ceil(y1 + dy))), max(0, int(x0 - dx)):max(0, int(np.ceil(x1 + dx)))] = True
        sums += [(changed & inside).mean(), (changed & near & ~inside).mean(), (changed & ~near).mean()]
        frames += 1
    return dict(zip(("face_boxes", "ring", "far"), np.round(sums / max(frames, 1), 4).tolist()))


def tracking_pass_of(args) -> dict:
    """The tracking pass, run by the code measured (``--code``: in a subprocess on that tree)."""
    if args.code is None:
        return tracking_pass(build_clip(args)[1])
    clip, pan = build_clip(args)
    truth = args.out / "pan_truth.npz"
    np.savez(truth, image=pan.crowd.image, boxes=pan.crowd.boxes, offsets=pan.offsets,
             size=np.array(pan.size), fps=pan.fps)
    _, err = run_cli([sys.executable, str(Path(__file__).resolve()), "--tracking-only", str(truth)], args.code)
    return json.loads(err.strip().splitlines()[-1])


def tracking_pass(pan) -> dict:
    """Detection + tracking in-process on the clip's exact frames; each reported box matched to a pasted face."""
    from streamdeid.config import PipelineConfig
    from evaluation.recognizers import box_iou
    from streamdeid.stages import FaceStage
    from streamdeid.summary import StageTimes
    from streamdeid.types import Frame

    stage = FaceStage(PipelineConfig(), pan.fps)
    times = StageTimes()
    owner: dict[int, dict[int, int]] = {}  # track -> {face: frames}
    reported = ghosts = duplicates = 0
    for t in range(len(pan)):
        result = stage(Frame(t, np.ascontiguousarray(pan.frame(t)), None, None), times)
        ids, gt = pan.faces_in(t)
        boxes = np.array([f.box for f in result.faces], np.float64).reshape(-1, 4)
        iou = box_iou(boxes, gt) if len(gt) and len(boxes) else np.zeros((len(boxes), len(gt)))
        taken: set[int] = set()
        for k, face in enumerate(result.faces):
            reported += 1
            j = int(iou[k].argmax()) if iou.shape[1] else -1
            if j < 0 or iou[k, j] < 0.3:
                ghosts += 1
                continue
            g = int(ids[j])
            duplicates += g in taken
            taken.add(g)
            owner.setdefault(face.track_id, {}).setdefault(g, 0)
            owner[face.track_id][g] += 1
    faces_tracked: dict[int, int] = {}
    for per_face in owner.values():
        g = max(per_face, key=per_face.get)  # the face a track followed most
        faces_tracked[g] = faces_tracked.get(g, 0) + 1
    n = len(faces_tracked)
    return {"tracks_on_faces": len(owner), "faces_tracked": n,
            "tracks_per_face": round(len(owner) / n, 3) if n else None,
            "max_tracks_one_face": max(faces_tracked.values(), default=0),
            "reported": reported, "ghost_share": round(ghosts / max(reported, 1), 4),
            "duplicate_share": round(duplicates / max(reported, 1), 4),
            "detect_ms_per_frame": round(times.ms["detect"] / len(pan), 1),
            "track_ms_per_frame": round(times.ms["track"] / len(pan), 2)}


def sheet(clip: Path, outputs: list[tuple[str, Path]], frames: list[int], path: Path, width: int = 640) -> None:
    """One row per frame: the input and each output side by side, labelled."""
    rows = []
    sources = [("input", clip), *outputs]
    pictures = [dict(read_frames(p, set(frames))) for _, p in sources]
    for t in frames:
        tiles = []
        for (label, _), pics in zip(sources, pictures):
            img = cv2.resize(pics[t], (width, width * pics[t].shape[0] // pics[t].shape[1]),
                             interpolation=cv2.INTER_AREA)
            cv2.putText(img, f"{label} #{t}", (8, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.7, (0, 255, 255), 2)
            tiles.append(img)
        rows.append(np.hstack(tiles))
    cv2.imwrite(str(path), np.vstack(rows))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_clip_args(ap)
    ap.add_argument("--min-px", type=float, default=12, help="faces at least this high count as 'in view'")
    ap.add_argument("--run-args", default="--anonymizer solid", help="options for `streamdeid run`")
    ap.add_argument("--code", type=Path, default=None, help="run streamdeid from this source tree (before/after)")
    ap.add_argument("--no-deface", action="store_true", help="do not run deface")
    ap.add_argument("--deface-thresholds", default="0.05,0.02",
                    help="also run deface once at each of these --thresh values (comma-separated; '' for none): "
                         "its covered area where its recall comes near streamdeid's")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per tool; the median is reported")
    ap.add_argument("--deface-python", default=None, help="Python of a venv with deface (default ~/venv-deface)")
    ap.add_argument("--out", type=Path, default=Path("crowd-out"))
    ap.add_argument("--tracking-only", type=Path, help=argparse.SUPPRESS)
    return ap.parse_args()


def reference_faces(clip: Path, pan: PanClip, deface_py: str | None) -> list:
    """The pasted faces, merged with CenterFace's (when deface is installed) as the recall references."""
    refs: dict[str, dict[int, np.ndarray]] = {
        "synthetic": {t: pan.faces_in(t)[1] for t in range(len(pan))}}
    if deface_py:
        refs["centerface"] = cached(clip, "centerface-0.5", lambda: CenterFaceReference(deface_py, 0.5).detect(
            read_frames(clip)))
    return merge_references(refs)


def timed_runs(cmd: list[str], deface_cmd: list[str] | None, repeat: int, code: Path | None
               ) -> tuple[float, float | None, str]:
    """Median seconds of streamdeid and of deface (None without it), and streamdeid's last log."""
    ours_s, theirs_s = [], []
    for _ in range(repeat):  # alternate, so both see the same machine state
        seconds, log = run_cli(cmd, code)
        ours_s.append(seconds)
        if deface_cmd:
            theirs_s.append(run_cli(deface_cmd)[0])
    return statistics.median(ours_s), statistics.median(theirs_s) if deface_cmd else None, log


def tool_result(name: str, clip: Path, output: Path, faces, pan: PanClip, seconds: float, extra: dict):
    """(the tool's entry in crowd.json, its recall report); ``extra`` goes between fps and covered_area."""
    report = evaluate(name, frame_pairs(clip, output, None), faces)
    return ({"seconds": round(seconds, 1), "fps": round(len(pan) / seconds, 2), **extra,
             "covered_area": round(covered_area(clip, output), 4), "where_area": where_area(clip, output, pan),
             "recall": report.to_json()}, report)


def run_tools(args, clip: Path, pan: PanClip, faces, in_view: int, deface_exe: str | None):
    """Both command lines on the clip: ({tool: entry}, recall reports, [(tool, output video)])."""
    ours, theirs = args.out / "streamdeid.mp4", args.out / "deface.mp4"
    cmd = [sys.executable, "-m", "streamdeid.cli", "run", str(clip), "-o", str(ours), "--overwrite",
           "--no-progress", *args.run_args.split()]
    deface_cmd = None
    if deface_exe:
        deface_cmd = [deface_exe, str(clip), "-o", str(theirs), "--replacewith", "solid",
                      "--execution-provider", "CPUExecutionProvider"]
    ours_s, theirs_s, log = timed_runs(cmd, deface_cmd, args.repeat, args.code)
    m = SUMMARY.search(log)
    tracks = int(m.group(3)) if m else -1
    entry, report = tool_result("streamdeid", clip, ours, faces, pan, ours_s, {
        "tracks": tracks, "tracks_per_face_in_view": round(tracks / max(in_view, 1), 2)})
    entries, reports, outputs = {"streamdeid": entry}, [report], [("streamdeid", ours)]
    if deface_cmd:
        entries["deface"], dreport = tool_result("deface", clip, theirs, faces, pan, theirs_s, {})
        reports.append(dreport)
        outputs.append(("deface", theirs))
    return entries, reports, outputs


def deface_sweep(args, clip: Path, pan: PanClip, faces, deface_exe: str) -> list[dict]:
    """deface run once (untimed) at each of --deface-thresholds: its covered area and recall at thresholds
    under its default 0.2, to compare the two tools' area where their recall is alike."""
    rows = []
    for thresh in (float(v) for v in args.deface_thresholds.split(",") if v.strip()):
        output = args.out / f"deface_t{thresh:g}.mp4"
        run_cli([deface_exe, str(clip), "-o", str(output), "--replacewith", "solid", "--thresh", f"{thresh:g}",
                 "--execution-provider", "CPUExecutionProvider"])
        report = evaluate(f"deface t{thresh:g}", frame_pairs(clip, output, None), faces)
        rows.append({"thresh": thresh, "covered_area": round(covered_area(clip, output), 4),
                     "where_area": where_area(clip, output, pan), "recall": report.to_json(),
                     "covered": covered_share(report)})
    return rows


def covered_share(report) -> dict[str, float]:
    """{reference: share of its faces covered}."""
    out = {}
    for name in report.sources():
        counts = report.by_bucket(name).values()
        out[name] = round(sum(c for c, _ in counts) / max(sum(t for _, t in counts), 1), 4)
    return out


def print_summary(result: dict, reports: list) -> None:
    print()
    print(table(reports))
    for r in reports:
        for name in r.sources():
            c, t = sum(v[0] for v in r.by_bucket(name).values()), sum(v[1] for v in r.by_bucket(name).values())
            print(f"  {r.name}: faces found by {name}: {c}/{t} = {100 * c / max(t, 1):.2f}% covered")
    s = result["streamdeid"]
    print(f"\nstreamdeid: {s['fps']:.2f} fps, {s['tracks']} tracks ({s['tracks_per_face_in_view']} per face in "
          f"view), covered area {100 * s['covered_area']:.1f}%")
    zones = [("streamdeid", s), ("deface", result.get("deface"))] + [
        (f"deface --thresh {r['thresh']:g}", r) for r in result.get("deface_thresholds", [])]
    print(f"where the area goes (share of the frame changed: in pasted faces' boxes / in a ring of {RING:g} "
          "box sizes around them / farther from every face):")
    for name, entry in zones:
        if entry:
            print(f"  {name:22s} " + " / ".join(f"{100 * v:.1f}%" for v in entry["where_area"].values()))
    if "deface" in result:
        d = result["deface"]
        print(f"deface:     {d['fps']:.2f} fps, covered area {100 * d['covered_area']:.1f}%")
        print(f"speed ratio {s['fps'] / d['fps']:.2f}x, area ratio {s['covered_area'] / d['covered_area']:.2f}x")
    ours = covered_share(reports[0])
    for row in result.get("deface_thresholds", []):
        shares = ", ".join(f"{k} {100 * v:.2f}% (streamdeid {100 * ours.get(k, 0):.2f}%)"
                           for k, v in row["covered"].items())
        print(f"deface --thresh {row['thresh']:g}: covered area {100 * row['covered_area']:.1f}% "
              f"(streamdeid {s['covered_area'] / row['covered_area']:.2f}x of it); faces covered: {shares}")
    if result["tracking_pass"]:
        print("tracking pass:", json.dumps(result["tracking_pass"]))


def write_outputs(out: Path, clip: Path, frames: int, outputs, report, result: dict) -> None:
    """sheet.png, misses.png (streamdeid's misses) and crowd.json."""
    sheet(clip, outputs, [0, frames // 3, 2 * frames // 3, frames - 1], out / "sheet.png")
    missed = dict(read_frames(clip, {o.face.frame for o in report.misses})) if report.misses else {}
    contact_sheet([("pan", o, missed[o.face.frame]) for o in report.misses], out / "misses.png")
    (out / "crowd.json").write_text(json.dumps(result, indent=1))
    print(f"\nJSON: {out / 'crowd.json'}; frames side by side: {out / 'sheet.png'}")


def main() -> None:
    args = parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tracking_only:  # for --code: the pass on the tree measured, as JSON on stderr
        print(json.dumps(tracking_pass(load_truth(args.tracking_only))), file=sys.stderr)
        return
    py = args.deface_python or deface_python()
    have_deface = bool(py and python_has_deface(py))

    clip, pan = build_clip(args)
    in_view = pan.distinct_faces(args.min_px)
    print(f"clip {clip.name}: {len(pan)} frames, camera {pan.speed():.1f} px/frame, "
          f"{in_view} distinct faces >= {args.min_px:.0f} px in view, "
          f"{np.mean([len(pan.faces_in(t, args.min_px)[0]) for t in range(len(pan))]):.0f} per frame")
    faces = reference_faces(clip, pan, py if have_deface else None)

    result: dict = {"clip": clip.name, "frames": len(pan), "camera_px_per_frame": round(pan.speed(), 2),
                    "faces_in_view": in_view, "run_args": args.run_args}
    deface_exe = str(Path(py).parent / "deface") if have_deface and not args.no_deface else None
    entries, reports, outputs = run_tools(args, clip, pan, faces, in_view, deface_exe)
    result.update(entries)
    if deface_exe and args.deface_thresholds:
        result["deface_thresholds"] = deface_sweep(args, clip, pan, faces, deface_exe)
    result["tracking_pass"] = tracking_pass_of(args)
    print_summary(result, reports)
    write_outputs(args.out, clip, len(pan), outputs, reports[0], result)


if __name__ == "__main__":
    main()
