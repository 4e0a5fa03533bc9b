"""Where a live run's anonymized frames go: rotated file segments or a live push.

``SegmentRecorder`` writes ``out.mp4`` as ``out_00000.mp4``, ``out_00001.mp4``
... (or a printf pattern such as ``out_%05d.mp4``), starting a new file every
``segment_time`` seconds of media time. Each segment is its own
``VideoWriter``: fragmented MP4 through a partial file renamed on close, so
every segment plays on its own and a crash loses at most the open segment's
tail (its partial file stays playable). Each segment's timestamps start at 0.
With a ``vault_factory``, every segment gets its own recovery vault: the
runner emits ``RenderedFrame`` items (a frame plus what its pastes changed)
and the vault records them with frame indices counted from the segment's
first frame, exactly as ``streamdeid recover`` will decode that file.

A stream target (``-``, ``rtsp://``...) gets one ``StreamWriter`` for the
whole run; segment rotation does not apply to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Protocol

from streamdeid.config import OutputConfig
from streamdeid.types import Frame, StreamdeidError
from streamdeid.redact import redact
from streamdeid.video.reader import AudioPacket
from streamdeid.video.stream_writer import StreamWriter, is_stream_output
from streamdeid.video.writer import VideoTemplate, VideoWriter

log = logging.getLogger(__name__)

SegmentHook = Callable[[Path], None]


@dataclass
class RenderedFrame:
    """An anonymized frame and the ``PastedFace`` records of its faces."""

    frame: Frame
    pasted: list = field(default_factory=list)


class SegmentVault(Protocol):
    metadata: dict[str, str]  # container tags for the segment (its vault's video id)

    def record(self, index: int, frame: Frame, pasted: list) -> None: ...

    def close(self, segment: Path, success: bool) -> None: ...


VaultFactory = Callable[[Path, float | None], SegmentVault]  # (segment, frames per second)
MAX_SEGMENTS = 10_000_000  # bound on the segment counter (pattern width)
MAX_EARLY_AUDIO = 2000  # audio packets held until the first video frame (about 40 s of AAC)


def segment_path(output: str | Path, index: int) -> Path:
    """``out.mp4`` -> ``out_00003.mp4``; a pattern with ``%`` is formatted instead."""
    text = str(output)
    if "%" in text:
        try:
            return Path(text % index)
        except (TypeError, ValueError):
            raise StreamdeidError(f"bad segment pattern {text!r} (use one integer field, e.g. out_%05d.mp4)") from None
    p = Path(text)
    return p.with_name(f"{p.stem}_{index:05d}{p.suffix}")


def first_free_segment(output: str | Path, start: int = 0) -> int:
    """The first index from ``start`` whose segment of ``output`` is not on disk (as a finished file, its
    unfinished copy or its vault): a restarted recording (a service's Restart=always) goes on after the
    segments a run before it left, and a recording skips any it meets later, instead of stopping on them or
    replacing them."""
    index = start
    while index < MAX_SEGMENTS and _taken(segment_path(output, index)):
        index += 1
    return index


def _taken(path: Path) -> bool:
    from ..vault import vault_path_for
    from ..video.partial import partial_path_for

    return path.exists() or partial_path_for(path).exists() or vault_path_for(path).exists()


class SegmentRecorder:
    """Writes emitted items to rotating segment files or one stream.

    ``write`` is called from one thread (the encoder thread). ``close``
    finishes the open segment; ``success=False`` keeps it as a partial file.
    """

    def __init__(
        self,
        output: str,
        template: VideoTemplate,
        config: OutputConfig,
        *,
        segment_time: float | None = None,
        stream_container: str = "mpegts",
        stream_options: dict[str, str] | None = None,
        on_segment_open: SegmentHook | None = None,
        on_segment_close: SegmentHook | None = None,
        vault_factory: VaultFactory | None = None,
    ) -> None:
        self.output = output
        self.template = template
        self.config = config
        self.stream = is_stream_output(output)
        if self.stream and segment_time:
            log.warning("--segment-time applies to file recordings, not to %s: ignored", redact(output))
            segment_time = None
        self.segment_time = segment_time
        self.stream_container = stream_container
        self.stream_options = stream_options
        self.on_open = on_segment_open
        self.on_close = on_segment_close
        self.vault_factory = None if self.stream else vault_factory
        self._vault: SegmentVault | None = None
        self._segment_frames = 0  # frames in the open segment
        self._early_audio: list[AudioPacket] = []  # audio that came before the first frame
        self.segments: list[Path] = []  # finished segment files (none for a stream: it leaves no file)
        self.frames_written = 0
        self._writer: VideoWriter | None = None
        self._segment: Path | None = None  # what the open segment's hooks are given
        self._start: int | None = None  # pts of the open segment's first frame (template tb)
        self._next_index = 0  # (a segment on disk is skipped: first_free_segment)

    # ------------------------------------------------------------- writing
    def write(self, item: object) -> None:
        if isinstance(item, RenderedFrame):
            self._write_frame(item.frame, item.pasted)
        elif isinstance(item, Frame):
            self._write_frame(item)
        elif isinstance(item, AudioPacket):
            self._write_audio(item)

    def _write_frame(self, frame: Frame, pasted: list | None = None) -> None:
        if self._writer is None or self._due(frame):
            self._rotate(frame)
        start = self._start or 0
        pts = None if frame.pts is None else frame.pts - start
        local = Frame(self._segment_frames, frame.image, pts, frame.time_base, yuv=frame.yuv)
        self._writer.write_frame(local)
        if self._vault is not None:
            self._vault.record(self._segment_frames, local, pasted or [])
        self._segment_frames += 1
        self.frames_written += 1

    def _due(self, frame: Frame) -> bool:
        if not self.segment_time or frame.pts is None or frame.time_base is None:
            return False
        return float((frame.pts - (self._start or 0)) * Fraction(frame.time_base)) >= self.segment_time

    def _write_audio(self, item: AudioPacket) -> None:
        if item.packet.pts is None or item.packet.time_base is None:
            return
        if self._writer is None:
            # Audio outruns video (the video waits in the look-ahead buffer and
            # the detector): hold it until the first frame opens the segment.
            if len(self._early_audio) < MAX_EARLY_AUDIO:
                self._early_audio.append(item)
            return
        shift = round((self._start or 0) * Fraction(self.template.time_base) / item.packet.time_base)
        pts = item.packet.pts - shift
        if pts < 0:
            return  # belongs before this segment's first frame
        item.packet.pts = pts
        if item.packet.dts is not None:
            item.packet.dts = item.packet.dts - shift
        self._writer.write_audio(item)

    # ------------------------------------------------------------ segments
    def _rotate(self, frame: Frame) -> None:
        self._finish_segment(success=True)
        if self.segment_time and not self.stream:
            self._next_index = first_free_segment(self.output, self._next_index)
        if self._next_index >= MAX_SEGMENTS:
            raise StreamdeidError("segment counter exhausted")
        if self.stream:
            path = Path(self.output)
            self._writer = StreamWriter(self.output, self.template, self.config,
                                        container=self.stream_container, options=self.stream_options)
        else:
            path = segment_path(self.output, self._next_index) if self.segment_time else Path(self.output)
            rate = self.template.average_rate
            fps = float(rate) if rate else None  # the vault chunks about a second of frames
            self._vault = self.vault_factory(path, fps) if self.vault_factory else None
            metadata = self._vault.metadata if self._vault is not None else None
            try:
                self._writer = VideoWriter(path, self.template, self.config, metadata=metadata)
            except BaseException:
                if self._vault is not None:
                    self._vault.close(path, success=False)
                    self._vault = None
                raise
            log.info("recording segment %s", path)
        self._segment = path
        self._next_index += 1
        self._segment_frames = 0
        self._start = frame.pts if not self.stream or self._start is None else self._start
        if self.on_open is not None:
            self.on_open(path)
        early, self._early_audio = self._early_audio, []
        for item in early:  # packets before this segment's first frame are dropped there
            self._write_audio(item)

    def _finish_segment(self, success: bool) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        if success:
            path = writer.close(success=True)
        else:
            path = writer.abort_keep_partial()
        if path is not None:
            self.segments.append(Path(path))
        vault, self._vault = self._vault, None
        if vault is not None:
            vault.close(Path(path) if path is not None else self._segment, success and path is not None)
        if self.on_close is not None:
            self.on_close(Path(path) if path is not None else self._segment)

    def close(self, success: bool = True) -> list[Path]:
        """Finish the open segment (published on success, else kept partial)."""
        self._finish_segment(success)
        return self.segments
