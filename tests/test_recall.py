"""Recall judged by faces the pipeline does not find itself (evaluation.recall).

The unit tests check the evaluator; the end-to-end tests hold `streamdeid run`'s
defaults to hand-labelled faces of the shared media and to a synthetic crowd
whose faces we placed (exact boxes). benchmarks/recall.py runs the full sweep
(CenterFace, dlib CNN/HOG, all clips, several crowds) and prints the tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from streamdeid.api import anonymize
from streamdeid.config import PipelineConfig
from evaluation.recall import (
    HandLabels,
    RecallReport,
    ReferenceFace,
    changed_share,
    contact_sheet,
    evaluate,
    frame_pairs,
    merge_references,
    read_frames,
    size_bucket,
)

from conftest import UTK

HAND_LABELS = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "hand_faces.json"


def _config() -> PipelineConfig:
    """The defaults with solid fill: detection and tracking are the defaults', and a solid cover
    changes every pixel it covers (see benchmarks/recall.py for why blur cannot be judged by pixels)."""
    cfg = PipelineConfig()
    cfg.progress = False
    cfg.anonymize.method = "solid"
    return cfg


# ---- the evaluator ---------------------------------------------------------------------------------


def test_size_buckets():
    assert [size_bucket(h) for h in (5, 16, 23.9, 24, 40, 79, 80, 500)] == \
        ["<16", "16-24", "16-24", "24-40", "40-80", "40-80", ">80", ">80"]


def test_merge_counts_a_face_once_with_every_source_that_found_it():
    a = {0: np.array([[10, 10, 50, 60.0], [200, 10, 240, 60]])}
    b = {0: np.array([[12, 14, 48, 58.0]]), 1: np.array([[0, 0, 20, 20.0]])}
    faces = merge_references({"a": a, "b": b})
    assert [(f.frame, f.sources) for f in faces] == [(0, ("a", "b")), (0, ("a",)), (1, ("b",))]


def test_changed_share_separates_covers_from_encoding_noise(tmp_path: Path):
    """A real face through H.264 (crf 18) untouched stays far under the bar; blurred, far over it."""
    from conftest import load_image

    image = cv2.resize(load_image("two_people.jpg"), (564, 330))
    box = np.array([101, 60, 203, 170.0])  # the left person's face at this size
    covered = image.copy()
    covered[40:190, 80:225] = cv2.GaussianBlur(image[40:190, 80:225], (0, 0), 8)
    path = tmp_path / "v.mp4"
    with av.open(str(path), "w") as c:  # the pipeline's own encoder settings (OutputConfig: x264 crf 18)
        s = c.add_stream("libx264", rate=5, options={"crf": "18", "preset": "veryfast"})
        s.width, s.height, s.pix_fmt = 564, 330, "yuv420p"
        for img in (image, covered):
            c.mux(s.encode(av.VideoFrame.from_ndarray(img, format="bgr24")))
        c.mux(s.encode())
    (_, untouched), (_, blurred) = list(read_frames(path))
    assert changed_share(image, untouched, box) < 0.3
    assert changed_share(image, blurred, box) > 0.8
    assert changed_share(image, image, np.array([-50, -50, -10, -10.0])) == 1.0  # outside the frame


def test_evaluate_reports_buckets_misses_and_over_cover():
    original = np.full((100, 200, 3), 60, np.uint8)
    original[20:40, 20:36] = 200  # "faces": bright patches
    original[20:80, 100:150] = 200
    output = original.copy()
    output[20:80, 100:150] = 60  # the big one covered, the small one left
    output[85:95, 5:195] = 0  # a cover where there is no face
    faces = [ReferenceFace(0, np.array([20, 20, 36, 40.0]), ("hand",)),
             ReferenceFace(0, np.array([100, 20, 150, 80.0]), ("hand",))]
    report = evaluate("x", [(0, original, output)], faces)
    assert report.by_bucket()["16-24"] == (0, 1) and report.by_bucket()["40-80"] == (1, 1)
    assert [m.face.box[0] for m in report.misses] == [20]
    assert report.recall() == (1, 2)
    # the strip minus where the big face's box (grown for hair) lies over it: 80x10 of 200x100 = 4 %
    assert 0.035 < report.uncovered_area < 0.06
    total = RecallReport("all")
    total.extend(report)
    assert total.recall() == (1, 2) and total.to_json()["misses"][0]["height"] == 20


def test_contact_sheet_shows_every_miss(tmp_path: Path):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 40, (120, 160, 3), dtype=np.uint8)
    misses = [("clip.mp4", evaluate("x", [(0, image, image)], [ReferenceFace(0, np.array(b, float), ("hand",))])
               .misses[0], image) for b in ([10, 10, 30, 34], [100, 50, 130, 90])]
    contact_sheet(misses, tmp_path / "m.png", tile=64, columns=5)
    sheet = cv2.imread(str(tmp_path / "m.png"))
    assert sheet.shape == (64 + 14, 5 * 64, 3)
    assert sheet[:64, :64].std() > 20  # the dark crop was contrast-stretched


def test_hand_labels_load_and_reject_unknown_versions(tmp_path: Path):
    labels = HandLabels.load(HAND_LABELS)
    assert set(labels.media) >= {"short_hamilton_clip.mp4", "two_people.jpg", "one-by-one-person-detection.mp4"}
    sources = labels.sources("short_hamilton_clip.mp4")
    clear, unsure = sources["hand"], sources["hand-uncertain"]
    assert set(unsure) <= set(clear)  # flagged boxes come out of their frame's list, the frame stays
    assert 0 < sum(map(len, unsure.values())) < sum(map(len, clear.values()))
    assert all(b.shape[1] == 4 for frames in labels.media.values() for b in frames.values())
    bad = tmp_path / "h.json"
    bad.write_text(json.dumps({"version": 2, "media": {}}))
    with pytest.raises(ValueError, match="version"):
        HandLabels.load(bad)


def test_hand_rejected_boxes_leave_the_references() -> None:
    """A box a reference detector reported where a person found no face (``not_faces``: the back of a
    head in one-by-one-person-detection.mp4) leaves every source; other boxes of that frame stay."""
    labels = HandLabels.load(HAND_LABELS)
    name = "one-by-one-person-detection.mp4"
    rejected = labels.not_faces[name][1179][0]
    elsewhere = np.array([100.0, 100.0, 140.0, 150.0])
    refs = {"centerface": {1179: np.stack([rejected + 1.5, elsewhere]), 1178: rejected[None]},
            "dlib-hog": {1179: np.zeros((0, 4))}}
    kept, dropped = labels.drop_not_faces(name, refs)
    assert dropped == 1
    assert np.array_equal(kept["centerface"][1179], elsewhere[None])
    assert len(kept["centerface"][1178]) == 1  # only the frame a person looked at
    assert labels.drop_not_faces("two_people.jpg", refs)[1] == 0  # no rejected box in that medium


def test_hand_labels_are_carried_between_labelled_frames_to_the_same_face() -> None:
    """A face labelled on two frames is placed linearly in between; a face beside it at another size is not
    taken for it (hamilton's 207 px performer at frame 45 was paired with a 68 px face at 50)."""
    from evaluation.references import interpolate_labels

    big_45, big_50 = np.array([398.0, 138, 550, 345]), np.array([500.0, 45, 625, 250])
    small_50 = np.array([459.0, 129, 508, 196])  # nearer big_45's centre than big_50 is
    between = interpolate_labels({45: big_45[None], 50: np.stack([small_50, big_50])}, gap=5)
    assert sorted(between) == [46, 47, 48, 49]
    assert np.allclose(between[48], [0.4 * big_45 + 0.6 * big_50])
    assert interpolate_labels({45: big_45[None], 60: big_50[None]}, gap=5) == {}  # labelled too far apart


# ---- the defaults, end to end ------------------------------------------------------------------------


def _hand_report(media: Path, name: str, tmp_path: Path) -> RecallReport:
    labels = HandLabels.load(HAND_LABELS).for_media(name)  # faces a person clearly sees
    src = media / name
    out = tmp_path / (f"{src.stem}.png" if src.suffix == ".jpg" else name)
    anonymize(str(src), out, _config())
    faces = merge_references({"hand": labels})
    return evaluate(name, frame_pairs(src, out, set(labels)), faces)


@pytest.mark.parametrize("name", ["short_hamilton_clip.mp4", "classroom.mp4", "one-by-one-person-detection.mp4",
                                  "face-demographics-walking-and-pause.mp4", "two_people.jpg"])
def test_defaults_cover_every_hand_labelled_face(name: str, media: Path, tmp_path: Path):
    """Every face a person clearly sees is covered, but for the known misses below; a known miss
    that gets covered fails too, so the list only shrinks."""
    report = _hand_report(media, name, tmp_path)
    misses = {(m.face.frame, round(float(m.face.box[0])), round(float(m.face.box[1]))) for m in report.misses}
    print(f"{name}: {report.recall()} hand-labelled faces covered; misses (frame, x1, y1) {sorted(misses)}")
    assert report.outcomes
    assert misses == KNOWN_MISSES.get(name, set())


# Hand-labelled faces the defaults leave uncovered, as measured, with why: (frame, x1, y1) of the box.
KNOWN_MISSES: dict[str, set[tuple[int, int, int]]] = {}


def test_defaults_on_a_synthetic_crowd(media: Path, tmp_path: Path):
    """150 UTKFace faces at 10-60 px, half of them blurred or darkened, on a real face-free frame."""
    if not UTK.is_dir():
        pytest.skip(f"face dataset not found at {UTK}")
    from evaluation.crowd import crowd_pool, default_background, make_crowd

    crowd = make_crowd(crowd_pool(UTK, limit=150), default_background(media), count=150, seed=101)
    src, out = tmp_path / "crowd.png", tmp_path / "crowd_out.png"
    cv2.imwrite(str(src), crowd.image)
    anonymize(str(src), out, _config())
    report = evaluate("crowd", frame_pairs(src, out), merge_references({"synthetic": {0: crowd.boxes}}))
    buckets = report.by_bucket()
    print(f"synthetic crowd: {buckets}")
    for label, floor in MIN_CROWD_RECALL.items():
        covered, total = buckets[label]
        assert total and covered / total >= floor, (label, covered, total)


# Floors for the synthetic crowd test, just under what the defaults measured on this crowd with the still
# passes (streamdeid.detect.still; 16-24 px: 40/42, 24-40: 35/35, 40-80: 35/35; with the video passes alone
# 35/42, 34/35, 35/35; the landed defaults before the small-face scan covered about a quarter of its 16-24 px
# faces). See docs/recall.md.
MIN_CROWD_RECALL = {"16-24": 0.92, "24-40": 0.97, "40-80": 0.97}
