"""Python API mirroring the CLI: ``streamdeid.anonymize(src, dst, config)``."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
from tqdm import tqdm

from .anonymizers import reversible_method
from .audit import TrackExporter
from .config import PipelineConfig
from .files import refuse_same_file
from .folder import FAILED, OK, SKIPPED, FileOutcome, output_is_complete
from .keys import RunKeys, run_keys
from .live.config import LiveConfig
from .pipeline import Pipeline, build_renderer
from .summary import RunSummary
from .threads import ThreadedSink, threaded_source
from .render import FrameRenderer
from .restore import MODEL_MODE_CAVEAT, RecoverResult, recover
from .types import Frame, FrameResult, StreamdeidError
from .vault_glue import VaultRecorder, open_vault_writer, pipeline_meta, vault_path_for, vault_quality, video_id_tag
from .video.images import is_image, list_media
from .redact import redact
from .video.reader import is_live_input, open_source
from .video.stream_writer import StreamWriter, is_stream_output
from .video.writer import VideoWriter, write_image

__all__ = ["MODEL_MODE_CAVEAT", "RecoverResult", "RunResult", "anonymize", "recover"]

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    output: Path
    summary: RunSummary  # a live feed's is a LiveSummary (segments, drops, reconnects, latency)
    vault: Path | None = None  # None: irreversible output (no key file, --no-vault, or a still image)
    files: list[FileOutcome] = field(default_factory=list)  # a folder run: one per file, in order
    segment_vaults: list[Path] = field(default_factory=list)  # a live recording: one vault per segment


def default_output(src: str) -> Path:
    """``clip.mp4`` -> ``clip_anonymized.mp4``; ``photos/`` -> ``photos_anonymized/``."""
    p = Path(src)
    if p.is_dir():
        return p.with_name(p.name.rstrip("/") + "_anonymized")
    return p.with_name(f"{p.stem}_anonymized{p.suffix}")


def anonymize(src: str, dst: str | Path | None = None, config: PipelineConfig | None = None, *,
              key_file: str | None = None, new_key: bool = False, vault: bool = True,
              store_crops: bool = True, skip_existing: bool = False, live: LiveConfig | None = None) -> RunResult:
    """Anonymize a video file, image, folder of them, ``"-"`` (stdin), or a live feed.

    A live feed (``rtsp://...`` and other URLs, ``/dev/videoN``; any input when ``live`` is given, e.g.
    a live pipe on stdin) is recorded into ``dst`` (a file, rotated into segments by
    ``live.segment_time``; ``-``; or a push URL) until it ends, ``live.stop_after`` seconds or SIGINT, with
    a vault beside each segment when a key file is given; ``LiveSourceLost`` when it stays unreachable.

    With ``key_file`` (a master key; ``new_key`` creates it when missing) every
    track gets its own key and a recovery vault ``<output>.sdv`` is written
    beside a video output (``vault=False``: none). Without a key file the run
    uses an ephemeral key that is never stored: the output is irreversible.

    A folder is processed file by file: a file that fails is recorded in
    ``RunResult.files`` and the run goes on. ``skip_existing`` (folders only)
    skips a file whose output (and vault) a previous run finished, and redoes
    one it left incomplete.
    """
    config = config or PipelineConfig()
    if live is not None or (src != "-" and is_live_input(src)):
        if skip_existing:
            raise StreamdeidError("--skip-existing resumes a folder run, not a live feed")
        return _anonymize_live(src, dst, config, run_keys(key_file, new_key=new_key), live or LiveConfig(),
                               vault=vault)
    if skip_existing and (src == "-" or not Path(src).is_dir()):
        raise StreamdeidError("--skip-existing resumes a folder run; INPUT is not a folder")
    keys = run_keys(key_file, new_key=new_key)
    if src == "-":
        if dst is None:
            raise StreamdeidError("reading from stdin (-) needs an output path: -o OUTPUT")
    elif not Path(src).exists():
        raise StreamdeidError(f"{src}: no such file or folder")
    if dst is not None and is_stream_output(str(dst)):
        return _anonymize_video(src, str(dst), config, keys, vault=False, store_crops=False)
    out = Path(dst) if dst is not None else default_output(src)
    refuse_same_file(src, out)
    if src != "-" and Path(src).is_dir():
        return _anonymize_folder(Path(src), out, config, keys, vault=vault, store_crops=store_crops,
                                 skip_existing=skip_existing)
    if src != "-" and is_image(src):
        return _anonymize_image(Path(src), out, config, keys)
    return _anonymize_video(src, out, config, keys, vault=vault and not keys.ephemeral, store_crops=store_crops)


def _anonymize_live(src: str, dst: str | Path | None, config: PipelineConfig, keys: RunKeys, live: LiveConfig, *,
                    vault: bool) -> RunResult:
    """Record a live feed (see anonymize). Without a key file the keys are ephemeral (never stored): DBAF
    still gets one key per track, and there is no vault."""
    from .live import run_live
    from .vault_glue import segment_vault_factory

    if dst is None:
        raise StreamdeidError("a live input needs an output: -o FILE, -o rtsp://..., or -o - for stdout")
    out, stream = str(dst), is_stream_output(str(dst))
    renderer = renderer_for(config, keys)  # loads the model before connecting
    factory = None
    if vault and not keys.ephemeral and not stream:
        factory = segment_vault_factory(keys, config, renderer.anonymizer)
    observers, closers = track_observers(config)  # --export-tracks
    try:
        summary = run_live(src, out, config, live, renderer=renderer, vault_factory=factory, observers=observers)
    finally:
        for close in closers:
            close()
    vaults = [vault_path_for(p) for p in summary.segments] if factory is not None else []
    return RunResult(out if stream else Path(out), summary, segment_vaults=vaults)


def renderer_for(config: PipelineConfig, keys: RunKeys) -> FrameRenderer:
    return build_renderer(config, keys.for_track)


def _anonymize_video(src: str, out: Path | str, config: PipelineConfig, keys: RunKeys, *, vault: bool,
                     store_crops: bool) -> RunResult:
    """``out`` is a file path, or ``-``/a URL (stdout or a push, never with a vault)."""
    vault_path = vault_path_for(out) if vault and isinstance(out, Path) else None
    if vault_path is not None and vault_path.exists() and not config.output.overwrite:
        raise StreamdeidError(f"{vault_path} exists; pass --overwrite to replace it")
    renderer = renderer_for(config, keys)  # loads the model: fails before any output exists
    reversible = reversible_method(renderer.anonymizer)
    if vault_path is not None and not store_crops and reversible is None:
        raise StreamdeidError(f"--no-crops stores no face pixels, so only a reversible anonymizer (dbaf) can be "
                              f"recovered from its vault, not {renderer.anonymizer.name}")
    # a vault of face pixels stores the decoder's own planes (video/planes.py)
    with open_source(src, keep_planes=vault_path is not None and store_crops) as source:
        writer = _open_writer(out, source, config, keys)
        vault_writer = None
        try:
            summary = RunSummary()
            observers, closers = track_observers(config, summary)
            if vault_path is not None:
                vault_writer = open_vault_writer(vault_path, keys, source=src, output=out,
                                                 store_crops=store_crops, overwrite=config.output.overwrite,
                                                 pipeline=pipeline_meta(config, renderer.anonymizer),
                                                 quality=vault_quality(config.output),
                                                 fps=float(source.average_rate or 25))
                observers.append(VaultRecorder(vault_writer, reversible))
        except BaseException:
            writer.close(success=False)
            raise
        ok = False
        try:
            ok = _run_pipeline(src, source, writer.write, config, renderer, observers, summary)
            if summary.interrupted:
                kept = writer.abort_keep_partial()  # None for a stream: what was sent is sent
                out = out if kept is None else Path(kept)
                log.warning("interrupted: %d frames written to %s", summary.frames, redact(str(out)))
        finally:
            for close in closers:
                close()
            if not summary.interrupted:
                writer.close(success=ok)
            vault_path = _finish_vault(vault_writer, vault_path, ok, summary.interrupted, out)
    return RunResult(out, summary, vault_path)


def _open_writer(out: Path | str, source, config: PipelineConfig, keys: RunKeys) -> VideoWriter:
    """A file output is tagged with the run's video id (recover checks it against the vault's)."""
    if isinstance(out, Path):
        return VideoWriter(out, source, config.output, metadata=video_id_tag(keys.video_id))
    return StreamWriter(out, source, config.output)


def _run_pipeline(src: str, source, write, config: PipelineConfig, renderer: FrameRenderer,
                  observers: list, summary: RunSummary) -> bool:
    """Decode, the ``Pipeline`` (detect and track; render on its own thread) and encode on four threads.
    True: every frame was written; False: Ctrl-C (``summary.interrupted``; the frames already taken are
    written, the caller keeps the partial output)."""
    bar = tqdm(total=source.frame_count, unit="frame", disable=not config.progress,
               desc=Path(src).name if src != "-" else "stdin", dynamic_ncols=True)
    sink = ThreadedSink(write, summary.times)

    def emit(result, _pasted) -> None:
        sink.put(result.frame)
        bar.update(1)

    t0 = time.perf_counter()
    try:
        pipeline = Pipeline(config, renderer, fps=float(source.average_rate or 25), emit=emit,
                            observers=observers, summary=summary, render_thread=True)
        pipeline.run(threaded_source(source, threading.Event(), summary.times), sink.put)
        sink.close()
        return True
    except KeyboardInterrupt:
        summary.interrupted = True
        sink.close()
        return False
    finally:
        summary.seconds = time.perf_counter() - t0
        bar.close()


def _finish_vault(vault_writer, vault_path: Path | None, ok: bool, interrupted: bool, out: Path) -> Path | None:
    """Close the vault beside a published (or, on Ctrl-C, partial) output; delete it on failure."""
    if vault_writer is None or vault_path is None:
        return None
    if ok or interrupted:
        vault_writer.close()
        if interrupted:
            kept = vault_path_for(out)
            vault_path.rename(kept)
            return kept
        return vault_path
    vault_writer.abort()
    vault_path.unlink(missing_ok=True)
    return None


def track_observers(config: PipelineConfig, summary: RunSummary | None = None):
    """The audit log (with ``summary``: its per-track --keep/--only decisions are written at close)."""
    observers, closers = [], []
    if config.export_tracks:
        exporter = TrackExporter(config.export_tracks, summary)
        observers.append(exporter)
        closers.append(exporter.close)
    return observers, closers


def _anonymize_image(src: Path, out: Path, config: PipelineConfig, keys: RunKeys) -> RunResult:
    from .detect.finder import FaceFinder
    from .detect.still import StillFinder

    if out.exists() and not config.output.overwrite:
        raise StreamdeidError(f"{out} exists; pass --overwrite to replace it")
    image = cv2.imread(str(src), cv2.IMREAD_COLOR)
    if image is None:
        raise StreamdeidError(f"{src}: not a readable image")
    t0 = time.perf_counter()
    finder = FaceFinder(config.detect)
    dets = StillFinder(finder).find(image)  # a still has no second frame: every pass, weak faces too
    faces = [_still_face(i, dets) for i in range(len(dets))]
    renderer = renderer_for(config, keys)
    result = FrameResult(Frame(0, image, None, None), faces)
    selection = _select_still(result, config, finder) if config.select.mode else None
    pasted = renderer.render(result)
    observers, closers = track_observers(config)
    for obs in observers:
        obs(result, pasted)
    for close in closers:
        close()
    write_image(out, image, overwrite=config.output.overwrite)
    summary = RunSummary(frames=1, faces=len(faces), tracks=len(faces), fallbacks=renderer.fallbacks,
                         leak_fallbacks=renderer.leak_fallbacks, seconds=time.perf_counter() - t0,
                         smallest_face=finder.smallest_face(image.shape[1], image.shape[0]), selection=selection)
    return RunResult(out, summary)


def _select_still(result: FrameResult, config: PipelineConfig, finder) -> str:
    """--keep/--only on a still: one judged frame decides (there is no second); an unjudgeable face
    (small, profile) is anonymized."""
    from .selection import SelectStage

    stage = SelectStage(config.select, fps=1.0, finder=finder, confirm=1)
    stage.observe(result)
    stage.split(result)
    return stage.line()


def _still_face(i: int, dets):
    from .types import TrackedFace

    return TrackedFace(i + 1, dets.boxes[i], dets.landmarks[i], float(dets.scores[i]), "detected")


def _anonymize_folder(src: Path, out: Path, config: PipelineConfig, keys: RunKeys, *, vault: bool = True,
                      store_crops: bool = True, skip_existing: bool = False) -> RunResult:
    """Every file of ``src`` into ``out``: a file that fails is recorded and the next one is done.
    Ctrl-C stops the whole run (``summary.interrupted``)."""
    files = list_media(src)
    if not files:
        raise StreamdeidError(f"{src}: no images or videos in this folder")
    out.mkdir(parents=True, exist_ok=True)
    total = RunSummary()
    outcomes: list[FileOutcome] = []
    for f in files:
        try:
            outcome, summary = _folder_file(f, out / f.name, config, keys, vault=vault and not keys.ephemeral,
                                            store_crops=store_crops, skip_existing=skip_existing)
        except KeyboardInterrupt:  # outside the frame loop (opening, loading the model, a still image)
            outcome, summary = _outcome(f, out / f.name, None, FAILED, error="interrupted"), RunSummary()
            summary.interrupted = True
        outcomes.append(outcome)
        if summary is not None:
            _add_summary(total, summary)
            if summary.interrupted:
                total.interrupted = True
                break
    return RunResult(out, total, files=outcomes)


def _folder_file(src: Path, dst: Path, config: PipelineConfig, keys: RunKeys, *, vault: bool,
                 store_crops: bool, skip_existing: bool) -> tuple[FileOutcome, RunSummary | None]:
    """One file of a folder run: its outcome, and its summary when it ran (None: skipped or failed)."""
    vault_path = vault_path_for(dst) if vault and not is_image(src) else None
    if skip_existing:
        if output_is_complete(dst, vault_path):
            return _outcome(src, dst, vault_path, SKIPPED), None
        config = _redo_config(dst, vault_path, config)
    try:
        if is_image(src):
            res = _anonymize_image(src, dst, config, keys)
        else:
            res = _anonymize_video(str(src), dst, config, keys.for_next_video(), vault=vault,
                                   store_crops=store_crops)
    except StreamdeidError as exc:
        return _outcome(src, dst, None, FAILED, error=str(exc)), None
    except Exception as exc:  # a bug of ours on this file: record it, do the others (traceback with -v)
        log.info("internal error on %s", src, exc_info=True)
        return _outcome(src, dst, None, FAILED, error=f"internal error: {_first_line(exc)}"), None
    return file_outcome(str(src), res), res.summary


def _redo_config(dst: Path, vault_path: Path | None, config: PipelineConfig) -> PipelineConfig:
    """--skip-existing and ``dst`` is not a finished output: what a previous run left there (a half-written
    output, a vault without its END) is replaced. Only called once ``output_is_complete`` said no."""
    if not dst.exists() and not (vault_path is not None and vault_path.exists()):
        return config
    log.warning("%s: the output a previous run left is incomplete; redoing it", dst)
    return dataclasses.replace(config, output=dataclasses.replace(config.output, overwrite=True))


def _outcome(src: Path | str, dst: Path | str, vault: Path | None, status: str, summary: RunSummary | None = None,
             error: str | None = None) -> FileOutcome:
    s = summary or RunSummary()
    return FileOutcome(str(src), str(dst), str(vault) if vault is not None else None, status, error,
                       s.frames, s.faces, s.tracks, round(s.seconds, 3))


def file_outcome(src: str, result: RunResult) -> FileOutcome:
    """The outcome of a single-file run (a ``--report`` of one entry)."""
    if result.summary.interrupted:
        return _outcome(src, result.output, result.vault, FAILED, result.summary,
                        error=f"interrupted: partial output kept at {result.output}")
    return _outcome(src, result.output, result.vault, OK, result.summary)


def failed_outcome(src: str, dst: str | Path | None, error: str) -> FileOutcome:
    """The outcome of a single-file run that raised ``error``."""
    if dst is None and src != "-":
        dst = default_output(src)
    return _outcome(src, dst if dst is not None else "", None, FAILED, error=error)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _add_summary(total: RunSummary, summary: RunSummary) -> None:
    for name in ("frames", "faces", "tracks", "fallbacks", "leak_fallbacks", "seconds"):
        setattr(total, name, getattr(total, name) + getattr(summary, name))
    sizes = [v for v in (total.smallest_face, summary.smallest_face) if v is not None]
    total.smallest_face = max(sizes) if sizes else None  # the weakest promise of the folder
