"""Reader/writer round trips on small synthetic videos made with PyAV."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from streamdeid.config import OutputConfig
from streamdeid.types import Frame, StreamdeidError
from streamdeid.video import (
    AudioPacket,
    VideoWriter,
    is_image,
    list_media,
    open_source,
    read_image,
    write_image,
)
from streamdeid.video.encoding import choose_video_encoding

from conftest import MEDIA  # noqa: E402

HAMILTON = MEDIA / "short_hamilton_clip.mp4"
VFR_PTS = [0, 1, 3, 4, 7]


def _image(i: int, w: int, h: int, noise: bool = False) -> np.ndarray:
    if noise:
        return np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 4 + i * 20) % 256, (y * 4) % 256, np.full_like(x, (i * 40) % 256)], -1)
    return img.astype(np.uint8)


def make_video(
    path: Path,
    size: tuple[int, int] = (64, 48),
    pts: list[int] = VFR_PTS,
    time_base: Fraction = Fraction(1, 25),
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    audio_seconds: float = 0.0,
    rotation: int = 0,
    noise: bool = False,
) -> list[np.ndarray]:
    """Write a test video with the given pts; returns the BGR images used."""
    w, h = size
    images = [_image(i, w, h, noise) for i in range(len(pts))]
    with av.open(str(path), "w") as out:
        vs = out.add_stream(codec, rate=25)
        vs.width, vs.height, vs.pix_fmt = w, h, pix_fmt
        vs.time_base = vs.codec_context.time_base = time_base
        if rotation:
            vs.set_display_rotation(rotation)
        aus = out.add_stream("aac", rate=44100, layout="mono") if audio_seconds else None
        for img, p in zip(images, pts):
            vf = av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format=pix_fmt)
            vf.pts, vf.time_base = p, time_base
            out.mux(vs.encode(vf))
        if aus is not None:
            _write_sine(out, aus, audio_seconds)
        out.mux(vs.encode(None))
    return images


def _write_sine(out: av.container.OutputContainer, stream: av.stream.Stream, seconds: float) -> None:
    n = int(44100 * seconds)
    samples = (0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / 44100)).astype(np.float32)
    for start in range(0, n, 1024):
        af = av.AudioFrame.from_ndarray(samples[None, start : start + 1024], format="fltp", layout="mono")
        af.sample_rate, af.pts, af.time_base = 44100, start, Fraction(1, 44100)
        out.mux(stream.encode(af))
    out.mux(stream.encode(None))


def read_all(path: Path) -> tuple[list[Frame], list[AudioPacket]]:
    with open_source(str(path)) as src:
        items = list(src)
    return [i for i in items if isinstance(i, Frame)], [i for i in items if isinstance(i, AudioPacket)]


def transcode(src_path: Path, dst_path: Path, **config: object) -> VideoWriter:
    with open_source(str(src_path)) as src:
        writer = VideoWriter(dst_path, src, OutputConfig(**config))
        for item in src:
            writer.write(item)
        writer.close(success=True)
    return writer


def _seconds(frames: list[Frame]) -> list[Fraction]:
    return [f.pts * f.time_base for f in frames]


# --------------------------------------------------------------- round trips
@pytest.mark.parametrize("ext", [".mp4", ".mkv"])
@pytest.mark.parametrize("time_base,pts", [(Fraction(1, 25), VFR_PTS), (Fraction(1, 1000), [0, 40, 120, 160, 280])])
def test_vfr_roundtrip_keeps_pts_and_audio(tmp_path: Path, ext: str, time_base: Fraction, pts: list[int]) -> None:
    source = tmp_path / f"in{ext}"
    make_video(source, pts=pts, time_base=time_base, audio_seconds=0.4)
    frames_in, audio_in = read_all(source)
    assert _seconds(frames_in) == [p * time_base for p in pts]
    writer = transcode(source, tmp_path / f"out{ext}")
    assert writer.audio_mode == "copy" and writer.frames_written == len(pts)
    frames_out, audio_out = read_all(tmp_path / f"out{ext}")
    assert [(f.index, f.pts, f.time_base) for f in frames_out] == [(f.index, f.pts, f.time_base) for f in frames_in]
    assert frames_out[0].image.shape == (48, 64, 3)
    assert len(audio_out) == len(audio_in) > 10
    assert [(a.pts, a.packet.duration) for a in audio_out] == [(a.pts, a.packet.duration) for a in audio_in]
    assert not (tmp_path / f"out.partial{ext}").exists()


def test_reader_properties(tmp_path: Path) -> None:
    source = tmp_path / "in.mp4"
    make_video(source, pts=list(range(10)), audio_seconds=0.2, rotation=90)
    with open_source(str(source)) as src:
        # frames come upright, as a player shows them: the stored 64 x 48 turned a quarter
        assert (src.width, src.height, src.rotation, src.is_live) == (48, 64, 90, False)
        assert src.has_audio and src.audio_stream is not None
        assert src.average_rate == 25 and src.frame_count == 10
        assert src.duration == pytest.approx(0.4, abs=0.05)
        assert "mp4" in src.format_name
        first = next(src.frames())
        assert first.index == 0 and first.image.dtype == np.uint8 and first.image.shape == (64, 48, 3)
    transcode(source, tmp_path / "out.mp4")
    with open_source(str(tmp_path / "out.mp4")) as out:
        # stored as the input was, under the same display matrix
        stream = out.video_stream.codec_context
        assert out.rotation == 90 and (stream.width, stream.height) == (64, 48)
        assert (out.width, out.height) == (48, 64)


def test_a_codec_mpegts_cannot_carry_is_refused_before_writing(tmp_path: Path) -> None:
    """FFV1 in MPEG-TS left a file without a video stream that the run reported written."""
    source = tmp_path / "in.mp4"
    make_video(source, pts=list(range(5)))
    with pytest.raises(StreamdeidError, match="codec ffv1 cannot be stored in .ts files"):
        transcode(source, tmp_path / "out.ts", codec="ffv1")
    assert not list(tmp_path.glob("out*"))
    transcode(source, tmp_path / "ok.ts")  # H.264 goes in
    assert len(read_all(tmp_path / "ok.ts")[0]) == 5


def test_mpegts_aac_goes_into_mp4(tmp_path: Path) -> None:
    """MPEG-TS (a pipe, `-o -`) carries AAC with ADTS headers, which MP4 refuses as they are: the audio is
    re-encoded there (the run failed with "Operation not permitted"), copied into Matroska."""
    source = tmp_path / "in.ts"
    make_video(source, pts=list(range(25)), audio_seconds=1.0)
    for ext, mode in ((".mp4", "reencode"), (".mkv", "copy")):
        writer = transcode(source, tmp_path / f"out{ext}")
        assert writer.audio_mode == mode
        with av.open(str(tmp_path / f"out{ext}")) as out:
            assert sum(1 for _ in out.decode(audio=0)) >= 40  # 1 s of 1024-sample AAC frames at 44.1 kHz


def test_odd_size_keeps_resolution(tmp_path: Path) -> None:
    source = tmp_path / "odd.mkv"
    make_video(source, size=(641, 363), pts=[0, 1, 2], codec="ffv1", pix_fmt="yuv420p")
    frames_in, _ = read_all(source)
    assert frames_in[0].image.shape == (363, 641, 3)
    writer = transcode(source, tmp_path / "odd.mp4")
    assert writer.pix_fmt == "yuv444p"
    frames_out, _ = read_all(tmp_path / "odd.mp4")
    assert len(frames_out) == 3 and frames_out[0].image.shape == (363, 641, 3)
    diff = np.abs(frames_out[1].image.astype(int) - frames_in[1].image.astype(int)).mean()
    assert diff < 4


@pytest.mark.parametrize("ext,codec,pix_fmt", [(".mkv", "ffv1", "bgr0"), (".mkv", "libx264", "bgr0")])
def test_lossless_roundtrip_is_bit_exact(tmp_path: Path, ext: str, codec: str, pix_fmt: str) -> None:
    source = tmp_path / "src.mkv"
    make_video(source, size=(65, 47), codec="ffv1", pix_fmt="bgr0", noise=True)
    frames_in, _ = read_all(source)
    transcode(source, tmp_path / f"out{ext}", codec=codec, pix_fmt=pix_fmt, crf=0)
    frames_out, _ = read_all(tmp_path / f"out{ext}")
    assert len(frames_out) == len(frames_in) == 5
    for a, b in zip(frames_in, frames_out):
        assert np.array_equal(a.image, b.image)


def test_yuv444_qp0_has_no_colour_drift(tmp_path: Path) -> None:
    """YUV is lossless at qp 0; only BGR<->YUV rounding remains, unbiased."""
    source = tmp_path / "src.mkv"
    make_video(source, size=(64, 48), codec="ffv1", pix_fmt="bgr0", noise=True)
    frames_in, _ = read_all(source)
    transcode(source, tmp_path / "out.mp4", pix_fmt="yuv444p", crf=0)
    frames_out, _ = read_all(tmp_path / "out.mp4")
    diff = np.stack([b.image.astype(int) - a.image.astype(int) for a, b in zip(frames_in, frames_out)])
    assert np.abs(diff).mean() < 1.0 and abs(diff.mean()) < 0.5


def test_webm_reencodes_audio_and_gif_output(tmp_path: Path) -> None:
    source = tmp_path / "in.mp4"
    make_video(source, pts=list(range(10)), audio_seconds=0.4)
    writer = transcode(source, tmp_path / "out.webm", codec="libvpx-vp9")
    assert writer.audio_mode == "reencode"
    frames, audio = read_all(tmp_path / "out.webm")
    with open_source(str(tmp_path / "out.webm")) as out:
        assert out.audio_stream.codec_context.name == "opus"
    assert len(frames) == 10 and sum(a.packet.duration for a in audio) * audio[0].time_base > Fraction(3, 10)
    writer = transcode(source, tmp_path / "out.gif")
    assert writer.audio_mode == "none"
    frames, _ = read_all(tmp_path / "out.gif")
    assert len(frames) == 10 and frames[0].image.shape == (48, 64, 3)
    assert [float(s) for s in _seconds(frames)] == pytest.approx([i * 0.04 for i in range(10)], abs=0.011)


def test_choose_encoding_defaults() -> None:
    enc = choose_video_encoding(OutputConfig(), 64, 48, ".mp4")
    assert (enc.codec, enc.pix_fmt, enc.options["crf"]) == ("libx264", "yuv420p", "18")
    lossless = choose_video_encoding(OutputConfig(crf=0, pix_fmt="yuv444p"), 64, 48, ".mkv")
    assert lossless.options["qp"] == "0"
    with pytest.raises(StreamdeidError):
        choose_video_encoding(OutputConfig(codec="nope"), 64, 48, ".mp4")
    with pytest.raises(StreamdeidError):
        choose_video_encoding(OutputConfig(), 64, 48, ".xyz")
    # the default codec goes where it can; a codec the user named that the container cannot hold is refused
    # (`--codec libx265 -o x.webm` was encoded VP9, and `--codec libx264 -o x.gif` GIF, without a word)
    assert choose_video_encoding(OutputConfig(), 64, 48, ".webm").codec == "libvpx-vp9"
    assert choose_video_encoding(OutputConfig(), 64, 48, ".gif").codec == "gif"
    for ext in (".webm", ".gif"):
        with pytest.raises(StreamdeidError, match="--codec libx265"):
            choose_video_encoding(OutputConfig(codec="libx265"), 64, 48, ext)
    with pytest.raises(StreamdeidError, match="takes 0-51"):  # x264 encoded crf 99 as 51
        choose_video_encoding(OutputConfig(crf=60), 64, 48, ".mp4")
    assert choose_video_encoding(OutputConfig(crf=60), 64, 48, ".webm").codec == "libvpx-vp9"


# ---------------------------------------------------------- output safety
def test_overwrite_refused_before_writing(tmp_path: Path) -> None:
    source = tmp_path / "in.mkv"
    make_video(source)
    target = tmp_path / "out.mp4"
    target.write_bytes(b"precious")
    with open_source(str(source)) as src:
        with pytest.raises(StreamdeidError, match="exists"):
            VideoWriter(target, src, OutputConfig())
    assert target.read_bytes() == b"precious" and not (tmp_path / "out.partial.mp4").exists()
    transcode(source, target, overwrite=True)
    assert len(read_all(target)[0]) == 5
    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(StreamdeidError, match="exists"):
        write_image(target, image)


def test_close_failure_deletes_and_abort_keeps_partial(tmp_path: Path) -> None:
    source = tmp_path / "in.mkv"
    make_video(source, pts=list(range(30)))
    with open_source(str(source)) as src:
        frames = list(src.frames())
        writer = VideoWriter(tmp_path / "a.mp4", src, OutputConfig())
        for f in frames:
            writer.write_frame(f)
        assert writer.close(success=False) is None
        writer = VideoWriter(tmp_path / "b.mkv", src, OutputConfig())
        for f in frames[:12]:
            writer.write_frame(f)
        partial = writer.abort_keep_partial()
    assert not (tmp_path / "a.mp4").exists() and not (tmp_path / "a.partial.mp4").exists()
    assert partial == tmp_path / "b.partial.mkv" and not (tmp_path / "b.mkv").exists()
    assert len(read_all(partial)[0]) == 12
    with open_source(str(source)) as src:
        empty = VideoWriter(tmp_path / "c.mp4", src, OutputConfig())
        with pytest.raises(StreamdeidError, match="no video frames"):
            empty.close(success=True)
        assert not VideoWriter(tmp_path / "d.mp4", src, OutputConfig()).abort_keep_partial().exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.partial.mkv", "in.mkv"]


def _write_and_die(source: Path, out: Path) -> None:
    """A process writes ``source`` into ``out`` and dies before closing the writer (a killed run)."""
    script = textwrap.dedent(
        f"""
        import os
        from streamdeid.config import OutputConfig
        from streamdeid.video import VideoWriter, open_source
        src = open_source({str(source)!r})
        w = VideoWriter({str(out)!r}, src, OutputConfig())
        for f in src.frames():
            w.write(f)
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_killed_writer_leaves_readable_fragmented_mp4(tmp_path: Path) -> None:
    source = tmp_path / "in.mkv"
    make_video(source, pts=list(range(75)))
    _write_and_die(source, tmp_path / "out.mp4")
    assert not (tmp_path / "out.mp4").exists()
    frames, _ = read_all(tmp_path / "out.partial.mp4")
    assert 25 <= len(frames) <= 75


def test_a_partial_name_is_taken_over_only_from_a_run_of_ours(tmp_path: Path) -> None:
    """An output is written to out.partial.mp4 first. A file of the user's with that name (or the input itself)
    was written over and deleted, exit 0; one a killed run left is ours and is taken over."""
    source = tmp_path / "in.mkv"
    make_video(source, pts=list(range(75)))
    left = tmp_path / "killed.partial.mp4"
    _write_and_die(source, tmp_path / "killed.mp4")
    assert left.stat().st_size > 0
    early = tmp_path / "early.mkv"  # killed before its first cluster: tags and no frame, so no video to open
    make_video(tmp_path / "twenty.mkv", pts=list(range(20)))
    _write_and_die(tmp_path / "twenty.mkv", early)
    assert 0 < (tmp_path / "early.partial.mkv").stat().st_size < 4096
    with open_source(str(tmp_path / "twenty.mkv")) as src:
        writer = VideoWriter(early, src, OutputConfig())  # taken over
        for f in src.frames():
            writer.write_frame(f)
        assert writer.close() == early
    (tmp_path / "twenty.mkv").unlink()
    early.unlink()
    mine = tmp_path / "mine.partial.mp4"
    mine.write_bytes(b"MY NOTES")
    still = tmp_path / "photo.partial.png"
    write_image(tmp_path / "photo.png", _image(1, 33, 21))
    (tmp_path / "photo.png").rename(still)
    before = still.read_bytes()
    # a folder lists the user's file of that name and the photo, not the killed run's leftover
    assert [p.name for p in list_media(tmp_path)] == ["in.mkv", "mine.partial.mp4", "photo.partial.png"]
    with open_source(str(source)) as src:
        with pytest.raises(StreamdeidError, match="not an unfinished output of streamdeid"):
            VideoWriter(tmp_path / "mine.mp4", src, OutputConfig())
        writer = VideoWriter(tmp_path / "killed.mp4", src, OutputConfig())  # the leftover is taken over
        for f in src.frames():
            writer.write_frame(f)
        assert writer.close() == tmp_path / "killed.mp4"
    assert mine.read_bytes() == b"MY NOTES" and not left.exists()
    assert len(read_all(tmp_path / "killed.mp4")[0]) == 75
    with pytest.raises(StreamdeidError, match="not an unfinished output of streamdeid"):
        write_image(tmp_path / "photo.png", _image(2, 33, 21))
    assert still.read_bytes() == before and not (tmp_path / "photo.png").exists()


@pytest.mark.parametrize("code, published", [(errno.ENOSPC, False), (errno.EINVAL, True)])
def test_a_disk_that_fails_the_finishing_copy_leaves_no_output(tmp_path: Path, monkeypatch, code: int,
                                                               published: bool) -> None:
    """A full disk failed the MP4's finishing copy, and the fragmented file, cut short by the same disk, was
    published with a warning, exit 0. Now a failed disk leaves nothing; another failure of the copy still
    publishes the fragmented file, which is whole."""
    import streamdeid.video.writer as writer_module

    def failing_copy(src, dst, *args):
        Path(dst).write_bytes(b"half")
        av.error.err_check(-code)

    monkeypatch.setattr(writer_module, "faststart_copy", failing_copy)
    source = tmp_path / "in.mkv"
    make_video(source, pts=list(range(10)))
    with open_source(str(source)) as src:
        writer = VideoWriter(tmp_path / "out.mp4", src, OutputConfig())
        for f in src.frames():
            writer.write_frame(f)
        if published:
            assert writer.close() == tmp_path / "out.mp4"
        else:
            with pytest.raises(StreamdeidError, match="cannot finish .*out.mp4"):
                writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mkv"] + (["out.mp4"] if published else [])


def test_write_image_and_folder_listing(tmp_path: Path) -> None:
    image = _image(1, 33, 21)
    write_image(tmp_path / "f10.png", image)
    write_image(tmp_path / "f2.png", image)
    (tmp_path / "clip.mp4").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("x")
    assert np.array_equal(read_image(tmp_path / "f2.png"), image)
    assert [p.name for p in list_media(tmp_path)] == ["clip.mp4", "f2.png", "f10.png"]
    assert is_image("A.JPG") and not is_image("a.mp4")
    with pytest.raises(StreamdeidError):
        read_image(tmp_path / "notes.txt")


def test_a_truncated_jpeg_is_refused_a_whole_one_read(tmp_path: Path) -> None:
    # a progressive JPEG with restart markers and bytes after its end (as a phone's motion photo has)
    ok, encoded = cv2.imencode(".jpg", _image(3, 90, 120), [cv2.IMWRITE_JPEG_PROGRESSIVE, 1,
                                                             cv2.IMWRITE_JPEG_RST_INTERVAL, 4])
    whole = encoded.tobytes()
    (tmp_path / "whole.jpg").write_bytes(whole + b"ftypmp42" * 64)
    assert read_image(tmp_path / "whole.jpg").shape == (120, 90, 3)
    for share in (0.05, 0.5, 0.99):
        (tmp_path / "cut.jpg").write_bytes(whole[: int(len(whole) * share)])
        with pytest.raises(StreamdeidError, match="truncated JPEG"):
            read_image(tmp_path / "cut.jpg")


# -------------------------------------------------------------- bad inputs
def test_bad_inputs_raise_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "text.mp4").write_text("this is not a video\n" * 50)
    (tmp_path / "empty.mp4").write_bytes(b"")
    audio_only = tmp_path / "audio.m4a"
    with av.open(str(audio_only), "w") as out:
        _write_sine(out, out.add_stream("aac", rate=44100, layout="mono"), 0.2)
    cases = {
        "missing.mp4": "not found",
        "text.mp4": "cannot read",
        "empty.mp4": "empty",
        "audio.m4a": "no video stream",
        ".": "directory",
    }
    for name, message in cases.items():
        with pytest.raises(StreamdeidError, match=message) as info:
            open_source(str(tmp_path / name))
        assert "\n" not in str(info.value)


def test_truncated_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mkv, mp4 = tmp_path / "in.mkv", tmp_path / "in.mp4"
    make_video(mkv, pts=list(range(100)), noise=True)
    make_video(mp4, pts=list(range(100)), noise=True)
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(mkv.read_bytes()[: mkv.stat().st_size // 2])
    with caplog.at_level(logging.WARNING):
        frames, _ = read_all(cut)
    assert 10 < len(frames) < 100
    assert "truncated" in caplog.text
    cut_mp4 = tmp_path / "cut.mp4"  # moov at the end: nothing is recoverable
    cut_mp4.write_bytes(mp4.read_bytes()[: mp4.stat().st_size // 2])
    with pytest.raises(StreamdeidError):
        open_source(str(cut_mp4))


def test_corrupt_middle_decodes_without_crash(tmp_path: Path) -> None:
    mkv = tmp_path / "in.mkv"
    make_video(mkv, pts=list(range(60)), noise=True)
    data = bytearray(mkv.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4000] = np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes()
    (tmp_path / "bad.mkv").write_bytes(bytes(data))
    frames, _ = read_all(tmp_path / "bad.mkv")
    assert 10 < len(frames) <= 60


@pytest.mark.parametrize("fmt", ["matroska", "mpegts"])
def test_stdin_stream(tmp_path: Path, fmt: str) -> None:
    ext = ".mkv" if fmt == "matroska" else ".ts"
    source = tmp_path / f"in{ext}"
    make_video(source, pts=list(range(12)), audio_seconds=0.3)
    script = (
        "from streamdeid.video import open_source, AudioPacket\n"
        "s = open_source('-')\n"
        "items = list(s)\n"
        "print(s.is_live, sum(not isinstance(i, AudioPacket) for i in items), s.has_audio)\n"
    )
    with open(source, "rb") as stdin:
        out = subprocess.run([sys.executable, "-c", script], stdin=stdin, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "12", "True"], out.stderr


# ------------------------------------------------------------- real media
@pytest.mark.skipif(not HAMILTON.exists(), reason=f"shared test clip {HAMILTON} is not present")
def test_hamilton_clip_audio_copied(tmp_path: Path) -> None:
    frames_in, audio_in = read_all(HAMILTON)
    assert len(frames_in) == 275
    transcode(HAMILTON, tmp_path / "out.mp4", preset="ultrafast")
    frames_out, audio_out = read_all(tmp_path / "out.mp4")
    assert len(frames_out) == 275 and len(audio_out) == len(audio_in)
    assert [f.pts for f in frames_out] == [f.pts for f in frames_in]
    with open_source(str(tmp_path / "out.mp4")) as out:
        assert out.audio_stream.codec_context.name == "aac"
        assert (out.width, out.height) == (640, 360)


def test_segment_time_warning_on_a_push_url_hides_the_password(caplog) -> None:
    from streamdeid.config import OutputConfig
    from streamdeid.live.outputs import SegmentRecorder

    with caplog.at_level("WARNING"):
        out = SegmentRecorder("rtsp://cam:s3cret@example.invalid/live", None, OutputConfig(), segment_time=10)
    assert out.segment_time is None
    assert "applies to file recordings" in caplog.text and "s3cret" not in caplog.text


def test_colour_tags_go_from_the_source_to_the_output(tmp_path: Path) -> None:
    """hamilton is tagged BT.709; its output must be too, or players (and the vault's recovery) convert its
    colours with another matrix. A change to the reader once set the tags only on a frame that changed size,
    so every output went untagged: the privacy check's SFace then matched a hamilton face it had not."""
    src = MEDIA / "short_hamilton_clip.mp4"
    with open_source(str(src)) as source:
        assert (source.color.colorspace, source.color.color_primaries, source.color.color_trc) == (1, 1, 1)
    transcode(src, tmp_path / "out.mp4")
    with av.open(str(tmp_path / "out.mp4")) as out:
        frame = next(out.decode(video=0))
        assert (int(frame.colorspace), int(frame.color_primaries), int(frame.color_trc)) == (1, 1, 1)


def test_a_mirrored_frame_comes_contiguous() -> None:
    """A mirrored frame was a negative-stride view of the decoded one: every later stage copied or took a slow
    path, and a mirrored crowd pan ran at 1.6 fps against 13.5 for the same frames stored upright."""
    from streamdeid.video.rotation import Orientation

    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    for turns in range(4):
        shown = Orientation(turns, True).upright(image)
        assert shown.flags["C_CONTIGUOUS"], turns
        assert np.array_equal(shown, np.rot90(image[:, ::-1], turns))


def test_a_named_pipe_as_input_says_to_use_stdin(tmp_path) -> None:
    """A named pipe (or bash's <(cmd), a /dev/fd pipe) was reported as an empty file (new-user review): it has
    no size. It is named for what it is, with the command that reads it."""
    import os
    import threading

    from conftest import run_cli

    fifo = tmp_path / "feed"
    os.mkfifo(fifo)
    # the run only stats the pipe; a writer is opened so that nothing could block on it either way
    opened = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)
    opened.start()
    proc = run_cli("run", str(fifo), "-o", str(tmp_path / "o.mp4"), "--no-progress")
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "is a pipe, not a file" in err and "streamdeid run - -o" in err, err
    if opened.is_alive():  # release the writer thread
        open(fifo, "rb").close()


def test_libx265_output_is_quiet_and_crf_0_is_lossless_to_x265(tmp_path) -> None:
    """--codec libx265 printed x265's 25 lines of settings on every run (new-user review); and its crf 0 is
    not lossless (x265 wants lossless=1), though the run took it for lossless output (encoding.is_lossless)."""
    import av

    from conftest import run_cli
    from streamdeid.config import OutputConfig
    from streamdeid.video.encoding import choose_video_encoding

    src = tmp_path / "in.mkv"
    make_video(src, size=(96, 64), pts=[0, 1, 2])
    proc = run_cli("run", str(src), "-o", str(tmp_path / "o.mkv"), "--codec", "libx265", "--no-progress")
    assert proc.returncode == 0 and b"x265 [info]" not in proc.stderr, proc.stderr.decode()[-500:]
    with av.open(str(tmp_path / "o.mkv")) as c:
        assert c.streams.video[0].codec_context.name == "hevc"
    enc = choose_video_encoding(OutputConfig(codec="libx265", crf=0), 96, 64, ".mkv")
    assert "lossless=1" in enc.options["x265-params"] and "crf" not in enc.options


def test_an_rgb_tagged_source_writes_a_yuv_output(tmp_path) -> None:
    """A VP9 file stored as gbrp (tagged colorspace RGB) failed at its first frame: the output copied the RGB
    tag onto its YUV stream and libvpx refused every frame ("Invalid data"; red team round 5). Its YUV
    output is left untagged now, and plays."""
    from conftest import run_cli

    src = tmp_path / "rgb.webm"
    make_video(src, size=(96, 64), pts=[0, 1, 2, 3], codec="libvpx-vp9", pix_fmt="gbrp")
    with av.open(str(src)) as c:
        assert c.streams.video[0].codec_context.colorspace == 0  # RGB, as libvpx tags gbrp
    out = tmp_path / "o.webm"
    proc = run_cli("run", str(src), "-o", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()[-400:]
    with av.open(str(out)) as c:
        assert c.streams.video[0].codec_context.pix_fmt == "yuv420p"
        assert sum(1 for _ in c.decode(video=0)) == 4
