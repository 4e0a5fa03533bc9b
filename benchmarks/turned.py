"""Recall on pictures turned in their pixels: sideways, upside down and tilted, with no display matrix.

    python benchmarks/turned.py                       # the default cases, this tree
    python benchmarks/turned.py --code /tmp/wt-old    # the same with another checkout (a worktree)

Each case is a real clip or a camera pan over a real photo, turned by an angle (a quarter or half turn
exactly; any other angle onto the canvas that holds the whole frame, so no face is cut off). It is run
through `streamdeid run --anonymizer solid`, the output is turned back, and the faces dlib's HOG
(upsampled twice, a detector the pipeline does not run) finds on the *upright* frames, every third frame,
are graded by recall.py's rule (covered when at least half of the inner box changed). A face the output
leaves bare on the turned copy but covers upright is a face lost to the turn: the upright row says what
the clip itself gives. JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import av
import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluation.recall import changed_share  # noqa: E402
from evaluation.references import DlibReference  # noqa: E402

MEDIA = ROOT.parent / "shared" / "media"
EVERY = 3  # grade every third frame (dlib HOG upsampled twice: about 1 s a 960x540 frame)
# name: (source, frames); "pan:PHOTO" is a 30-frame pan over the photo scaled to 1100 px wide, 960x540
SOURCES = {"group pan": ("pan:group_meeting.jpg", 30), "parade pan": ("pan:crowd_parade.jpg", 30),
           "walking": ("face-demographics-walking-and-pause.mp4", 60),
           "head pose": ("head-pose-face-detection-female-and-male.mp4", 60)}
CASES = [("group pan", a) for a in (0, 90, 270, 180, 45)] + [("parade pan", a) for a in (0, 90, 180)] \
    + [("walking", a) for a in (0, 30, 45, -45, 60)] + [("head pose", a) for a in (0, 30, 45, 60)]


def source_frames(source: str, n: int) -> list[np.ndarray]:
    if source.startswith("pan:"):
        photo = cv2.imread(str(MEDIA / source[4:]))
        photo = cv2.resize(photo, None, fx=1100 / photo.shape[1], fy=1100 / photo.shape[1],
                           interpolation=cv2.INTER_AREA)
        return [np.ascontiguousarray(photo[:540, 4 * i:4 * i + 960]) for i in range(n)]
    with av.open(str(MEDIA / source)) as c:
        return [f.to_ndarray(format="bgr24") for _, f in zip(range(n), c.decode(video=0))]


def turn_maps(width: int, height: int, angle: float) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """(forward [2, 3], back [2, 3], turned size): the frame turned ``angle`` degrees anticlockwise onto the
    canvas that holds it whole (its sides even, for 4:2:0 video). Written apart from detect/turns.py's
    ``turned`` on purpose: the inputs a benchmark grades should not share the code under test."""
    forward = cv2.getRotationMatrix2D((width / 2, height / 2), angle, 1.0)
    c, s = abs(forward[0, 0]), abs(forward[0, 1])
    size = (2 * round((width * c + height * s) / 2), 2 * round((width * s + height * c) / 2))  # even: 4:2:0
    forward[:, 2] += (size[0] - width) / 2, (size[1] - height) / 2
    return forward, cv2.invertAffineTransform(forward), size


def write(frames: list[np.ndarray], path: Path) -> None:
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.width, s.height = frames[0].shape[1], frames[0].shape[0]
        s.pix_fmt, s.options = "yuv420p", {"crf": "16"}
        for f in frames:
            c.mux(s.encode(av.VideoFrame.from_ndarray(f, format="bgr24")))
        c.mux(s.encode())


def run_case(frames: list[np.ndarray], faces: dict[int, np.ndarray], angle: float, work: Path,
             code: Path | None) -> dict:
    h, w = frames[0].shape[:2]
    if angle % 90 == 0:  # exact, and the size a player would show
        k = int(angle // 90) % 4
        turn, back = (lambda f: np.ascontiguousarray(np.rot90(f, k))), (lambda f: np.ascontiguousarray(np.rot90(f, -k)))
    else:
        forward, inverse, size = turn_maps(w, h, angle)
        turn = lambda f: cv2.warpAffine(f, forward, size)  # noqa: E731
        back = lambda f: cv2.warpAffine(f, inverse, (w, h))  # noqa: E731
    src, out = work / "in.mp4", work / "out.mp4"
    write([turn(f) for f in frames], src)
    env = dict(os.environ, PYTHONPATH=str(code)) if code else None
    proc = subprocess.run([sys.executable, "-m", "streamdeid.cli", "run", str(src), "-o", str(out), "--anonymizer",
                           "solid", "--overwrite", "--no-progress"], capture_output=True, text=True, env=env,
                          cwd=str(code) if code else None)
    if proc.returncode:
        raise SystemExit(proc.stderr.strip().splitlines()[-1])
    with av.open(str(src)) as c:  # the turned input as encoded, turned back: what the output is compared with
        shown_in = [back(f.to_ndarray(format="bgr24")) for f in c.decode(video=0)]
    with av.open(str(out)) as c:
        shown_out = [back(f.to_ndarray(format="bgr24")) for f in c.decode(video=0)]
    total, bare = 0, []
    for i, boxes in faces.items():
        for box in boxes:
            total += 1
            if changed_share(shown_in[i], shown_out[i], box) < 0.5:
                bare.append(i)
    return {"faces": total, "bare": len(bare), "bare_frames": sorted(set(bare)),
            "summary": proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, help="run `streamdeid` from this checkout (a worktree of another commit)")
    ap.add_argument("--out", type=Path, default=Path("turned-report"))
    args = ap.parse_args()
    hog = DlibReference("hog", upsample=2)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, cache = [], {}
    print(f"{'case':<22}{'angle':>7}{'faces':>8}{'bare':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, angle in CASES:
            if name not in cache:
                frames = source_frames(*SOURCES[name])
                cache[name] = (frames, hog.detect((i, f) for i, f in enumerate(frames) if i % EVERY == 0))
            frames, faces = cache[name]
            result = run_case(frames, faces, angle, Path(tmp), args.code)
            rows.append({"case": name, "angle": angle, **result})
            print(f"{name:<22}{angle:>7}{result['faces']:>8}{result['bare']:>7}", flush=True)
    (args.out / "turned.json").write_text(json.dumps(rows, indent=1))
    print(f"\nJSON: {args.out / 'turned.json'}")


if __name__ == "__main__":
    main()
