"""`streamdeid run` as a user runs it: outputs, timing, bad input, interruption."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from conftest import decode, face_frames, make_video, run_cli, set_mp4_matrix
from streamdeid.video.reader import open_source


def _err_line(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr.decode()
    assert "Traceback" not in err, err
    return err


def test_help_explains_options() -> None:
    proc = run_cli("run", "--help")
    out = proc.stdout.decode()
    assert proc.returncode == 0
    for opt in ("--detect-every", "--hold", "--remember", "--lookahead", "--key-file", "--export-tracks", "--crf", "--min-face",
                "--report", "--skip-existing"):
        assert opt in out


def test_summary_says_which_faces_were_looked_for(tmp_path: Path, media: Path) -> None:
    """320x240: the fast pass (640 px) sees 12 px faces at 24 px, so no scan is needed for the default;
    --min-face 6 needs the scan at 2x (1280 px) and says so; --min-face 0 turns the scan off."""
    src = make_video(tmp_path / "in.mp4", face_frames(media, 4))
    lines = {}
    for flag in ("12", "6", "0"):
        proc = run_cli("run", str(src), "-o", str(tmp_path / f"o{flag}.mp4"), "--no-progress", "--min-face", flag)
        assert proc.returncode == 0, _err_line(proc)
        lines[flag] = proc.stderr.decode().splitlines()[0]
    assert "looked for faces from 6 px" in lines["6"]
    assert "looked for faces from 12 px" in lines["12"] and "looked for faces from 12 px" in lines["0"]


def test_a_min_face_taller_than_the_picture_is_said(tmp_path: Path, media: Path) -> None:
    """--min-face 1000 on a 320x240 video or photo was replaced without a word by what the passes look for (16-24
    px, in the summary line only): now one warning says so, and the run goes on as before (a folder's or a
    batch's files differ in size). A value the picture holds says nothing."""
    make_video(tmp_path / "in.mp4", face_frames(media, 3))
    photo = tmp_path / "in.jpg"
    cv2.imwrite(str(photo), face_frames(media, 1)[0])
    for name in ("in.mp4", "in.jpg"):
        proc = run_cli("run", str(tmp_path / name), "-o", str(tmp_path / f"o1000_{name}"), "--no-progress",
                       "--min-face", "1000")
        err = _err_line(proc)
        assert proc.returncode == 0, err
        said = [line for line in err.splitlines() if "--min-face 1000" in line]
        assert len(said) == 1 and "320x240" in said[0] and "taller than" in said[0], err
        assert "looked for faces from" in said[0], err
        proc = run_cli("run", str(tmp_path / name), "-o", str(tmp_path / f"o240_{name}"), "--no-progress",
                       "--min-face", "240")
        assert proc.returncode == 0 and "--min-face" not in _err_line(proc), _err_line(proc)


def test_synthetic_face_video_is_covered_and_timing_kept(tmp_path: Path, media: Path) -> None:
    tb = Fraction(1, 1000)
    pts = [0, 40, 80, 200, 240, 400, 440, 480, 520, 700]  # variable frame rate
    src = make_video(tmp_path / "in.mp4", face_frames(media, len(pts)), pts=pts, time_base=tb)
    out = tmp_path / "in_anonymized.mp4"
    proc = run_cli("run", str(src), "--no-progress", "--export-tracks", str(tmp_path / "t.jsonl"))
    assert proc.returncode == 0, _err_line(proc)
    assert out.exists()
    with av.open(str(src)) as a, av.open(str(out)) as b:
        fa, fb = list(a.decode(video=0)), list(b.decode(video=0))
        assert [f.time for f in fa] == [f.time for f in fb]
        assert (fb[0].width, fb[0].height) == (fa[0].width, fa[0].height)
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    head, rows = rows[0], rows[1:]
    from streamdeid.vault import read_video_id_tag

    with av.open(str(out)) as c:  # the run's video id, as the output's metadata has it
        assert head == {"video_id": read_video_id_tag(dict(c.metadata))} and len(head["video_id"]) == 32
    assert {r["frame"] for r in rows} == set(range(len(pts)))
    assert rows and all(r["method"] == "blur" for r in rows)
    assert all(isinstance(r["matched"], bool) and not (r["matched"] and r["state"] == "detected") for r in rows)
    assert "10 frames" in proc.stderr.decode() and "irreversible" in proc.stderr.decode()


def test_never_overwrites_without_flag(tmp_path: Path, media: Path) -> None:
    src = make_video(tmp_path / "in.mp4", face_frames(media, 3))
    out = tmp_path / "out.mp4"
    out.write_bytes(b"precious")
    proc = run_cli("run", str(src), "-o", str(out), "--no-progress")
    assert proc.returncode == 1 and "--overwrite" in _err_line(proc)
    assert out.read_bytes() == b"precious"
    proc = run_cli("run", str(src), "-o", str(out), "--no-progress", "--overwrite")
    assert proc.returncode == 0 and len(decode(out)) == 3


def test_never_writes_over_the_key_file_or_another_output(tmp_path: Path, media: Path) -> None:
    """The key file is the only way back to the originals: no output of run or recover (video, vault, audit log,
    report) may replace it, --overwrite or not. Without --overwrite no existing file is replaced, the audit log
    included; no two outputs may be one file."""
    src = make_video(tmp_path / "in.mp4", face_frames(media, 3))
    key = tmp_path / "v.mp4.sdv"  # named as the vault of v.mp4 would be
    assert run_cli("keygen", str(key)).returncode == 0
    secret = key.read_bytes()
    out = tmp_path / "out.mp4"
    base = ("run", str(src), "--no-progress", "--key-file", str(key))
    for args, message in [
        (("-o", str(key), "--overwrite"), "the output"),
        (("-o", str(tmp_path / "v.mp4"), "--overwrite"), "the vault"),
        (("-o", str(out), "--export-tracks", str(key), "--overwrite"), "the audit log"),
        (("-o", str(out), "--report", str(key), "--overwrite"), "the report"),
    ]:
        proc = run_cli(*base, *args)
        assert proc.returncode == 1 and f"{message} " in _err_line(proc) and "is the key file itself" in _err_line(proc), \
            (args, _err_line(proc))
        assert key.read_bytes() == secret
    proc = run_cli(*base, "-o", str(out), "--export-tracks", str(out))
    assert proc.returncode == 1 and "both the output and the audit log" in _err_line(proc), _err_line(proc)
    photo = tmp_path / "ref.jpg"
    photo.write_bytes((media / "obama.jpg").read_bytes())
    source = src.read_bytes()
    for args, message in [
        (("--report", str(src)), "the report"), (("--export-tracks", str(src), "--overwrite"), "the audit log"),
        (("--keep", str(photo), "--report", str(photo)), "the report"),
        (("--report", str(out) + ".sdv"), "both the vault and the report"),
    ]:
        proc = run_cli(*base, "-o", str(out), *args)
        assert proc.returncode == 1 and message in _err_line(proc), (args, _err_line(proc))
    assert src.read_bytes() == source and photo.read_bytes() == (media / "obama.jpg").read_bytes()
    proc = run_cli("run", str(media / "obama.jpg"), "-o", str(photo), "--keep", str(photo), "--overwrite")
    assert proc.returncode == 1 and "is the reference photo itself" in _err_line(proc), _err_line(proc)
    proc = run_cli("run", str(tmp_path), "-o", str(tmp_path / "o"), "--export-tracks", str(tmp_path / "t.jsonl"))
    assert proc.returncode == 1 and "a folder's files" in _err_line(proc), _err_line(proc)
    assert not out.exists()
    kept = tmp_path / "t.jsonl"  # an audit log is the output's: kept as the output is (a report is rewritten)
    kept.write_bytes(b"precious")
    proc = run_cli(*base, "-o", str(out), "--export-tracks", str(kept))
    assert proc.returncode == 1 and "--overwrite" in _err_line(proc), _err_line(proc)
    assert kept.read_bytes() == b"precious" and not out.exists()
    proc = run_cli(*base, "-o", str(out))
    assert proc.returncode == 0, _err_line(proc)
    for target in (key, tmp_path / "out.mp4.sdv"):
        proc = run_cli("recover", str(out), "--key-file", str(key), "-o", str(target), "--overwrite")
        assert proc.returncode == 1 and "itself" in _err_line(proc), _err_line(proc)
    assert key.read_bytes() == secret


def test_a_keyless_overwrite_removes_the_replaced_outputs_vault(tmp_path: Path, media: Path) -> None:
    """The vault beside an output belongs to that output: when a run without a key file replaces the output, the
    old vault (which no longer matches anything) goes too; a run that fails leaves both as they were."""
    src = make_video(tmp_path / "in.mp4", face_frames(media, 3))
    key, out = tmp_path / "k.key", tmp_path / "out.mp4"
    assert run_cli("keygen", str(key)).returncode == 0
    assert run_cli("run", str(src), "-o", str(out), "--no-progress", "--key-file", str(key)).returncode == 0
    vault = tmp_path / "out.mp4.sdv"
    before = out.read_bytes(), vault.read_bytes()
    (tmp_path / "bad.mp4").write_bytes(b"not a video")
    assert run_cli("run", str(tmp_path / "bad.mp4"), "-o", str(out), "--no-progress", "--overwrite").returncode == 1
    assert (out.read_bytes(), vault.read_bytes()) == before
    proc = run_cli("run", str(src), "-o", str(out), "--no-progress", "--overwrite")
    assert proc.returncode == 0 and "removed" in _err_line(proc) and not vault.exists(), _err_line(proc)
    assert out.read_bytes() != before[0]
    # another video's vault put there (a copy): kept and said, with --overwrite or without (it was removed as
    # "the vault of the output this run replaced"; new-user review)
    vault.write_bytes(before[1])
    for flags in ((), ("--overwrite",)):
        target = out if flags else tmp_path / "fresh.mp4"
        if not flags:
            (tmp_path / "fresh.mp4.sdv").write_bytes(before[1])
        proc = run_cli("run", str(src), "-o", str(target), "--no-progress", *flags)
        err = proc.stderr.decode()
        assert proc.returncode == 0 and "is not this output's vault" in err and "removed" not in err, err
        assert Path(str(target) + ".sdv").read_bytes() == before[1]


def test_what_a_run_that_did_not_finish_left_is_kept_until_asked(tmp_path: Path, media: Path) -> None:
    """A run killed outright leaves out.partial.mp4 beside a vault still named out.mp4.sdv (Ctrl-C: renamed
    out.partial.mp4.sdv). A rerun says so instead of writing over them; recover finds that vault for the partial
    output; --overwrite replaces them."""
    src = make_video(tmp_path / "in.mp4", face_frames(media, 3))
    key, out = tmp_path / "k.key", tmp_path / "out.mp4"
    assert run_cli("keygen", str(key)).returncode == 0
    assert run_cli("run", str(src), "-o", str(out), "--no-progress", "--key-file", str(key)).returncode == 0
    partial = tmp_path / "out.partial.mp4"
    out.rename(partial)  # as a run killed at its last frame leaves them
    proc = run_cli("run", str(src), "-o", str(out), "--no-progress", "--key-file", str(key))
    assert proc.returncode == 1 and "did not finish" in _err_line(proc) and "--overwrite" in _err_line(proc)
    assert partial.exists() and (tmp_path / "out.mp4.sdv").exists() and not out.exists()
    proc = run_cli("recover", str(partial), "--key-file", str(key), "-o", str(tmp_path / "rec.mp4"))
    assert proc.returncode == 0, _err_line(proc)
    assert len(decode(tmp_path / "rec.mp4")) == 3
    (tmp_path / "out.mp4.sdv").rename(tmp_path / "out.partial.mp4.sdv")  # as after Ctrl-C
    proc = run_cli("run", str(src), "-o", str(out), "--no-progress", "--key-file", str(key))
    assert proc.returncode == 1 and "out.partial.mp4.sdv" in _err_line(proc), _err_line(proc)
    proc = run_cli("run", str(src), "-o", str(out), "--no-progress", "--key-file", str(key), "--overwrite")
    assert proc.returncode == 0 and "removed" in _err_line(proc), _err_line(proc)
    assert sorted(p.name for p in tmp_path.glob("out*")) == ["out.mp4", "out.mp4.sdv"]


def test_a_file_system_refusal_is_one_line(tmp_path: Path, media: Path) -> None:
    """What the file system refuses (here a name too long for it) is a one-line error, not an internal one."""
    src = make_video(tmp_path / ("x" * 240 + ".mp4"), face_frames(media, 2))
    key = tmp_path / "k.key"
    assert run_cli("keygen", str(key)).returncode == 0
    proc = run_cli("run", str(src), "--no-progress", "--key-file", str(key))
    err = _err_line(proc)
    assert proc.returncode == 1 and err.startswith("streamdeid: error:") and "internal error" not in err, err
    assert "name too long" in err.lower() and err.strip().count("\n") == 0, err


@pytest.mark.parametrize("content", [None, b"", b"this is not a video\n" * 50])
def test_bad_input_one_line_error(tmp_path: Path, content: bytes | None) -> None:
    src = tmp_path / "clip.mp4"
    if content is not None:
        src.write_bytes(content)
    proc = run_cli("run", str(src), "--no-progress")
    err = _err_line(proc)
    assert proc.returncode == 1
    assert err.strip().count("\n") == 0 and err.startswith("streamdeid: error:")
    assert not list(tmp_path.glob("clip_anonymized*"))  # nothing half-written


def test_truncated_video_gives_output_or_error(tmp_path: Path, media: Path) -> None:
    data = (media / "head-pose-face-detection-male.mp4").read_bytes()
    src = tmp_path / "cut.mp4"
    src.write_bytes(data[: len(data) // 2])
    proc = run_cli("run", str(src), "--no-progress")
    _err_line(proc)
    out = tmp_path / "cut_anonymized.mp4"
    if proc.returncode == 0:
        assert len(decode(out)) > 0
    else:
        assert proc.returncode == 1 and not out.exists()


def test_odd_size_and_no_faces(tmp_path: Path) -> None:
    # Smooth gradients, not random noise: at the default threshold (0.3) the small-face scan finds a
    # phantom face in uniform noise, which is a false positive, not a face-free frame.
    ramp = np.linspace(0, 255, 641, dtype=np.float32)[None, :, None]
    frames = [np.broadcast_to((ramp * (0.5 + 0.1 * k)).clip(0, 255), (363, 641, 3)).astype(np.uint8)
              for k in range(4)]
    src = make_video(tmp_path / "odd.mkv", frames)
    proc = run_cli("run", str(src), "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    out = decode(tmp_path / "odd_anonymized.mkv")
    assert len(out) == 4 and out[0].shape == (363, 641, 3)
    assert "0 faces" in proc.stderr.decode()


def _walking_frames(media: Path, n: int = 12) -> list[np.ndarray]:
    """The first ``n`` frames of the walking clip (three people), BGR."""
    with av.open(str(media / "face-demographics-walking-and-pause.mp4")) as c:
        return [f.to_ndarray(format="bgr24") for _, f in zip(range(n), c.decode(video=0))]


def test_a_phones_sideways_video_is_covered_as_it_is_shown(tmp_path: Path, media: Path) -> None:
    """A phone stores portrait video sideways under a display matrix. Faces are found and covered as a player
    shows them: each turned copy gives the upright run's faces and, turned upright, its output."""
    frames = _walking_frames(media)
    outputs = {}
    for degrees in (0, 90, -90, 180):
        turns = (degrees // 90) % 4
        stored = [np.ascontiguousarray(np.rot90(f, -turns)) for f in frames]  # what upright() undoes
        src = make_video(tmp_path / f"in{turns}.mp4", stored, rotation=degrees)
        out = tmp_path / f"out{turns}.mp4"
        proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
        assert proc.returncode == 0, _err_line(proc)
        with av.open(str(out)) as c:  # stored as the input was, under the same display matrix
            assert (c.streams.video[0].width, c.streams.video[0].height) == stored[0].shape[1::-1]
            assert round(next(c.decode(video=0)).rotation) % 360 == degrees % 360
        outputs[degrees] = ([np.rot90(f, turns) for f in decode(out)], proc.stderr.decode().split(" faces")[0])
    # MPEG-TS and GIF store no display matrix: the frames are written upright, as shown
    for ext in (".ts", ".gif"):
        out = tmp_path / f"out1{ext}"
        proc = run_cli("run", str(tmp_path / "in1.mp4"), "-o", str(out), "--anonymizer", "solid", "--no-progress")
        assert proc.returncode == 0, _err_line(proc)
        outputs[ext] = (decode(out), proc.stderr.decode().split(" faces")[0])
        assert outputs[ext][0][0].shape == frames[0].shape
    upright, line = outputs[0]
    assert int(line.split()[-1]) >= 24  # three people on 12 frames
    for degrees, (shown, said) in outputs.items():
        assert said == line, degrees
        tolerance = 20.0 if degrees == ".gif" else 2.0  # GIF's 252 colours: 12 levels a pixel
        assert np.mean([np.abs(a.astype(int) - b).mean() for a, b in zip(upright, shown)]) < tolerance, degrees


def test_a_mirrored_video_is_covered_as_it_is_shown(tmp_path: Path, media: Path) -> None:
    """A display matrix may mirror the picture as well as turn it (``ffmpeg -display_vflip``, some dashcams):
    the frames were worked on upside down, and 26 of 62 faces of a group pan were left bare. Each mirrored
    copy now gives the upright run's faces and output, written upright without a matrix."""
    frames = _walking_frames(media)
    runs = {}
    # name: (matrix a, b, c, d; the stored frames whose shown picture is the upright clip)
    cases = {"upright": ((1, 0, 0, 1), lambda f: f), "vflip": ((1, 0, 0, -1), lambda f: f[::-1]),
             "hflip": ((-1, 0, 0, 1), lambda f: f[:, ::-1]), "transpose": ((0, 1, 1, 0), lambda f: f.transpose(1, 0, 2))}
    for name, (matrix, store) in cases.items():
        src = make_video(tmp_path / f"{name}.mp4", [np.ascontiguousarray(store(f)) for f in frames])
        set_mp4_matrix(src, *matrix)
        out = tmp_path / f"out_{name}.mp4"
        proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
        assert proc.returncode == 0, _err_line(proc)
        with av.open(str(out)) as c:
            assert round(next(c.decode(video=0)).rotation) == 0  # written as shown
        runs[name] = (decode(out), proc.stderr.decode().split(" faces")[0])
    upright, line = runs["upright"]
    assert int(line.split()[-1]) >= 24
    for name, (shown, said) in runs.items():
        assert said == line, name
        assert shown[0].shape == frames[0].shape, name
        assert np.mean([np.abs(a.astype(int) - b).mean() for a, b in zip(upright, shown)]) < 2.0, name


def test_a_recording_with_a_pause_is_covered_as_without_it(tmp_path: Path, media: Path) -> None:
    """A motion-triggered camera records bursts: a 60 s pause in the timestamps pulled the mean frame rate
    to 1 fps, the pipeline's hold and look-ahead then spanned no frame, and 214 of 538 covers of hamilton's
    first 60 frames were dropped (a performer's profile bare). The same frames (lossless), with and without
    the pause, now get the same covers; frames 1 ms apart are paced at 120 fps at most."""
    with av.open(str(media / "short_hamilton_clip.mp4")) as c:
        frames = [f.to_ndarray(format="bgr24") for _, f in zip(range(40), c.decode(video=0))]
    tb = Fraction(1, 90000)
    lines = {}
    for name, pts in {"plain": [i * 3000 for i in range(40)],
                      "pause": [i * 3000 + (60 * 90000 if i >= 20 else 0) for i in range(40)]}.items():
        src = make_video(tmp_path / f"{name}.mp4", frames, fps=30, codec="ffv1", pts=pts, time_base=tb)
        with open_source(str(src)) as source:
            assert source.pace == 30.0, float(source.average_rate)  # the pause's mean: 0.65 fps
        proc = run_cli("run", str(src), "-o", str(tmp_path / f"out_{name}.mkv"), "--anonymizer", "solid",
                       "--no-progress")
        assert proc.returncode == 0, _err_line(proc)
        lines[name] = proc.stderr.decode().split(" fps")[0].rsplit(",", 1)[0]
    assert lines["pause"] == lines["plain"]
    # the encoder spends its bits by the timestamps: the same covers, not the same bytes
    shown = [decode(tmp_path / f"out_{name}.mkv") for name in ("plain", "pause")]
    assert np.mean([np.abs(a.astype(int) - b).mean() for a, b in zip(*shown)]) < 1.0
    fast = make_video(tmp_path / "fast.mp4", frames[:10], fps=30, pts=[i * 90 for i in range(10)], time_base=tb)
    with open_source(str(fast)) as source:
        assert source.pace == 120.0, float(source.average_rate)


def test_a_stream_that_changes_picture_size_is_scaled_to_its_first(tmp_path: Path, media: Path) -> None:
    """A broadcast or DVR capture switching SD to HD mid-stream (two MPEG-TS joined) failed the whole run
    ("frame 0 is 480x270, output is 640x360", blaming the wrong frame). Later frames are scaled to the
    first size, as ffmpeg does, and their faces covered."""
    frames = _walking_frames(media, 20)  # 480x270
    large = [cv2.resize(f, (640, 360), interpolation=cv2.INTER_CUBIC) for f in frames[10:]]
    joined = tmp_path / "joined.ts"
    tb = Fraction(1, 90000)  # the second part's clock goes on from the first's, as one recording's does
    parts = [make_video(tmp_path / f"{i}.ts", part, pts=[(10 * i + k) * 3600 for k in range(10)], time_base=tb)
             for i, part in enumerate((frames[:10], large))]
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    out, tracks = tmp_path / "out.mp4", tmp_path / "tracks.jsonl"
    proc = run_cli("run", str(joined), "-o", str(out), "--anonymizer", "solid", "--export-tracks", str(tracks),
                   "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    assert "changes size to 640x360 at frame 10" in proc.stderr.decode()
    shown = decode(out)
    assert len(shown) == 20 and {f.shape for f in shown} == {(270, 480, 3)}
    covered = {json.loads(line).get("frame") for line in tracks.read_text().splitlines()}
    assert set(range(10, 20)) <= covered  # the people walk on through the larger frames, covered


def test_the_shown_video_stream_is_anonymized_not_a_cover_picture_before_it(tmp_path: Path, media: Path) -> None:
    """A file whose first video stream is a one-frame cover picture (a face) and whose second is the clip:
    the picture was anonymized alone and the clip lost (a 1-frame output, "the file may be truncated"). The
    stream a player shows is taken, and the one left out is said."""
    frames = _walking_frames(media)
    src = tmp_path / "cover_first.mkv"
    with av.open(str(src), "w") as c:
        cover = c.add_stream("mjpeg", rate=1)
        cover.width, cover.height, cover.pix_fmt = 480, 270, "yuvj420p"
        clip = c.add_stream("libx264", rate=12)
        clip.width, clip.height, clip.pix_fmt = 480, 270, "yuv420p"
        for stream, images in ((cover, frames[:1]), (clip, frames)):
            for i, img in enumerate(images):
                vf = av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format=stream.pix_fmt)
                vf.pts, vf.time_base = i, Fraction(1, 12)
                for packet in stream.encode(vf):
                    c.mux(packet)
            for packet in stream.encode():
                c.mux(packet)
    out = tmp_path / "out.mp4"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    said = proc.stderr.decode()
    assert "1 more video stream(s) beside #1" in said and "truncated" not in said
    assert len(decode(out)) == len(frames)


def test_anamorphic_video_keeps_its_pixel_shape(tmp_path: Path, media: Path) -> None:
    """PAL widescreen stores 720x576 with pixels 64:45 wide; the output had square pixels and played
    squashed at 5:4. Its sample aspect ratio is kept, in MP4 and Matroska."""
    src = tmp_path / "pal.mp4"
    with av.open(str(src), "w") as c:
        s = c.add_stream("libx264", rate=12)
        s.width, s.height, s.pix_fmt = 720, 576, "yuv420p"
        s.codec_context.sample_aspect_ratio = Fraction(64, 45)
        for img in _walking_frames(media, 4):
            for packet in s.encode(av.VideoFrame.from_ndarray(cv2.resize(img, (720, 576)), format="bgr24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    for ext in (".mp4", ".mkv"):
        out = tmp_path / f"out{ext}"
        proc = run_cli("run", str(src), "-o", str(out), "--no-progress")
        assert proc.returncode == 0, _err_line(proc)
        with av.open(str(out)) as c:
            assert c.streams.video[0].display_aspect_ratio == Fraction(16, 9), ext
    # stored sideways too, and written upright into MPEG-TS (no display matrix): the pixels turn with the frames
    turned = tmp_path / "turned.mp4"
    with av.open(str(turned), "w") as c:
        s = c.add_stream("libx264", rate=12)
        s.width, s.height, s.pix_fmt = 720, 576, "yuv420p"
        s.codec_context.sample_aspect_ratio = Fraction(64, 45)
        s.set_display_rotation(90)
        for packet in s.encode(av.VideoFrame.from_ndarray(np.zeros((576, 720, 3), np.uint8), format="bgr24")):
            c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    out = tmp_path / "turned.ts"
    proc = run_cli("run", str(turned), "-o", str(out), "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    with av.open(str(out)) as c:
        assert c.streams.video[0].display_aspect_ratio == Fraction(9, 16)


def test_a_webm_input_gets_a_webm_output_it_can_hold(tmp_path: Path, media: Path) -> None:
    """The default output of in.webm is in_anonymized.webm, which cannot hold H.264: the run failed with
    "codec libx264 cannot be stored in .webm files". WebM outputs are encoded VP9."""
    src = make_video(tmp_path / "in.webm", _walking_frames(media, 6), codec="libvpx-vp9")
    proc = run_cli("run", str(src), "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    out = tmp_path / "in_anonymized.webm"
    with av.open(str(out)) as c:
        assert c.streams.video[0].codec_context.name == "vp9"
    assert len(decode(out)) == 6


def _zoom_into_the_man(media: Path, cx: float, cy: float) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The head-pose clip's first 40 frames, zoomed about (``cx``, ``cy``) 0.25x more each frame up to 7x: per frame
    the original, the zoomed frame and the zoom ([2, 3], original -> zoomed pixels)."""
    out = []
    with av.open(str(media / "head-pose-face-detection-female-and-male.mp4")) as c:
        for i, f in enumerate(c.decode(video=0)):
            if i == 40:
                break
            img = f.to_ndarray(format="bgr24")
            h, w = img.shape[:2]
            z = min(1 + i * 0.25, 7)
            x0, y0 = np.clip(cx - w / z / 2, 0, w - w / z), np.clip(cy - h / z / 2, 0, h - h / z)
            zoom = np.array([[z, 0, -x0 * z], [0, z, -y0 * z]])
            out.append((img, cv2.warpAffine(img, zoom, (w, h)), zoom))
    return out


def test_a_face_zoomed_closer_than_the_frame_stays_covered(tmp_path: Path, media: Path) -> None:
    """A zoom into the man of the head-pose clip (7x by frame 24, about x=330, y=110) until his face overflows
    the frame: the detector loses it there, and his eyes, nose and mouth were left uncovered on the last 13
    frames. The close-up is held over the whole frame (track/tracker.py CLOSE_UP_*). Before it is lost, runs box
    it weakly by part of it, off its middle (0.34-0.44 on frames 15 and 19): drawn at those boxes, the mouth's
    corner, the cheek and the beard were bare (40% of frame 19), and on frames 23-24 of some encodings of this
    clip (x264's output varies a little from process to process). A close-up found weakly is drawn over the
    frame too (tracker.py, _Track.shaky)."""
    frames = [zoomed for _, zoomed, _ in _zoom_into_the_man(media, 330, 110)]
    src = make_video(tmp_path / "zoom.mp4", frames, fps=12)
    out = tmp_path / "out.mp4"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    unchanged = [float((np.abs(a.astype(int) - b).max(2) < 12).mean()) for a, b in zip(decode(src), decode(out))]
    # the detector finds his face at its own size up to frame 14 (the background around it stays), then as a
    # close-up: from there on the frame is covered but for its corners (0.17 at most over 6 encodings of the clip)
    assert len(unchanged) == 40 and max(unchanged[15:]) < 0.25, [round(u, 2) for u in unchanged]


def test_a_zoom_centred_on_a_face_covers_it_whole_once_it_overflows(tmp_path: Path, media: Path) -> None:
    """The same zoom, centred on the man's face (x=365, y=100). His face, as dlib's HOG boxes it on the unzoomed
    frame and carried through the zoom, must be covered wholly once the close-up is drawn over the frame. It was
    not: the over-the-frame cover was placed by the track's landmarks, which lay left of the frame's middle,
    and his jaw, mouth corner and ear were bare on frames 21-39 (33-48% of his face box unchanged)."""
    dlib = pytest.importorskip("dlib", reason="the eval extra (dlib) gives the reference face")
    hog = dlib.get_frontal_face_detector()
    frames, truth = [], []
    for img, zoomed, zoom in _zoom_into_the_man(media, 365, 100):
        h, w = img.shape[:2]
        frames.append(zoomed)
        boxes = [(r.left(), r.top(), r.right(), r.bottom()) for r in hog(cv2.cvtColor(img, cv2.COLOR_BGR2RGB), 1)]
        man = [np.array(b, np.float64) for b in boxes if b[0] > w / 2]  # the man, on the right
        truth.append(None if not man else np.tile(zoom[:, :2].diagonal(), 2) * man[0] + np.tile(zoom[:, 2], 2))
    # +-1 level of noise (seed 1): one of the encodings on which the runs boxed his eyes and nose weakly (0.40-0.42)
    # and a third of the frame wide on frames 25 and 27; drawn at those boxes, half his face box was bare on frames
    # 25-28 (x264's output varies from process to process, so the clean clip failed now and then in CI)
    rng = np.random.default_rng(1)
    frames = [np.clip(f.astype(np.int16) + rng.integers(-1, 2, f.shape), 0, 255).astype(np.uint8) for f in frames]
    src = make_video(tmp_path / "zoom.mp4", frames, fps=12)
    out = tmp_path / "out.mp4"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    bare = []
    for t, (a, b, box) in enumerate(zip(decode(src), decode(out), truth)):
        if box is None or t < 21:  # from frame 21 his face overflows the frame (7x by frame 24)
            continue
        x1, y1, x2, y2 = int(max(box[0], 0)), int(max(box[1], 0)), int(min(box[2], w)), int(min(box[3], h))
        bare.append(float((np.abs(a[y1:y2, x1:x2].astype(int) - b[y1:y2, x1:x2]).max(2) < 12).mean()))
    assert len(bare) >= 15 and max(bare) < 0.05, [round(u, 2) for u in bare]


def test_a_close_talking_head_the_detector_keeps_finding_is_covered_at_its_own_size(tmp_path: Path,
                                                                                     media: Path) -> None:
    """The head-pose clip's man cropped so his face spans the frame's height (a selfie, a talking head): the
    close-up hold is for a face the detector lost, not for one it finds at every run. (Its first form drew
    the face over the whole frame between runs, so the next detection started a new track: the frame stayed
    grey from frame 7 on, 4 tracks for one face.)"""
    frames = []
    with av.open(str(media / "head-pose-face-detection-male.mp4")) as c:
        for i, f in enumerate(c.decode(video=0)):
            if i == 30:
                break
            img = cv2.copyMakeBorder(f.to_ndarray(format="bgr24"), 200, 200, 200, 200, cv2.BORDER_REPLICATE)
            frames.append(cv2.resize(img[93 + 200 - 48:93 + 200 + 48, 250 + 200 - 85:250 + 200 + 85], (510, 288),
                                     interpolation=cv2.INTER_CUBIC))
    src = make_video(tmp_path / "head.mp4", frames, fps=12)
    out, log = tmp_path / "out.mp4", tmp_path / "out.jsonl"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--export-tracks", str(log),
                   "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    tracks = {r["track"] for r in map(json.loads, log.read_text().splitlines()) if "track" in r}
    changed = [1 - float((np.abs(a.astype(int) - b).max(2) < 12).mean()) for a, b in zip(decode(src), decode(out))]
    assert len(tracks) == 1 and max(changed) < 0.75, (tracks, [round(c, 2) for c in changed])


def test_hundred_faces_in_one_image(tmp_path: Path, media: Path) -> None:
    face = cv2.imread(str(media / "obama.jpg"))
    face = cv2.resize(face, (60, 80))
    grid = np.vstack([np.hstack([face] * 10)] * 10)  # 100 faces, 600x800
    src = tmp_path / "crowd.png"
    cv2.imwrite(str(src), grid)
    proc = run_cli("run", str(src), "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    n = int(proc.stderr.decode().split(" faces")[0].split()[-1])
    assert n >= 90
    out = cv2.imread(str(tmp_path / "crowd_anonymized.png"))
    assert out.shape == grid.shape and not np.array_equal(out, grid)


def test_folder_of_images_and_videos(tmp_path: Path, media: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jpg").write_bytes((media / "two_people.jpg").read_bytes())
    make_video(folder / "b.mp4", face_frames(media, 3))
    photo = cv2.imread(str(media / "two_people.jpg"))
    cv2.imwrite(str(folder / "c.tif"), photo)  # TIFF was skipped unseen: "1 ok" for a folder of photos
    (folder / "d.psd").write_bytes(b"not read")  # a Photoshop file (.heic was here until HEIC was read)
    (folder / "notes.txt").write_text("not media")
    (folder / "day2").mkdir()  # a subfolder was passed over without a word
    (folder / "day2" / "e.jpg").write_bytes((media / "two_people.jpg").read_bytes())
    proc = run_cli("run", str(folder), "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    assert "2 file(s) not read, not a photo or video this tool reads (d.psd, notes.txt)" in proc.stderr.decode()
    assert "1 subfolder(s) not read (day2)" in proc.stderr.decode()
    out = tmp_path / "in_anonymized"
    assert sorted(p.name for p in out.iterdir()) == ["a.jpg", "b.mp4", "c.tif"]
    changed = np.abs(cv2.imread(str(out / "c.tif")).astype(int) - photo).max(axis=2) > 20
    assert 0.01 < changed.mean() < 0.5  # its two faces covered, the rest as it was (lossless)


def _folder_with_bad_files(tmp_path: Path, media: Path) -> Path:
    """a.mp4 (4 frames with a face) and b.jpg are good; bad.mp4 is random bytes, cut.mp4 half an mp4."""
    folder = tmp_path / "in"
    folder.mkdir()
    make_video(folder / "a.mp4", face_frames(media, 4))
    (folder / "b.jpg").write_bytes((media / "obama-240p.jpg").read_bytes())
    (folder / "bad.mp4").write_bytes(np.random.default_rng(0).bytes(5000))
    whole = make_video(tmp_path / "whole.mp4", face_frames(media, 6)).read_bytes()
    (folder / "cut.mp4").write_bytes(whole[: len(whole) // 2])
    return folder


def _statuses(report: Path) -> dict[str, dict]:
    return {Path(f["input"]).name: f for f in json.loads(report.read_text())["files"]}


def _mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def _vault_info(path: Path) -> dict:
    from streamdeid.vault import VaultReader

    with VaultReader(path) as reader:
        return reader.inspect()


def test_folder_goes_on_after_bad_files_and_resumes(tmp_path: Path, media: Path) -> None:
    folder, out, key, report = _folder_with_bad_files(tmp_path, media), tmp_path / "out", tmp_path / "k.key", \
        tmp_path / "report.json"
    assert run_cli("keygen", str(key)).returncode == 0
    args = ("run", str(folder), "-o", str(out), "--key-file", str(key), "--report", str(report), "--no-progress")
    proc = run_cli(*args)
    err = _err_line(proc)
    assert proc.returncode == 1, err
    assert "streamdeid: 2 ok, 2 failed, 0 skipped" in err.splitlines()
    failed = [line for line in err.splitlines() if line.startswith("streamdeid: failed: ")]
    assert [Path(line.split(": ")[2]).name for line in failed] == ["bad.mp4", "cut.mp4"], err
    assert sorted(p.name for p in out.iterdir()) == ["a.mp4", "a.mp4.sdv", "b.jpg"]  # nothing half-written
    assert len(decode(out / "a.mp4")) == 4 and cv2.imread(str(out / "b.jpg")) is not None
    files = _statuses(report)
    assert {name: f["status"] for name, f in files.items()} == {"a.mp4": "ok", "b.jpg": "ok", "bad.mp4": "failed",
                                                              "cut.mp4": "failed"}
    assert files["a.mp4"]["vault"] == str(out / "a.mp4.sdv") and files["a.mp4"]["frames"] == 4
    assert files["a.mp4"]["faces"] > 0 and files["a.mp4"]["error"] is None and files["b.jpg"]["vault"] is None
    assert files["bad.mp4"]["error"] and files["cut.mp4"]["error"] and files["bad.mp4"]["vault"] is None
    totals = json.loads(report.read_text())["totals"]
    assert (totals["files"], totals["ok"], totals["failed"], totals["skipped"], totals["frames"]) == (4, 2, 2, 0, 5)

    before = _mtimes(out)
    proc = run_cli(*args)  # a plain rerun touches nothing and says why for each file
    assert proc.returncode == 1 and "0 ok, 4 failed, 0 skipped" in _err_line(proc)
    assert "--overwrite" in _statuses(report)["a.mp4"]["error"] and _mtimes(out) == before

    proc = run_cli(*args, "--skip-existing")
    err = _err_line(proc)
    assert proc.returncode == 1 and "streamdeid: 0 ok, 2 failed, 2 skipped" in err.splitlines(), err
    assert {n: f["status"] for n, f in _statuses(report).items()} == {"a.mp4": "skipped", "b.jpg": "skipped",
                                                                     "bad.mp4": "failed", "cut.mp4": "failed"}
    assert _mtimes(out) == before

    sdv = out / "a.mp4.sdv"
    sdv.write_bytes(sdv.read_bytes()[:-10])  # the END record is gone, as after a kill
    assert not _vault_info(sdv)["complete"]
    proc = run_cli(*args, "--skip-existing")
    err = _err_line(proc)
    assert proc.returncode == 1 and "streamdeid: 1 ok, 2 failed, 1 skipped" in err.splitlines(), err
    files = _statuses(report)
    assert files["a.mp4"]["status"] == "ok" and files["b.jpg"]["status"] == "skipped"
    info = _vault_info(sdv)
    assert info["complete"] and info["frame_range"] == [0, 3]
    assert len(decode(out / "a.mp4")) == 4
    assert _mtimes(out)["b.jpg"] == before["b.jpg"] and _mtimes(out)["a.mp4"] != before["a.mp4"]


def test_skip_existing_redoes_an_output_shorter_than_its_vault(tmp_path: Path, media: Path) -> None:
    """The vault has faces up to frame 3 but the output holds 2 frames: not a finished pair, so it is
    redone; a verified output beside it is left alone."""
    folder, out, key = tmp_path / "in", tmp_path / "out", tmp_path / "k.key"
    folder.mkdir()
    make_video(folder / "a.mp4", face_frames(media, 4))
    make_video(folder / "c.mp4", face_frames(media, 3))
    args = ("run", str(folder), "-o", str(out), "--key-file", str(key), "--new-key", "--no-progress")
    assert run_cli(*args).returncode == 0
    with av.open(str(out / "a.mp4")) as c:
        ours = dict(c.metadata)  # the run's video id
    make_video(out / "a.mp4", face_frames(media, 2), metadata=ours)
    before = _mtimes(out)
    proc = run_cli(*args, "--skip-existing")
    err = _err_line(proc)
    assert proc.returncode == 0 and "streamdeid: 1 ok, 0 failed, 1 skipped" in err.splitlines(), err
    assert len(decode(out / "a.mp4")) == 4 and _vault_info(out / "a.mp4.sdv")["complete"]
    assert _mtimes(out)["c.mp4"] == before["c.mp4"] and _mtimes(out)["c.mp4.sdv"] == before["c.mp4.sdv"]


def test_skip_existing_never_replaces_a_vault_of_another_video_nor_a_finished_output_without_its_vault(
        tmp_path: Path, media: Path) -> None:
    """A vault is the only way to its video's faces: --skip-existing does not write over one that belongs to
    another video, nor redo (with a new video id) an output whose vault was moved away."""
    folder, out, key = tmp_path / "in", tmp_path / "out", tmp_path / "k.key"
    folder.mkdir()
    make_video(folder / "a.mp4", face_frames(media, 3))
    make_video(folder / "c.mp4", face_frames(media, 4))  # another input than a.mp4
    args = ("run", str(folder), "-o", str(out), "--key-file", str(key), "--new-key", "--no-progress")
    assert run_cli(*args).returncode == 0
    others = (out / "c.mp4.sdv").read_bytes()
    (out / "a.mp4.sdv").write_bytes(others)
    proc = run_cli(*args, "--skip-existing")
    assert proc.returncode == 1 and "belongs to another video" in proc.stderr.decode(), _err_line(proc)
    assert (out / "a.mp4.sdv").read_bytes() == others
    (out / "a.mp4.sdv").unlink()
    proc = run_cli(*args, "--skip-existing")
    assert proc.returncode == 1 and "its vault a.mp4.sdv is missing" in proc.stderr.decode(), _err_line(proc)
    before = (out / "a.mp4").read_bytes()
    assert run_cli(*args, "--skip-existing", "--overwrite").returncode == 0
    assert (out / "a.mp4").read_bytes() != before and _vault_info(out / "a.mp4.sdv")["complete"]
    # another input's finished output and vault, copied into a.mp4's place: not a.mp4's, so not done
    for name in ("a.mp4", "a.mp4.sdv"):
        (out / name).write_bytes((out / name.replace("a.", "c.")).read_bytes())
    proc = run_cli(*args, "--skip-existing")
    assert proc.returncode == 1 and "was made from another input than a.mp4" in proc.stderr.decode(), _err_line(proc)
    assert (out / "a.mp4.sdv").read_bytes() == (out / "c.mp4.sdv").read_bytes()


def test_skip_existing_never_takes_someone_elses_video_for_done_nor_replaces_it(tmp_path: Path, media: Path) -> None:
    """A video at an output's name that streamdeid did not write (no video id of ours: the raw footage copied
    there, say) is neither skipped as anonymized nor replaced without --overwrite, with a key or without."""
    folder = tmp_path / "in"
    folder.mkdir()
    make_video(folder / "a.mp4", face_frames(media, 3))
    for key_args in ((), ("--key-file", str(tmp_path / "k.key"), "--new-key")):
        out = tmp_path / f"out{len(key_args)}"
        out.mkdir()
        (out / "a.mp4").write_bytes((folder / "a.mp4").read_bytes())
        proc = run_cli("run", str(folder), "-o", str(out), "--skip-existing", "--no-progress", *key_args)
        assert proc.returncode == 1 and "streamdeid did not write it" in proc.stderr.decode(), _err_line(proc)
        assert (out / "a.mp4").read_bytes() == (folder / "a.mp4").read_bytes()
        proc = run_cli("run", str(folder), "-o", str(out), "--skip-existing", "--overwrite", "--no-progress",
                       *key_args)
        assert proc.returncode == 0 and (out / "a.mp4").read_bytes() != (folder / "a.mp4").read_bytes()


def test_a_folder_whose_every_file_fails_leaves_no_output_folder(tmp_path: Path) -> None:
    """Nothing written, nothing made: an empty output folder would look like a run that finished. A folder
    that was there before stays (it is the user's)."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bad.mp4").write_bytes(np.random.default_rng(0).bytes(5000))
    (folder / "worse.jpg").write_bytes(b"not a photo")
    out = tmp_path / "made" / "out"
    proc = run_cli("run", str(folder), "-o", str(out), "--no-vault", "--no-progress")
    assert proc.returncode == 1 and "0 ok, 2 failed" in _err_line(proc), _err_line(proc)
    assert not (tmp_path / "made").exists()  # the old code left made/out/, empty
    out.mkdir(parents=True)
    proc = run_cli("run", str(folder), "-o", str(out), "--no-vault", "--no-progress")
    assert proc.returncode == 1 and out.is_dir() and not any(out.iterdir())


def test_skip_existing_is_for_folders(tmp_path: Path, media: Path) -> None:
    src = make_video(tmp_path / "in.mp4", face_frames(media, 2))
    proc = run_cli("run", str(src), "--skip-existing", "--no-progress")
    assert proc.returncode == 2 and "folder" in _err_line(proc)  # a usage error (README)


def test_stdin_stream(tmp_path: Path, media: Path) -> None:
    src = make_video(tmp_path / "in.mkv", face_frames(media, 6))
    out = tmp_path / "out.mkv"
    proc = run_cli("run", "-", "-o", str(out), "--no-progress", input=src.read_bytes())
    assert proc.returncode == 0, _err_line(proc)
    assert len(decode(out)) == 6
    proc = run_cli("run", "-", "--no-progress", input=b"")
    assert proc.returncode == 1 and "-o" in _err_line(proc)
    # an MP4 with its index after its media (hamilton: 2 MB of it) cannot come through a pipe: said, with what works
    mp4 = media / "short_hamilton_clip.mp4"
    proc = run_cli("run", "-", "-o", str(tmp_path / "x.mkv"), "--no-progress", input=mp4.read_bytes())
    assert proc.returncode == 1 and "cannot be read from a pipe" in _err_line(proc)
    # a pipe cut short is said, as a cut file is: its Matroska header promised more (it passed without a word)
    long = make_video(tmp_path / "long.mkv", face_frames(media, 6) * 25).read_bytes()  # 6 s
    proc = run_cli("run", "-", "-o", str(tmp_path / "cut.mkv"), "--no-progress", input=long[:len(long) // 2])
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "the file may be truncated" in err, err
    # two recordings one after the other on a pipe, each from 0: the second follows on at the frame rate (each of
    # its frames set to the last + 1 tick, it played in a few ms)
    a = make_video(tmp_path / "a.ts", face_frames(media, 6) * 5).read_bytes()
    proc = run_cli("run", "-", "-o", str(tmp_path / "ab.mp4"), "--no-progress", input=a + a)
    assert proc.returncode == 0 and "the timestamps go back" in proc.stderr.decode(), proc.stderr.decode()
    with av.open(str(tmp_path / "ab.mp4")) as c:
        times = [float(f.time) for f in c.decode(video=0)]
    assert len(times) == 60 and 2.3 < times[-1] - times[0] < 2.5, (len(times), times[-1] - times[0])


LONG_FRAMES = 1500  # long enough that the run is still going when the partial file first passes 50 KB


def _long_input(tmp_path: Path, media: Path) -> Path:
    frames = face_frames(media, 30)
    return make_video(tmp_path / "long.mp4", frames * (LONG_FRAMES // 30), fps=30)


def _stopped_midway(sig: int, *run_args: str, command: str = "run") -> tuple[subprocess.Popen, bytes]:
    """``streamdeid COMMAND RUN_ARGS`` (its -o OUT.mp4 among them) sent ``sig`` once OUT.partial.mp4 passes
    50 KB: the ended process and its stderr."""
    out = Path(run_args[run_args.index("-o") + 1])
    partial = out.with_name(out.stem + ".partial" + out.suffix)
    # SIG_DFL for SIGINT in the child: a suite started in the background (``cmd &``) has SIGINT
    # ignored, which children inherit, and Python then installs no KeyboardInterrupt handler.
    proc = subprocess.Popen([sys.executable, "-m", "streamdeid.cli", command, *run_args, "--no-progress"],
                            stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not partial.exists() or partial.stat().st_size < 50_000):
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL, signal.SIGTERM])
def test_interrupt_leaves_playable_partial(tmp_path: Path, media: Path, sig: int) -> None:
    """SIGTERM (``kill``, a service manager) ends the run as Ctrl-C does, said in one line, with exit 143; it
    ended the process at once and silently (new-user review)."""
    out = tmp_path / "out.mp4"
    proc, err = _stopped_midway(sig, str(_long_input(tmp_path, media)), "-o", str(out))
    partial = tmp_path / "out.partial.mp4"
    assert proc.returncode != 0
    assert "Traceback" not in err.decode()
    if sig != signal.SIGKILL:
        assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], err.decode()
        assert "interrupted: " in err.decode() and " frames written to " in err.decode(), err.decode()
    assert not out.exists()  # the final name only ever holds a complete output
    frames = decode(partial)
    assert 0 < len(frames) < LONG_FRAMES


def test_recover_stopped_midway_leaves_no_originals_and_its_output_is_owner_only(tmp_path: Path,
                                                                                  media: Path) -> None:
    """A recovered video holds the original faces. Killed by SIGTERM or SIGHUP, recover left a playable partial
    file of them (readable by every user under the usual umask); now both end as Ctrl-C does and remove it.
    A finished recovery is mode 0600, as its vault is (a security review)."""
    anon, key = tmp_path / "anon.mp4", tmp_path / "k.bin"
    proc = run_cli("run", str(_long_input(tmp_path, media)), "-o", str(anon), "--key-file", str(key), "--new-key",
                   "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        out = tmp_path / f"rec{sig}.mp4"
        proc, err = _stopped_midway(sig, str(anon), "-o", str(out), "--key-file", str(key), command="recover")
        assert proc.returncode == 143 and "Traceback" not in err.decode(), err.decode()
        assert not out.exists() and not (tmp_path / f"rec{sig}.partial.mp4").exists()
    out = tmp_path / "rec.mp4"
    proc = run_cli("recover", str(anon), "-o", str(out), "--key-file", str(key), "--no-progress")
    assert proc.returncode == 0, _err_line(proc)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_an_interrupted_rerun_leaves_the_earlier_output_its_vault_and_log(tmp_path: Path, media: Path) -> None:
    """Re-rendering over an output (--overwrite, as after a review) and stopping it midway kept the old output
    but had already truncated its vault and audit log: its faces could no longer be recovered. Both are
    written beside the partial output now, and replace the old ones only with it."""
    key, out, log = tmp_path / "k.key", tmp_path / "out.mp4", tmp_path / "out.jsonl"
    vault = tmp_path / "out.mp4.sdv"
    first = run_cli("run", str(make_video(tmp_path / "short.mp4", face_frames(media, 8))), "-o", str(out),
                    "--key-file", str(key), "--new-key", "--export-tracks", str(log), "--no-progress")
    assert first.returncode == 0, _err_line(first)
    before = {p: p.read_bytes() for p in (out, vault, log)}
    proc, _ = _stopped_midway(signal.SIGINT, str(_long_input(tmp_path, media)), "-o", str(out), "--key-file",
                              str(key), "--export-tracks", str(log), "--overwrite")
    assert proc.returncode == 130
    assert {p: p.read_bytes() for p in before} == before  # the earlier output, vault and log, as they were
    assert (tmp_path / "out.partial.mp4.sdv").is_file() and (tmp_path / "out.jsonl.partial").is_file()
    assert run_cli("recover", str(out), "--key-file", str(key), "-o", str(tmp_path / "back.mp4")).returncode == 0


def test_stdin_to_stdout_keeps_every_frame(tmp_path: Path, media: Path) -> None:
    src = make_video(tmp_path / "in.mkv", face_frames(media, 8))
    proc = run_cli("run", "-", "-o", "-", "--no-progress", input=src.read_bytes())
    assert proc.returncode == 0, _err_line(proc)
    out = tmp_path / "out.ts"
    out.write_bytes(proc.stdout)
    assert len(decode(out)) == 8  # a pipe from a file is not "live": nothing dropped


def test_unreachable_camera_exits_3(tmp_path: Path) -> None:
    proc = run_cli("run", "rtsp://127.0.0.1:9/none", "-o", str(tmp_path / "x.mp4"), "--max-retries", "1",
                   "--read-timeout", "1", timeout=60)
    assert proc.returncode == 3
    assert "cannot connect" in _err_line(proc)
    assert not list(tmp_path.iterdir())


def test_live_segments_each_get_a_vault_that_recovers(tmp_path: Path, media: Path) -> None:
    src = make_video(tmp_path / "in.mkv", face_frames(media, 60), fps=25)
    key = tmp_path / "k.key"
    out = tmp_path / "rec.mkv"
    proc = run_cli("run", "-", "--live", "-o", str(out), "--segment-time", "1", "--max-latency", "30",
                   "--stats-interval", "0", "--key-file", str(key), "--new-key", "--codec", "ffv1",
                   input=src.read_bytes())
    assert proc.returncode == 0, _err_line(proc)
    assert b"a recovery vault beside each recording" in proc.stderr
    segments = sorted(tmp_path.glob("rec_*.mkv"))
    assert len(segments) >= 2
    all_back = []
    for seg in segments:
        assert Path(str(seg) + ".sdv").exists()
        restored = tmp_path / f"restored_{seg.name}"
        rec = run_cli("recover", str(seg), "-o", str(restored), "--key-file", str(key), "--codec", "ffv1",
                      "--no-progress")
        assert rec.returncode == 0, _err_line(rec)
        anon, back = decode(seg), decode(restored)
        assert len(back) == len(anon)
        assert any((a != b).any() for a, b in zip(anon, back))  # faces came back
        all_back += back
        from streamdeid.vault.reader import VaultReader

        assert VaultReader(Path(str(seg) + ".sdv")).inspect()["header"]["fps"] == 25  # chunks of a second
    # lossless output and vault (the vault stored the decoder's planes): the segments recover to the input
    # (the feed's last frames after the detector's last run are dropped, not written: Pipeline.drop_unsearched)
    source = decode(src)
    assert 0 <= len(source) - len(all_back) <= 3 and all(np.array_equal(a, b) for a, b in zip(all_back, source))
    # Vaults of different segments are different videos: one cannot open another's file.
    wrong = run_cli("recover", str(segments[0]), "-o", str(tmp_path / "x.mkv"), "--key-file", str(key),
                    "--vault", str(segments[1]) + ".sdv", "--no-progress")
    assert wrong.returncode == 1 and "another video" in _err_line(wrong)


def test_unexpected_error_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from click.testing import CliRunner

    import streamdeid.api as api
    from streamdeid.cli import main

    def boom(*args, **kwargs):
        raise RuntimeError("something broke\nsecond line")

    monkeypatch.setattr(api, "anonymize", boom)
    src = tmp_path / "x.mp4"
    src.write_bytes(b"")
    result = CliRunner().invoke(main, ["run", str(src)])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "internal error: RuntimeError: something broke" in result.output


def test_live_mode_passes_audio_through(tmp_path: Path, media: Path) -> None:
    """A live feed with audio (here stdin, forced live) keeps its audio in the recording."""
    src = tmp_path / "ham.mkv"
    with av.open(str(media / "short_hamilton_clip.mp4")) as i, av.open(str(src), "w") as o:
        streams = {s.index: o.add_stream_from_template(s) for s in i.streams}
        video_t, audio_t = [], []
        for p in i.demux():
            if p.dts is None:
                continue
            (audio_t if p.stream.type == "audio" else video_t).append(float(p.pts * p.time_base))
            p.stream = streams[p.stream.index]
            o.mux(p)
    # A live recording starts with its first video frame: audio before it is not kept.
    n_audio = sum(min(video_t) <= t <= max(video_t) for t in audio_t)
    out = tmp_path / "live.mp4"
    proc = run_cli("run", "-", "--live", "-o", str(out), "--max-latency", "60", "--stats-interval", "0",
                   input=src.read_bytes())
    assert proc.returncode == 0, _err_line(proc)
    with av.open(str(out)) as c:
        assert c.streams.audio and c.streams.audio[0].codec_context.name == "aac"
        got = sum(1 for p in c.demux(c.streams.audio[0]) if p.size)
    assert got >= 0.97 * n_audio  # copied through, packet for packet


def test_reader_hanging_up_on_stdout_is_one_plain_line(media: Path) -> None:
    """`streamdeid run CLIP -o - | head -c ...`: a closed pipe ends the run with one line and exit 141."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "streamdeid.cli", "run", str(media / "short_hamilton_clip.mp4"),
                             "-o", "-", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(100_000)
    proc.stdout.close()  # the reader hangs up
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "hung up" in lines[0] and "WARNING" not in err and "Traceback" not in err, err


def test_output_equal_to_input_is_refused_even_with_overwrite(tmp_path: Path, media: Path) -> None:
    src = tmp_path / "only_copy.mp4"
    src.write_bytes((media / "head-pose-face-detection-male.mp4").read_bytes())
    link = tmp_path / "link.mp4"
    link.symlink_to(src)
    before = src.read_bytes()
    for out in (src, link):
        proc = run_cli("run", str(src), "-o", str(out), "--overwrite", "--no-progress")
        assert proc.returncode == 1 and b"is the input itself" in proc.stderr, proc.stderr
    assert src.read_bytes() == before


def _start_run(src: Path, out: Path, *extra: str):
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "streamdeid.cli", "run", str(src), "-o", str(out), "--no-progress",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partial = out.with_name(f"{out.stem}.partial{out.suffix}")
    deadline = time.monotonic() + 60
    while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert partial.exists(), proc.stderr.read().decode() if proc.poll() is not None else "no partial file"
    return proc


def test_two_runs_to_one_name_give_one_whole_output_and_one_clear_error(tmp_path: Path, media: Path) -> None:
    src, out = media / "short_hamilton_clip.mp4", tmp_path / "same.mp4"
    first = _start_run(src, out, "--anonymizer", "solid")
    second = run_cli("run", str(src), "-o", str(out), "--anonymizer", "mosaic", "--no-progress")
    assert second.returncode == 1 and b"another run is writing" in second.stderr, second.stderr
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()
    assert len(decode(out)) == 275


def test_output_appearing_meanwhile_is_not_replaced(tmp_path: Path, media: Path) -> None:
    src, out = media / "short_hamilton_clip.mp4", tmp_path / "late.mp4"
    run = _start_run(src, out)
    out.write_bytes(b"somebody else's file")
    err = run.stderr.read().decode()
    assert run.wait(timeout=300) == 1 and "appeared while this run was writing it" in err, err
    assert out.read_bytes() == b"somebody else's file"
    kept = err.strip().rsplit("kept at ", 1)[1]
    assert len(decode(Path(kept))) == 275  # this run's result, whole, where the message says


@pytest.mark.parametrize("min_bytes", [0, 120_000])  # 0: killed before its first fragment is written
def test_kill_9_then_recover_partial_restores_what_the_partial_holds(tmp_path: Path, media: Path,
                                                                     min_bytes: int) -> None:
    src = _long_input(tmp_path, media)
    key, out = tmp_path / "k.key", tmp_path / "out.mp4"
    assert run_cli("keygen", str(key)).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "streamdeid.cli", "run", str(src), "-o", str(out), "--no-progress",
                             "--key-file", str(key)], stderr=subprocess.PIPE)
    partial = tmp_path / "out.partial.mp4"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not partial.exists() or partial.stat().st_size < min_bytes):
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.kill()
    proc.communicate(timeout=60)
    assert not out.exists()  # nothing under the final name
    rec = tmp_path / "rec.mp4"
    assert not (tmp_path / "out.mp4.sdv").exists()  # the vault is written beside the partial output
    res = run_cli("recover", str(partial), "--key-file", str(key), "-o", str(rec), "--partial", "--no-progress")
    err = res.stderr.decode()
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    if min_bytes == 0 and partial.stat().st_size == 0:  # nothing was written: a clear error, no output
        assert res.returncode == 1 and not rec.exists(), err
        return
    assert res.returncode == 0, err
    assert len(decode(rec)) == len(decode(partial)) > 0


def test_fuzz_sample_no_traceback_hang_or_half_output(tmp_path: Path, media: Path) -> None:
    """A fast sample of benchmarks/fuzz.py (one case per mutation): damaged real clips get an output that
    decodes or a one-line error, never a traceback, a hang or a half-written output."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from fuzz import MUTATIONS, run_cases

    result = run_cases(len(MUTATIONS), seed=7, out_dir=tmp_path, timeout=120, verbose=False)
    assert not result["bad"], result["bad"]
    assert sum(sum(c.values()) for c in result["counts"].values()) == len(MUTATIONS)


def test_option_tables_name_real_options_and_fields() -> None:
    """run.options. tables: each entry is an option of its command and a field of its config; an option
    given on the command line lands on its field, one left out keeps the field's default."""
    import dataclasses

    from streamdeid import cli
    from streamdeid.run.options import LIVE_OPTIONS, RECOVER_OPTIONS, RUN_OPTIONS, live_config, pipeline_config
    from streamdeid.config import PipelineConfig
    from streamdeid.live import LiveConfig

    run_params = {p.name for p in cli.run.params}
    assert set(RUN_OPTIONS) | set(LIVE_OPTIONS) <= run_params
    assert set(RECOVER_OPTIONS) <= {p.name for p in cli.recover.params}
    assert set(LIVE_OPTIONS.values()) <= {f.name for f in dataclasses.fields(LiveConfig)}
    ctx = cli.run.make_context("run", ["in.mp4", "--threshold", "0.4", "--mask-margin", "0.2", "--crf", "0",
                                       "--no-progress", "--segment-time", "5"])
    config, default = pipeline_config(ctx.params, RUN_OPTIONS), PipelineConfig()
    assert (config.detect.score_threshold, config.blend.margin, config.output.crf) == (0.4, 0.2, 0)
    assert config.detect.min_face == default.detect.min_face and config.detect.every is None
    assert config.progress is False and live_config(ctx.params).segment_time == 5


def test_a_4k_video_says_at_the_start_that_it_looks_for_larger_faces_than_min_face(tmp_path: Path) -> None:
    """At 3840x2160 the small-face scan is capped (detect/finder.py MAX_SCAN_SIDE), so faces are looked for
    from 24 px whatever --min-face says; only the summary's last line said so (new-user review). A warning
    says it up front; a 640x360 clip, which the scan covers from 12 px, gets none."""
    big = make_video(tmp_path / "k4.mp4", [np.full((2160, 3840, 3), 90, np.uint8)] * 2, fps=10)
    small = make_video(tmp_path / "s.mp4", [np.full((360, 640, 3), 90, np.uint8)] * 2, fps=10)
    for src, warned in ((big, True), (small, False)):
        proc = run_cli("run", str(src), "-o", str(tmp_path / f"o_{src.name}"), "--min-face", "12", "--no-progress")
        err = proc.stderr.decode()
        assert proc.returncode == 0, err
        assert ("faces are looked for from 24 px, not from --min-face 12" in err) == warned, err


def test_live_only_options_on_a_file_and_clashing_options_are_usage_errors(tmp_path: Path, media: Path) -> None:
    """A live feed's options given for a file were accepted and ignored (--stats-json wrote nothing,
    --stdout-format matroska gave MPEG-TS); --segment-time alone was refused. Each is refused now, before any
    output, and options that do not go together exit 2 as a usage error, as the README says (new-user review)."""
    src = make_video(tmp_path / "in.mp4", face_frames(media, 2))
    out = tmp_path / "out.mp4"
    for flags in (("--stats-json", str(tmp_path / "s.json")), ("--max-latency", "2"), ("--max-retries", "3"),
                  ("--rtsp-transport", "tcp"), ("--read-timeout", "9"), ("--segment-time", "5")):
        proc = run_cli("run", str(src), "-o", str(out), *flags, "--no-progress")
        err = proc.stderr.decode()
        assert proc.returncode == 2 and f"{flags[0]}" in err and "INPUT is a file" in err, err
        assert not out.exists() and not (tmp_path / "s.json").exists()
    proc = run_cli("run", str(src), "-o", "-", "--stdout-format", "matroska", "--no-progress")
    assert proc.returncode == 2 and b"--stdout-format: for a live feed" in proc.stderr, proc.stderr
    photo = str(media / "obama-240p.jpg")
    proc = run_cli("run", str(src), "-o", str(out), "--keep", photo, "--only", photo, "--no-progress")
    assert proc.returncode == 2 and b"exclude each other" in proc.stderr, proc.stderr
    # the defaults still run
    proc = run_cli("run", str(src), "-o", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()


def test_options_that_ask_for_a_vault_the_run_cannot_write_are_warned_before_it(tmp_path: Path, media: Path) -> None:
    """--key-file with -o - and --vault-quality without a key file gave no vault, said only after the whole
    stream was written, or not at all (new-user review). Both are warned before the first frame."""
    src = make_video(tmp_path / "in.mp4", face_frames(media, 2))
    key = tmp_path / "k.key"
    assert run_cli("keygen", str(key)).returncode == 0
    proc = run_cli("run", str(src), "-o", "-", "--key-file", str(key), "--no-progress")
    err = proc.stderr.decode()
    assert proc.returncode == 0 and len(proc.stdout) > 0, err
    assert err.index("WARNING: a stream output (-) gets no recovery vault") < err.index(" frames, "), err
    proc = run_cli("run", str(src), "-o", str(tmp_path / "o.mp4"), "--vault-quality", "lossless", "--no-progress")
    assert proc.returncode == 0 and b"--vault-quality sets how a recovery vault" in proc.stderr, proc.stderr
    proc = run_cli("run", str(src), "-o", str(tmp_path / "o2.mp4"), "--vault-quality", "lossless", "--key-file",
                   str(key), "--no-progress")
    assert proc.returncode == 0 and b"WARNING" not in proc.stderr and (tmp_path / "o2.mp4.sdv").exists(), proc.stderr


def test_encoder_settings_ffmpeg_refuses_are_said_in_words(tmp_path: Path, media: Path) -> None:
    """--preset bogus and --codec mjpeg printed FFmpeg's own call (`avcodec_open2("libx264", {...})
    returned 22`; new-user review). The preset is checked against x264's list; an encoder that refuses its
    settings is named as such. Neither leaves an output."""
    src = make_video(tmp_path / "in.mp4", face_frames(media, 2))
    proc = run_cli("run", str(src), "-o", str(tmp_path / "o.mp4"), "--preset", "bogus", "--no-progress")
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "--preset bogus: libx264 takes ultrafast" in err and "avcodec" not in err, err
    proc = run_cli("run", str(src), "-o", str(tmp_path / "o.avi"), "--codec", "mjpeg", "--no-progress")
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "avcodec_open2" not in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("o.*"))


def test_a_folder_of_photos_shows_its_progress(tmp_path: Path, media: Path) -> None:
    """Videos have a bar each; a folder of photos was silent until its summary (11 s for one crowd photo;
    new-user review). It has a bar over its photos now, and none with --no-progress."""
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        (folder / name).write_bytes((media / "obama-240p.jpg").read_bytes())
    proc = run_cli("run", str(folder), "-o", str(tmp_path / "out"), "--anonymizer", "solid")
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "3/3" in err and "photo" in err, err
    proc = run_cli("run", str(folder), "-o", str(tmp_path / "out2"), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0 and b"3/3" not in proc.stderr, proc.stderr


def test_a_face_on_the_last_frame_only_is_covered(tmp_path: Path, media: Path) -> None:
    """The detector runs on every 2nd frame, and a face is back-filled only from a later run: a face pasted
    on the last frame of a clip, at an odd index, was left bare (red team round 5). The last frame gets a
    detector run now. Graded on the pasted face's own box."""
    from evaluation.recall import changed_share

    face = cv2.resize(cv2.imread(str(media / "obama-240p.jpg")), (160, 120))[10:110, 40:120]  # a portrait
    background = np.full((360, 640, 3), 70, np.uint8)
    cv2.rectangle(background, (100, 200), (500, 330), (40, 90, 140), -1)
    frames = [background.copy() for _ in range(20)]  # the last index is 19: not a detector frame
    frames[-1][120:220, 300:380] = face
    src = make_video(tmp_path / "in.mkv", frames, codec="ffv1")
    out = tmp_path / "out.mkv"
    proc = run_cli("run", str(src), "-o", str(out), "--anonymizer", "solid", "--codec", "ffv1", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()[-300:]
    shown, got = decode(src), decode(out)
    assert len(got) == 20
    assert changed_share(shown[-1], got[-1], (333, 122, 356, 153)) >= 0.5  # the portrait's face, by eye


def test_an_input_named_as_the_outputs_unfinished_copy_is_refused_and_kept(tmp_path: Path, media: Path) -> None:
    """`run a.partial.jpg -o a.jpg` wrote the output over its input (its unfinished copy) and moved it, so the
    input was gone, exit 0; `recover x.partial.mp4 -o x.mp4`, what a run advises after Ctrl-C, did the same
    to the anonymized video."""
    photo = tmp_path / "a.partial.jpg"
    photo.write_bytes((media / "obama-240p.jpg").read_bytes())
    clip = make_video(tmp_path / "x.partial.mp4", face_frames(media, 3))
    before = photo.read_bytes(), clip.read_bytes()
    key = tmp_path / "k.bin"
    assert run_cli("keygen", str(key)).returncode == 0
    for args in (("run", str(photo), "-o", str(tmp_path / "a.jpg")),
                 ("run", str(clip), "-o", str(tmp_path / "x.mp4"), "--overwrite"),
                 ("recover", str(clip), "--key-file", str(key), "-o", str(tmp_path / "x.mp4"))):
        proc = run_cli(*args, "--no-progress") if args[0] == "run" else run_cli(*args)
        err = proc.stderr.decode()
        assert proc.returncode == 1 and "which is the input itself" in err and "Traceback" not in err, err
    assert (photo.read_bytes(), clip.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.partial.jpg", "k.bin", "x.partial.mp4"]


@pytest.mark.parametrize("option, value", [("--threshold", "nan"), ("--hold", "inf"), ("--mask-margin", "nan"),
                                           ("--lookahead", "1e9")])
def test_a_number_that_is_not_finite_is_refused_before_the_run(tmp_path: Path, media: Path, option: str,
                                                               value: str) -> None:
    """`--threshold nan` passed the range check (nan fails no comparison): the run found no face and wrote the
    photo bare, exit 0. inf and huge durations ended in an internal error."""
    out = tmp_path / "o.jpg"
    proc = run_cli("run", str(media / "obama-240p.jpg"), "-o", str(out), option, value)
    assert proc.returncode == 2 and f"Invalid value for '{option}'" in proc.stderr.decode() and not out.exists()
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"input,threshold\n{media / 'obama-240p.jpg'},nan\n")
    proc = run_cli("batch", str(manifest), "-o", str(tmp_path / "b"), "--no-progress")
    err = proc.stderr.decode()
    assert proc.returncode != 0 and "not a finite number" in err and "Traceback" not in err, err


def test_a_vault_that_cannot_be_finished_leaves_no_output(tmp_path: Path, media: Path, monkeypatch) -> None:
    """The output was published before its vault was sealed: a vault that failed then (a full disk) left the
    output under its final name and no vault, exit 1. Now the vault is sealed first."""
    from streamdeid import anonymize
    from streamdeid.config import PipelineConfig
    from streamdeid.types import StreamdeidError
    from streamdeid.vault.writer import VaultWriter

    def full_disk(self) -> None:
        raise StreamdeidError("cannot write vault: No space left on device")

    monkeypatch.setattr(VaultWriter, "close", full_disk)
    src = make_video(tmp_path / "in.mp4", face_frames(media, 3))
    with pytest.raises(StreamdeidError, match="No space left"):
        anonymize(str(src), tmp_path / "out.mp4", PipelineConfig(), key_file=str(tmp_path / "k.bin"), new_key=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]  # the key the run made opens nothing: gone too


def test_keys_and_originals_are_never_written_to_stdout(tmp_path: Path) -> None:
    """`export-key -o -` wrote a key file named "-"; `recover -o -` said "unsupported output extension ''"."""
    for args in (("export-key", "--key-file", "k.bin", "--vault", "v.sdv", "--track", "1", "-o", "-"),
                 ("recover", "x.mp4", "--key-file", "k.bin", "-o", "-")):
        proc = run_cli(*args)
        err = proc.stderr.decode()
        assert proc.returncode == 2 and ("not to stdout" in err or "give -o PATH" in err), err
        assert len(err.strip().splitlines()) == 1 and not (Path.cwd() / "-").exists(), err


def test_a_key_made_by_a_run_that_kept_nothing_is_removed(tmp_path: Path, media: Path) -> None:
    """`run BAD --key-file new.bin --new-key` (a missing file, one that is no video, a folder of such, a camera
    nobody answers at) failed and left the key it had made: a key file that opens nothing, beside a user who
    may take it for the one that opens their video. It is removed with the run; a key that was there before
    the run, or one a vault of the run needs (a folder whose good file was done), is kept."""
    (tmp_path / "bad.mp4").write_bytes(b"this is not a video\n" * 50)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bad.mp4").write_bytes(b"this is not a video\n" * 50)
    key = tmp_path / "new.bin"
    for args, code in (((str(tmp_path / "missing.mp4"),), 1), ((str(tmp_path / "bad.mp4"),), 1),
                       ((str(folder), "-o", str(tmp_path / "outf")), 1),
                       (("rtsp://127.0.0.1:1/x", "-o", str(tmp_path / "live.mp4"), "--max-retries", "0"), 3)):
        proc = run_cli("run", *args, "--key-file", str(key), "--new-key", "--no-progress")
        err = _err_line(proc)
        assert proc.returncode == code and "created a new master key" in err, err
        assert not key.exists(), (args, err)
        assert "removed" in err and "new.bin" in err, err
    # a key that was there before a failed run is the user's: kept as it was
    assert run_cli("keygen", str(key)).returncode == 0
    secret = key.read_bytes()
    proc = run_cli("run", str(tmp_path / "bad.mp4"), "--key-file", str(key), "--new-key", "--no-progress")
    assert proc.returncode == 1 and key.read_bytes() == secret, _err_line(proc)
    key.unlink()
    # a folder with a good file: its vault needs the new key, kept though another file failed
    make_video(folder / "a.mp4", face_frames(media, 3))
    proc = run_cli("run", str(folder), "-o", str(tmp_path / "out2"), "--key-file", str(key), "--new-key",
                   "--no-progress")
    assert proc.returncode == 1 and key.exists() and (tmp_path / "out2" / "a.mp4.sdv").exists(), _err_line(proc)
    key.unlink()
    # Ctrl-C midway: the partial output's vault needs the new key
    out = tmp_path / "stopped.mp4"
    proc, err = _stopped_midway(signal.SIGINT, str(_long_input(tmp_path, media)), "-o", str(out), "--key-file",
                                str(key), "--new-key", "--anonymizer", "solid")
    assert proc.returncode == 130 and key.exists(), err.decode()
    assert (tmp_path / "stopped.partial.mp4.sdv").exists(), err.decode()
