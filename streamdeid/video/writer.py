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

Beside it: video/partial.py (the partial file, its lock, the final move, stills)
and video/stream_writer.py (``StreamWriter``: URLs and stdout); both are
re-exported here.
"""

from __future__ import annotations

import errno
import logging
import os
from fractions import Fraction
from pathlib import Path
from typing import Protocol

import av
import numpy as np
from av.video.reformatter import Interpolation

from streamdeid.config import OutputConfig
from streamdeid.types import Frame, StreamdeidError
from streamdeid.video import gif
from streamdeid.video.encoding import (
    MP4_LIKE,
    MPEGTS_CODECS,
    UNQUERYABLE,
    VideoEncoding,
    add_audio_encoder,
    choose_video_encoding,
    muxer_options,
    output_format,
    pick_audio_encoder,
    tag_colors,
)
from streamdeid.video.finish import faststart_copy
from streamdeid.video.partial import OWN_TAG, check_overwrite, claim_partial, partial_path_for, publish, write_image
from streamdeid.video.inputs import AV_ERRORS
from streamdeid.video.reader import AudioPacket, ColorInfo, error_reason
from streamdeid.video.rotation import as_stored, quarter_turns, turned_size

# a disk that failed the finishing copy failed the fragmented file before it as well
WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})

log = logging.getLogger(__name__)

GIF_TIME_BASE = Fraction(1, 100)  # the GIF format stores delays in 1/100 s
ROTATION_EXTENSIONS = frozenset({".mp4", ".m4v", ".mov", ".mkv", ".webm"})  # containers with a display matrix
ADTS_FORMATS = frozenset({"mpegts", "aac"})  # demuxers whose AAC packets carry ADTS headers
ASC_ONLY = frozenset({".mp4", ".m4v", ".mov"})  # muxers that refuse them

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
    sample_aspect_ratio: Fraction | None  # the upright frames' non-square pixels (anamorphic), kept: plays as wide
    color: ColorInfo
    audio_stream: av.audio.stream.AudioStream | None


class VideoWriter:
    """Encodes frames (and copies audio) into ``path`` via a partial file.

    Call :meth:`close` with ``success=True`` to publish the file, ``False``
    to delete it, or :meth:`abort_keep_partial` to finalize and keep the
    partial file (e.g. on Ctrl-C). Used as a context manager it closes with
    ``success`` = "no exception".
    """

    private = False  # files readable by their owner only (recovered originals); a StreamWriter writes no file

    def __init__(self, path: str | os.PathLike[str], template: VideoTemplate, config: OutputConfig,
                 metadata: dict[str, str] | None = None, *, private: bool = False) -> None:
        self.path = Path(path)
        self.private = private
        self._start(template, config, metadata)

    def _start(self, template: VideoTemplate, config: OutputConfig, metadata: dict[str, str] | None) -> None:
        """Open the container and add the streams (after ``path`` or a StreamWriter's target is set)."""
        self._config = config
        self._template = template
        self._closed = False
        self._last_pts: int | None = None
        self._pts_shift = 0  # ticks added to every frame's pts since its timestamps went back (_output_pts)
        self._frames_written = 0
        self._audio_out: av.stream.Stream | None = None
        self._audio_copy = False
        self._claim: int | None = None
        self._container = self._open_container()  # also sets partial_path, _ext and _encoding
        self._metadata = dict(metadata or {})  # container tags, e.g. the vault's video id
        if not any(k.lower() == "comment" for k in self._metadata):  # what tells a partial file as ours
            self._metadata["comment"] = OWN_TAG
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
        self._encoding = choose_video_encoding(self._config, *self._stored_size(), self._ext)
        self._claim = claim_partial(self.partial_path, self.path, private=self.private)
        try:
            return av.open(str(self.partial_path), mode="w", format=fmt, options=muxer_options(self._ext))
        except AV_ERRORS as exc:
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
        except AV_ERRORS as exc:
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
        try:
            finished = self._unfragment()
        except StreamdeidError:
            self._discard()
            raise
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
            if self.private:  # created owner-only before the copy writes into it
                os.close(os.open(finished, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
                os.chmod(finished, 0o600)
            faststart_copy(self.partial_path, finished, output_format(self._ext), self._metadata)
        except AV_ERRORS as exc:  # the fragmented file is still a good video: publish it
            finished.unlink(missing_ok=True)
            if getattr(exc, "errno", None) in WRITE_ERRORS:  # unless the disk failed it: then it is cut short too
                raise StreamdeidError(f"cannot finish {self.path}: {error_reason(exc)}") from None
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
        # frames come upright (as shown) and are stored turned back, under the template's display matrix
        (stream.width, stream.height), stream.pix_fmt = self._stored_size(), enc.pix_fmt
        time_base = t.time_base or Fraction(1, 1000)
        if enc.codec == "gif":
            time_base = GIF_TIME_BASE
        elif self._ext == ".avi" and rate:
            time_base = 1 / rate  # AVI is constant-rate: one tick per frame
        stream.time_base = time_base
        stream.codec_context.time_base = time_base
        stream.thread_type = "AUTO"
        if not av.VideoFormat(enc.pix_fmt).is_rgb and enc.codec != "gif":
            tag_colors(stream, t.color)
        if t.rotation and self._keeps_rotation():
            stream.set_display_rotation(t.rotation)
        if t.sample_aspect_ratio and enc.codec != "gif":  # the upright picture's: turned back with the frames
            sar = t.sample_aspect_ratio
            stream.codec_context.sample_aspect_ratio = 1 / sar if self._turns() % 2 else sar
        return stream

    def _add_audio_stream(self, source: av.audio.stream.AudioStream | None) -> None:
        if source is None:
            return
        if self._ext == ".gif":
            log.warning("GIF has no audio track: the audio is dropped")
            return
        name = source.codec_context.name
        # MPEG-TS (a pipe, our own `-o -`) carries AAC with ADTS headers, which MP4 and MOV refuse (EPERM at
        # the first packet): re-encoded there, as PyAV cannot hand the muxer aac_adtstoasc's config in time
        adts = name == "aac" and getattr(self._template, "format_name", "") in ADTS_FORMATS
        if self._accepts(name) and not (adts and self._ext in ASC_ONLY):
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
        self._audio_out = add_audio_encoder(self._container, encoder, source)
        log.info("audio %s cannot go into %s: re-encoding to %s", name, self._ext, encoder)

    def _accepts(self, codec: str) -> bool:
        """Whether the output container can store ``codec``. MPEG-TS cannot answer the question: its list."""
        if self._ext in UNQUERYABLE:
            return codec in MPEGTS_CODECS
        return codec in self._container.supported_codecs

    # ---------------------------------------------------------- encoding
    def _keeps_rotation(self) -> bool:
        """Whether the container stores a display matrix (MP4, MOV, Matroska). MPEG-TS, GIF, AVI and FLV do not:
        there the frames are written upright, as they are shown, or players would show them sideways."""
        return self._ext in ROTATION_EXTENSIONS

    def _turns(self) -> int:
        """Quarter turns that take an upright frame back to how it is stored (0: stored upright)."""
        return quarter_turns(self._template.rotation) if self._keeps_rotation() else 0

    def _stored_size(self) -> tuple[int, int]:
        """(width, height) of the stored frames: the template's, turned back by its rotation."""
        t = self._template
        return turned_size(t.width, t.height, self._turns())

    def _to_video_frame(self, image: np.ndarray) -> av.VideoFrame:
        image = as_stored(image, self._turns())
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
        pts += self._pts_shift
        if self._last_pts is not None and pts <= self._last_pts:
            step = self._frame_ticks()
            if pts < self._last_pts - step:
                # a jump back (two recordings one after the other on a pipe, each from 0): the frames after it
                # follow on at the frame rate. Each set to last + 1, the second recording played in a few ms.
                self._pts_shift += self._last_pts + step - pts
                log.warning("frame %d: the timestamps go back by %.2f s; the frames after it follow on",
                            frame.index, float((self._last_pts - pts) * tb))
                pts = self._last_pts + step
            else:  # rounding (GIF's 1/100 s) or a repeat: the next tick
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
        except AV_ERRORS as exc:
            raise self._write_error(exc) from None

    def _write_error(self, exc: BaseException) -> StreamdeidError:
        """The user-facing error for a failed write."""
        return StreamdeidError(f"{self._destination()} failed: {error_reason(exc)}")

    def _destination(self) -> str:
        """What a write error names."""
        return f"writing {self.partial_path}"

    def _output_name(self) -> str:
        """The output as a message names it."""
        return str(self.partial_path)

    # ---------------------------------------------------------- shutdown
    def _flush_encoders(self) -> None:
        if self._audio_out is not None and not self._audio_copy:
            try:
                for af in self._template.audio_stream.decode(None):
                    self._mux(self._audio_out.encode(af))
            except AV_ERRORS as exc:
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
            except AV_ERRORS as exc:
                raise StreamdeidError(f"finishing {self._output_name()} failed: {error_reason(exc)}") from None

    def _discard(self) -> None:
        self._closed = True
        try:
            self._container.close()
        except AV_ERRORS:
            pass  # the file is deleted anyway
        try:
            self.partial_path.unlink(missing_ok=True)
        except OSError as exc:  # never mask the error that brought us here (a read-only folder...)
            log.warning("could not remove %s: %s", self.partial_path, exc.strerror)
        self._release()


__all__ = [
    "BGR_TO_YUV", "GIF_TIME_BASE", "VideoTemplate", "VideoWriter", "check_overwrite", "claim_partial",
    "partial_path_for", "publish", "write_image",
]
