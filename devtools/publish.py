"""Publish a video file to an RTSP server in real time, looping (the RTSP lab of devtools/rtsp.py; not packaged).

A stand-in for an IP camera: decodes ``path`` and re-encodes it with
low-latency x264 settings, pushing with RTSP ANNOUNCE/RECORD, paced to the
file's frame rate. If the server goes away the publisher retries (bounded),
like a camera would. Optionally stamps each frame's send time (wall clock,
milliseconds) as a row of black/white blocks in the top-left corner, which
``read_stamp`` decodes again after anonymization to measure end-to-end latency.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

log = logging.getLogger(__name__)

STAMP_BITS = 32
STAMP_BLOCK = 8  # pixels per bit block (survives H.264 at normal quality)
_ERRORS = (av.FFmpegError, OSError, ValueError)


def stamp_time(image: np.ndarray, ms: int) -> None:
    """Write ``ms`` (mod 2**32) as 32 blocks along the top-left edge, in place."""
    b = STAMP_BLOCK
    for i in range(STAMP_BITS):
        image[0:b, i * b:(i + 1) * b] = 255 if (ms >> (STAMP_BITS - 1 - i)) & 1 else 0


def read_stamp(image: np.ndarray) -> int:
    b = STAMP_BLOCK
    value = 0
    for i in range(STAMP_BITS):
        block = image[1:b - 1, i * b + 1:(i + 1) * b - 1]
        value = (value << 1) | int(block.mean() > 127)
    return value


def now_ms() -> int:
    return int(time.time() * 1000) % (1 << STAMP_BITS)


@dataclass
class PublishStats:
    frames: int = 0
    connections: int = 0
    errors: int = 0


def publish_loop(path: str, url: str, seconds: float, stop: threading.Event | None = None, *,
                 transport: str = "udp", stamp: bool = False, retry_wait: float = 0.5,
                 stats: PublishStats | None = None, max_connections: int = 100) -> PublishStats:
    """Push ``path`` to ``url`` in a loop for ``seconds`` (or until ``stop``)."""
    stop = stop or threading.Event()
    stats = stats or PublishStats()
    deadline = time.monotonic() + seconds
    for _ in range(max_connections):
        if stop.is_set() or time.monotonic() >= deadline:
            break
        try:
            _publish_once(path, url, deadline, stop, transport, stamp, stats)
        except _ERRORS as exc:
            stats.errors += 1
            log.info("publisher: %s; retrying", exc)
            stop.wait(retry_wait)
    return stats


def _publish_once(path, url, deadline, stop, transport, stamp, stats) -> None:
    with av.open(path) as inp:
        vin = inp.streams.video[0]
        rate = Fraction(vin.average_rate or 25)
        out = av.open(url, mode="w", format="rtsp", options={"rtsp_transport": transport}, timeout=5.0)
        try:
            vout = out.add_stream("libx264", rate=rate, options={
                "preset": "ultrafast", "tune": "zerolatency", "g": str(round(rate)), "crf": "23"})
            vout.width, vout.height, vout.pix_fmt = vin.codec_context.width, vin.codec_context.height, "yuv420p"
            vout.time_base = 1 / rate
            stats.connections += 1
            n = 0
            t0 = time.monotonic()
            for _loop in range(1_000_000):
                inp.seek(0)
                for vf in inp.decode(vin):
                    if stop.is_set() or time.monotonic() >= deadline:
                        return
                    image = vf.to_ndarray(format="bgr24")
                    if stamp:
                        stamp_time(image, now_ms())
                    frame = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p")
                    frame.pts, frame.time_base = n, 1 / rate
                    out.mux(vout.encode(frame))
                    n += 1
                    stats.frames += 1
                    ahead = t0 + float(n / rate) - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
        finally:
            try:
                out.close()
            except _ERRORS:
                pass
