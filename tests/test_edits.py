"""A reviewer's corrections (streamdeid/edits/, docs/edits.md): the edits file, and ``run --edits`` on a real clip.

The clip is the first 30 frames of short_hamilton_clip.mp4 (stored lossless, so what the run reads is what the
test compares with), run with ``--threshold 0.9 --anonymizer solid --codec ffv1``: two faces are covered and
others are left visible (0.95 covers no face in this clip at all, so there would be no cover to remove). The
outputs are lossless, so "equal to the source" is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest
from conftest import decode, make_video, run_cli

from streamdeid.edits import (
    FORMAT, VERSION, Box, EditPlan, Edits, SourceInfo, check_source, load_edits, owner, save_edits, with_added,
)
from streamdeid.edits.format import from_json
from streamdeid.types import Detections, Frame, FrameResult, StreamdeidError, TrackedFace

N = 30  # frames of the clip (a scene cut at frame 20)
FLAGS = ("--threshold", "0.9", "--anonymizer", "solid", "--codec", "ffv1", "--no-progress")
ADD_FRAME, REMOVE_FRAME = 12, 10


def _edits(**kw) -> Edits:
    base = {"source": SourceInfo("clip.mp4", N, 640, 360), "add": [Box(3, (10.0, 20.0, 50.0, 70.0))],
            "remove": [Box(7, (100, 100, 140.5, 160))], "output": "clip_anonymized.mp4"}
    base.update(kw)
    return Edits(**base)


def _write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# -- the file ---------------------------------------------------------------------------------------------------

def test_save_and_load_round_trip(tmp_path: Path) -> None:
    edits = _edits()
    path = tmp_path / "e.json"
    save_edits(edits, path)
    assert load_edits(path) == edits
    text = path.read_text()
    data = json.loads(text)
    assert data == edits.to_json()
    assert (data["format"], data["version"]) == (FORMAT, VERSION) == ("streamdeid-edits", 1)
    assert data["source"] == {"name": "clip.mp4", "frames": N, "width": 640, "height": 360}
    assert data["add"] == [{"frame": 3, "box": [10.0, 20.0, 50.0, 70.0]}]
    assert "\n  " in text and text.endswith("\n")  # pretty
    assert [p.name for p in tmp_path.iterdir()] == ["e.json"]  # no temp file left
    save_edits(_edits(add=[], output=None), path)  # replaced in place
    assert load_edits(path) == _edits(add=[], output=None)


def test_save_refuses_what_load_would_refuse(tmp_path: Path) -> None:
    with pytest.raises(StreamdeidError, match="box must be 4 finite numbers"):
        save_edits(_edits(add=[Box(0, (5.0, 5.0, 5.0, 9.0))]), tmp_path / "e.json")
    assert not (tmp_path / "e.json").exists()


GOOD = _edits().to_json()
GOOD_TEXT = json.dumps(GOOD)

BAD = {
    "not_json": ("{\"format\": ", "not JSON"),
    "not_object": ([1, 2], "not an edits file"),
    "wrong_format": ({**GOOD, "format": "something-else"}, "\"format\" must be \"streamdeid-edits\""),
    "no_format": ({k: v for k, v in GOOD.items() if k != "format"}, "\"format\" must be"),
    "version_2": ({**GOOD, "version": 2}, "edits version 2 is not supported"),
    "no_version": ({k: v for k, v in GOOD.items() if k != "version"}, "missing field \"version\""),
    "no_source": ({k: v for k, v in GOOD.items() if k != "source"}, "missing field \"source\""),
    "no_add": ({k: v for k, v in GOOD.items() if k != "add"}, "missing field \"add\""),
    "source_field": ({**GOOD, "source": {"name": "a", "frames": 3, "width": 640}}, "source: missing field \"height\""),
    "unknown_key": ({**GOOD, "comment": "hi"}, "unknown key \"comment\""),
    "unknown_box_key": ({**GOOD, "add": [{"frame": 1, "box": [0, 0, 1, 1], "score": 1}]}, "add[0]: unknown key"),
    "bad_box": ({**GOOD, "add": [{"frame": 1, "box": [10, 10, 5, 20]}]}, "add[0]: box must be 4 finite numbers"),
    "three_numbers": ({**GOOD, "remove": [{"frame": 1, "box": [1, 2, 3]}]}, "remove[0]: box must be"),
    "nan_box": (GOOD_TEXT.replace('"box": [10.0, 20.0, 50.0, 70.0]', '"box": [0, 0, NaN, 5]'), "box must be 4 finite"),
    "negative_frame": ({**GOOD, "add": [{"frame": -1, "box": [0, 0, 5, 5]}]}, "add[0]: frame must be a whole number"),
    "frame_beyond": ({**GOOD, "remove": [{"frame": N, "box": [0, 0, 5, 5]}]}, "remove[0]: frame 30 is beyond"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_files_give_one_line(tmp_path: Path, case: str) -> None:
    data, says = BAD[case]
    path = _write(tmp_path / "bad.json", data)
    with pytest.raises(StreamdeidError) as info:
        load_edits(path)
    message = str(info.value)
    assert says in message and "\n" not in message and str(path) in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StreamdeidError, match="edits file not found"):
        load_edits(tmp_path / "none.json")


def test_check_source_refuses_another_video() -> None:
    edits = _edits()
    check_source(edits, N, 640, 360, "renamed.mp4")  # the name may differ
    check_source(edits, None, 640, 360, "clip.mkv")  # frame count not known before decoding
    for frames, w, h, says in ((N, 1280, 720, "not on clip.mp4 (1280x720)"), (N + 1, 640, 360, "(31 frames)")):
        with pytest.raises(StreamdeidError, match="another video") as info:
            check_source(edits, frames, w, h, "clip.mp4")
        assert says in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(StreamdeidError, match=r"remove\[0\]: frame 7 is beyond clip.mkv's 5 frames"):
        short = _edits(source=SourceInfo("c", 5, 640, 360), add=[], remove=[Box(7, (0, 0, 5, 5))])
        check_source(short, None, 640, 360, "clip.mkv")  # the count the edits give, when the video's is not known
    with pytest.raises(StreamdeidError, match=r"add\[0\]: box .* lies outside"):
        check_source(_edits(add=[Box(0, (700.0, 10.0, 720.0, 30.0))]), N, 640, 360, "clip.mp4")


# -- how a run applies them (units) ------------------------------------------------------------------------------

def test_added_boxes_join_the_detections() -> None:
    lm = np.arange(10, dtype=np.float32).reshape(5, 2) + 100
    dets = Detections(np.array([[100, 100, 140, 150], [300, 10, 330, 50]]), np.array([0.5, 0.8]),
                      np.stack([lm, lm + 200]))
    out, forced = with_added(dets, np.array([[102, 98, 142, 149], [10, 10, 40, 50]]))
    assert forced.tolist() == [False, True, True]  # the detection under the first added box is replaced
    np.testing.assert_array_equal(out.boxes[0], [300, 10, 330, 50])
    np.testing.assert_allclose(out.scores, [0.8, 1.0, 1.0])
    np.testing.assert_array_equal(out.landmarks[1], lm)  # the replaced detection's landmarks are kept
    assert np.isnan(out.landmarks[2]).all()  # none known: the renderer covers the box
    out, forced = with_added(Detections.empty(), np.array([[0, 0, 5, 5]]))
    assert forced.tolist() == [True] and len(out) == 1


def test_owner_of_a_removal() -> None:
    lm = np.zeros((5, 2))
    faces = [TrackedFace(4, [100, 100, 150, 160], lm, 0.9), TrackedFace(2, [140, 100, 190, 160], lm, 0.9),
             TrackedFace(9, [400, 300, 420, 330], lm, 0.9)]
    assert owner(faces, (138, 98, 192, 162)).track_id == 2  # overlaps it most
    assert owner(faces, (380, 280, 440, 350)).track_id == 9  # a cover drawn larger than the box: its centre
    assert owner(faces, (10, 10, 40, 40)) is None
    assert owner([], (10, 10, 40, 40)) is None


def test_plan_removes_a_track_on_every_frame_after_a_first_pass() -> None:
    lm = np.zeros((5, 2))
    edits = _edits(add=[], remove=[Box(1, (100, 100, 150, 160))])

    def result(index: int) -> FrameResult:
        image = np.zeros((8, 8, 3), np.uint8)
        return FrameResult(Frame(index, image, index, None), [TrackedFace(5, [100, 100, 150, 160], lm, 0.9),
                                                               TrackedFace(6, [300, 100, 350, 160], lm, 0.9)])

    first = EditPlan(edits, report=False)
    for i in range(3):
        first.resolve(result(i))
    assert first.decided == {0: 5}
    plan = EditPlan(edits, first.decided)
    r0 = result(0)
    plan.resolve(r0)
    plan.apply(r0)  # frame 0, before the removal's frame: already known
    assert [f.track_id for f in r0.faces] == [6] and [f.track_id for f in r0.kept] == [5]


def test_a_removal_uncovers_no_frame_beyond_the_reviewed_cover() -> None:
    """A drawn box moves the detector's runs, so a re-run's tracks can differ from the reviewed run's: a
    reviewer's removal of a back-filled cover (frames 31-81) went to the singer's track (frames 20-81) and
    uncovered his face on frames 20-30, which the reviewer never marked. The review writes the reviewed
    cover's frames, and the track is undrawn on those only."""
    lm = np.zeros((5, 2))
    edits = _edits(add=[], remove=[Box(46, (100, 100, 150, 160), (31, 81))])

    def result(index: int) -> FrameResult:
        return FrameResult(Frame(index, np.zeros((8, 8, 3), np.uint8), index, None),
                           [TrackedFace(5, [100, 100, 150, 160], lm, 0.9)])

    first = EditPlan(edits, report=False)
    first.resolve(result(46))
    plan = EditPlan(edits, first.decided)
    for index, drawn in ((20, True), (30, True), (31, False), (81, False), (82, True)):
        r = result(index)
        plan.apply(r)
        assert bool(r.faces) == drawn, index
    assert plan.hidden[5] == [31, 81, 2]
    with pytest.raises(StreamdeidError, match="frames must be"):
        from_json({**edits.to_json(), "remove": [{"frame": 46, "box": [1, 1, 9, 9], "frames": [50, 81]}]})


def test_a_track_an_added_box_went_into_is_never_removed() -> None:
    lm = np.zeros((5, 2))
    box = (100.0, 100.0, 150.0, 160.0)
    edits = _edits(add=[Box(2, box)], remove=[Box(1, (98, 98, 152, 162))])
    first = EditPlan(edits, report=False)
    for i in range(4):
        state = "detected" if i == 2 else "held"
        first.resolve(FrameResult(Frame(i, np.zeros((8, 8, 3), np.uint8), i, None),
                                  [TrackedFace(5, box, lm, 1.0, state)]))
    assert first.decided == {0: 5} and first.added == {5: 0} and not first.removed
    plan = EditPlan(edits, first.decided, first.added)
    r = FrameResult(Frame(0, np.zeros((8, 8, 3), np.uint8), 0, None), [TrackedFace(5, box, lm, 1.0)])
    plan.apply(r)
    assert [f.track_id for f in r.faces] == [5] and not r.kept


# -- run --edits on a real clip ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def clip(media: Path, tmp_path_factory) -> dict:
    """The clip, its source frames, the run without edits and its audit log."""
    d = tmp_path_factory.mktemp("edits")
    frames = []
    with av.open(str(media / "short_hamilton_clip.mp4")) as c:
        for f in c.decode(video=0):
            frames.append(f.to_ndarray(format="bgr24"))
            if len(frames) == N:
                break
    path = make_video(d / "clip.mkv", frames, fps=30, codec="ffv1")
    src = decode(path)
    base, log = d / "base.mkv", d / "base.jsonl"
    proc = run_cli("run", str(path), "-o", str(base), *FLAGS, "--export-tracks", str(log))
    assert proc.returncode == 0, proc.stderr.decode()
    return {"dir": d, "path": path, "src": src, "base": decode(base), "base_log": _audit(log)}


def _audit(path: Path) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if "frame" in r]


def _region(box, shape, grow: float = 1.0) -> tuple[slice, slice]:
    x1, y1, x2, y2 = (float(v) for v in box)
    cx, cy, hw, hh = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) * grow / 2, (y2 - y1) * grow / 2
    h, w = shape[:2]
    return (slice(max(0, int(cy - hh)), min(h, int(np.ceil(cy + hh)))),
            slice(max(0, int(cx - hw)), min(w, int(np.ceil(cx + hw)))))


def _changed(a: np.ndarray, b: np.ndarray, box, grow: float = 1.0) -> float:
    """Share of the pixels of ``box`` (grown about its centre) that differ between two frames."""
    ys, xs = _region(box, a.shape, grow)
    return float((a[ys, xs] != b[ys, xs]).any(2).mean())


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.fixture(scope="module")
def edited(clip: dict) -> dict:
    """A visible face added (found by the pipeline's own detector at the default threshold), an isolated cover
    removed at a frame in the middle of its track; the edited run made twice, the first with a key file."""
    from streamdeid.config import DetectConfig
    from streamdeid.detect.finder import FaceFinder

    src, base, log, d = clip["src"], clip["base"], clip["base_log"], clip["dir"]
    found = FaceFinder(DetectConfig()).find(src[ADD_FRAME], scan=True)
    visible = [(float(s), b.tolist()) for b, s in zip(found.boxes, found.scores)
               if _changed(src[ADD_FRAME], base[ADD_FRAME], b, grow=1.5) == 0]
    assert visible, "the 0.9 run covered every face the default threshold finds"
    add = max(visible)[1]
    covers = [r for r in log if r["frame"] == REMOVE_FRAME and r["method"] == "solid"]
    # the cover farthest from every other face of its frame, and from the added face
    def distance(r):
        others = [o["box"] for o in log if o["frame"] == REMOVE_FRAME and o["track"] != r["track"]] + [add]
        cx, cy = (r["box"][0] + r["box"][2]) / 2, (r["box"][1] + r["box"][3]) / 2
        return min(np.hypot(cx - (o[0] + o[2]) / 2, cy - (o[1] + o[3]) / 2) for o in others)
    removed = max(covers, key=distance)
    x1, y1, x2, y2 = removed["box"]
    edits = Edits(SourceInfo("clip.mkv", N, 640, 360), add=[Box(ADD_FRAME, tuple(add))],
                  remove=[Box(REMOVE_FRAME, (x1 - 2, y1 - 2, x2 + 2, y2 + 2))], output="base.mkv")
    path = d / "edits.json"
    save_edits(edits, path)
    key = d / "k.bin"
    outs = []
    for i, extra in enumerate((("--key-file", str(key), "--new-key"), ())):
        out, audit = d / f"edited{i}.mkv", d / f"edited{i}.jsonl"
        proc = run_cli("run", str(clip["path"]), "-o", str(out), *FLAGS, "--edits", str(path),
                       "--export-tracks", str(audit), *extra)
        assert proc.returncode == 0, proc.stderr.decode()
        outs.append((out, decode(out), _audit(audit), proc.stderr.decode()))
    return {"add": add, "removed": removed, "key": key, "runs": outs}


def test_an_added_face_is_covered_where_it_was_tracked(clip: dict, edited: dict) -> None:
    src, base = clip["src"], clip["base"]
    _, out, log, _ = edited["runs"][0]
    add = edited["add"]
    assert _changed(src[ADD_FRAME], out[ADD_FRAME], add) > 0.5  # covered on its frame
    # the track the added box started: followed forward (held) and backward (back-filled by the look-ahead)
    track = next(r["track"] for r in log if r["frame"] == ADD_FRAME and _iou(r["box"], add) > 0.5)
    faces = [r for r in log if r["track"] == track]
    frames = [r["frame"] for r in faces]
    assert min(frames) < ADD_FRAME < max(frames)
    assert {r["state"] for r in faces} >= {"detected", "held", "backfilled"}
    for r in faces:
        i = r["frame"]
        assert r["method"] == "solid"
        assert _changed(src[i], base[i], r["box"]) == 0, f"frame {i}: already covered without the edit"
        assert _changed(src[i], out[i], r["box"]) > 0.3, f"frame {i}: the added face is not covered"


def test_a_removed_cover_is_gone_from_every_frame_of_its_track(clip: dict, edited: dict) -> None:
    src, base, base_log = clip["src"], clip["base"], clip["base_log"]
    _, out, log, stderr = edited["runs"][0]
    removed = edited["removed"]["track"]
    faces = [r for r in base_log if r["track"] == removed]
    assert min(r["frame"] for r in faces) < REMOVE_FRAME  # frames before the removal's too (the first pass)
    hidden = [r for r in log if r["method"] == "kept"]
    assert hidden and {r["frame"] for r in hidden} == {r["frame"] for r in faces}
    for r in faces:
        i = r["frame"]
        region = _region(r["box"], src[i].shape, grow=2.0)
        drawn = [o["box"] for o in log if o["frame"] == i and o["method"] == "solid"]
        assert all(_iou(o, (region[1].start, region[0].start, region[1].stop, region[0].stop)) == 0 for o in drawn)
        assert _changed(src[i], base[i], r["box"]) > 0.3  # the cover the reviewer saw
        np.testing.assert_array_equal(out[i][region], src[i][region], err_msg=f"frame {i}")  # exactly the source
    assert f"remove[0] at frame {REMOVE_FRAME}: track" in stderr and "a reviewer's decision" in stderr


def test_the_same_edits_give_the_same_frames(edited: dict) -> None:
    (_, first, log0, _), (_, second, log1, _) = edited["runs"]
    assert len(first) == len(second) == N
    for i, (a, b) in enumerate(zip(first, second)):
        assert a.tobytes() == b.tobytes(), f"frame {i} differs"
    assert log0 == log1


def test_an_added_face_is_vaulted_under_its_own_track_key(clip: dict, edited: dict) -> None:
    out, _, log, _ = edited["runs"][0]
    d, src, add = clip["dir"], clip["src"], edited["add"]
    track = next(r["track"] for r in log if r["frame"] == ADD_FRAME and _iou(r["box"], add) > 0.5)
    vault = Path(f"{out}.sdv")
    info = json.loads(run_cli("inspect", str(vault)).stdout)
    assert track in info["track_ids"] and edited["removed"]["track"] not in info["track_ids"]
    track_key = d / "track.key"
    proc = run_cli("export-key", "--key-file", str(edited["key"]), "--vault", str(vault), "--track", str(track),
                   "-o", str(track_key))
    assert proc.returncode == 0, proc.stderr.decode()
    restored = d / "restored.mkv"
    proc = run_cli("recover", str(out), "--key-file", str(track_key), "-o", str(restored), "--codec", "ffv1",
                   "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()
    back = decode(restored)
    others = [r for r in log if r["method"] == "solid" and r["track"] != track]
    assert others
    for r in log:
        i = r["frame"]
        if r["track"] == track:
            assert _changed(src[i], back[i], r["box"]) == 0, f"frame {i}: the added face is not restored"
    assert any(_changed(src[r["frame"]], back[r["frame"]], r["box"]) > 0.3 for r in others)  # its key only


# -- refusals: one line, exit 1, no output ------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["not_json", "wrong_format", "version_2", "bad_box", "negative_frame", "foreign"])
def test_run_refuses_bad_edits_before_any_output(clip: dict, tmp_path: Path, case: str) -> None:
    if case == "foreign":  # made on another video: 1280x720
        data, says = {**_edits().to_json(), "source": {"name": "x.mp4", "frames": N, "width": 1280, "height": 720}}, \
            "another video"
    else:
        data, says = BAD[case]
    path = _write(tmp_path / "bad.json", data)
    out = tmp_path / "out.mkv"
    proc = run_cli("run", str(clip["path"]), "-o", str(out), *FLAGS, "--edits", str(path))
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamdeid: error: ") and says in lines[0], err
    assert list(tmp_path.iterdir()) == [path]  # no output, no partial file


def test_run_refuses_edits_for_a_folder(clip: dict, tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    save_edits(_edits(), path)
    proc = run_cli("run", str(clip["dir"]), "-o", str(tmp_path / "out"), "--edits", str(path), "--no-progress")
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == ("streamdeid: error: --edits corrects the run of one video or photo file, "
                                            "not a folder")
    assert not (tmp_path / "out").exists()


def test_a_photos_edits_are_applied(tmp_path: Path) -> None:
    """A photo's review saves an edits file, which the run refused ("not an image"): the reviewer's missed
    face stayed bare. A photo's adds are covered and its removals left as they are, on frame 0."""
    import cv2

    from conftest import MEDIA

    photo = cv2.imread(str(MEDIA / "two_people.jpg"))
    src = tmp_path / "in.png"
    cv2.imwrite(str(src), photo)
    log = tmp_path / "first.jsonl"
    first = run_cli("run", str(src), "-o", str(tmp_path / "first.png"), "--export-tracks", str(log),
                    "--anonymizer", "solid", "--no-progress")
    assert first.returncode == 0, first.stderr.decode()
    faces = [json.loads(line) for line in log.read_text().splitlines() if '"frame"' in line]
    assert len(faces) >= 2
    h, w = photo.shape[:2]
    added = [5.0, 5.0, 45.0, 45.0]  # a corner no face is in: covered because a person said "a face"
    edits = Edits(SourceInfo("in.png", 1, w, h), add=[Box(0, tuple(added))], remove=[Box(0, tuple(faces[0]["box"]))])
    path = _write(tmp_path / "e.json", edits.to_json())
    out = tmp_path / "out.png"
    proc = run_cli("run", str(src), "-o", str(out), "--edits", str(path), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()
    assert "remove[0]: face" in proc.stderr.decode()
    result = cv2.imread(str(out))
    assert _changed(photo, result, faces[0]["box"]) == 0  # the removed cover: the photo's own pixels
    assert _changed(photo, result, faces[1]["box"]) > 0.5  # the other face still covered
    assert _changed(photo, result, added) > 0.9


def test_an_added_box_keeps_the_reviewed_runs_detector_frames(media: Path, tmp_path: Path) -> None:
    """An added box gets a detector run on its frame. It restarted the detector's schedule there, so every
    later run fell on other frames than in the reviewed run, and the re-run's tracks differed from the ones
    the reviewer saw: on hamilton's first 90 frames, with one box drawn on an empty corner at frame 45, 386
    of 1,171 reviewed covers came back the same. The extra run now leaves the schedule as it was, and it
    gives the tracker the added box alone (FaceTracker.update_added): with all it detected, 856 of 1,006
    came back. Now every reviewed cover comes back, and every new one is the added box's own track."""
    from streamdeid.track.tracker import ADDED_IDS_FROM

    with av.open(str(media / "short_hamilton_clip.mp4")) as c:
        frames = [f.to_ndarray(format="bgr24") for _, f in zip(range(90), c.decode(video=0))]
    src = make_video(tmp_path / "ham.mkv", frames, fps=30, codec="ffv1")
    flags = ("--anonymizer", "solid", "--no-progress")
    logs = []
    for name, edits in (("reviewed", None), ("again", Edits(SourceInfo("ham.mkv", 90, 640, 360),
                                                              add=[Box(45, (9.4, 9.7, 60.0, 59.6))]))):
        log = tmp_path / f"{name}.jsonl"
        extra = ("--edits", str(_write(tmp_path / "e.json", edits.to_json()))) if edits else ()
        proc = run_cli("run", str(src), "-o", str(tmp_path / f"{name}.mp4"), *flags, "--export-tracks", str(log),
                       *extra)
        assert proc.returncode == 0, proc.stderr.decode()
        logs.append(_audit(log))
    # the same covers, each with the track id the reviewer saw (an added track took the next id, and every later
    # track's was one higher: the ids `recover --track` and `export-key --track` name)
    again = {(r["frame"], r["track"], tuple(r["box"])) for r in logs[1]}
    same = [(r["frame"], r["track"], tuple(r["box"])) in again for r in logs[0]]
    assert all(same), f"{sum(same)} of {len(same)} reviewed covers came back"
    reviewed = {(r["frame"], r["track"], tuple(r["box"])) for r in logs[0]}
    new = [r for r in logs[1] if (r["frame"], r["track"], tuple(r["box"])) not in reviewed]
    assert {r["track"] for r in new} == {ADDED_IDS_FROM} and 45 in {r["frame"] for r in new}  # the added box's


def test_an_output_names_the_edits_it_was_rendered_with() -> None:
    """The run tags its output with its video id and the digest of the edits it applied (the review's tracking
    pass applies an edits file only when its digest is that one); the id reads back the same either way."""
    from streamdeid.edits.format import Box, Edits, SourceInfo
    from streamdeid.vault import read_edits_tag, read_video_id_tag, video_id_tag

    vid = bytes(range(16))
    source = SourceInfo("a.mp4", 10, 64, 48)
    one = Edits(source, add=[Box(3, (1.0, 2.0, 30.0, 40.0))])
    same = Edits(SourceInfo("b.mp4", 10, 64, 48), add=[Box(3, (1, 2, 30, 40))], output="elsewhere.mp4")
    other = Edits(source, add=[Box(3, (1.0, 2.0, 30.0, 41.0))])
    assert one.digest() == same.digest() != other.digest() and len(one.digest()) == 16
    plain, edited = video_id_tag(vid), video_id_tag(vid, one.digest())
    assert read_video_id_tag(plain) == read_video_id_tag(edited) == vid.hex()
    assert read_edits_tag(plain) is None and read_edits_tag(edited) == one.digest()
    assert read_edits_tag({"comment": "made with something else"}) is None


def test_a_face_a_reviewer_added_is_covered_though_a_keep_photo_matches_it(tmp_path: Path, media: Path) -> None:
    """`run --edits E --keep SELF.jpg` left the face an added box named fully visible on every frame, exit 0: the
    keep photo's match overruled the reviewer's "a face to cover here"."""
    import cv2

    from streamdeid.config import DetectConfig
    from streamdeid.detect.finder import FaceFinder

    clip = media / "head-pose-face-detection-male.mp4"
    src = decode(clip)
    photo = tmp_path / "self.png"
    cv2.imwrite(str(photo), src[30])  # the same man: --keep leaves him visible
    found = FaceFinder(DetectConfig()).find(src[5], scan=True)
    box = tuple(float(v) for v in found.boxes[int(found.scores.argmax())])
    h, w = src[5].shape[:2]
    save_edits(Edits(SourceInfo(clip.name, len(src), w, h), add=[Box(5, box)]), tmp_path / "e.json")
    runs = {}
    for name, extra in (("kept", ()), ("edited", ("--edits", str(tmp_path / "e.json")))):
        out = tmp_path / f"{name}.mkv"
        proc = run_cli("run", str(clip), "-o", str(out), "--keep", str(photo), "--codec", "ffv1", "--no-progress",
                       *extra)
        assert proc.returncode == 0, proc.stderr.decode()
        runs[name] = (decode(out), proc.stderr.decode())
    kept, edited = runs["kept"][0], runs["edited"][0]
    assert _changed(src[5], kept[5], box) < 0.05  # --keep alone: he stays visible
    assert _changed(src[5], edited[5], box) > 0.5  # the added box: covered on its frame
    assert "a reviewer added a face box to it" in runs["edited"][1]


def test_saving_edits_follows_no_planted_symlink(tmp_path) -> None:
    """save_edits wrote through a temp file of a predictable name (.NAME.PID.tmp) opened with open(), which
    follows symlinks: another user with write access to the folder could make a save replace any file of the
    reviewer's (a security review). The temp file is now created exclusively under a random name."""
    import os

    from streamdeid.edits.format import Edits, SourceInfo, load_edits, save_edits

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "out.mp4.edits.json"
    (tmp_path / f".{target.name}.{os.getpid()}.tmp").symlink_to(victim)
    edits = Edits(SourceInfo("out.mp4", 10, 64, 48))
    save_edits(edits, target)
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and load_edits(target).source.frames == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([victim.name, target.name,
                                                                f".{target.name}.{os.getpid()}.tmp"])



def test_a_removals_tracking_pass_leaves_the_runs_warnings_to_the_output_run(clip: dict, edited: dict,
                                                                          tmp_path: Path) -> None:
    """With removals the video is read twice (a tracking pass, then the output run): a warning about the
    video (--min-face taller than the picture) is said once, by the output run (the old code said it twice)."""
    proc = run_cli("run", str(clip["path"]), "-o", str(tmp_path / "out.mkv"), *FLAGS, "--edits",
                   str(clip["dir"] / "edits.json"), "--min-face", "500")
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "removals decided in a tracking pass" in err or "edits:" in err, err
    assert err.count("is taller than the picture") == 1, err
