"""Settings of a live run (RTSP camera, capture device, pipe)."""

from __future__ import annotations

from dataclasses import dataclass

from streamdeid.types import StreamdeidError

TRANSPORTS = ("auto", "tcp", "udp")


@dataclass
class LiveConfig:
    # RTSP lower transport: auto (TCP, then UDP where the server refuses interleaved TCP) | tcp | udp
    transport: str = "auto"
    connect_timeout: float = 10.0  # seconds to open a stream and decode its first frame
    read_timeout: float = 5.0  # seconds without data before a connection counts as dropped
    backoff_initial: float = 0.5  # first wait before reconnecting (seconds)
    backoff_max: float = 10.0  # cap of the wait between attempts (seconds)
    backoff_factor: float = 2.0  # wait multiplier after each failed attempt
    max_retries: int = 10  # connection attempts per outage (at least 1) before giving up; -1 = forever
    max_latency: float = 1.0  # seconds from frame arrival to emission; older frames are dropped
    # Look-ahead (cover a face in frames before its first detection) may use at
    # most this fraction of max_latency; also capped by PipelineConfig.lookahead_seconds.
    lookahead_fraction: float = 0.25
    segment_time: float | None = None  # seconds per recorded segment; None = one file
    stats_interval: float = 5.0  # seconds between statistics reports; 0 = none
    # Statistics as JSON lines: a file path, or "-"/"stderr" for stderr
    # (stdout may carry the video). None: one human-readable line on stderr.
    stats_json: str | None = None
    stream_container: str = "mpegts"  # stdout (-o -) container: mpegts | matroska
    input_format: str | None = None  # force a demuxer (stdin: mpegts/matroska; devices: v4l2)
    device_options: dict[str, str] | None = None  # v4l2 options, e.g. {"video_size": "1280x720"}
    stop_after: float | None = None  # stop cleanly after this many seconds (tests, benchmarks)

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise StreamdeidError(f"rtsp transport must be one of {', '.join(TRANSPORTS)}, not {self.transport!r}")
        if self.max_latency <= 0:
            raise StreamdeidError("max latency must be positive")
        if self.segment_time is not None and self.segment_time <= 0:
            raise StreamdeidError("segment time must be positive (or None for one file)")
        if self.backoff_initial <= 0 or self.backoff_factor < 1 or self.backoff_max < self.backoff_initial:
            raise StreamdeidError("reconnect backoff needs 0 < initial <= max and factor >= 1")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise StreamdeidError("timeouts must be positive")
        if self.stream_container not in ("mpegts", "matroska"):
            raise StreamdeidError("stdout container must be mpegts or matroska")

    def backoff(self, attempt: int) -> float:
        """Wait before reconnect attempt ``attempt`` (1-based)."""
        return min(self.backoff_max, self.backoff_initial * self.backoff_factor ** max(0, attempt - 1))
