"""What happened to each file of a run: ``FileOutcome``, resuming (``--skip-existing``, batches) and the JSON
report (``--report``).

A folder run or a batch attempts every file; a file that fails is recorded and the run goes on.
``output_is_complete`` tells an output a previous run finished (it decodes, and its
vault is complete and covers its frames) from one a crash or a kill left half-written.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import av
import cv2

from ..redact import redact
from ..types import StreamdeidError
from ..video.images import is_image

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
INTERNAL_ERROR = "internal error"  # how a report's error line starts when a bug of ours, not the file, failed it


@dataclass
class FileOutcome:
    """What happened to one input file of a run (one entry of ``--report``)."""

    input: str
    output: str
    vault: str | None
    status: str  # OK | FAILED | SKIPPED
    error: str | None = None
    frames: int = 0
    faces: int = 0
    tracks: int = 0
    seconds: float = 0.0


def outcome(src: Path | str, dst: Path | str, vault: Path | None, status: str, summary=None,
            error: str | None = None) -> FileOutcome:
    """``summary``: the file's ``RunSummary`` (frames, faces, tracks, seconds), None when it did not run."""
    frames, faces, tracks, seconds = ((summary.frames, summary.faces, summary.tracks, summary.seconds)
                                      if summary is not None else (0, 0, 0, 0.0))
    return FileOutcome(str(src), str(dst), str(vault) if vault is not None else None, status, error,
                       frames, faces, tracks, round(seconds, 3))


def failed_outcome(src: str, dst: str | Path, error: str) -> FileOutcome:
    return outcome(src, dst, None, FAILED, error=error)


def error_line(exc: BaseException) -> str:
    """An unexpected exception (a bug of ours) as one line of a report."""
    lines = str(exc).strip().splitlines()
    return f"{INTERNAL_ERROR}: {type(exc).__name__}" + (f": {lines[0]}" if lines else "")


def counts(outcomes: list[FileOutcome]) -> dict[str, int]:
    return {s: sum(o.status == s for o in outcomes) for s in (OK, FAILED, SKIPPED)}


def summary_line(outcomes: list[FileOutcome]) -> str:
    c = counts(outcomes)
    return f"{c[OK]} ok, {c[FAILED]} failed, {c[SKIPPED]} skipped"


def write_report(path: str | Path, outcomes: list[FileOutcome], *, interrupted: bool = False) -> None:
    """The per-file outcomes and their totals as JSON, written to a temp file and moved into place."""
    target = Path(path)
    totals = {"files": len(outcomes), **counts(outcomes), "interrupted": interrupted}
    for name in ("frames", "faces", "tracks"):
        totals[name] = sum(getattr(o, name) for o in outcomes)
    totals["seconds"] = round(sum(o.seconds for o in outcomes), 3)
    # an input or an error text may quote a camera URL
    text = redact(json.dumps({"files": [asdict(o) for o in outcomes], "totals": totals}, indent=2)) + "\n"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StreamdeidError(f"cannot write the report {target}: {exc.strerror}") from None


def decoded_video(path: Path) -> tuple[int, str | None]:
    """(frames of ``path``'s first video stream, decoded to the end; the streamdeid video id its metadata
    carries, or None). (0, None) when it does not decode cleanly."""
    from ..vault import read_video_id_tag

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                return 0, None
            tag = read_video_id_tag(dict(container.metadata))
            return sum(1 for _ in container.decode(video=0)), tag
    except (av.FFmpegError, OSError, EOFError, ValueError):
        return 0, None


def decoded_frame_count(path: Path) -> int:
    """Frames of ``path``'s first video stream, decoded to the end; 0 when it does not decode cleanly."""
    return decoded_video(path)[0]


def output_video_id(path: Path) -> str | None:
    """The streamdeid video id a video's metadata carries (every video output has one; read without decoding
    a frame): a file at an output's name without one is someone's own, never to be skipped as done or
    replaced unasked. None when it has none or cannot be opened."""
    from ..vault import read_video_id_tag

    try:
        with av.open(str(path)) as container:
            return read_video_id_tag(dict(container.metadata))
    except (av.FFmpegError, OSError, EOFError, ValueError):
        return None


def _vault_info(vault: Path) -> dict | None:
    from ..vault import VaultReader

    try:
        with VaultReader(vault) as reader:
            return reader.inspect()
    except (StreamdeidError, OSError):
        return None


def vault_video_id(vault: Path) -> str | None:
    """The video id a vault belongs to (hex; in its clear header), None when it cannot be read."""
    info = _vault_info(vault)
    return info.get("video_id") if info else None


def vault_source_fingerprint(vault: Path) -> str | None:
    """The keyed fingerprint of the input a vault was made from (its clear header), None when it has none."""
    info = _vault_info(vault)
    return (info.get("header") or {}).get("source_fingerprint") if info else None


def vault_is_finished(vault: Path) -> bool:
    """The vault has its end record: a run wrote it whole."""
    info = _vault_info(vault)
    return bool(info and info["complete"])


def vault_covers(vault: Path, frames: int, video_id: str | None = None) -> bool:
    """The vault is complete (END record, nothing damaged), its faces lie within ``frames`` frames and, with
    ``video_id``, it is that video's. Uses only ``inspect()``'s "complete", "frame_range" and "video_id" (the
    vault's internals may change)."""
    info = _vault_info(vault)
    if info is None:
        return False
    last = info["frame_range"][1] if info["frame_range"] else -1  # no face at all: no records
    same = video_id is None or info.get("video_id") == video_id
    return bool(info["complete"]) and last + 1 <= frames and same


def output_is_complete(output: Path, vault: Path | None) -> bool:
    """A previous run finished ``output`` (and ``vault``, when one is expected, of the same video): safe to
    skip. An image carries no mark of ours: one that decodes counts as done."""
    if not output.is_file():
        return False
    if is_image(output):
        return cv2.imread(str(output), cv2.IMREAD_UNCHANGED) is not None
    # a video streamdeid wrote carries its video id: any other file there (a copy of the footage itself) is not done
    frames, video_id = decoded_video(output)
    return frames > 0 and video_id is not None and (vault is None or vault_covers(vault, frames, video_id))
