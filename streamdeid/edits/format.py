"""The edits file: a reviewer's corrections to a run, as versioned JSON (docs/edits.md).

    {"format": "streamdeid-edits", "version": 1,
     "source": {"name": "clip.mp4", "frames": 275, "width": 640, "height": 360},
     "output": "clip_anonymized.mp4",
     "add": [{"frame": 12, "box": [100.0, 40.0, 160.0, 110.0]}],
     "remove": [{"frame": 30, "box": [300, 20, 380, 120], "frames": [24, 61]}]}

``add``: faces the run missed (covered from that frame, followed like a detected face); ``remove``: covers
that are not a face (the track owning the cover at that frame is not drawn, on the reviewed cover's
``frames`` only where the review wrote them: a re-run whose tracks differ never uncovers more than the
reviewer saw). Frames count decoded frames
from 0; boxes are x1, y1, x2, y2 in the source's pixels. ``load_edits`` checks everything it reads and says
what is wrong in one line (``StreamdeidError``); ``check_source`` refuses edits made on another video.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files import read_error
from ..types import StreamdeidError

__all__ = ["FORMAT", "VERSION", "Box", "Edits", "SourceInfo", "check_source", "load_edits", "save_edits"]

FORMAT = "streamdeid-edits"
VERSION = 1

_TOP = ("format", "version", "source", "output", "add", "remove")
_SOURCE = ("name", "frames", "width", "height")
_BOX = ("frame", "box")
_BOX_OPTIONAL = ("frames",)


@dataclass(frozen=True)
class SourceInfo:
    """The video the edits were made on (its frames are the output's: one output frame per input frame)."""

    name: str
    frames: int
    width: int
    height: int


@dataclass(frozen=True)
class Box:
    """A box on one frame: ``frame`` counts decoded frames from 0, ``box`` is x1, y1, x2, y2 in source pixels."""

    frame: int
    box: tuple[float, float, float, float]
    # a removal's reviewed cover: its first and last frame (the re-run leaves its track undrawn there only);
    # None: the whole track (files written by hand, or before the review wrote spans)
    frames: tuple[int, int] | None = None


@dataclass
class Edits:
    """A reviewer's corrections to one video's run."""

    source: SourceInfo
    # faces the run missed: covered from here, followed like a detected face
    add: list[Box] = field(default_factory=list)
    # covers that are not a face: the track owning the cover at that frame is not drawn
    remove: list[Box] = field(default_factory=list)
    output: str | None = None  # the output reviewed (informative)

    def to_json(self) -> dict:
        """The file's JSON object (``save_edits`` writes it)."""
        s = self.source
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": {"name": s.name, "frames": s.frames, "width": s.width, "height": s.height},
            "output": self.output,
            "add": [_box_json(b) for b in self.add],
            "remove": [_box_json(b) for b in self.remove],
        }

    def digest(self) -> str:
        """16 hex digits that name these corrections (their boxes, not the file's layout): the run tags its output
        with them (vault/naming.py), so a review knows which edits the output was rendered with."""
        boxes = {"add": [_box_json(b) for b in self.add], "remove": [_box_json(b) for b in self.remove]}
        return hashlib.sha256(json.dumps(boxes, sort_keys=True).encode()).hexdigest()[:16]


def _box_json(b: Box) -> dict:
    out: dict[str, Any] = {"frame": b.frame, "box": [float(v) for v in b.box]}
    if b.frames is not None:
        out["frames"] = list(b.frames)
    return out


def load_edits(path: str | Path) -> Edits:
    """The edits file at ``path``, checked; StreamdeidError with one line naming what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise StreamdeidError(f"{path}: not an edits file (not UTF-8 text)") from None
    except OSError as exc:
        raise read_error(exc, "edits file", str(path)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StreamdeidError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:  # nested past the parser's depth
        raise StreamdeidError(f"{path}: not JSON (nested too deep)") from None
    try:
        return from_json(data)
    except _Invalid as exc:
        raise StreamdeidError(f"{path}: {exc}") from None


def from_json(data: Any) -> Edits:
    """``Edits`` from a parsed edits file; StreamdeidError (one line, without the path) when it is not one."""
    if not isinstance(data, dict):
        raise _Invalid(f"not an edits file (a JSON object with \"format\": \"{FORMAT}\" expected)")
    if data.get("format") != FORMAT:
        got = "missing" if "format" not in data else json.dumps(data["format"])[:40]
        raise _Invalid(f"not an edits file (\"format\" must be \"{FORMAT}\", got {got})")
    if "version" not in data:
        raise _Invalid("missing field \"version\"")
    version = data["version"]
    if not is_whole(version) or version != VERSION:
        raise _Invalid(f"edits version {json.dumps(version)[:20]} is not supported (this streamdeid reads "
                       f"version {VERSION})")
    _known_keys(data, _TOP, "")
    for name in ("source", "add", "remove"):
        if name not in data:
            raise _Invalid(f"missing field \"{name}\"")
    source = _source(data["source"])
    output = data.get("output")
    if output is not None and not isinstance(output, str):
        raise _Invalid("\"output\" must be a string or null")
    edits = Edits(source, _boxes(data["add"], "add"), _boxes(data["remove"], "remove"), output)
    for where, boxes in (("add", edits.add), ("remove", edits.remove)):
        for i, b in enumerate(boxes):
            if b.frame >= source.frames:
                raise _Invalid(f"{where}[{i}]: frame {b.frame} is beyond the source's {source.frames} frames "
                               f"(frames count from 0)")
    return edits


class _Invalid(StreamdeidError):
    """What is wrong with a parsed edits file (``load_edits`` adds the path)."""


def is_whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _known_keys(obj: dict, known: tuple[str, ...], where: str) -> None:
    unknown = sorted(k for k in obj if k not in known)
    if unknown:
        at = f"{where}: " if where else ""
        raise _Invalid(f"{at}unknown key {json.dumps(unknown[0])[:40]} (known: {', '.join(known)})")


def _source(obj: Any) -> SourceInfo:
    if not isinstance(obj, dict):
        raise _Invalid("\"source\" must be an object {name, frames, width, height}")
    _known_keys(obj, _SOURCE, "source")
    for name in _SOURCE:
        if name not in obj:
            raise _Invalid(f"source: missing field \"{name}\"")
    if not isinstance(obj["name"], str):
        raise _Invalid("source.name must be a string")
    for name in ("frames", "width", "height"):
        v = obj[name]
        if not is_whole(v) or v < 1:
            raise _Invalid(f"source.{name} must be a whole number of at least 1, got {json.dumps(v)[:20]}")
    return SourceInfo(obj["name"], obj["frames"], obj["width"], obj["height"])


def _boxes(items: Any, where: str) -> list[Box]:
    if not isinstance(items, list):
        raise _Invalid(f"\"{where}\" must be a list of {{\"frame\": N, \"box\": [x1, y1, x2, y2]}}")
    return [_box(item, f"{where}[{i}]") for i, item in enumerate(items)]


def _box(item: Any, where: str) -> Box:
    if not isinstance(item, dict):
        raise _Invalid(f"{where}: must be an object {{\"frame\": N, \"box\": [x1, y1, x2, y2]}}")
    _known_keys(item, _BOX + _BOX_OPTIONAL, where)
    for name in _BOX:
        if name not in item:
            raise _Invalid(f"{where}: missing field \"{name}\"")
    frame = item["frame"]
    if not is_whole(frame) or frame < 0:
        raise _Invalid(f"{where}: frame must be a whole number from 0, got {json.dumps(frame)[:20]}")
    box = item["box"]
    ok = (isinstance(box, list) and len(box) == 4 and all(is_number(v) and math.isfinite(v) for v in box)
          and box[2] > box[0] and box[3] > box[1])
    if not ok:
        raise _Invalid(f"{where}: box must be 4 finite numbers [x1, y1, x2, y2] with x2 > x1 and y2 > y1, "
                       f"got {json.dumps(box)[:60]}")
    return Box(frame, tuple(float(v) for v in box), _span(item.get("frames"), frame, where))


def _span(frames: Any, frame: int, where: str) -> tuple[int, int] | None:
    """A removal's optional ``frames``: [first, last] around its own frame."""
    if frames is None:
        return None
    ok = (isinstance(frames, list) and len(frames) == 2 and all(is_whole(v) for v in frames)
          and 0 <= frames[0] <= frame <= frames[1])
    if not ok:
        raise _Invalid(f"{where}: frames must be [first, last] whole numbers around frame {frame}, "
                       f"got {json.dumps(frames)[:40]}")
    return int(frames[0]), int(frames[1])


def save_edits(edits: Edits, path: str | Path) -> None:
    """Write ``edits`` to ``path`` as pretty JSON: checked as ``load_edits`` checks it, written to a temp file
    beside it and moved into place (a reader never sees half a file)."""
    data = edits.to_json()
    try:
        from_json(json.loads(json.dumps(data)))  # never write a file load_edits would refuse
    except _Invalid as exc:
        raise StreamdeidError(f"edits not saved to {path}: {exc}") from None
    target = Path(path)
    tmp: Path | None = None
    try:
        # a fresh name, created exclusively: a predictable one that open() followed (a symlink another user
        # put in a shared folder) replaced whatever file it pointed at (a security review)
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        tmp = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise StreamdeidError(f"cannot write edits file {target}: {exc.strerror}") from None


def check_source(edits: Edits, frames: int | None, width: int, height: int, name: str) -> None:
    """StreamdeidError (one line) when ``edits`` were made on another video than ``name`` (``width`` x
    ``height``, ``frames`` frames; None: not known before decoding): another frame size, another frame count
    when it is known, a box on a frame the video does not have or wholly outside the frame. The names may
    differ (a file renamed or copied)."""
    s = edits.source
    made = f"{s.name} ({s.width}x{s.height}, {s.frames} frames)"
    if (s.width, s.height) != (width, height):
        raise StreamdeidError(f"the edits were made on {made}, not on {name} ({width}x{height}): another video")
    if frames is not None and frames != s.frames:
        raise StreamdeidError(f"the edits were made on {made}, not on {name} ({frames} frames): another video")
    limit = frames if frames is not None else s.frames
    for where, boxes in (("add", edits.add), ("remove", edits.remove)):
        for i, b in enumerate(boxes):
            if b.frame >= limit:
                raise StreamdeidError(f"edits {where}[{i}]: frame {b.frame} is beyond {name}'s {limit} frames")
            x1, y1, x2, y2 = b.box
            if x2 <= 0 or y2 <= 0 or x1 >= width or y1 >= height:
                raise StreamdeidError(f"edits {where}[{i}]: box {list(b.box)} lies outside {name}'s {width}x{height} "
                                      f"frame")
