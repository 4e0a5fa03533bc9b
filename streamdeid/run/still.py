"""One still image: every detector pass at once (a still has no second frame), no tracker, no vault."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from ..config import PipelineConfig
from ..detect.finder import min_face_over_picture
from ..edits import Edits, check_source, owner, with_added
from ..render import FrameRenderer
from ..summary import RunSummary
from ..types import Frame, FrameResult, StreamdeidError, TrackedFace
from ..video.images import read_image
from ..video.writer import write_image
from .result import RunResult, track_observers

log = logging.getLogger(__name__)


def run_still(src: Path, out: Path, config: PipelineConfig, renderer_for, edits: Edits | None = None) -> RunResult:
    """``renderer_for()``: the run's renderer, built once the image is read (a missing model still fails
    before the output is written). ``edits``: a reviewer's corrections (--edits; frame 0 is the photo)."""
    from ..detect.finder import FaceFinder
    from ..detect.still import StillFinder

    if out.exists() and not config.output.overwrite:
        raise StreamdeidError(f"{out} exists; pass --overwrite to replace it")
    image = read_image(src)
    if edits is not None:
        check_source(edits, 1, image.shape[1], image.shape[0], src.name)
    t0 = time.perf_counter()
    finder = FaceFinder(config.detect)
    still = StillFinder(finder)
    dets = still.find(image)  # a still has no second frame: every pass, weak faces too
    added = np.zeros(len(dets), bool)
    if edits is not None and edits.add:
        dets, added = with_added(dets, np.array([b.box for b in edits.add], np.float32))
        log.info("edits: %d face box(es) added", len(edits.add))
    faces = [TrackedFace(i + 1, dets.boxes[i], dets.landmarks[i], float(dets.scores[i]), "detected")
             for i in range(len(dets))]
    renderer: FrameRenderer = renderer_for()
    result = FrameResult(Frame(0, image, None, None), faces)
    if edits is not None:
        _remove(result, edits, {faces[i].track_id for i in np.flatnonzero(added)})
    decided = RunSummary()  # --keep/--only: the audit log writes its per-face decisions at close
    if config.select.mode:
        decided.selection, decided.decisions = _select_still(result, config, finder)
    pasted = renderer.render(result)
    observers, closers = track_observers(config, decided)
    for obs in observers:
        obs(result, pasted)
    for close in closers:
        close()
    write_image(out, image, overwrite=config.output.overwrite)
    smallest = still.smallest_face(image.shape[1], image.shape[0])
    too_tall = min_face_over_picture(config.detect.min_face, image.shape[1], image.shape[0], smallest, "photo")
    if too_tall:  # it was replaced without a word (the summary line named what was looked for)
        log.warning("%s", too_tall)
    summary = RunSummary(frames=1, faces=len(result.faces), tracks=len(result.faces), fallbacks=renderer.fallbacks,
                         leak_fallbacks=renderer.leak_fallbacks, seconds=time.perf_counter() - t0,
                         smallest_face=smallest,
                         selection=decided.selection, decisions=decided.decisions)
    return RunResult(out, summary)


def _remove(result: FrameResult, edits: Edits, added: set[int]) -> None:
    """A removal names the face its box overlaps most (edits.owner); that face is left as it is (``kept``),
    unless an added box made it (privacy first), and each says so on the record."""
    for k, b in enumerate(edits.remove):
        face = owner(result.faces, b.box)
        if face is None:
            log.warning("edits: remove[%d]: no cover there, nothing removed", k)
        elif face.track_id in added:
            log.warning("edits: remove[%d]: face %d is covered all the same: an added box made it", k, face.track_id)
        else:
            result.faces = [f for f in result.faces if f is not face]
            result.kept = list(result.kept) + [face]
            log.warning("edits: remove[%d]: face %d left as it is (a reviewer's decision)", k, face.track_id)


def _select_still(result: FrameResult, config: PipelineConfig, finder) -> tuple[str, dict]:
    """--keep/--only on a still: one judged frame decides (there is no second); an unjudgeable face
    (small, profile) is anonymized. Returns the selection's line and each face's decision (by track id)."""
    from ..selection import SelectStage

    stage = SelectStage(config.select, fps=1.0, finder=finder, confirm=1)
    stage.observe(result)
    stage.split(result)
    return stage.line(), {t: ev.summary() for t, ev in stage.selector.tracks.items()}
