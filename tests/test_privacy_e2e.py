"""End-to-end privacy on every shared clip: which reference faces of the original survive.

The faces checked come from references the pipeline does not run (hand labels in
benchmarks/data/hand_faces.json, and dlib's HOG detector upsampled once on every
third frame), so the pipeline's detector does not pick the faces it is graded
on. benchmarks/recall.py measures the same references' coverage in full.

The default anonymizer (blur) must leak nothing (KNOWN_LEAKS lists exceptions
with their reasons; there are none today). The shipped DBAF model is not
held to this here: with its leak guard it leaked 1 face in 1 of 5 runs of all
five clips (docs/MODEL_CARD.md); ``benchmarks/leak_guard.py`` measures it.

Each reference face is compared with the same place in the output with SFace
(see streamdeid.identity.leakcheck for the exact criterion, why it has a
blanked-face reference, and how faces without landmarks are judged).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streamdeid.api import anonymize
from streamdeid.config import PipelineConfig
from evaluation.recall import DlibReference, HandLabels, boxes_by_frame, merge_references, read_frames
from evaluation.recognizers import dlib_available
from streamdeid.identity.leakcheck import check_video
from streamdeid.identity.sface import SFace

CLIPS = [
    "classroom.mp4",
    "face-demographics-walking-and-pause.mp4",
    "head-pose-face-detection-female-and-male.mp4",
    "head-pose-face-detection-male.mp4",
    "short_hamilton_clip.mp4",
]


HAND_LABELS = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "hand_faces.json"
HOG_EVERY = 3  # dlib HOG (upsampled once) costs ~0.2 s a 640x360 frame here


@pytest.fixture(scope="module")
def sface() -> SFace:
    return SFace()


@pytest.fixture(scope="module")
def hog():
    if not dlib_available():
        pytest.skip("dlib not installed (pip install 'streamdeid[eval]'): no independent reference detector")
    return DlibReference("hog", upsample=1)


def reference_faces(src: Path, hog) -> dict[int, np.ndarray]:
    """Hand labels plus dlib HOG on every HOG_EVERY-th frame, merged."""
    frames = ((i, f) for i, f in read_frames(src) if i % HOG_EVERY == 0)
    per_source = {"hand": HandLabels.load(HAND_LABELS).for_media(src.name), hog.name: hog.detect(frames)}
    return boxes_by_frame(merge_references(per_source))


def _run(src: Path, out: Path, **detect) -> None:
    cfg = PipelineConfig()
    cfg.progress = False
    for k, v in detect.items():
        setattr(cfg.detect, k, v)
    anonymize(str(src), out, cfg)


@pytest.mark.parametrize("clip", CLIPS)
def test_no_face_leaks(clip: str, media: Path, tmp_path: Path, sface: SFace, hog) -> None:
    src, out = media / clip, tmp_path / clip
    _run(src, out)
    report = check_video(str(src), str(out), sface=sface, faces=reference_faces(src, hog))
    print(f"{clip}: {report.frames} frames, {report.faces} faces checked, {len(report.leaks)} leaks, "
          f"{report.plain_matches} plain SFace matches, max similarity {report.max_similarity:.3f}")
    assert report.faces > 0
    leaks = {(c.frame, round(c.box[0]), round(c.box[1])) for c in report.leaks}
    assert leaks == KNOWN_LEAKS.get(clip, set())  # a known leak that gets fixed fails too: shrink the list


# Reference faces still recognisable in the default output, as measured, with why: (frame, x1, y1).
# None today (a fast woman at hamilton's left edge leaked in 2 frames while weak tracks waited for a
# confirmation: TrackConfig.confirm_hits).
KNOWN_LEAKS: dict[str, set[tuple[int, int, int]]] = {}
