"""Live outputs: push encoded frames (and audio) to a URL or stdout instead of a file.

``StreamWriter`` is a ``VideoWriter`` (video/writer.py) whose container is the target itself:
``rtsp://`` (RTSP ANNOUNCE/RECORD), ``rtmp://`` (FLV), ``srt://``/``udp://``/``tcp://`` (MPEG-TS)
or ``-`` (stdout). ``open_writer`` picks it or a file writer from the target.
"""

from __future__ import annotations

import errno
import logging
import os
import time

import av

from streamdeid.config import OutputConfig
from streamdeid.types import OutputClosed, StreamdeidError
from streamdeid.video.encoding import choose_video_encoding
from streamdeid.redact import redact
from streamdeid.video.inputs import AV_ERRORS
from streamdeid.video.reader import error_reason
from streamdeid.video.writer import VideoTemplate, VideoWriter

log = logging.getLogger(__name__)

# Live outputs: where a stream goes -> (muxer, pseudo-extension for codec checks).
STREAM_OUTPUTS = {"rtsp://": "rtsp", "rtmp://": "flv", "srt://": "mpegts", "udp://": "mpegts", "tcp://": "mpegts"}
STDOUT = "-"
# Encoder settings for live pushes: no B-frames or look-ahead queue in x264
# (each would add frames of delay) and a keyframe every 2 s so a player that
# joins mid-stream starts quickly.
LIVE_X264 = {"tune": "zerolatency"}
# A wait this close to the socket timeout was a timeout (FFmpeg's RTSP muxer says "Invalid data" for it too).
TIMED_OUT_SHARE = 0.9


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
        # A failed write leaves the muxer unusable: FFmpeg's RTSP muxer frees its streams when the server refuses
        # SETUP or RECORD, and PyAV sends the header again at the next packet, which crashed the process
        # (SIGSEGV) when close() flushed the encoder. After a failure the container is only closed.
        self._failure: StreamdeidError | None = None
        self._sent = False  # a packet went out (an RTSP server took ANNOUNCE/SETUP/RECORD)
        # No file is written, published or kept: what was sent is sent. ``target`` names the output
        # (redacted in messages: a URL may hold credentials).
        self.path = None
        self.partial_path = None
        self._start(template, config, None)

    def _keeps_rotation(self) -> bool:
        """Only Matroska of the stream formats stores a display matrix (not MPEG-TS, RTSP or FLV)."""
        return self._stream_fmt == "matroska"

    def _open_container(self) -> av.container.OutputContainer:
        """Open the target itself: no partial file, what was sent is sent."""
        import sys

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
        encoding = choose_video_encoding(self._config, *self._stored_size(), ext)
        if encoding.codec in X264_LIVE_CODECS:
            encoding.options = {**encoding.options, **LIVE_X264}
            rate = self._template.average_rate
            encoding.options.setdefault("g", str(max(1, round(2 * float(rate)))) if rate else "50")
        self._encoding = encoding
        opts = {"flush_packets": "1", **(self._options or {})}
        if fmt == "rtsp" and self._timeout:
            # The RTSP muxer's socket I/O timeout (microseconds): PyAV's timeout= guards inputs only, and the
            # handshake runs at the first packet holding the GIL, so a server that never answered held the run
            # (SIGTERM included) for good. Other URLs are opened by PyAV without options: none can be passed.
            opts.setdefault("timeout", str(int(self._timeout * 1e6)))
        try:
            if target == STDOUT:
                return av.open(sys.stdout.buffer, mode="w", format=fmt, options=opts)
            return av.open(target, mode="w", format=fmt, options=opts, timeout=self._timeout)
        except AV_ERRORS as exc:
            raise StreamdeidError(f"cannot open output {redact(target)}: {error_reason(exc)}") from None

    def _mux(self, packets: av.Packet | list[av.Packet]) -> None:
        if self._failure is not None:  # never the muxer again (see __init__)
            raise self._failure
        started = time.monotonic()
        try:
            self._container.mux(packets)
        except AV_ERRORS as exc:
            self._failure = self._write_error(exc, time.monotonic() - started)
            raise self._failure from None
        if isinstance(packets, av.Packet) or packets:
            self._sent = True

    def _write_error(self, exc: BaseException, waited: float = 0.0) -> StreamdeidError:
        if self.target == STDOUT and _is_broken_pipe(exc):
            self._reader_gone = True
            return OutputClosed(f"the reader of - hung up after {self._frames_written} frames; stopped")
        if self._stream_fmt == "rtsp" and not self._sent:
            return StreamdeidError(self._refused(exc, waited))
        return super()._write_error(exc)

    def _refused(self, exc: BaseException, waited: float) -> str:
        """What an RTSP server that did not take the push (its handshake runs at the first packet) did."""
        url, reason = redact(self.target), error_reason(exc)
        if self._timeout and waited >= TIMED_OUT_SHARE * self._timeout:
            return f"the RTSP server at {url} did not answer within {self._timeout:g} s; nothing was pushed"
        if isinstance(exc, av.error.InvalidDataError):
            # garbage, a hang-up, or an error answer to SETUP or RECORD (FFmpeg reports all of them so)
            return f"the RTSP server at {url} refused the push or answered invalid data; nothing was pushed"
        if reason.startswith("Server returned"):
            return f"the RTSP server at {url} refused the push ({reason}); nothing was pushed"
        return f"cannot push to {url}: {reason}"

    def _accepts(self, codec: str) -> bool:
        if self._stream_fmt in ("rtsp", "flv", "mpegts"):
            return codec in ("h264", "hevc", "libx264", "libx265", "aac", "mp3", "opus", "libopus", "ac3")
        return super()._accepts(codec)

    def close(self, success: bool = True) -> None:
        """End the stream. Returns None: there is no file to publish."""
        if self._closed:
            return None
        if self._frames_written == 0 or self._reader_gone or self._failure is not None:
            self._discard()  # nobody to finish the stream for, or a muxer that failed (see __init__)
            return None
        try:
            self._finalize()
        except StreamdeidError as exc:
            if success:
                raise
            log.warning("ending %s: %s", redact(self.target), exc)
        return None

    def abort_keep_partial(self) -> None:
        """End the stream; nothing is kept beyond what was sent."""
        self.close(success=False)
        return None

    def _destination(self) -> str:
        return f"pushing to {redact(self.target)}"

    def _output_name(self) -> str:
        return redact(self.target)

    def _discard(self) -> None:
        self._closed = True
        try:
            self._container.close()
        except AV_ERRORS:
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
