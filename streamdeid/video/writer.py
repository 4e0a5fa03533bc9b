"""Encode ``Frame`` objects and mux audio into an output video, crash-safely.

The output is written to ``<stem>.partial<ext>`` next to the final path and
renamed only on success, so a half-written file never masquerades as a
finished one. MP4/MOV are fragmented and packets are flushed as written, so
even a killed process leaves a playable partial file; a finished one is
copied into a plain MP4 with its index first (video/finish.py), so browsers
and players see its duration and can seek.

Frame pts/time_base go to the encoder unchanged (rescaled only if the
container forces another time base), preserving variable frame rate and the
frame count. Audio packets are stream-copied when the output container
accepts their codec, otherwise decoded and re-encoded (e.g. AAC -> Opus for
WebM). One thread at a time may use a writer.
"""

from __future__ import annotations

import errno
import logging
import os
from fractions import Fraction
from pathlib import Path
from typing import Protocol

import av
import cv2
import numpy as np
from av.video.reformatter import Interpolation

from streamdeid.config import OutputConfig
from streamdeid.types import Frame, OutputClosed, StreamdeidError
from streamdeid.video import gif
from streamdeid.video.encoding import (
    MP4_LIKE,
    UNQUERYABLE,
    VideoEncoding,
    choose_video_encoding,
    muxer_options,
    output_format,
    pick_audio_encoder,
)
from streamdeid.video.finish import faststart_copy
from streamdeid.video.reader import AudioPacket, ColorInfo, error_reason, redact_url

log = logging.getLogger(__name__)

_AV_ERRORS = (av.FFmpegError, OSError, ValueError)
GIF_TIME_BASE = Fraction(1, 100)  # the GIF format stores delays in 1/100 s
# Correct rounding in BGR->YUV: swscale's default truncates (colours drift
# darker at each encode); this costs little next to the encoder itself.
BGR_TO_YUV = Interpolation.BILINEAR | Interpolation.ACCURATE_RND


class VideoTemplate(Protocol):
    """What the writer needs to know about its input (a ``VideoSource`` fits)."""

    width: int
    height: int
    time_base: Fraction
    average_rate: Fraction | None
    rotation: int
    color: ColorInfo
    audio_stream: av.audio.stream.AudioStream | None


def partial_path_for(path: Path) -> Path:
    """``out.mp4`` -> ``out.partial.mp4``: same directory, so the final
    rename is atomic, and the same extension, so players still open it."""
    return path.with_name(f"{path.stem}.partial{path.suffix}")


def claim_partial(partial: Path, final: Path) -> int:
    """Create or open ``partial`` and hold an exclusive lock on it for this run (an fd to close when
    done). Two runs writing one output name would otherwise write one file and both "finish" it: the
    second is told at once instead. A partial file left by a run that died is not locked, and is
    reused. Filesystem errors read as what they are."""
    import fcntl

    try:
        fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StreamdeidError(f"cannot create {partial}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StreamdeidError(f"another run is writing {final} (it holds {partial})") from None
    return fd


def publish(finished: Path, final: Path, overwrite: bool) -> None:
    """Move ``finished`` to ``final``. Without ``overwrite`` it never replaces a file that appeared
    there meanwhile (a hard link fails on an existing name: no window between test and rename)."""
    try:
        if overwrite:
            os.replace(finished, final)
            return
        try:
            os.link(finished, final)
        except FileExistsError:
            raise StreamdeidError(f"{final} appeared while this run was writing it; this run's result "
                                  f"is kept at {finished}") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            if final.exists():  # no hard links on this filesystem: test, then rename
                raise StreamdeidError(f"{final} appeared while this run was writing it; this run's "
                                      f"result is kept at {finished}") from None
            os.replace(finished, final)
            return
        finished.unlink()
    except OSError as exc:
        raise StreamdeidError(f"cannot move {finished} to {final}: {exc.strerror}") from None


def check_overwrite(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise StreamdeidError(f"output exists: {path} (pass --overwrite to replace it)")
    if path.is_dir():
        raise StreamdeidError(f"output path is a directory: {path}")
    if not path.parent.is_dir():
        raise StreamdeidError(f"output folder does not exist: {path.parent}")


class VideoWriter:
    """Encodes frames (and copies audio) into ``path`` via a partial file.

    Call :meth:`close` with ``success=True`` to publish the file, ``False``
    to delete it, or :meth:`abort_keep_partial` to finalize and keep the
    partial file (e.g. on Ctrl-C). Used as a context manager it closes with
    ``success`` = "no exception".
    """

    def __init__(self, path: str | os.PathLike[str], template: VideoTemplate, config: OutputConfig,
                 metadata: dict[str, str] | None = None) -> None:
        self.path = Path(path)
        self._config = config
        self._template = template
        self._closed = False
        self._last_pts: int | None = None
        self._frames_written = 0
        self._audio_out: av.stream.Stream | None = None
        self._audio_copy = False
        self._claim: int | None = None
        self._container = self._open_container()  # also sets partial_path, _ext and _encoding
        self._metadata = dict(metadata or {})  # container tags, e.g. the vault's video id
        self._container.metadata.update(self._metadata)
        try:
            self._video = self._add_video_stream(self._encoding)
            self._add_audio_stream(template.audio_stream)
        except BaseException:
            self._discard()
            raise

    def _open_container(self) -> av.container.OutputContainer:
        """Claim the partial file beside ``path`` and open it (a StreamWriter opens its target instead)."""
        self.partial_path = partial_path_for(self.path)
        self._ext = self.path.suffix.lower()
        fmt = output_format(self._ext)
        check_overwrite(self.path, self._config.overwrite)
        self._encoding = choose_video_encoding(self._config, self._template.width, self._template.height, self._ext)
        self._claim = claim_partial(self.partial_path, self.path)
        try:
            return av.open(str(self.partial_path), mode="w", format=fmt, options=muxer_options(self._ext))
        except _AV_ERRORS as exc:
            self._release()
            raise StreamdeidError(f"cannot create {self.partial_path}: {error_reason(exc)}") from None

    # ------------------------------------------------------------ public API
    @property
    def frames_written(self) -> int:
        return self._frames_written

    @property
    def codec(self) -> str:
        return self._encoding.codec

    @property
    def pix_fmt(self) -> str:
        return self._encoding.pix_fmt

    @property
    def audio_mode(self) -> str:
        """``"copy"``, ``"reencode"`` or ``"none"``."""
        if self._audio_out is None:
            return "none"
        return "copy" if self._audio_copy else "reencode"

    def write(self, item: Frame | AudioPacket) -> None:
        """Write one reader item: a ``Frame`` is encoded, an ``AudioPacket``
        copied or re-encoded. Lets a sink forward everything it receives."""
        if isinstance(item, Frame):
            self.write_frame(item)
        else:
            self.write_audio(item)

    write_item = write

    def write_frame(self, frame: Frame) -> None:
        """Encode one frame; its size must equal the template's."""
        h, w = frame.image.shape[:2]
        if (w, h) != (self._template.width, self._template.height):
            raise StreamdeidError(
                f"frame {frame.index} is {w}x{h}, output is {self._template.width}x{self._template.height}"
            )
        vf = self._to_video_frame(frame.image)
        vf.pts = self._output_pts(frame)
        vf.time_base = self._video.codec_context.time_base
        self._mux(self._video.encode(vf))
        self._frames_written += 1

    def write_audio(self, item: AudioPacket) -> None:
        """Copy (or re-encode) one audio packet from the template's stream."""
        if self._audio_out is None:
            return
        packet = item.packet
        if self._audio_copy:
            packet.stream = self._audio_out
            self._mux(packet)
            return
        try:
            decoded = self._template.audio_stream.decode(packet)
        except _AV_ERRORS as exc:
            log.warning("skipped an undecodable audio packet: %s", error_reason(exc))
            return
        for af in decoded:
            self._mux(self._audio_out.encode(af))

    def close(self, success: bool = True) -> Path | None:
        """Finish the file. On success rename it to the final path and return
        that path; on failure delete the partial file and return None."""
        if self._closed:
            return self.path if success and self.path.exists() else None
        if not success:
            self._discard()
            return None
        if self._frames_written == 0:
            self._discard()
            raise StreamdeidError(f"no video frames were written; {self.path} not created")
        self._finalize()
        finished = self._unfragment()
        try:
            publish(finished, self.path, self._config.overwrite)  # on failure the error names `finished`
        finally:
            if finished != self.partial_path:  # the finished copy holds everything
                self.partial_path.unlink(missing_ok=True)
            self._release()
        return self.path

    def _release(self) -> None:
        """Let go of the partial file's lock (see claim_partial)."""
        if self._claim is not None:
            os.close(self._claim)
            self._claim = None

    def _unfragment(self) -> Path:
        """The finished file to publish: for MP4/MOV a plain copy with the index first (video/finish.py),
        beside the partial file, which stays until the copy is in place; else the partial file."""
        if self._ext not in MP4_LIKE:
            return self.partial_path
        finished = self.path.with_name(f"{self.path.stem}.finishing{self.path.suffix}")
        try:
            faststart_copy(self.partial_path, finished, output_format(self._ext), self._metadata)
        except _AV_ERRORS as exc:  # the fragmented file is still a good video: publish it
            finished.unlink(missing_ok=True)
            log.warning("%s stays fragmented (browsers may show a wrong duration): %s", self.path, error_reason(exc))
            return self.partial_path
        return finished

    def abort_keep_partial(self) -> Path:
        """Finalize what was written so far and leave it at ``partial_path``,
        which is returned. If no frame was written yet there is nothing worth
        keeping: the partial file is removed (the returned path won't exist)."""
        if self._frames_written == 0:
            self._discard()
            return self.partial_path
        if not self._closed:
            try:
                self._finalize()
            except StreamdeidError as exc:
                log.warning("partial output may be incomplete: %s", exc)
        return self.partial_path

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.close(success=exc_type is None)

    # ----------------------------------------------------------- set-up
    def _add_video_stream(self, enc: VideoEncoding) -> av.video.stream.VideoStream:
        t = self._template
        if not self._accepts(enc.codec):
            raise StreamdeidError(f"codec {enc.codec} cannot be stored in {self._ext} files (try .mkv)")
        rate = t.average_rate if t.average_rate and t.average_rate > 0 else None
        stream = self._container.add_stream(enc.codec, rate=rate, options=enc.options)
        stream.width, stream.height, stream.pix_fmt = t.width, t.height, enc.pix_fmt
        time_base = t.time_base or Fraction(1, 1000)
        if enc.codec == "gif":
            time_base = GIF_TIME_BASE
        elif self._ext == ".avi" and rate:
            time_base = 1 / rate  # AVI is constant-rate: one tick per frame
        stream.time_base = time_base
        stream.codec_context.time_base = time_base
        stream.thread_type = "AUTO"
        if not av.VideoFormat(enc.pix_fmt).is_rgb and enc.codec != "gif":
            self._tag_colors(stream, t.color)
        if t.rotation:
            stream.set_display_rotation(t.rotation)
        return stream

    def _tag_colors(self, stream: av.video.stream.VideoStream, color: ColorInfo) -> None:
        ctx = stream.codec_context
        ctx.color_range = 2 if color.color_range == 2 else 1  # keep full range, else limited
        if color.colorspace != 2:
            ctx.colorspace = color.colorspace
        if color.color_primaries != 2:
            ctx.color_primaries = color.color_primaries
        if color.color_trc != 2:
            ctx.color_trc = color.color_trc

    def _add_audio_stream(self, source: av.audio.stream.AudioStream | None) -> None:
        if source is None:
            return
        if self._ext == ".gif":
            log.warning("GIF has no audio track: the audio is dropped")
            return
        name = source.codec_context.name
        if self._accepts(name):
            try:
                self._audio_out = self._container.add_stream_from_template(source)
                self._audio_copy = True
                return
            except ValueError:
                pass  # the muxer refused the codec after all: re-encode
        encoder = pick_audio_encoder(set() if self._ext in UNQUERYABLE else self._container.supported_codecs)
        if encoder is None:
            log.warning("%s accepts no audio codec we can encode: audio dropped", self._ext)
            return
        self._audio_out = self._make_audio_encoder(encoder, source)
        log.info("audio %s cannot go into %s: re-encoding to %s", name, self._ext, encoder)

    def _accepts(self, codec: str) -> bool:
        """Whether the output container can store ``codec``. Some muxers
        (MPEG-TS) cannot answer the question; then we assume yes."""
        return self._ext in UNQUERYABLE or codec in self._container.supported_codecs

    def _make_audio_encoder(self, encoder: str, source: av.audio.stream.AudioStream) -> av.stream.Stream:
        codec = av.Codec(encoder, "w")
        rates = codec.audio_rates
        rate = source.rate if not rates or source.rate in rates else max(rates)
        layout = source.layout.name if source.channels <= 2 else "stereo"
        stream = self._container.add_stream(encoder, rate=rate, layout=layout)
        stream.format = codec.audio_formats[0].name
        return stream

    # ---------------------------------------------------------- encoding
    def _to_video_frame(self, image: np.ndarray) -> av.VideoFrame:
        if self._encoding.codec == "gif":
            return av.VideoFrame.from_ndarray((gif.quantize(image), gif.PALETTE), format="pal8")
        vf = av.VideoFrame.from_ndarray(image, format="bgr24")
        pix_fmt = self._encoding.pix_fmt
        if av.VideoFormat(pix_fmt).is_rgb:
            return vf.reformat(format=pix_fmt)
        ctx = self._video.codec_context
        colorspace = ctx.colorspace if ctx.colorspace != 2 else None
        return vf.reformat(
            format=pix_fmt, dst_colorspace=colorspace, dst_color_range=int(ctx.color_range), interpolation=BGR_TO_YUV
        )

    def _output_pts(self, frame: Frame) -> int:
        """Frame pts in the encoder time base, forced strictly increasing
        (encoders reject repeats, e.g. after rounding into GIF's 1/100 s)."""
        tb = self._video.codec_context.time_base
        if frame.pts is None or frame.time_base is None:
            pts = 0 if self._last_pts is None else self._last_pts + self._frame_ticks()
        elif Fraction(frame.time_base) == tb:
            pts = frame.pts
        else:
            pts = round(frame.pts * Fraction(frame.time_base) / tb)
        if self._last_pts is not None and pts <= self._last_pts:
            log.debug("frame %d: pts %d not increasing, using %d", frame.index, pts, self._last_pts + 1)
            pts = self._last_pts + 1
        self._last_pts = pts
        return pts

    def _frame_ticks(self) -> int:
        """One frame duration in encoder ticks (for frames without pts)."""
        rate = self._template.average_rate
        tb = self._video.codec_context.time_base
        return max(1, round(1 / (rate * tb))) if rate else 1

    def _mux(self, packets: av.Packet | list[av.Packet]) -> None:
        try:
            self._container.mux(packets)
        except _AV_ERRORS as exc:
            raise self._write_error(exc) from None

    def _write_error(self, exc: BaseException) -> StreamdeidError:
        """The user-facing error for a failed write."""
        return StreamdeidError(f"{self._destination()} failed: {error_reason(exc)}")

    def _destination(self) -> str:
        """What a write error names."""
        return f"writing {self.partial_path}"

    # ---------------------------------------------------------- shutdown
    def _flush_encoders(self) -> None:
        if self._audio_out is not None and not self._audio_copy:
            try:
                for af in self._template.audio_stream.decode(None):
                    self._mux(self._audio_out.encode(af))
            except _AV_ERRORS as exc:
                log.warning("audio decoder flush failed: %s", error_reason(exc))
            self._mux(self._audio_out.encode(None))
        self._mux(self._video.encode(None))

    def _finalize(self) -> None:
        self._closed = True
        try:
            self._flush_encoders()
        finally:
            try:
                self._container.close()
            except _AV_ERRORS as exc:
                raise StreamdeidError(f"finishing {self.partial_path} failed: {error_reason(exc)}") from None

    def _discard(self) -> None:
        self._closed = True
        try:
            self._container.close()
        except _AV_ERRORS:
            pass  # the file is deleted anyway
        try:
            self.partial_path.unlink(missing_ok=True)
        except OSError as exc:  # never mask the error that brought us here (a read-only folder...)
            log.warning("could not remove %s: %s", self.partial_path, exc.strerror)
        self._release()


# Live outputs: where a stream goes -> (muxer, pseudo-extension for codec checks).
STREAM_OUTPUTS = {"rtsp://": "rtsp", "rtmp://": "flv", "srt://": "mpegts", "udp://": "mpegts", "tcp://": "mpegts"}
STDOUT = "-"
# Encoder settings for live pushes: no B-frames or look-ahead queue in x264
# (each would add frames of delay) and a keyframe every 2 s so a player that
# joins mid-stream starts quickly.
LIVE_X264 = {"tune": "zerolatency"}


def is_stream_output(target: str) -> bool:
    """``-`` (stdout) or a URL the writer pushes to instead of a file."""
    return target == STDOUT or str(target).lower().startswith(tuple(STREAM_OUTPUTS))


class StreamWriter(VideoWriter):
    """A ``VideoWriter`` that pushes to a live target instead of a file:
    ``rtsp://host:port/path`` (RTSP ANNOUNCE/RECORD), ``rtmp://`` (FLV),
    ``srt://``/``udp://``/``tcp://`` (MPEG-TS) or ``-`` (stdout, MPEG-TS or
    Matroska via ``container``). There is no partial file: what was sent is
    sent, so ``close(success=False)`` just ends the stream.
    """

    def __init__(
        self,
        target: str,
        template: VideoTemplate,
        config: OutputConfig,
        *,
        container: str = "mpegts",
        options: dict[str, str] | None = None,
        timeout: float | None = 10.0,
    ) -> None:
        self.target = target
        self._container_name, self._options, self._timeout = container, options, timeout
        self._reader_gone = False  # stdout's reader hung up (EPIPE)
        # ``path`` names what close() returns and a live run lists as its segment: "-", or "stream"
        # for a URL (which may hold credentials, so it is not used as a path).
        super().__init__(Path(target) if target == STDOUT else Path("stream"), template, config)

    def _open_container(self) -> av.container.OutputContainer:
        """Open the target itself: no partial file, what was sent is sent."""
        import sys

        self.partial_path = self.path
        target = self.target
        if target == STDOUT:
            ext = ".mkv" if self._container_name in ("matroska", "mkv") else ".ts"
            fmt = "matroska" if ext == ".mkv" else "mpegts"
        else:
            scheme = target.split("://", 1)[0].lower() + "://"
            fmt = STREAM_OUTPUTS[scheme]
            ext = ".mkv" if fmt in ("rtsp", "flv") else ".ts"  # codec checks only: both take H.264/AAC
        self._ext = ext
        self._stream_fmt = fmt
        encoding = choose_video_encoding(self._config, self._template.width, self._template.height, ext)
        if encoding.codec in X264_LIVE_CODECS:
            encoding.options = {**encoding.options, **LIVE_X264}
            rate = self._template.average_rate
            encoding.options.setdefault("g", str(max(1, round(2 * float(rate)))) if rate else "50")
        self._encoding = encoding
        opts = {"flush_packets": "1", **(self._options or {})}
        try:
            if target == STDOUT:
                return av.open(sys.stdout.buffer, mode="w", format=fmt, options=opts)
            return av.open(target, mode="w", format=fmt, options=opts, timeout=self._timeout)
        except _AV_ERRORS as exc:
            raise StreamdeidError(f"cannot open output {redact_url(target)}: {error_reason(exc)}") from None

    def _write_error(self, exc: BaseException) -> StreamdeidError:
        if self.target == STDOUT and _is_broken_pipe(exc):
            self._reader_gone = True
            return OutputClosed(f"the reader of - hung up after {self._frames_written} frames; stopped")
        return super()._write_error(exc)

    def _accepts(self, codec: str) -> bool:
        if self._stream_fmt in ("rtsp", "flv", "mpegts"):
            return codec in ("h264", "hevc", "libx264", "libx265", "aac", "mp3", "opus", "libopus", "ac3")
        return super()._accepts(codec)

    def close(self, success: bool = True) -> Path | None:
        if self._closed:
            return None
        if self._frames_written == 0 or self._reader_gone:  # nobody to finish the stream for
            self._discard()
            return None
        try:
            self._finalize()
        except StreamdeidError as exc:
            if success:
                raise
            log.warning("ending %s: %s", redact_url(self.target), exc)
        return self.path if success else None

    def abort_keep_partial(self) -> Path:
        self.close(success=False)
        return self.path

    def _destination(self) -> str:
        return f"pushing to {redact_url(self.target)}"

    def _discard(self) -> None:
        self._closed = True
        try:
            self._container.close()
        except _AV_ERRORS:
            pass


X264_LIVE_CODECS = frozenset({"libx264", "libx264rgb", "libx265"})


def open_writer(
    target: str | os.PathLike[str],
    template: VideoTemplate,
    config: OutputConfig,
    *,
    stream_container: str = "mpegts",
    stream_options: dict[str, str] | None = None,
) -> VideoWriter:
    """A ``StreamWriter`` for ``-``/URLs, else a file ``VideoWriter``."""
    if is_stream_output(str(target)):
        return StreamWriter(str(target), template, config, container=stream_container, options=stream_options)
    return VideoWriter(target, template, config)


def _is_broken_pipe(exc: BaseException) -> bool:
    """EPIPE, as FFmpeg reports it or as PyAV's write callback re-raises Python's BrokenPipeError."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, BrokenPipeError) or getattr(seen, "errno", None) == errno.EPIPE:
            return True
        seen = seen.__cause__ or seen.__context__
    return "broken pipe" in str(exc).lower()


def write_image(path: str | os.PathLike[str], image: np.ndarray, overwrite: bool = False) -> Path:
    """Write a still image (format from the extension) via a partial file."""
    target = Path(path)
    check_overwrite(target, overwrite)
    ext = target.suffix.lower()
    params = [cv2.IMWRITE_JPEG_QUALITY, 95] if ext in (".jpg", ".jpeg") else []
    try:
        ok, data = cv2.imencode(ext, image, params)
    except cv2.error:
        ok = False
    if not ok:
        raise StreamdeidError(f"cannot encode an image as {ext or 'no extension'}: {target}")
    partial = partial_path_for(target)
    try:
        partial.write_bytes(data.tobytes())
        os.replace(partial, target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise StreamdeidError(f"cannot write {target}: {exc.strerror}") from None
    return target
