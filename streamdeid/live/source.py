"""A live source that survives drops: reconnects with backoff, keeps time monotonic.

Wraps ``streamdeid.video.reader.open_source`` (one connection) for
``rtsp://`` (and other network URLs), ``/dev/videoN`` and ``-``. When a
connection ends (error, read timeout, end of stream) the outage is logged and
the source reconnects with exponential backoff, up to ``max_retries`` failed
attempts in a row; then ``LiveSourceLost`` is raised. stdin cannot be
reopened: its end is the normal end of the run.

Across connections frame indices keep counting and pts are rewritten into the
first connection's time base with an offset, so the output timeline is
strictly increasing: the first frame after an outage follows the last frame
before it by one frame duration (outage time is not inserted as a gap).
A ``Discontinuity`` item is yielded at each reconnect so consumers can reset
state that must not span the gap (look-ahead back-fill, detector cadence).
"""

from __future__ import annotations

import logging
import re
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction

import cv2

from streamdeid.redact import redact
from streamdeid.types import Frame, StreamdeidError
from streamdeid.video.reader import (
    STDIN,
    AudioPacket,
    ColorInfo,
    VideoSource,
    is_device,
    is_stream_url,
    open_source,
)

from .config import LiveConfig

log = logging.getLogger(__name__)

# A pts jump forward larger than this (camera clock reset, wrap) is treated
# like a reconnect: re-offset so the output does not freeze for the jump.
MAX_PTS_JUMP_SECONDS = 10.0


class LiveSourceLost(StreamdeidError):
    """The source stayed unreachable through every reconnect attempt.

    ``exit_code`` is what a CLI should exit with, so a supervisor (systemd,
    Kubernetes) can tell "camera gone" from bad usage or a crash.
    """

    exit_code = 3


@dataclass
class Discontinuity:
    """Yielded between the last item of one connection and the first of the next."""

    outage_seconds: float
    reconnects: int


@dataclass
class Outage:
    """One loss of the source: when it began (wall clock), when it came back."""

    started: float
    reason: str
    frame_before: int  # index of the last frame read before the outage (-1: none)
    ended: float | None = None
    attempts: int = 0

    @property
    def seconds(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


@dataclass
class _Timeline:
    """Maps each connection's pts onto one strictly increasing output timeline."""

    time_base: Fraction
    frame_ticks: int
    offset: int | None = None  # added to rescaled pts of the current connection
    last: int | None = None

    def new_connection(self) -> None:
        self.offset = None

    def map(self, pts: int | None, tb: Fraction | None) -> int:
        if pts is None or tb is None:
            raw = None
        else:
            raw = pts if tb == self.time_base else round(pts * tb / self.time_base)
        if raw is None:  # no timestamp: one frame after the last
            out = 0 if self.last is None else self.last + self.frame_ticks
            self.last = out
            return out
        if self.offset is None:
            self.offset = 0 if self.last is None else self.last + self.frame_ticks - raw
        out = raw + self.offset
        if self.last is not None:
            jump = float((out - self.last) * self.time_base)
            if out <= self.last or jump > MAX_PTS_JUMP_SECONDS:
                log.info("input timestamps jumped by %.3f s: re-aligned", jump)
                self.offset = self.last + self.frame_ticks - raw
                out = raw + self.offset
        self.last = out
        return out

    def audio_offset_seconds(self) -> Fraction | None:
        return None if self.offset is None else self.offset * self.time_base


@dataclass
class SourceCounters:
    frames_in: int = 0
    reconnects: int = 0
    connected: bool = False
    outages: list[Outage] = field(default_factory=list)


# Errors after which the other RTSP transport cannot do better: the host, the account or the stream is the
# problem, not how RTP travels (the RTSP exchange itself is TCP either way).
_NOT_TRANSPORT = re.compile(r"(?i)refused|timed? ?out|unreachable|no route|resolve|name or service|"
                            r"immediate exit|\b40[134]\b|unauthori[sz]ed|forbidden|not found")


def server_refused_transport(reason: str) -> bool:
    """Whether a failed RTSP open may work over the other lower transport (a server answered, but not
    with a verdict on the host, the account or the stream: rtsp-server-perl answers 400 to TCP). Judged
    on the reason after the URL: CI's random port 33401 read as a 401 and never fell back to UDP."""
    return not _NOT_TRANSPORT.search(error_tail(reason))


def error_tail(exc: StreamdeidError | str) -> str:
    """``cannot read URL as a video: REASON`` -> ``REASON`` (the URL is said once)."""
    text = str(exc)
    return text.split(" as a video: ", 1)[1] if " as a video: " in text else text


class LiveSource:
    """Iterate ``Frame``, ``AudioPacket`` and ``Discontinuity`` items from a live input.

    Open with :meth:`connect` (which retries like a reconnect); the first
    connection fixes the template (size, time base, rate, colour, audio stream)
    the writers are created from. Later connections with another frame size
    are resized to it. One thread iterates; ``stop`` ends waits early.
    """

    def __init__(self, url: str, live: LiveConfig, stop: threading.Event | None = None,
                 opener: Callable[..., VideoSource] = open_source, keep_planes: bool = False) -> None:
        self.url = url
        self.keep_planes = keep_planes  # frames carry the decoder's planes (Frame.yuv) for segment vaults
        self.name = redact(url) if url != STDIN else "<stdin>"
        self.live = live
        self.stop = stop or threading.Event()
        self._opener = opener
        self._src: VideoSource | None = None
        self._first: VideoSource | None = None
        self._timeline: _Timeline | None = None
        self._index = 0
        self.counters = SourceCounters()
        # a camera or a stream comes back; a file read to its end is done (reopened, it played again forever)
        self.reopenable = url != STDIN and not os.path.isfile(url)
        self.transport: str | None = None  # RTSP: the lower transport of the last connection

    # -------------------------------------------------- template properties
    @property
    def width(self) -> int:
        return self._template().width

    @property
    def height(self) -> int:
        return self._template().height

    @property
    def time_base(self) -> Fraction:
        return self._template().time_base

    @property
    def average_rate(self) -> Fraction | None:
        return self._template().average_rate

    @property
    def rotation(self) -> int:
        return self._template().rotation

    @property
    def sample_aspect_ratio(self) -> Fraction | None:
        return self._template().sample_aspect_ratio

    @property
    def format_name(self) -> str:
        return self._template().format_name

    @property
    def color(self) -> ColorInfo:
        return self._template().color

    @property
    def audio_stream(self):
        return self._template().audio_stream

    @property
    def fps(self) -> float:
        rate = self.average_rate
        return float(rate) if rate and 1 <= float(rate) <= 240 else 25.0

    def _template(self) -> VideoSource:
        if self._first is None:
            raise StreamdeidError("live source is not connected yet")
        return self._first

    # ------------------------------------------------------------ connect
    def _options(self, transport: str | None = None) -> dict[str, str]:
        if transport is not None:
            return {
                "rtsp_transport": transport,
                # FFmpeg >= 5: socket I/O timeout of the RTSP demuxer, in microseconds
                # (the old name "stimeout" is gone in FFmpeg 8).
                "timeout": str(int(self.live.read_timeout * 1e6)),
            }
        if is_stream_url(self.url):
            return {"rw_timeout": str(int(self.live.read_timeout * 1e6))}
        if is_device(self.url):
            return dict(self.live.device_options or {})
        return {}

    def _transports(self) -> list[str | None]:
        """RTSP lower transports to try, in order (``[None]``: not RTSP). ``auto`` tries the one that
        worked last first."""
        if not self.url.lower().startswith(("rtsp://", "rtsps://")):
            return [None]
        if self.live.transport != "auto":
            return [self.live.transport]
        return ["udp", "tcp"] if self.transport == "udp" else ["tcp", "udp"]

    def _open_once(self) -> VideoSource:
        timeout = None if self.url == STDIN else (self.live.connect_timeout, self.live.read_timeout)
        tries = self._transports()
        failures: list[StreamdeidError] = []
        for transport in tries:
            try:
                src = self._opener(self.url, format=self.live.input_format, options=self._options(transport),
                                   timeout=timeout, keep_planes=self.keep_planes)
            except StreamdeidError as exc:
                failures.append(exc)
                if len(tries) == 1 or not server_refused_transport(str(exc)):
                    break  # unreachable, timed out, unauthorized, no such stream: the same over the other one
                continue
            if transport is not None and transport != self.transport:
                how = log.info if transport == "tcp" else log.warning
                how("%s: RTSP over %s%s", self.name, transport.upper(),
                    " (the server refused interleaved TCP; UDP may lose packets on a busy network)"
                    if transport == "udp" and len(failures) else "")
                self.transport = transport
            return src
        if len(failures) > 1:  # both transports, in the order tried
            raise StreamdeidError(f"{failures[0]} (over {tries[0].upper()}); {error_tail(failures[1])} "
                                  f"(over {tries[1].upper()})")
        raise failures[0]

    def connect(self) -> None:
        """Open the first connection, retrying with backoff; raises ``LiveSourceLost``."""
        if not self.reopenable:
            self._attach(self._open_once())
            return
        outage = Outage(time.time(), "initial connection", -1)
        if not self._reconnect(outage, first=True):
            raise LiveSourceLost(f"cannot connect to {self.name}: {error_tail(outage.reason)}")

    def _attach(self, src: VideoSource) -> None:
        self._src = src
        if self._first is None:
            self._first = src
            rate = src.average_rate
            ticks = round(1 / (rate * src.time_base)) if rate else round(1 / (25 * src.time_base))
            self._timeline = _Timeline(src.time_base, max(1, ticks))
            log.info("%s: %dx%d, %s fps, time base %s", self.name, src.width, src.height,
                     f"{float(rate):.2f}" if rate else "unknown", src.time_base)
        else:
            self._timeline.new_connection()
            if (src.width, src.height) != (self.width, self.height):
                log.warning("%s: reconnected at %dx%d, resizing to %dx%d", self.name,
                            src.width, src.height, self.width, self.height)
        self.counters.connected = True

    def _reconnect(self, outage: Outage, first: bool = False) -> bool:
        """Retry until connected (True) or out of attempts/stopped (False)."""
        limit = self.live.max_retries
        attempt = 0
        while not self.stop.is_set():
            attempt += 1
            outage.attempts = attempt
            try:
                src = self._open_once()
            except StreamdeidError as exc:
                outage.reason = str(exc)
                log.warning("%s: connection attempt %d failed: %s", self.name, attempt, exc)
            else:
                if self.stop.is_set():
                    src.close()
                    return False
                self._attach(src)
                outage.ended = time.time()
                if not first:
                    log.warning("%s: reconnected after %.1f s (%d attempt%s)", self.name,
                                outage.seconds, attempt, "" if attempt == 1 else "s")
                return True
            if limit >= 0 and attempt >= max(1, limit):
                return False
            self.stop.wait(self.live.backoff(attempt))
        return False

    def close(self) -> None:
        for src in {id(s): s for s in (self._src, self._first) if s is not None}.values():
            src.close()
        self._src = None

    def __enter__(self) -> "LiveSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- iterate
    def __iter__(self) -> Iterator[Frame | AudioPacket | Discontinuity]:
        if self._src is None:
            self.connect()
        max_connections = 1_000_000  # bound: each pass is one connection
        for _ in range(max_connections):
            src = self._src
            yield from self._read(src)
            if self.stop.is_set() or not self.reopenable:
                return
            reason = src.end_reason or "end of stream"
            outage = Outage(time.time(), reason, self._index - 1)
            self.counters.outages.append(outage)
            self.counters.connected = False
            log.warning("%s: input lost after frame %d (%s); reconnecting", self.name, self._index - 1, reason)
            if src is not self._first:
                src.close()
            self._src = None
            if not self._reconnect(outage):
                if self.stop.is_set():
                    return
                raise LiveSourceLost(
                    f"{self.name}: gave up after {outage.attempts} reconnect attempts "
                    f"({error_tail(outage.reason)})")
            self.counters.reconnects += 1
            yield Discontinuity(outage.seconds or 0.0, self.counters.reconnects)

    def _read(self, src: VideoSource) -> Iterator[Frame | AudioPacket]:
        tl = self._timeline
        size = (self.width, self.height)
        for item in src:
            if self.stop.is_set():
                return
            if isinstance(item, AudioPacket):
                offset = tl.audio_offset_seconds()
                if offset is None or item.packet.time_base is None or item.packet.pts is None:
                    continue  # before this connection's first frame: no timeline yet
                shift = round(offset / item.packet.time_base)
                item.packet.pts += shift
                if item.packet.dts is not None:
                    item.packet.dts += shift
                yield item
                continue
            image, yuv = item.image, item.yuv
            if (image.shape[1], image.shape[0]) != size:
                image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
                yuv = None  # no longer this image's planes: its faces go to the vault as BGR
            pts = tl.map(item.pts, item.time_base)
            frame = Frame(index=self._index, image=image, pts=pts, time_base=tl.time_base, yuv=yuv)
            self._index += 1
            self.counters.frames_in += 1
            yield frame
