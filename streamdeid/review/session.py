"""One review: the output, its tracks, the flags and thumbnails, and the corrections the reviewer saves.

``Review.prepare`` does all the work before the page is served (nothing is computed per request):

1. the output's frame timestamps (video.py) and, when a browser cannot play it (ffv1, Matroska, 4:4:4), a
   preview copy in the work folder;
2. the tracks (tracks.py: the audit log, else a tracking pass on --source);
3. one pass over the output: the visible-face scan on sampled frames (flags.py) and the covered faces'
   thumbnails;
4. one pass over the originals (--source, else with --key-file the output recovered from its vault into
   the work folder) for each track's original face;
5. the run's facts: the output, the vault header (no key needed), the audit log's counts, the scan.

``save`` writes the reviewer's corrections through ``streamdeid.edits.format`` (``save_edits``): added boxes
(faces the run missed) and removals (a Box on a frame where a cover stands: the re-run removes the track
owning it), in source pixels, at the frame index the page showed (video.py: index <-> time).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from ..config import PipelineConfig
from ..edits.format import Edits, load_edits
from ..threads import prefetch
from ..files import refuse_clobbering
from ..types import StreamdeidError
from .flags import VISIBLE_SCORE, Flag, VisibleFaceScan, cover_flags, sample_step, sort_flags
from .tracks import Cover, Tracks, find_audit_log, read_audit_log, track_source
from .video import VideoFacts, frames_bgr, read_facts, write_preview

log = logging.getLogger(__name__)

THUMB_HEIGHT = 112  # px of a thumbnail
THUMB_GROW = 0.3  # a thumbnail shows the box grown by this share of its side on each side
STATE_CODES = {"detected": 0, "held": 1, "backfilled": 2}
KEPT_CODE = 3  # a face --keep/--only (or a removal) left visible: the audit log's method "kept"


def decision_words(decision) -> str:
    """An audit log's --keep/--only decision in words: "left visible on frames 0-7" or "covered"."""
    if not isinstance(decision, dict):
        return str(decision)
    if not decision.get("left_visible"):
        return "covered"
    spans = ", ".join(f"{a}-{b}" for a, b in decision.get("visible_frames") or [])
    return f"left visible on frames {spans}" if spans else "left visible"


def default_edits_path(output: Path) -> Path:
    return output.with_name(output.name + ".edits.json")


@dataclass
class ReviewSettings:
    output: Path
    source: Path | None = None
    tracks: Path | None = None  # an audit log; None: beside the output, else a tracking pass on the source
    key_file: Path | None = None  # originals from the output's vault when there is no source
    edits: Path | None = None  # where Save writes; None: OUT.edits.json
    config: PipelineConfig = field(default_factory=PipelineConfig)  # the run's detection options (tracking pass)
    scan: bool = True  # the visible-face scan


def thumbnail(image: np.ndarray, box) -> bytes:
    """A JPEG of ``box`` (grown by THUMB_GROW) cut from ``image``, THUMB_HEIGHT px tall."""
    h, w = image.shape[:2]
    x1, y1, x2, y2 = (float(v) for v in box)
    gx, gy = THUMB_GROW * (x2 - x1), THUMB_GROW * (y2 - y1)
    a, b = int(max(0, np.floor(x1 - gx))), int(max(0, np.floor(y1 - gy)))
    c, d = int(min(w, np.ceil(x2 + gx))), int(min(h, np.ceil(y2 + gy)))
    if c - a < 2 or d - b < 2:
        crop = np.zeros((THUMB_HEIGHT, THUMB_HEIGHT, 3), np.uint8)
    else:
        crop = image[b:d, a:c]
        scale = THUMB_HEIGHT / crop.shape[0]
        size = (max(1, min(2 * THUMB_HEIGHT, round(crop.shape[1] * scale))), THUMB_HEIGHT)
        crop = cv2.resize(crop, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    ok, jpg = cv2.imencode(".jpg", crop, [cv2.IMWRITE_JPEG_QUALITY, 85])
    return jpg.tobytes()


def _representative(covers: list[Cover]) -> Cover:
    """The frame a track is shown by: its best detection, else its first cover."""
    detected = [c for c in covers if c.state == "detected"]
    return max(detected, key=lambda c: c.score) if detected else covers[0]


class Review:
    def __init__(self, settings: ReviewSettings, workdir: Path, echo: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.output = settings.output
        self.workdir = workdir
        self.echo = echo
        self.edits_path = settings.edits or default_edits_path(self.output)
        self.facts: VideoFacts | None = None
        self.video_file: Path = self.output
        self.tracks: Tracks | None = None
        self.audit_log: Path | None = None
        self.flags: list[Flag] = []
        self.thumbs: dict[str, bytes] = {}
        self.source_facts: VideoFacts | None = None
        self.originals: Path | None = None  # --source, or the output recovered from its vault
        self.originals_from = ""
        self.scan_info: dict = {}
        self.timings: dict[str, float] = {}
        self.vault_info: dict | None = None
        self._by_frame: dict[int, list[Cover]] | None = None

    # ------------------------------------------------------------------ prepare
    def _check_edits_file(self) -> None:
        """Save replaces the edits file: one that is there must be an edits file (a mistyped --edits naming a
        vault, a key or anything else would be lost). Its folder must be there to write in, or the reviewer
        found out at Save, after the work."""
        folder = self.edits_path.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise StreamdeidError(f"--edits {self.edits_path}: cannot write in {folder} (no such folder, or not "
                                  "writable): Save would fail")
        if not self.edits_path.exists():
            return
        from ..edits.format import load_edits

        try:
            load_edits(self.edits_path)
        except StreamdeidError as exc:
            raise StreamdeidError(f"{self.edits_path} is there and is not an edits file ({str(exc).split(': ', 1)[-1]}); "
                                  "Save would replace it: give --edits another path") from None

    def prepare(self) -> None:
        s = self.settings
        if not self.output.is_file():
            raise StreamdeidError(f"{self.output}: no such file")
        # Save writes the edits file: never over what the review reads (the key file above all)
        refuse_clobbering([("output", self.output), ("source", s.source), ("key file", s.key_file),
                           ("audit log", s.tracks)], [("edits file", self.edits_path)], overwrite=True)
        self._check_edits_file()
        t0 = time.perf_counter()
        self.facts = facts = read_facts(self.output)
        self.timings["read"] = time.perf_counter() - t0
        if s.source is not None:
            if not s.source.is_file():
                raise StreamdeidError(f"{s.source}: no such file")
            self.source_facts = read_facts(s.source)
            shown = (self.source_facts.width, self.source_facts.height)
            if shown != (facts.width, facts.height):
                raise StreamdeidError(f"{s.source} is {shown[0]}x{shown[1]}, the output {facts.width}x{facts.height}: "
                                      "not the run's source (give the video the output was made from)")
            if self.source_facts.frames != facts.frames:
                self.echo(f"streamdeid: warning: {s.source} has {self.source_facts.frames} frames, the output "
                          f"{facts.frames}: is it the run's source?")
        self._load_tracks()
        self._read_vault()
        if not facts.playable:
            t = time.perf_counter()
            self.echo(f"streamdeid: {facts.codec} ({facts.pix_fmt}) in {facts.container.split(',')[0]} does not "
                      "play in a browser: writing an H.264 preview copy for the page")
            self.video_file = write_preview(facts, self.workdir / "preview.mp4")
            self.timings["preview"] = time.perf_counter() - t
        self._originals()
        self.flags = cover_flags(self.tracks, facts.width, facts.height)
        for k, f in enumerate(self.flags):
            f.thumb = f"f{k}"
        self._output_pass()
        self._originals_pass()
        self._forget_recovered()
        self.flags = sort_flags(self.flags)

    def _forget_recovered(self) -> None:
        """Delete the originals recovered from the vault once their thumbnails are taken: the page needs
        nothing more of them, and a de-anonymized copy of the whole video must not outlive that."""
        if self.originals is not None and self.originals.parent == self.workdir:
            self.originals.unlink(missing_ok=True)

    def _load_tracks(self) -> None:
        s = self.settings
        audit = s.tracks if s.tracks is not None else find_audit_log(self.output)
        if s.tracks is not None and not s.tracks.is_file():
            raise StreamdeidError(f"{s.tracks}: no such audit log")
        if audit is not None and self._of_this_run(audit):
            self.audit_log = audit
            self.echo(f"streamdeid: tracks from the audit log {audit}")
        elif s.source is not None:
            self.echo(f"streamdeid: no audit log of this run beside {self.output.name}: tracking {s.source} again "
                      "(detection + tracking, the run's options as given)")
            edits, note = self._edits_rendered()
            self.tracks = track_source(str(s.source), s.config, edits=edits)
            self.timings["tracking"] = self.tracks.seconds
            if note:
                self.tracks.origin += f"; {note}"
        else:
            raise StreamdeidError(f"no tracks for {self.output}: give the run's audit log (--tracks X.jsonl, from "
                                  "`streamdeid run --export-tracks`) or its source (--source IN)")
        last = max((c.frame for c in self.tracks.covers), default=-1)
        if last >= self.facts.frames:
            raise StreamdeidError(f"the tracks reach frame {last} but {self.output} has {self.facts.frames} frames: "
                                  "tracks of another video?")

    def _edits_rendered(self) -> tuple[Edits | None, str | None]:
        """The edits the output was rendered with (its tag names their digest), from the edits file, for the
        tracking pass to apply as the run did; None when the run applied none. When the file no longer holds
        them (changed or gone since the re-run), the pass applies none, and the note says so for the page."""
        digest = self.facts.edits
        if digest is None:
            return None, None
        try:
            edits = load_edits(self.edits_path) if self.edits_path.is_file() else None
        except StreamdeidError:  # not an edits file now: the pass cannot apply what the output was rendered with
            edits = None
        if edits is not None and edits.digest() == digest:
            self.echo(f"streamdeid: the tracking pass applies {self.edits_path.name}, as the run that re-rendered "
                      f"{self.output.name} did")
            return edits, None
        note = (f"{self.output.name} was rendered with edits that {self.edits_path.name} does not hold now (changed "
                "or gone since): the covers shown are those without edits (re-render with --export-tracks to "
                "review what it drew)")
        self.echo(f"streamdeid: warning: {note}")
        return None, note

    def _of_this_run(self, audit: Path) -> bool:
        """Read ``audit`` into ``self.tracks`` when it is the log of the run that wrote the output (both carry
        the run's video id; a log without one is taken as it is). A log an earlier run of the same output left
        beside it is not: an error when it was given (--tracks) or nothing else can give the tracks."""
        tracks = read_audit_log(audit)
        made = self.facts.video_id
        if tracks.video_id is None or made is None or tracks.video_id == made:
            self.tracks = tracks
            return True
        what = (f"the audit log {audit} was written by an earlier run, not by the run that made {self.output.name} "
                "(a rerun writes its own log with --export-tracks)")
        if self.settings.tracks is not None or self.settings.source is None:
            raise StreamdeidError(what)
        self.echo(f"streamdeid: {what}; not used")
        return False

    def _read_vault(self) -> None:
        from ..vault.naming import vault_path_for

        path = vault_path_for(self.output)
        if not path.is_file():
            return
        try:
            from ..vault import VaultReader

            with VaultReader(path) as reader:
                info = reader.inspect()
            self.vault_info = {"path": str(path), "header": info.get("header", {}),
                               "tracks": len(info.get("track_ids", []) or []),
                               "frame_records": info.get("frame_records")}
        except Exception as exc:  # a broken vault is a fact to show, not a reason to stop the review
            self.vault_info = {"path": str(path), "error": str(exc)}

    def _originals(self) -> None:
        s = self.settings
        if s.source is not None:
            self.originals, self.originals_from = s.source, f"the source {s.source}"
            return
        if s.key_file is None or self.vault_info is None or "error" in self.vault_info:
            return
        from ..api import recover

        t = time.perf_counter()
        config = PipelineConfig()
        config.output.codec = "ffv1"
        config.progress = False
        dst = self.workdir / "originals.mkv"
        self.echo(f"streamdeid: recovering the original faces from {self.vault_info['path']} for the thumbnails")
        recover(str(self.output), dst, key_file=str(s.key_file), config=config)
        self.originals, self.originals_from = dst, f"the vault {self.vault_info['path']} (recovered with the key)"
        self.timings["recover"] = time.perf_counter() - t

    def _thumb_frames(self) -> dict[int, list[tuple[str, tuple]]]:
        """frame -> [(thumbnail name stem, box)] for each track's representative frame and each cover flag."""
        want: dict[int, list[tuple[str, tuple]]] = {}
        for track, covers in self.tracks.by_track().items():
            rep = _representative(covers)
            want.setdefault(rep.frame, []).append((f"t{track}", rep.box))
        for f in self.flags:
            if f.thumb is not None:
                want.setdefault(f.frame, []).append((f.thumb, f.box))
        return want

    def _output_pass(self) -> None:
        facts = self.facts
        want = self._thumb_frames()
        by_frame = self.tracks.by_frame()
        step = sample_step(facts.fps)
        t0, c0 = time.perf_counter(), time.process_time()  # the scan's cost: CenterFace loaded, the output decoded, detecting
        scan = VisibleFaceScan() if self.settings.scan else None
        hit_thumbs: dict[tuple[int, tuple], bytes] = {}
        frames = frames_bgr(self.output, lambda i: i in want or (scan is not None and i % step == 0))
        for index, image in prefetch(frames, 4, "streamdeid-review-decode"):
            for stem, box in want.get(index, ()):
                self.thumbs[f"{stem}-out"] = thumbnail(image, box)
            if scan is not None and index % step == 0:
                # a face --keep/--only left visible is visible: the scan shows it, as any face no cover is on
                drawn = [c for c in by_frame.get(index, []) if c.method != "kept"]
                for box, _score in scan(index, image, drawn):
                    hit_thumbs[(index, box)] = thumbnail(image, box)
        total = time.perf_counter() - t0
        if scan is not None:
            visible = scan.flags(step)
            for k, f in enumerate(visible):
                f.thumb = f"v{k}"
                self.thumbs[f"v{k}-out"] = hit_thumbs[(f.frame, f.box)]
            self.flags += visible
            self.scan_info = {"frames": scan.frames, "of": facts.frames, "every": step,
                              "centerface_seconds": round(scan.seconds, 2), "pass_seconds": round(total, 2),
                              "hits": len(scan.hits), "faces": len(visible)}
            self.echo(f"streamdeid: scan: CenterFace on {scan.frames} of {facts.frames} output frames (one in "
                      f"{step}): {len(visible)} faces left visible; {total:.1f} s")
        self.timings["output pass"] = total
        self.timings["output pass cpu"] = time.process_time() - c0

    def _originals_pass(self) -> None:
        if self.originals is None:
            return
        want = self._thumb_frames()
        t0 = time.perf_counter()
        for index, image in frames_bgr(self.originals, lambda i: i in want):
            for stem, box in want[index]:
                self.thumbs[f"{stem}-src"] = thumbnail(image, box)
        self.timings["originals pass"] = time.perf_counter() - t0

    # ------------------------------------------------------------------ the page
    def state(self) -> dict:
        """Everything the page shows, as JSON."""
        facts = self.facts
        tracks = []
        for track, covers in sorted(self.tracks.by_track().items()):
            rep = _representative(covers)
            states = Counter(c.state for c in covers)
            methods = Counter(c.method for c in covers if c.method)
            tracks.append({
                "id": track, "first": covers[0].frame, "last": covers[-1].frame, "frames": len(covers),
                "states": dict(states), "methods": dict(methods),
                "best": round(max((c.score for c in covers if c.state == "detected"), default=0.0), 3),
                "rep": {"frame": rep.frame, "box": list(rep.box)},
                "thumb_out": self._thumb(f"t{track}", "out"),
                "thumb_src": self._thumb(f"t{track}", "src"),
                "decision": self.tracks.decisions.get(track),
                # per cover: frame, x1, y1, x2, y2, state (0 detected, 1 held, 2 back-filled, 3 left visible)
                "covers": [[c.frame, *(round(v, 1) for v in c.box),
                            KEPT_CODE if c.method == "kept" else STATE_CODES.get(c.state, 1)] for c in covers],
            })
        return {
            "output": self.output.name,
            "video": {"width": facts.width, "height": facts.height, "frames": facts.frames,
                      "fps": round(facts.fps, 4), "times": [round(t, 6) for t in facts.times],
                      "preview": self.video_file != self.output},
            "tracks": tracks,
            "flags": [{**f.to_json(), "thumb_out": self._thumb(f.thumb, "out"), "thumb_src": self._thumb(f.thumb, "src")}
                      for f in self.flags],
            "facts": self.fact_rows(),
            "audit_log": self.audit_log is not None,
            "edits": {"path": str(self.edits_path), **self.existing_edits()},
        }

    def _thumb(self, stem: str | None, which: str) -> str | None:
        name = f"{stem}-{which}"
        return name if stem is not None and name in self.thumbs else None

    def fact_rows(self) -> list[list[str]]:
        facts, tracks = self.facts, self.tracks
        rows = [
            ["output", f"{self.output} ({facts.codec} {facts.pix_fmt}, {facts.width}x{facts.height}, "
                       f"{facts.frames} frames, {facts.fps:.3f} fps, {facts.times[-1] - facts.times[0]:.2f} s)"],
        ]
        if self.video_file != self.output:
            rows.append(["shown as", "an H.264 preview copy (the browser cannot play the output itself); "
                                     "flags and thumbnails use the output's own frames"])
        rows.append(["tracks from", tracks.origin])
        drawn = [c for c in tracks.covers if c.method != "kept"]
        states = Counter(c.state for c in drawn)
        methods = Counter(c.method for c in drawn if c.method)
        covered = len({c.frame for c in drawn})
        rows.append(["covers", f"{len(drawn)} faces on {covered} of {facts.frames} frames, "
                               f"{len({c.track for c in drawn})} tracks; "
                               + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))])
        if methods:
            rows.append(["methods", ", ".join(f"{n} {m}" for m, n in sorted(methods.items()))
                         + ("; none: a face whose box lies wholly outside the frame" if "none" in methods else "")])
        kept = [c for c in tracks.covers if c.method == "kept"]
        if kept:
            rows.append(["left visible", f"{len(kept)} faces of {len({c.track for c in kept})} tracks "
                                         "(--keep/--only, or a removal): drawn in the kept colour"])
        if tracks.decisions:
            rows.append(["--keep/--only", f"{len(tracks.decisions)} tracks judged: "
                         + ", ".join(f"{t}: {decision_words(d)}" for t, d in sorted(tracks.decisions.items()))])
        if self.vault_info is not None:
            v = self.vault_info
            if "error" in v:
                rows.append(["vault", f"{v['path']}: {v['error']}"])
            else:
                h = v["header"]
                pipe = h.get("pipeline", {})
                rows.append(["vault", f"{v['path']}: {v['tracks']} tracks, {v['frame_records']} face-frames; "
                                      f"anonymizer {pipe.get('anonymizer')}, mask {json.dumps(pipe.get('blend'))}, "
                                      f"written {h.get('created')}"])
        else:
            rows.append(["vault", "none beside the output (irreversible)"])
        rows.append(["originals", self.originals_from or "none (give --source, or --key-file with the vault)"])
        if self.scan_info:
            si = self.scan_info
            rows.append(["scan", f"CenterFace (native resolution, score >= {VISIBLE_SCORE}) on {si['frames']} of {si['of']} "
                                 f"output frames (one in {si['every']}): {si['faces']} faces left visible; "
                                 f"{si['pass_seconds']} s ({si['centerface_seconds']} s detecting)"])
        rows.append(["flags", ", ".join(f"{n} {k}" for k, n in sorted(Counter(f.kind for f in self.flags).items()))
                     or "none"])
        rows.append(["edits", f"Save writes {self.edits_path}"])
        return rows

    def existing_edits(self) -> dict:
        """The corrections already saved (so a review can be continued), as the page's lists."""
        if not self.edits_path.is_file():
            return {"add": [], "remove": [], "stamp": self.edits_stamp()}
        try:
            from ..edits.format import load_edits

            e = load_edits(self.edits_path)
        except Exception as exc:
            self.echo(f"streamdeid: warning: cannot load {self.edits_path}: {exc}")
            return {"add": [], "remove": [], "error": str(exc), "stamp": self.edits_stamp()}
        return {"stamp": self.edits_stamp(), "add": [{"frame": b.frame, "box": list(b.box)} for b in e.add],
                "remove": [{"frame": b.frame, "box": list(b.box), "track": self.track_at(b.frame, b.box)}
                           for b in e.remove]}

    def edits_stamp(self) -> str:
        """Which version of the edits file a page loaded: its size and change time ("" while there is none)."""
        try:
            st = self.edits_path.stat()
        except OSError:
            return ""
        return f"{st.st_size}:{st.st_mtime_ns}"

    def track_at(self, frame: int, box) -> int | None:
        """The track whose cover on ``frame`` is ``box`` (the best overlap)."""
        from ..track.matching import iou_matrix

        if self._by_frame is None:
            self._by_frame = self.tracks.by_frame()
        covers = self._by_frame.get(frame, [])
        if not covers:
            return None
        iou = iou_matrix(np.array([c.box for c in covers]), np.array([box], np.float64))[:, 0]
        k = int(iou.argmax())
        return covers[k].track if iou[k] > 0.3 else None

    def track_span(self, track: int) -> tuple[int, int]:
        """The first and last frame of ``track``'s covers in the reviewed run."""
        if self._by_frame is None:
            self._by_frame = self.tracks.by_frame()
        frames = [f for f, covers in self._by_frame.items() if any(c.track == track for c in covers)]
        return min(frames), max(frames)

    def source_info(self):
        from ..edits.format import SourceInfo

        facts = self.facts  # the boxes are in the output's pixels, frame for frame the source's (checked)
        name = self.settings.source.name if self.settings.source is not None else self.output.name
        return SourceInfo(name=name, frames=facts.frames, width=facts.width, height=facts.height)

    def save(self, payload: dict) -> dict:
        """The page's corrections -> the edits file. Raises ValueError for a payload out of range."""
        try:
            from ..edits.format import Box, Edits, save_edits
        except ImportError as exc:
            raise RuntimeError(f"the edits format (streamdeid.edits.format) is not available: {exc}") from None
        facts = self.facts
        if not isinstance(payload, dict) or not all(isinstance(payload.get(k, []), list) for k in ("add", "remove")):
            raise ValueError('the edits must be {"add": [...], "remove": [...]}')
        add = [self._box(item, facts, Box) for item in payload.get("add", [])]
        remove = []
        for item in payload.get("remove", []):
            b = self._box(item, facts, Box)
            track = self.track_at(b.frame, b.box)
            if track is None:
                raise ValueError(f"no cover at frame {b.frame} box {list(b.box)} to remove")
            # the reviewed cover's frames: the re-run uncovers no more than these (edits/apply.py)
            remove.append(Box(b.frame, b.box, self.track_span(track)))
        stamp = payload.get("stamp")
        if stamp is not None and stamp != self.edits_stamp():
            # another review (or another tab) saved since this page loaded the file: Save sends the whole list,
            # and would drop that review's corrections
            raise ValueError(f"{self.edits_path.name} changed since this page loaded it (another review or tab "
                             "saved it): reload the page, which shows what is saved, and make your changes again")
        edits = Edits(source=self.source_info(), add=add, remove=remove, output=self.output.name)
        save_edits(edits, self.edits_path)
        self.echo(f"streamdeid: saved {len(add)} added boxes and {len(remove)} removals to {self.edits_path}")
        return {"path": str(self.edits_path), "add": len(add), "remove": len(remove), "stamp": self.edits_stamp()}

    @staticmethod
    def _box(item: dict, facts: VideoFacts, Box):
        # a page's request, or anyone's on the loopback: each value checked as `run --edits` checks the file
        # (edits/format.py), one plain line when wrong: true or 1.9 was saved as frame 1, "50" as a coordinate
        from ..edits.format import is_number, is_whole

        ok = (isinstance(item, dict) and set(item) == {"frame", "box"} and is_whole(item["frame"])
              and isinstance(item["box"], list) and len(item["box"]) == 4 and all(is_number(v) for v in item["box"]))
        if not ok:
            raise ValueError(f"each box is {{\"frame\": N, \"box\": [x1, y1, x2, y2]}} with a whole frame number and "
                             f"four numbers, and nothing else; got {item!r:.120}")
        frame = item["frame"]
        x1, y1, x2, y2 = (float(v) for v in item["box"])
        if not np.isfinite([x1, y1, x2, y2]).all():
            raise ValueError(f"box {item['box']!r:.80} at frame {frame} is not four finite numbers")
        if not 0 <= frame < facts.frames:
            raise ValueError(f"frame {frame} is not in 0-{facts.frames - 1}")
        x1, x2 = sorted((min(max(x1, 0.0), facts.width), min(max(x2, 0.0), facts.width)))
        y1, y2 = sorted((min(max(y1, 0.0), facts.height), min(max(y2, 0.0), facts.height)))
        if x2 - x1 < 2 or y2 - y1 < 2:
            raise ValueError(f"box {item['box']} at frame {frame} is empty")
        return Box(frame=frame, box=(round(x1, 1), round(y1, 1), round(x2, 1), round(y2, 1)))
