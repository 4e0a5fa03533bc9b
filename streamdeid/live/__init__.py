"""Live streams: RTSP cameras, capture devices and pipes in; recordings and pushes out.

``run_live(source, output, config, live)`` is the entry point; see
``streamdeid.live.runner`` for the threading and the latency bound,
``source`` for reconnects, ``outputs`` for segment rotation.
"""

from .config import LiveConfig
from .outputs import SegmentRecorder, segment_path
from .runner import LiveSummary, live_lookahead_frames, run_live
from .source import Discontinuity, LiveSource, LiveSourceLost, Outage

__all__ = [
    "Discontinuity",
    "LiveConfig",
    "LiveSource",
    "LiveSourceLost",
    "LiveSummary",
    "Outage",
    "SegmentRecorder",
    "live_lookahead_frames",
    "run_live",
    "segment_path",
]
