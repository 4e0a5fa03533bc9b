"""The output video as the review page sees it: its frame timestamps, a copy the browser can play, and
one pass over its frames.

Frame index <-> video time. The page plays the output (or its preview copy, below) and must know which
frame it shows: a box drawn on the paused picture belongs to that frame. Each frame's presentation time
is read here with PyAV (``frame.time``: pts x time base, in decode order = frame index, the index the run
and its audit log count); the page shows frame ``i`` for any ``currentTime`` from ``times[i]`` up to
``times[i+1]`` and seeks to frame ``i`` at the middle of that interval. Chromium's ``currentTime`` is the
same clock: on short_hamilton_clip (first frame at 0.852 s) a seek to each frame's middle drew that very
frame (tests/test_review.py checks a drawn box lands on the frame it was drawn on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from ..types import StreamdeidError
from ..vault.naming import read_edits_tag, read_video_id_tag
from ..video.inputs import AV_ERRORS, error_reason
from ..video.rotation import display_rotation, quarter_turns, turned_size, upright

log = logging.getLogger(__name__)

# What Chromium, Firefox and Safari all play without a plug-in: anything else gets a preview copy.
PLAYABLE_CONTAINERS = {"mp4", "mov", "webm"}  # a substring of PyAV's format name ("mov,mp4,m4a,...")
PLAYABLE_CODECS = {"h264", "vp8", "vp9", "av1"}
PLAYABLE_PIX_FMTS = {"yuv420p", "yuvj420p"}
PREVIEW_CRF = "16"  # the preview is only looked at; the flags and thumbnails use the output's own frames


@dataclass
class VideoFacts:
    """What PyAV says about a video file, and its frames' presentation times in seconds."""

    path: Path
    width: int
    height: int
    codec: str
    pix_fmt: str
    container: str
    fps: float
    times: list[float]
    time_base: Fraction
    pts: list[int]
    video_id: str | None = None  # hex, the run's (its output's metadata, vault/naming.py); None: not a run's
    edits: str | None = None  # the digest of the edits the run applied (Edits.digest); None: it applied none
    turns: int = 0  # quarter turns that make a stored frame upright (video/rotation.py); width, height: upright

    @property
    def frames(self) -> int:
        return len(self.times)

    @property
    def playable(self) -> bool:
        """Plays in a browser as it is (H.264/VP8/VP9/AV1 in 8-bit 4:2:0, in MP4 or WebM)."""
        names = set(self.container.split(","))
        return bool(names & PLAYABLE_CONTAINERS) and self.codec in PLAYABLE_CODECS and self.pix_fmt in PLAYABLE_PIX_FMTS


def read_facts(path: Path) -> VideoFacts:
    """Decode ``path`` once (no pixel conversion) for its frame timestamps."""
    try:
        with av.open(str(path)) as c:
            if not c.streams.video:
                raise StreamdeidError(f"no video stream in {path}")
            s = c.streams.video[0]
            s.thread_type = "AUTO"
            cc = s.codec_context
            times, pts = [], []
            time_base = Fraction(s.time_base) if s.time_base else Fraction(1, 1000)
            last, turns = None, None
            for frame in c.decode(s):
                turns = _turns(frame) if turns is None else turns
                p = frame.pts if frame.pts is not None else (last + 1 if last is not None else 0)
                last = p
                pts.append(int(p))
                times.append(float(p * time_base))
            if not times:
                raise StreamdeidError(f"{path}: no video frames")
            rate = s.average_rate or Fraction(25)
            # upright, as a player (and the run, and its audit log) sees it
            width, height = turned_size(cc.width, cc.height, turns)
            return VideoFacts(path=path, width=int(width), height=int(height), codec=cc.name,
                              pix_fmt=str(cc.pix_fmt or ""), container=c.format.name, fps=float(rate),
                              times=times, time_base=time_base, pts=pts,
                              video_id=read_video_id_tag(dict(c.metadata)), edits=read_edits_tag(dict(c.metadata)),
                              turns=turns)
    except StreamdeidError:
        raise
    except AV_ERRORS as exc:
        raise StreamdeidError(f"cannot read {path} as a video: {error_reason(exc)}") from None


def _turns(frame: av.VideoFrame) -> int:
    return quarter_turns(display_rotation(frame))


def frames_bgr(path: Path, wanted: Callable[[int], bool]) -> Iterator[tuple[int, np.ndarray]]:
    """(index, BGR image) for each frame of ``path`` whose index ``wanted`` accepts, in order; the others are
    decoded but not converted (the cheap part of a pass). Upright, as the run worked on them."""
    try:
        with av.open(str(path)) as c:
            s = c.streams.video[0]
            s.thread_type = "AUTO"
            turns = None
            for i, frame in enumerate(c.decode(s)):
                turns = _turns(frame) if turns is None else turns
                if wanted(i):
                    yield i, upright(frame.to_ndarray(format="bgr24"), turns)
    except AV_ERRORS as exc:
        raise StreamdeidError(f"cannot decode {path}: {error_reason(exc)}") from None


def write_preview(facts: VideoFacts, dst: Path) -> Path:
    """An H.264 (4:2:0, faststart) MP4 of ``facts.path`` with the same frame timestamps, for an output the
    browser cannot play (``--codec ffv1``, 4:4:4, RGB H.264, Matroska). Odd sides are cut to even ones (the
    page maps its boxes by the output's own size). Audio is left out: the page is for looking."""
    w, h = facts.width - facts.width % 2, facts.height - facts.height % 2
    try:
        with av.open(str(facts.path)) as ic, av.open(str(dst), "w", options={"movflags": "+faststart"}) as oc:
            s = ic.streams.video[0]
            s.thread_type = "AUTO"
            o = oc.add_stream("libx264", rate=Fraction(facts.fps).limit_denominator(100000))
            o.width, o.height, o.pix_fmt = w, h, "yuv420p"
            o.time_base = facts.time_base
            o.options = {"crf": PREVIEW_CRF, "preset": "veryfast"}
            for i, frame in enumerate(ic.decode(s)):
                image = upright(frame.to_ndarray(format="bgr24"), facts.turns)[:h, :w]  # played as it is shown
                out = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
                out.pts, out.time_base = facts.pts[i], facts.time_base
                for packet in o.encode(out):
                    oc.mux(packet)
            for packet in o.encode():
                oc.mux(packet)
    except AV_ERRORS as exc:
        raise StreamdeidError(f"cannot write a preview of {facts.path}: {error_reason(exc)}") from None
    return dst
