"""Demux and decode one video source into ``Frame`` objects and audio packets.

Sources: files, ``-`` (stdin), network streams (``rtsp://`` etc.) and V4L2
devices (``/dev/videoN``). Reconnecting a dropped live source is the job of
``streamdeid.live``; this module opens one connection and reads it to its end.

Video frames are decoded to BGR uint8 with their pts and time_base copied
unchanged, so the writer can reproduce variable frame rate exactly. Audio is
not decoded: packets are passed through so the writer can copy them without
re-encoding (lossless and cheap).

Every failure surfaces as ``StreamdeidError`` with a one-line message. A
source that breaks mid-stream (truncated download, killed recorder) yields
what decodes and then stops with a logged warning, because a partially
anonymized video is more useful to the user than a crash.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Union

import av

from av.video.reformatter import Interpolation, VideoReformatter

from streamdeid.types import Frame, StreamdeidError
from streamdeid.video.planes import planes_of, to_bgr
from streamdeid.video.rotation import Orientation, display_rotation, orientation_of, turned_size

# Input classification and opening live in .inputs; these names stay importable
# from here because the writers, the CLI and streamdeid.live import them from
# the reader.
from streamdeid.video.inputs import (
    READ_ERRORS,
    STDIN,
    STDIN_NAME,
    error_reason,
    is_device,
    is_live_input,
    is_stream_url,
    open_container,
)
from streamdeid.redact import redact

log = logging.getLogger(__name__)

# Consecutive undecodable video packets after which we give up on a source:
# beyond this the data is garbage, and looping on it would look like a hang.
MAX_CONSECUTIVE_DECODE_ERRORS = 50
# Demuxed packets without a single decoded frame before open_source gives up
# (e.g. a file of audio packets with a broken video stream).
MAX_PACKETS_BEFORE_FIRST_FRAME = 2000
# swscale's default YUV->BGR path truncates, darkening every decode by ~1.5
# levels; these flags round correctly (bias ~0.1) but cost ~5x more time.
ACCURATE_YUV_TO_BGR = Interpolation.BILINEAR | Interpolation.ACCURATE_RND | Interpolation.FULL_CHR_H_INT
# VideoSource.pace's bounds (frames per second): below 10 a 0.5 s hold would span few frames of a clip
# whose mean rate a pause pulled down; above 120 the look-ahead would buffer hundreds of frames.
PACE_RANGE = (10.0, 120.0)


@dataclass
class AudioPacket:
    """An undecoded audio packet, kept intact so the writer can stream-copy it."""

    packet: av.Packet

    @property
    def pts(self) -> int | None:
        return self.packet.pts

    @property
    def time_base(self) -> Fraction | None:
        return self.packet.time_base

    @property
    def seconds(self) -> float | None:
        if self.packet.pts is None or self.packet.time_base is None:
            return None
        return float(self.packet.pts * self.packet.time_base)


@dataclass(frozen=True)
class ColorInfo:
    """Colour tags of the source's frames (FFmpeg enum values).

    The writer converts BGR back to YUV with the same matrix and range the
    reader used to convert to BGR, and tags the output identically, so colours
    do not shift through a decode/encode round trip.
    """

    colorspace: int = 2  # AVCOL_SPC_UNSPECIFIED
    color_range: int = 0  # AVCOL_RANGE_UNSPECIFIED
    color_primaries: int = 2
    color_trc: int = 2


SourceItem = Union[Frame, AudioPacket]


class VideoSource:
    """An open video source: a context manager and an iterator of items.

    Iterating yields ``Frame`` and ``AudioPacket`` items in demux order. Use
    :func:`open_source` rather than constructing this directly. One thread
    at a time may iterate it.
    """

    def __init__(
        self, container: av.container.InputContainer, name: str, is_live: bool, accurate_color: bool = False,
        keep_planes: bool = False,
    ) -> None:
        self._container = container
        self._interpolation = ACCURATE_YUV_TO_BGR if accurate_color else None
        # Frame.yuv for the vault; not with accurate_color, whose conversion is not local (video/planes.py)
        self._keep_planes = keep_planes and not accurate_color
        self._reformatter = VideoReformatter()  # keeps swscale's context (and colour tables) across frames
        self.name = name
        self.is_live = is_live
        self._video = pick_video_stream(container, name)
        self._sole_video = len(container.streams.video) == 1  # else the container's duration may be another's
        self._video.thread_type = "AUTO"
        audio = container.streams.audio
        self._audio = audio[0] if audio else None
        wanted = [self._video] + ([self._audio] if self._audio is not None else [])
        self._packets = container.demux(wanted)
        self._pending: deque[SourceItem] = deque()
        self._index = 0
        self._last_pts: int | None = None
        self._last_seconds = 0.0
        self._exhausted = False
        self._closed = False
        self._decode_errors = 0
        self.end_reason: str | None = None  # why reading stopped early (an error), else None
        self.rotation = 0  # the display matrix's, degrees counter-clockwise (the writer keeps it)
        self._orientation = Orientation()  # what makes a stored frame upright (video/rotation.py)
        self._size: tuple[int, int] | None = None  # the first frame's stored (width, height): every frame's
        self._resized_to: tuple[int, int] | None = None  # the last size a frame was scaled from
        self.color = ColorInfo()
        self._prime()

    # ----------------------------------------------------------- properties
    @property
    def width(self) -> int:
        """Of the frames this source yields: upright, as a player shows them (video/rotation.py)."""
        return int(turned_size(*self._stored_size(), self._orientation.turns)[0])

    @property
    def height(self) -> int:
        return int(turned_size(*self._stored_size(), self._orientation.turns)[1])

    def _stored_size(self) -> tuple[int, int]:
        """The first frame's (width, height) as stored; the decoder's own may already be a later frame's."""
        if self._size is not None:
            return self._size
        ctx = self._video.codec_context
        return ctx.width, ctx.height

    @property
    def average_rate(self) -> Fraction | None:
        """Mean frame rate, or None when the container does not know it."""
        rate = self._video.average_rate or self._video.guessed_rate
        return Fraction(rate) if rate else None

    @property
    def sample_aspect_ratio(self) -> Fraction | None:
        """The shape of a pixel of the frames this source yields (anamorphic video: 720x576 shown at 16:9),
        upright like them: the stored one's inverse when they are turned a quarter. None for square or
        unknown pixels."""
        sar = self._video.codec_context.sample_aspect_ratio
        if not sar or sar == 1:
            return None
        sar = Fraction(sar)
        return 1 / sar if self._orientation.turns % 2 else sar

    @property
    def pace(self) -> float:
        """Frames per second the pipeline sizes its time windows by (hold, look-ahead, scan spacing). A
        recording with pauses (a motion-triggered camera) has a mean rate far under its frames' own rate,
        which would leave the hold and the look-ahead no frame at all; frames milliseconds apart claim
        hundreds. So the nominal rate stands in for a mean under half of it, and either is kept in
        PACE_RANGE: every window spans some frames and the look-ahead's buffer stays small."""
        mean, nominal = self._video.average_rate, self._video.guessed_rate
        rate = float(mean or nominal or 25)
        if mean and nominal and float(mean) < 0.5 * float(nominal):
            rate = float(nominal)
        return min(max(rate, PACE_RANGE[0]), PACE_RANGE[1])

    @property
    def time_base(self) -> Fraction:
        tb = self._video.time_base
        if tb:
            return Fraction(tb)
        rate = self.average_rate
        return 1 / rate if rate else Fraction(1, 1000)

    @property
    def duration(self) -> float | None:
        """Duration in seconds (stream first, container second), or None."""
        stream = self._video
        if stream.duration and stream.time_base:
            return float(stream.duration * stream.time_base)
        if self._container.duration and self._sole_video:
            return self._container.duration / av.time_base
        return None

    @property
    def frame_count(self) -> int | None:
        """Frame count from the header, else duration x rate; None if unknown."""
        if self._video.frames:
            return int(self._video.frames)
        duration, rate = self.duration, self.average_rate
        if duration and rate:
            return max(1, round(duration * rate))
        return None

    @property
    def has_audio(self) -> bool:
        return self._audio is not None

    @property
    def audio_stream(self) -> av.audio.stream.AudioStream | None:
        return self._audio

    @property
    def video_stream(self) -> av.video.stream.VideoStream:
        return self._video

    @property
    def metadata(self) -> dict[str, str]:
        """Container-level tags (e.g. the streamdeid video id of an anonymized output)."""
        return dict(self._container.metadata)

    @property
    def format_name(self) -> str:
        return str(self._container.format.name)

    @property
    def frames_read(self) -> int:
        return self._index

    # ------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[SourceItem]:
        return self

    def __next__(self) -> SourceItem:
        while not self._pending:
            if self._exhausted or self._closed:
                raise StopIteration
            self._step()
        return self._pending.popleft()

    def frames(self) -> Iterator[Frame]:
        """Iterate video frames only, dropping audio (for image-like uses)."""
        for item in self:
            if isinstance(item, Frame):
                yield item

    def __enter__(self) -> "VideoSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._container.close()
            except READ_ERRORS:  # closing a broken input must not mask the real error
                pass

    # ------------------------------------------------------------- internals
    def _prime(self) -> None:
        """Decode up to the first frame so bad inputs fail at open time and
        rotation/colour (only carried on decoded frames) are known."""
        packets = 0
        while not any(isinstance(item, Frame) for item in self._pending):
            if self._exhausted or packets > MAX_PACKETS_BEFORE_FIRST_FRAME:
                raise StreamdeidError(f"no decodable video frames in {self.name}{self._pipe_hint()}")
            self._step()
            packets += 1

    def _pipe_hint(self) -> str:
        """An MP4 or MOV whose index (moov) comes after its media cannot be read from a pipe: say so."""
        if self.name == STDIN_NAME and "mp4" in self.format_name:
            return (" (an MP4 whose index is at its end cannot be read from a pipe: give the file itself, or pipe "
                    "Matroska or MPEG-TS)")
        return ""

    def _step(self) -> None:
        """Demux one packet and queue what it produces."""
        try:
            packet = next(self._packets)
        except StopIteration:
            self._finish()
            return
        except READ_ERRORS as exc:
            log.warning("%s: stopped reading after frame %d: %s", self.name, self._index, error_reason(exc))
            self.end_reason = error_reason(exc)
            self._finish()
            return
        if packet.stream.type == "audio":
            if packet.size > 0:
                self._pending.append(AudioPacket(packet))
            return
        if packet.size == 0:  # demux's end-of-stream marker: drain the decoder once
            self._finish()
            return
        self._decode(packet)

    def _decode(self, packet: av.Packet | None) -> None:
        try:
            decoded = self._video.decode(packet)
        except READ_ERRORS as exc:
            self._decode_errors += 1
            log.warning("%s: skipped an undecodable video packet: %s", self.name, error_reason(exc))
            if self._decode_errors >= MAX_CONSECUTIVE_DECODE_ERRORS:
                log.warning("%s: too many decode errors, stopping after frame %d", self.name, self._index)
                self._finish(flush=False)
            return
        for vf in decoded:
            self._decode_errors = 0
            self._pending.append(self._to_frame(vf))

    def _finish(self, flush: bool = True) -> None:
        """End of input: drain the decoder's delayed frames, then stop."""
        if self._exhausted:
            return
        self._exhausted = True
        if flush:
            self._decode(None)
        # (a pipe on stdin too: a Matroska or MP4 header that promises a duration tells a pipe cut short; a live
        # feed's header promises none, and a network stream or a device never ends on its own terms)
        if (not self.is_live or self.name == STDIN_NAME) and self._ended_early():
            log.warning(
                "%s: video stopped at %.2f s of %.2f s after %d frames; the file may be truncated or damaged",
                self.name, self._last_seconds, self._expected_end(), self._index,
            )

    def _expected_end(self) -> float:
        stream = self._video
        start = float(stream.start_time * stream.time_base) if stream.start_time and stream.time_base else 0.0
        return start + (self.duration or 0.0)

    def _ended_early(self) -> bool:
        """Truncated files often end without any demuxer error, so compare
        the last decoded time with the duration promised by the header."""
        if not self.duration or self._last_pts is None:
            return False
        tolerance = max(1.0, 0.05 * self.duration)
        return self._last_seconds < self._expected_end() - tolerance

    def _to_frame(self, vf: av.VideoFrame) -> Frame:
        if self._index == 0:
            self._orientation = orientation_of(vf)
            # a mirror cannot be written back under a rotation: such a video is written upright, no matrix
            self.rotation = 0 if self._orientation.mirrored else display_rotation(vf)
            self._size = (vf.width, vf.height)
            self.color = ColorInfo(
                int(vf.colorspace), int(vf.color_range), int(vf.color_primaries), int(vf.color_trc)
            )
        resized = (vf.width, vf.height) != self._size
        if resized:
            self._note_resize(vf)
        # turned upright: faces stored sideways (a phone's portrait video) are found and covered as shown
        image = self._orientation.upright(to_bgr(vf, self._interpolation, self._reformatter, self._size))
        time_base = Fraction(vf.time_base) if vf.time_base else self.time_base
        pts = vf.pts if vf.pts is not None else self._guess_pts(time_base)
        # the planes are as stored
        yuv = planes_of(vf) if self._keep_planes and self._orientation.is_identity and not resized else None
        frame = Frame(index=self._index, image=image, pts=pts, time_base=time_base, yuv=yuv,
                      interlaced=bool(vf.interlaced_frame) and self._orientation.is_identity)
        self._index += 1
        self._last_pts = pts
        self._last_seconds = float(pts * time_base)
        return frame

    def _note_resize(self, vf: av.VideoFrame) -> None:
        """A broadcast or DVR capture may switch picture size mid-stream (SD to HD): such frames are scaled to
        the first frame's size, as ffmpeg scales them to its output's; said once per new size."""
        size = (vf.width, vf.height)
        if size != self._resized_to:
            self._resized_to = size
            log.warning("%s: the picture changes size to %dx%d at frame %d; scaled to %dx%d, the output's size",
                        self.name, *size, self._index, *self._size)

    def _guess_pts(self, time_base: Fraction) -> int:
        """Some raw/piped streams carry no pts: continue at the average rate."""
        if self._last_pts is None:
            return 0
        rate = self.average_rate or Fraction(25)
        return self._last_pts + max(1, round(1 / (rate * time_base)))


def pick_video_stream(container: av.container.InputContainer, name: str) -> av.VideoStream:
    """The stream a player would show (FFmpeg's best: never a cover picture, which may come first), and a
    warning where the file holds further video streams, which the output does not carry."""
    shown = container.streams.best("video") or container.streams.video[0]
    others = [s for s in container.streams.video
              if s is not shown and not s.disposition & av.stream.Disposition.attached_pic]
    if others:
        log.warning("%s: %d more video stream(s) beside #%d (%dx%d) are left out of the output",
                    name, len(others), shown.index, shown.codec_context.width, shown.codec_context.height)
    return shown


def open_source(
    path_or_dash: str,
    format: str | None = None,
    accurate_color: bool = False,
    *,
    options: dict[str, str] | None = None,
    timeout: float | tuple[float, float] | None = None,
    keep_planes: bool = False,
) -> VideoSource:
    """Open a video file, ``-`` for a stream piped into stdin, a network
    stream (``rtsp://``, ``rtmp://``, ``srt://``...) or a V4L2 device
    (``/dev/video0``).

    ``format`` forces a demuxer (e.g. ``"matroska"``, ``"mpegts"``), which
    only matters for stdin streams that probing cannot identify (devices
    default to ``"v4l2"``). ``accurate_color`` trades YUV->BGR speed for
    exact rounding (see ``ACCURATE_YUV_TO_BGR``). ``options`` go to the
    demuxer/protocol (e.g. ``{"rtsp_transport": "tcp"}``); ``timeout`` is
    PyAV's wall-clock bound in seconds, a float or ``(open, read)``, which
    also ends a read that hangs inside FFmpeg. ``keep_planes``: frames carry
    the decoder's 4:2:0 planes too (``Frame.yuv``), for a vault that stores face pixels.
    Raises ``StreamdeidError`` for anything that is not a decodable video.
    """
    try:
        container, name, is_live = open_container(str(path_or_dash), format, options, timeout)
    except StreamdeidError:
        raise
    except READ_ERRORS as exc:
        shown = redact(str(path_or_dash))
        raise StreamdeidError(f"cannot read {shown} as a video: {error_reason(exc)}") from None
    if not container.streams.video:
        container.close()
        raise StreamdeidError(f"no video stream in {name}")
    try:
        return VideoSource(container, name, is_live, accurate_color, keep_planes)
    except StreamdeidError:
        container.close()
        raise
    except READ_ERRORS as exc:
        container.close()
        raise StreamdeidError(f"cannot decode {name}: {error_reason(exc)}") from None


__all__ = [
    "AudioPacket", "ColorInfo", "SourceItem", "VideoSource", "open_source",
    "STDIN", "error_reason", "is_device", "is_live_input", "is_stream_url",
]
