"""End-to-end privacy on every shared clip: which reference faces of the original survive.

The faces checked come from references the pipeline does not run (hand labels in
benchmarks/data/hand_faces.json, and dlib's HOG detector upsampled once on every
third frame), so the pipeline's detector does not pick the faces it is graded
on. benchmarks/recall.py measures the same references' coverage in full.

The default anonymizer (blur) must leak nothing but the measured KNOWN_LEAKS
(two frames of one face of short_hamilton_clip.mp4, explained there). The shipped DBAF model is not
held to this here: with its leak guard it leaked 1 face in 1 of 5 runs of all
five clips (docs/MODEL_CARD.md); ``benchmarks/leak_guard.py`` measures it.

Each reference face is compared with the same place in the output with SFace
(see streamdeid.identity.leakcheck for the exact criterion, why it has a
blanked-face reference, and how faces without landmarks are judged).
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from streamdeid.api import anonymize
from streamdeid.config import PipelineConfig
from streamdeid.eval.recall import DlibReference, HandLabels, boxes_by_frame, merge_references, read_frames
from streamdeid.eval.recognizers import dlib_available
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
KNOWN_LEAKS = {
    # A fast, motion-blurred woman at the left edge: her held cover (last detected at frame 58) drifts
    # right while she moves left, so at 60 and 65 it covers part of her face only (motion compensation
    # is issue 19's work).
    "short_hamilton_clip.mp4": {(60, 35, 131), (65, 16, 132)},
}


def test_frames_between_detections_are_covered(media: Path, tmp_path: Path, sface: SFace, hog) -> None:
    """With --detect-every 3, the two frames in between rely on the tracker alone."""
    clip = "head-pose-face-detection-female-and-male.mp4"
    src, out = media / clip, tmp_path / clip
    _run(src, out, every=3)
    frames = ((i, f) for i, f in read_frames(src) if i % 3)  # the frames the detector skipped
    report = check_video(str(src), str(out), sface=sface,
                         faces=boxes_by_frame(merge_references({hog.name: hog.detect(frames)})))
    skipped = [c for c in report.checks if c.frame % 3]
    assert skipped and report.leaks == []


def test_audio_and_timing_preserved(media: Path, tmp_path: Path) -> None:
    src, out = media / "short_hamilton_clip.mp4", tmp_path / "h.mp4"
    _run(src, out)
    with av.open(str(src)) as a, av.open(str(out)) as b:
        assert len(b.streams.audio) == 1 and b.streams.audio[0].codec_context.name == "aac"
        va, vb = a.streams.video[0], b.streams.video[0]
        assert (vb.width, vb.height) == (va.width, va.height)
        ta = [f.time for f in a.decode(va)]
        tb = [f.time for f in b.decode(vb)]
        assert len(ta) == len(tb) == 275
        assert max(abs(x - y) for x, y in zip(ta, tb)) < 1e-3
    with av.open(str(src)) as a, av.open(str(out)) as b:
        pa = [(p.pts, bytes(p)) for p in a.demux(a.streams.audio[0]) if p.size]
        pb = [(p.pts, bytes(p)) for p in b.demux(b.streams.audio[0]) if p.size]
        assert pa == pb  # copied bit for bit, not re-encoded
