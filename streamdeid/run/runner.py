"""``Runner``: a run assembled once (options, keys, loaded models); every entry point goes through it.

    CLI ``run`` / ``streamdeid.anonymize()`` / a batch worker
        -> Runner(RunOptions, Models).run(src, dst)
            -> a live feed (live.py) | a folder, file by file (``file``) | a still (still.py)
               | a video file or stdin into a file or a stream (video.py)

The runner alone decides what surrounds a video's frames: its keys (one master, a fresh video id per
video), its renderer (the anonymizer from ``Models``) and whether and where its vault is written
(``vault_for``). The pieces below it take those decisions as arguments.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from tqdm import tqdm

from ..checks import check_arg
from ..files import refuse_clobbering, refuse_same_file
from ..keys import RunKeys, encode_key, run_keys, write_master_key
from ..pipeline import build_renderer
from ..render import FrameRenderer
from ..summary import RunSummary
from ..types import StreamdeidError, UsageError
from ..vault import source_fingerprints, vault_path_for
from ..vault.header import parse_video_id
from ..video.images import is_image, list_media, say_unread, unread_files
from ..video.inputs import is_device, refuse_unread_scheme
from ..video.partial import left_by_a_run, partial_path_for
from ..video.stream_writer import is_stream_output
from .models import Models
from .options import RunOptions
from .outcome import (FAILED, OK, SKIPPED, FileOutcome, error_line, outcome, output_is_complete, output_video_id,
                      vault_is_finished, vault_source_fingerprint, vault_video_id)
from .result import RunResult

log = logging.getLogger(__name__)


def _keep_a_killed_recording(out: Path) -> None:
    """A live recording killed outright leaves ``out``'s unfinished copy, playable. The next run would take it
    over and write from its start (a restarted service's frames replaced the killed run's): it is moved aside
    first, to the first free ``STEM.partial-N.EXT``."""
    partial = partial_path_for(out)
    if not partial.is_file() or not left_by_a_run(partial):
        return  # none, or not ours (the writer refuses to touch it)
    for n in range(1, 10_000):
        kept = partial.with_name(f"{out.stem}.partial-{n}{out.suffix}")
        if not kept.exists():
            os.rename(partial, kept)
            log.warning("%s holds a recording cut short by a killed run: kept as %s", partial.name, kept.name)
            return


def _fingerprints(src: str, master, video_id: str | None) -> list[str]:
    """``src``'s source fingerprints as a vault of ``video_id`` holds it: salted with its id, or (vaults written
    before the salt) without."""
    ids: list[bytes | None] = [None]
    if video_id is not None:
        try:
            ids.insert(0, parse_video_id(video_id))
        except (ValueError, TypeError):  # an id that is no video id: only the old form can match
            pass
    return source_fingerprints(src, master, ids)


def default_output(src: str) -> Path:
    """``clip.mp4`` -> ``clip_anonymized.mp4``; ``photos/`` -> ``photos_anonymized/``; ``clip`` ->
    ``clip_anonymized.mp4``."""
    p = Path(src)
    if not p.name:  # "." or "..": name the output after the folder itself
        p = p.resolve()
    if p.is_dir():
        return p.with_name(p.name.rstrip("/") + "_anonymized")
    return p.with_name(f"{p.stem}_anonymized{p.suffix or '.mp4'}")  # a name without an extension: MP4


class Runner:
    """Made once from ``RunOptions`` (the key file is read, or created with ``new_key``, here); ``models``
    may be shared with other runners (a batch worker's per-file options)."""

    def __init__(self, options: RunOptions | None = None, models: Models | None = None, *,
                 keys: RunKeys | None = None) -> None:
        check_arg("options", options, RunOptions | None)  # its fields too: before the key file is made
        self.options = options or RunOptions()
        self.models = models or Models()
        self._keys = keys or run_keys(self.options.key_file, new_key=self.options.new_key)
        # --new-key: the key file this runner made (a runner sharing another's keys made none). A run that fails
        # having kept no vault removes it again (``drop_new_key``): it would open nothing. Kept for good once a
        # run succeeded or kept a vault; written back before the next run of a runner that removed it.
        self._new_key: Path | None = self._keys.created if keys is None else None
        self._key_removed = False
        self._key_kept = False

    @property
    def config(self):
        return self.options.config

    def with_options(self, options: RunOptions) -> Runner:
        """A runner for other options (a manifest row's) with the same models and master key."""
        return Runner(options, self.models, keys=self._keys)

    # -- what surrounds a video's frames: decided here only ---------------------------------------------

    def next_keys(self) -> RunKeys:
        """The keys of the next video: the run's master, and a video id of its own."""
        return self._keys.for_next_video()

    def renderer(self, keys: RunKeys) -> FrameRenderer:
        """The configured anonymizer in a renderer, with ``keys``' per-track keys (loads the model)."""
        return build_renderer(self.config, keys.for_track, self.models.anonymizer(self.config.anonymize))

    def writes_vault(self) -> bool:
        """A vault needs a key file that is kept (an ephemeral key could never open it) and no --no-vault."""
        return self.options.vault and not self._keys.ephemeral

    def vault_for(self, src: str | Path, out: Path | str) -> Path | None:
        """Where the vault of ``src``'s output ``out`` goes: beside a file output; none for a still image or a
        stream output (stdout, a push URL), nor when ``writes_vault`` says no."""
        if not self.writes_vault() or not isinstance(out, Path) or (src != "-" and is_image(src)):
            return None
        return vault_path_for(out)

    # -- entry points -------------------------------------------------------------------------------------

    def run(self, src: str, dst: str | Path | None = None) -> RunResult:
        """Anonymize ``src`` (a video file, an image, a folder of them, ``-`` for stdin, or a live feed) into
        ``dst`` (default: beside the input, see ``default_output``). A run that fails (an error, Ctrl-C, a file
        of a folder) having kept no vault removes the key file this runner made (``drop_new_key``)."""
        self._key_back()
        try:
            result = self._run(src, dst)
        except BaseException:
            self.drop_new_key()
            raise
        if result.summary.interrupted or any(f.status == FAILED for f in result.files):
            self.drop_new_key()
        else:
            self._key_kept = True  # it did what was asked: the key is the user's now, vault or not
        return result

    def drop_new_key(self, outputs=()) -> None:
        """After a failed run (or batch): remove the key file this runner made (--new-key) when no vault it may
        open is on disk: none beside an output a vault was opened for (``RunKeys.vault_outputs``) or one of
        ``outputs`` (a batch's, whose workers opened theirs), under its final or its unfinished name. A key file
        that was there before the runner, that no longer holds its key, or that an earlier run of the runner
        succeeded with, is never touched."""
        path = self._new_key
        if path is None or self._key_removed or self._key_kept:
            return
        for out in [*self._keys.vault_outputs, *outputs]:
            if vault_path_for(Path(out)).exists() or vault_path_for(partial_path_for(Path(out))).exists():
                self._key_kept = True
                return
        try:
            if path.read_bytes() != encode_key(self._keys.master):
                return
            path.unlink()
        except OSError:
            return
        self._key_removed = True
        log.warning("removed the key file %s made by this run: nothing was written that it opens", path)

    def _key_back(self) -> None:
        """The key file a failed run removed is written again (the same key) before this runner's next run,
        whose vault needs it: refused when another file has taken its name meanwhile."""
        if self._key_removed:
            write_master_key(self._keys.master, self._new_key)
            self._key_removed = False
            log.warning("wrote the master key made by this runner to %s again", self._new_key)

    def _run(self, src: str, dst: str | Path | None) -> RunResult:
        o = self.options
        if o.edits is not None:
            _refuse_edits(src, o)
        if o.is_live(src):
            refuse_unread_scheme(src)
            if is_device(src) and not Path(src).exists():  # retried, it took a minute to say so
                from ..live.source import LiveSourceLost

                raise LiveSourceLost(f"capture device not found: {src}")
            if o.skip_existing:
                raise UsageError("--skip-existing resumes a folder run, not a live feed")
            self.refuse_clobbering(src)
            return self._live(src, dst)
        if o.skip_existing and (src == "-" or not Path(src).is_dir()):
            raise UsageError("--skip-existing resumes a folder run; INPUT is not a folder")
        if o.live.segment_time is not None:
            raise UsageError("--segment-time rotates the recording of a live feed; INPUT is a file "
                             "(--live reads a pipe on stdin as one)")
        if o.live_given:  # accepted and then ignored, they would say the run did what it did not
            names = ", ".join("--" + n.replace("_", "-") for n in o.live_given)
            raise UsageError(f"{names}: for a live feed; INPUT is a file (--live reads a pipe on stdin as one)")
        if src == "-":
            if dst is None:
                raise StreamdeidError("reading from stdin (-) needs an output path: -o OUTPUT")
        elif not Path(src).exists():
            refuse_unread_scheme(src)  # http:// and the like: FFmpeg could read some, but not as a feed we handle
            raise StreamdeidError(f"{src}: no such file or folder")
        if dst is not None and is_stream_output(str(dst)):
            self.refuse_clobbering(src)
            return self._video(src, str(dst))
        out = self._output_for(src, dst)
        if src != "-" and Path(src).is_dir():
            return self._folder(Path(src), out)
        if src != "-" and is_image(src):
            return self._still(Path(src), out)
        return self._video(src, out)

    def _output_for(self, src: str, dst: str | Path | None) -> Path:
        """The output path of a file, stdin or folder ``src`` (``dst``: -o, None for the default), checked
        before anything is written: see ``refuse_clobbering``, and what a run that did not finish left."""
        out = Path(dst) if dst is not None else default_output(src)
        single = src == "-" or not Path(src).is_dir()
        if dst is not None and src != "-" and single and _names_a_folder(str(dst)):
            out = out / default_output(src).name  # -o FOLDER/ for one file: the default name in that folder
        if not single:  # (a single file's output is checked against its input by refuse_clobbering)
            refuse_same_file(src, out)
            if self.config.export_tracks:
                raise StreamdeidError("--export-tracks writes the log of one video; a folder's files would each "
                                      "replace it (run the files one by one)")
            self.refuse_clobbering(src)
            return out
        vault = self.vault_for(src, out)
        _refuse_a_killed_runs_vault(out, vault, self.config.output.overwrite)
        self.refuse_clobbering(src, out, vault)
        return out

    def refuse_clobbering(self, src: str | None = None, out: Path | str | None = None,
                          vault: Path | None = None) -> None:
        """Before anything is written: the run's outputs (``out``, its ``vault``, the audit log, the --report)
        are none of the files it reads (``src``, the key file, the edits file, the reference photos), nor one
        another, nor existing files without --overwrite (the report is rewritten by every run)."""
        o = self.options
        reads = [("input", src), ("key file", o.key_file), ("edits file", o.edits)]
        reads += [("reference photo", r) for r in self.config.select.references]
        refuse_clobbering(reads, [("output", out), ("vault", vault), ("audit log", self.config.export_tracks),
                                  ("report", o.report)], self.config.output.overwrite, rewritten=("report",))

    def file(self, src: Path, dst: Path) -> tuple[FileOutcome, RunSummary | None]:
        """One file of a folder or a batch, never raising for a bad file: its outcome, and its summary when it
        ran (None: skipped or failed). With ``skip_existing`` a finished output is skipped and one a crash
        left half-written is redone."""
        runner = self
        try:
            refuse_same_file(src, dst)  # whatever --overwrite says (a batch whose -o is its input folder)
            if self.options.skip_existing:
                vault_path = self.vault_for(src, dst)
                if output_is_complete(dst, vault_path) and self._made_from(src, vault_path):
                    return outcome(src, dst, vault_path, SKIPPED), None
                runner = self._redo(dst, vault_path)
            res = runner._still(src, dst) if is_image(src) else runner._video(str(src), dst)
        except StreamdeidError as exc:
            return outcome(src, dst, None, FAILED, error=str(exc)), None
        except Exception as exc:  # a bug of ours on this file: record it, do the others (traceback with -v)
            log.info("internal error on %s", src, exc_info=True)
            return outcome(src, dst, None, FAILED, error=error_line(exc)), None
        return file_outcome(str(src), res), res.summary

    # -- the kinds of input ---------------------------------------------------------------------------------

    def _video(self, src: str, out: Path | str) -> RunResult:
        from .video import run_video

        edits = self._edits(src)  # read and checked against the video before any output exists
        keys = self.next_keys()
        renderer = self.renderer(keys)  # loads the model: fails before any output exists
        plan = None
        if edits is not None:
            from ..edits import decide_removals
            from .video import track_pass

            plan = decide_removals(edits, lambda first: track_pass(src, self.config, renderer, first))
        return run_video(src, out, self.config, renderer, keys, vault_path=self.vault_for(src, out),
                         store_crops=self.options.store_crops, edits=plan)

    def _edits(self, src: str):
        """The --edits file (None without one), refused when it was made on another video than ``src``."""
        if self.options.edits is None:
            return None
        from ..edits import check_source, load_edits
        from ..video.reader import open_source

        edits = load_edits(self.options.edits)
        with open_source(src) as source:  # the header's frame count only: an estimate is no check
            frames = int(source.video_stream.frames or 0) or None
            check_source(edits, frames, source.width, source.height, Path(src).name)
        return edits

    def _still(self, src: Path, out: Path) -> RunResult:
        from .still import run_still

        edits = None
        if self.options.edits is not None:
            from ..edits import load_edits

            edits = load_edits(self.options.edits)  # checked against the photo once it is read (run_still)
        return run_still(src, out, self.config, lambda: self.renderer(self.next_keys()), edits=edits)

    def _live(self, src: str, dst: str | Path | None) -> RunResult:
        """Without a key file the keys are ephemeral (never stored): DBAF still gets one key per track."""
        from ..live.outputs import first_free_segment, segment_path
        from ..video.partial import check_overwrite
        from .live import check_live_output, run_live_feed
        from .recording import segment_vault_factory

        out = check_live_output(dst)
        stream = is_stream_output(out)
        if not stream and self.options.live.segment_time:  # before the feed is read (a pipe cannot be read again)
            first = first_free_segment(out)  # a restart goes on after the segments on disk, never over them
            if first:
                log.warning("%d segment(s) of %s on disk already: recording from %s", first, Path(out).name,
                            segment_path(out, first).name)
        elif not stream:
            check_overwrite(Path(out), self.config.output.overwrite)
            if self.writes_vault() and vault_path_for(Path(out)).exists() and not self.config.output.overwrite:
                raise StreamdeidError(f"{vault_path_for(Path(out))} exists; pass --overwrite to replace it")
            _keep_a_killed_recording(Path(out))
        keys = self.next_keys()
        renderer = self.renderer(keys)  # loads the model before connecting
        factory = segment_vault_factory(keys, self.config, renderer.anonymizer) \
            if self.writes_vault() and not stream else None
        return run_live_feed(src, out, self.config, self.options.live, renderer, stream=stream,
                             vault_factory=factory)

    def _folder(self, src: Path, out: Path) -> RunResult:
        """Every file of ``src`` into ``out``: a file that fails is recorded and the next one is done.
        Ctrl-C stops the whole run (``summary.interrupted``)."""
        files = list_media(src)
        if not files:
            raise StreamdeidError(f"{src}: no images or videos in this folder")
        say_unread(unread_files(src), src)
        subfolders = sorted(p.name for p in src.iterdir() if p.is_dir() and not p.name.startswith("."))
        if subfolders:  # they were passed over without a word
            log.warning("%s: %d subfolder(s) not read (%s%s): a folder run reads the files directly inside; "
                        "`streamdeid batch` reads subfolders too", src, len(subfolders), ", ".join(subfolders[:3]),
                        ", ..." if len(subfolders) > 3 else "")
        if out.exists() and not out.is_dir():
            raise StreamdeidError(f"{out} is a file: the output of a folder is a folder (give another -o)")
        made = [p for p in (out, *out.parents) if not p.exists()]  # the folders this run creates, deepest first
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StreamdeidError(f"cannot create the output folder {out}: {exc.strerror or exc}") from None
        try:
            return self._folder_files(src, out, files)
        finally:
            _remove_if_empty(made)  # every file failed: no empty folder left that looks like a finished run

    def _folder_files(self, src: Path, out: Path, files: list[Path]) -> RunResult:
        """``_folder``'s loop: each of ``files`` (in ``src``) into the folder ``out``."""
        total = RunSummary()
        outcomes: list[FileOutcome] = []
        # videos have a bar each (run/video.py); photos one over the folder's photos, or a folder of them
        # is silent for as long as they take (an 11 s crowd photo)
        photos = sum(is_image(f) for f in files)
        bar = tqdm(total=photos, unit="photo", desc=src.name, disable=not self.config.progress or photos < 2,
                   dynamic_ncols=True)
        for f in files:
            try:
                done, summary = self.file(f, out / f.name)
            except KeyboardInterrupt:  # outside the frame loop (opening, loading the model, a still image)
                done, summary = outcome(f, out / f.name, None, FAILED, error="interrupted"), RunSummary()
                summary.interrupted = True
            outcomes.append(done)
            bar.update(is_image(f))
            if summary is not None:
                total.add(summary)
                if summary.interrupted:
                    total.interrupted = True
                    break
        bar.close()
        return RunResult(out, total, files=outcomes)

    def _made_from(self, src: Path, vault: Path | None) -> bool:
        """Whether ``vault`` (a finished output's) was made from ``src`` as it is now: its clear header holds a
        keyed fingerprint of its input's size and first MiB (vault/header.py). Another input's output and
        vault copied into this one's place, or an input changed since, is not done; its vault is the only copy
        of the faces it holds, so it is redone only with --overwrite. True without a vault to tell."""
        if vault is None:
            return True
        made, video_id = vault_source_fingerprint(vault), vault_video_id(vault)
        if made is None or made in _fingerprints(src, self._keys.master, video_id):
            return True
        if not self.config.output.overwrite:
            raise StreamdeidError(f"{vault} was made from another input than {Path(src).name} (or from it before it "
                                  "changed): pass --overwrite to redo it, or move that output and vault away first")
        return False

    def _redo(self, dst: Path, vault_path: Path | None) -> Runner:
        """``dst`` is not a finished output (``output_is_complete`` said no): what a previous run left there (an
        output whose vault has no END, a vault alone) is replaced; a video of someone else's is not."""
        if not dst.exists() and not (vault_path is not None and vault_path.exists()):
            return self
        if not self.config.output.overwrite:
            refuse_redoing(dst, vault_path)
        log.warning("%s: the output a previous run left is incomplete; redoing it", dst)
        output = dataclasses.replace(self.config.output, overwrite=True)
        options = dataclasses.replace(self.options, config=dataclasses.replace(self.config, output=output))
        return self.with_options(options)


def _remove_if_empty(folders: list[Path]) -> None:
    """Removes ``folders`` (deepest first) that are empty, stopping at the first that is not."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (a file was written), or gone
            return


def refuse_redoing(dst: Path, vault: Path | None) -> None:
    """What --skip-existing found at ``dst`` and ``vault`` is not a run of ours that stopped half-way: a video
    someone else made, a finished output whose vault was moved or deleted, or a vault that belongs to another
    video (the only way to that video's faces). Replaced only with --overwrite."""
    here = vault is not None and vault.exists()
    if dst.exists() and not is_image(dst):
        video_id = output_video_id(dst)
        if video_id is None:
            raise StreamdeidError(f"{dst} exists and streamdeid did not write it (it carries no video id of ours): "
                                  "pass --overwrite to replace it, or choose another output folder")
        if vault is not None and not here:
            raise StreamdeidError(f"{dst} is finished but its vault {vault.name} is missing (moved or deleted?): "
                                  "pass --overwrite to anonymize it again, with a new vault")
        owner = vault_video_id(vault) if here else None
        if owner is not None and owner != video_id:
            raise StreamdeidError(f"{vault} belongs to another video than {dst.name}: pass --overwrite to replace "
                                  "both, or move that vault away first")
    elif here and vault_is_finished(vault):
        raise StreamdeidError(f"{vault} is a finished vault without its video {dst.name}: pass --overwrite to "
                              "replace it, or move it away first")


def _refuse_a_killed_runs_vault(out: Path, vault: Path | None, overwrite: bool) -> None:
    """A run that did not finish left ``out.partial.mp4`` and a vault: named for ``out`` when it was killed
    outright, ``out.partial.mp4.sdv`` after Ctrl-C. Its faces can still be recovered from them, so this run
    does not write over them without --overwrite, and says so."""
    partial = partial_path_for(out)
    if vault is None or overwrite or out.exists() or not partial.exists():
        return
    vault = next((v for v in (vault, vault_path_for(partial)) if v.exists()), None)
    if vault is None:
        return
    raise StreamdeidError(f"{vault} and {partial} are left by a run that did not finish: pass --overwrite to "
                          f"replace them, or recover what it wrote (`streamdeid recover {partial} --key-file KEY --partial -o OUT`)")


def _names_a_folder(dst: str) -> bool:
    """-o given as a folder: an existing one, or a path ending with a separator."""
    return dst.endswith(("/", os.sep)) or Path(dst).is_dir()


def _refuse_edits(src: str, options: RunOptions) -> None:
    """--edits correct one video file's run: not a live feed, stdin, a folder or a still image."""
    what = ("a live feed" if options.is_live(src) else "stdin" if src == "-" else
            "a folder" if Path(src).is_dir() else None)
    if what is not None:
        raise StreamdeidError(f"--edits corrects the run of one video or photo file, not {what}")
    if options.skip_existing:
        raise StreamdeidError("--edits corrects the run of one video or photo file; --skip-existing is for folders")


def file_outcome(src: str, result: RunResult) -> FileOutcome:
    """The outcome of a single-file run (a ``--report`` of one entry)."""
    if result.summary.interrupted:
        return outcome(src, result.output, result.vault, FAILED, result.summary,
                       error=f"interrupted: partial output kept at {result.output}")
    return outcome(src, result.output, result.vault, OK, result.summary)
