"""Python API mirroring the CLI: ``streamdeid.anonymize(src, dst, config)``."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
from tqdm import tqdm

from .anonymize import create_anonymizer
from .audit import TrackExporter
from .config import PipelineConfig
from .pipeline import RunSummary, ThreadedSink, process_frames, threaded_source
from .render import FrameRenderer
from .types import Frame, FrameResult, StreamdeidError
from .video.images import is_image, list_media
from .video.reader import open_source
from .video.writer import VideoWriter, write_image

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    output: Path
    summary: RunSummary


def default_output(src: str) -> Path:
    """``clip.mp4`` -> ``clip_anonymized.mp4``; ``photos/`` -> ``photos_anonymized/``."""
    p = Path(src)
    if p.is_dir():
        return p.with_name(p.name.rstrip("/") + "_anonymized")
    return p.with_name(f"{p.stem}_anonymized{p.suffix}")


def anonymize(src: str, dst: str | Path | None = None, config: PipelineConfig | None = None) -> RunResult:
    """Anonymize a video file, image, folder of them, or ``"-"`` (stdin)."""
    config = config or PipelineConfig()
    if src == "-":
        if dst is None:
            raise StreamdeidError("reading from stdin (-) needs an output path: -o OUTPUT")
    elif not Path(src).exists():
        raise StreamdeidError(f"{src}: no such file or folder")
    out = Path(dst) if dst is not None else default_output(src)
    if src != "-" and Path(src).is_dir():
        return _anonymize_folder(Path(src), out, config)
    if src != "-" and is_image(src):
        return _anonymize_image(Path(src), out, config)
    return _anonymize_video(src, out, config)


def _renderer(config: PipelineConfig) -> FrameRenderer:
    return FrameRenderer(create_anonymizer(config.anonymize), align=config.align,
                         blend=config.blend, anonymize=config.anonymize)


def _anonymize_video(src: str, out: Path, config: PipelineConfig) -> RunResult:
    summary = RunSummary()
    stop = threading.Event()
    with open_source(src) as source:
        fps = float(source.average_rate or 25)
        writer = VideoWriter(out, source, config.output)
        renderer = _renderer(config)
        observers, closers = _observers(config)
        bar = tqdm(total=source.frame_count, unit="frame", disable=not config.progress,
                   desc=Path(src).name if src != "-" else "stdin", dynamic_ncols=True)
        sink = ThreadedSink(writer.write, summary.times)

        def emit(item: object) -> None:
            sink.put(item)
            if isinstance(item, Frame):
                bar.update(1)

        t0 = time.perf_counter()
        ok = False
        try:
            process_frames(threaded_source(source, stop, summary.times), config, renderer,
                           fps=fps, emit=emit, observers=observers, summary=summary)
            sink.close()
            ok = True
        except KeyboardInterrupt:
            summary.interrupted = True
            sink.close()
            partial = writer.abort_keep_partial()
            log.warning("interrupted: %d frames written to %s", summary.frames, partial)
            out = Path(partial)
        finally:
            summary.seconds = time.perf_counter() - t0
            bar.close()
            for close in closers:
                close()
            if not summary.interrupted:
                writer.close(success=ok)
    return RunResult(out, summary)


def _observers(config: PipelineConfig):
    observers, closers = [], []
    if config.export_tracks:
        exporter = TrackExporter(config.export_tracks)
        observers.append(exporter)
        closers.append(exporter.close)
    return observers, closers


def _anonymize_image(src: Path, out: Path, config: PipelineConfig) -> RunResult:
    from .detect import create_detector

    if out.exists() and not config.output.overwrite:
        raise StreamdeidError(f"{out} exists; pass --overwrite to replace it")
    image = cv2.imread(str(src), cv2.IMREAD_COLOR)
    if image is None:
        raise StreamdeidError(f"{src}: not a readable image")
    t0 = time.perf_counter()
    dets = create_detector(config.detect).detect(image)
    faces = [_still_face(i, dets) for i in range(len(dets))]
    renderer = _renderer(config)
    result = FrameResult(Frame(0, image, None, None), faces)
    pasted = renderer.render(result)
    observers, closers = _observers(config)
    for obs in observers:
        obs(result, pasted)
    for close in closers:
        close()
    write_image(out, image, overwrite=config.output.overwrite)
    summary = RunSummary(frames=1, faces=len(faces), tracks=len(faces), fallbacks=renderer.fallbacks,
                         seconds=time.perf_counter() - t0)
    return RunResult(out, summary)


def _still_face(i: int, dets):
    from .types import TrackedFace

    return TrackedFace(i + 1, dets.boxes[i], dets.landmarks[i], float(dets.scores[i]), "detected")


def _anonymize_folder(src: Path, out: Path, config: PipelineConfig) -> RunResult:
    files = list_media(src)
    if not files:
        raise StreamdeidError(f"{src}: no images or videos in this folder")
    out.mkdir(parents=True, exist_ok=True)
    total = RunSummary()
    for f in files:
        res = _anonymize_image(f, out / f.name, config) if is_image(f) else _anonymize_video(str(f), out / f.name, config)
        for name in ("frames", "faces", "tracks", "fallbacks", "seconds"):
            setattr(total, name, getattr(total, name) + getattr(res.summary, name))
        if res.summary.interrupted:
            total.interrupted = True
            break
    return RunResult(out, total)
