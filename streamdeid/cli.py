"""Command line: ``streamdeid run | recover | keygen | export-key | inspect | demo``.

Every user-facing failure is a ``StreamdeidError`` turned into one line on
stderr and a non-zero exit; Ctrl-C exits 130 after closing the output.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from . import __version__
from .batch.cli import batch_command
from .cli_types import FiniteRange
from .registry import BACKENDS, METHODS
from .console import setup_logging
from .redact import redact
from .run.options import RECOVER_OPTIONS, pipeline_config
from .types import OutputClosed, StreamdeidError, UsageError

EXIT_ERROR = 1
EXIT_USAGE = 2  # as click's own usage errors
EXIT_INTERRUPTED = 130
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a tool killed by a closed pipe
EXIT_TERMINATED = 143  # 128 + SIGTERM


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a service manager stopping the run) during a file run: it ends as Ctrl-C ends it
    (the partial output finished and kept, said in one line), with SIGTERM's exit code. It ended the process
    at once, silently, and left the progress bar's line unfinished."""


_TERMINATED: list[bool] = []  # set by the handler: the run's interruption was a SIGTERM


def _end_on_sigterm(*, hangup: bool = False) -> None:
    """SIGTERM (and with ``hangup`` SIGHUP: the terminal closed) ends the command as Ctrl-C does. For recover
    that matters most: killed outright, it left a playable partial file of the original faces."""
    import signal
    import threading

    def handler(_signum, _frame) -> None:
        _TERMINATED.append(True)
        raise _Terminated()

    if threading.current_thread() is threading.main_thread():  # (the only thread that may set one)
        signal.signal(signal.SIGTERM, handler)
        if hangup:
            signal.signal(signal.SIGHUP, handler)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not fail on the dead pipe."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


class _Group(click.Group):
    """Turns StreamdeidError and Ctrl-C into one-line messages and exit codes."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except OutputClosed as exc:  # `... -o - | head`: say so in one line, exit as SIGPIPE would
            _silence_stdout()
            click.echo(f"streamdeid: {redact(str(exc))}", err=True)
            ctx.exit(EXIT_PIPE_CLOSED)
        except StreamdeidError as exc:
            click.echo(f"streamdeid: error: {redact(str(exc))}", err=True)
            ctx.exit(EXIT_USAGE if isinstance(exc, UsageError) else EXIT_ERROR)
        except KeyboardInterrupt:
            click.echo("streamdeid: terminated" if _TERMINATED else "streamdeid: interrupted", err=True)
            ctx.exit(EXIT_TERMINATED if _TERMINATED else EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except OSError as exc:  # the filesystem said no (read-only, full, a name too long): not a bug of ours
            if logging.getLogger().isEnabledFor(logging.INFO):
                logging.getLogger("streamdeid").exception("file system error")
            where = f": {redact(str(exc.filename))}" if exc.filename else ""
            click.echo(f"streamdeid: error: {exc.strerror or type(exc).__name__}{where}", err=True)
            ctx.exit(EXIT_ERROR)
        except Exception as exc:  # a bug of ours: still one line (the traceback with -v)
            if logging.getLogger().isEnabledFor(logging.INFO):
                logging.getLogger("streamdeid").exception("internal error")
            detail = redact(str(exc)).strip().splitlines()[0] if str(exc).strip() else ""
            click.echo(f"streamdeid: internal error: {type(exc).__name__}: {detail} (rerun with -v for details;"
                       " please report it)", err=True)
            ctx.exit(EXIT_ERROR)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="streamdeid")
@click.option("-v", "--verbose", is_flag=True, help="Log every stage's decisions (fallbacks, reconnects).")
def main(verbose: bool) -> None:
    """Anonymize faces in videos and images; recover them later with a key.

    \b
    Quick start:
      streamdeid keygen k.bin
      streamdeid run input.mp4 --key-file k.bin      # writes input_anonymized.mp4 + .sdv vault
      streamdeid recover input_anonymized.mp4 --key-file k.bin -o restored.mp4
    """
    setup_logging(logging.INFO if verbose else logging.WARNING)


@main.command()
@click.argument("input", metavar="INPUT")
@click.option("-o", "--output", type=click.Path(dir_okay=True), help="Output file or folder. Default: <stem>_anonymized.<ext> beside the input.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@click.option("--anonymizer", "method", type=click.Choice(list(METHODS)), default="blur", show_default=True, help="How faces are replaced. blur/mosaic/solid: classic covers. dbaf: a generated face per person from the shipped 64 px model (or --model), checked by the leak guard; experimental, see docs/MODEL_CARD.md. composite: one averaged face of 12 people per person, on CPU (docs/composite.md).")
@click.option("--model", "model_path", type=click.Path(), default=None, help="dbaf: generator file (.onnx for onnxrt, .safetensors for torch, .engine for tensorrt); composite: a donor bank folder (python -m training composites --out DIR). Default: the shipped weights or bank.")
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="onnxrt", show_default=True, help="dbaf: what runs the generator (ONNX Runtime on CPU by default).")
@click.option("--leak-threshold", type=FiniteRange(0.05, 0.363), default=None, help="dbaf and composite: SFace similarity at which the leak guard switches a track to solid fill (default 0.25, stricter than SFace's 0.363 because encoding shifts it; lower is stricter).")
@click.option("--detect-every", type=click.IntRange(min=1), default=None, help="Run the detector on every N-th frame (and on scene cuts) and track in between. Default 2; 1 with dbaf, whose leak guard needs measured landmarks.")
@click.option("--detect-size", type=click.IntRange(0, 8192), default=None, help="Longest side of the image the detector's fast pass sees on every run (0: native). Default 640; a frame larger than 1280 px is seen at no less than half its size (1080p at 960).")
@click.option("--min-face", type=click.IntRange(min=0), default=None, help="Smallest face (height in pixels of the input) to look for. When the fast pass cannot see faces that small, an upscaled scan runs every 0.25 s, on scene cuts and on stills (0: no scan; live feeds put scans off while the machine has no time for them, and the summary says how often). Default 12; the summary line says what was looked for.")
@click.option("--threshold", type=FiniteRange(0.05, 0.99), default=None, help="Detector score threshold. Default 0.3 (dark, soft and small faces score low). Lower covers more, with more false positives.")
@click.option("--hold", type=FiniteRange(0, 60), default=0.5, show_default=True, help="Seconds a lost face stays covered at its predicted position.")
@click.option("--remember", type=FiniteRange(0, 60), default=1.0, show_default=True, help="Seconds after it was lost that a face's track is remembered (no longer covered), so the face keeps its track (one key, one identity) when it is found again. Up to --hold: forgotten when its cover ends.")
@click.option("--rejoin", type=FiniteRange(0, 60), default=2.0, show_default=True, help="Seconds after it was lost that a face's track is still kept past --remember, taken up again only by a detection that shows the same face's pixels: a face that leaves the picture (a camera sweeping back over a crowd) or is hidden keeps its track, and a stranger standing where it was lost does not take it. Up to --remember: no such check.")
@click.option("--lookahead", type=FiniteRange(0, 10), default=0.5, show_default=True, help="Seconds a new face is also covered before its first detection.")
@click.option("--mask", type=click.Choice(["ellipse", "hull"]), default="ellipse", show_default=True, help="Shape of the pasted region.")
@click.option("--mask-margin", type=FiniteRange(0, 2), default=None, help="Grow the pasted region by this fraction of the face size (default 0.15).")
@click.option("--mask-feather", type=FiniteRange(0, 0.5), default=None, help="Width of the pasted region's soft edge, outside the fully covered face, as a fraction of the aligned crop's side. Default 0.02 for blur, mosaic and solid (area changed around every face, little else), 0.08 for dbaf (a generated face's seam fades out).")
@click.option("--codec", default="libx264", show_default=True, help="Video encoder (e.g. libx264, libx265, ffv1 for lossless).")
@click.option("--crf", type=click.IntRange(0, 63), default=18, show_default=True, help="Quality: x264/x265 take 0-51, VP9 (.webm) 0-63; lower is better, 0 = lossless.")
@click.option("--preset", default="veryfast", show_default=True, help="x264/x265 speed preset.")
@click.option("--key-file", type=click.Path(dir_okay=False), help="Master key (from `streamdeid keygen`): write a recovery vault <output>.sdv. Without it the output is irreversible.")
@click.option("--new-key", is_flag=True, help="Create --key-file if it does not exist.")
@click.option("--no-vault", is_flag=True, help="Write no recovery vault even with --key-file.")
@click.option("--vault-quality", type=click.Choice(["auto", "high", "small", "lossless"]), default="auto", show_default=True, help="How the vault stores original faces: one small H.264 video per person and second. high: near-lossless (about 45 dB); small: about half the size, a few dB lower; lossless: bit-exact (several times larger). auto: lossless when the output is lossless (--codec ffv1 or --crf 0), else high.")
@click.option("--no-crops", is_flag=True, help="dbaf: the vault keeps only track ids and geometry, no face pixels; recover with --mode model.")
@click.option("--live", "force_live", is_flag=True, help="Treat INPUT as a live feed with a latency bound (automatic for rtsp:// and other URLs and /dev/video*; use it for a live pipe on stdin).")
@click.option("--max-latency", type=FiniteRange(min=0.05), default=1.0, show_default=True, help="Live: frames older than this (seconds) are dropped whole before anonymization.")
@click.option("--segment-time", type=FiniteRange(min=1), default=None, help="Live: rotate the recording into playable segments of this many seconds.")
@click.option("--max-retries", type=click.IntRange(min=-1), default=10, show_default=True, help="Live: reconnect attempts per outage (-1: forever); then exit 3.")
@click.option("--rtsp-transport", type=click.Choice(["auto", "tcp", "udp"]), default="auto", show_default=True, help="Live: how RTP travels from an RTSP camera. auto: interleaved TCP (no loss, one port), then UDP when the server refuses TCP (some older cameras and NVRs); the log says when UDP is used. tcp or udp: that one only.")
@click.option("--read-timeout", type=FiniteRange(min=0.1), default=5.0, show_default=True, help="Live: seconds without data before the feed counts as dropped.")
@click.option("--stats-json", type=str, default=None, help="Live: statistics as JSON lines to this file (or - for stderr).")
@click.option("--stats-interval", type=FiniteRange(min=0), default=5.0, show_default=True, help="Live: seconds between statistics reports (0: none).")
@click.option("--stdout-format", type=click.Choice(["mpegts", "matroska"]), default="mpegts", show_default=True, help="Live: container when writing to stdout (-o -).")
@click.option("--keep", "keep", multiple=True, type=click.Path(exists=True), help="Reference photo (one face) or folder of photos of a person who stays visible; repeatable. Everyone else is anonymized. A track is left visible only after 3 detected frames in a row match (SFace >= 0.6) and is covered again at the first frame that does not.")
@click.option("--only", "only", multiple=True, type=click.Path(exists=True), help="Reference photo or folder: only people who match are anonymized; repeatable. Everyone else stays visible once 3 detected frames in a row clearly do not match (SFace < 0.3); a track that matches once is anonymized for good, an undecided one is anonymized.")
@click.option("--export-tracks", type=click.Path(dir_okay=False), help="Write a JSONL audit log: per frame and track, box, score, state, method (kept: left visible by --keep/--only); at the end one line per judged track with its decision and evidence.")
@click.option("--edits", type=click.Path(dir_okay=False), default=None, help="A reviewer's corrections (JSON, docs/edits.md): boxes of faces the run missed, covered from that frame and followed like detected faces, and boxes of covers that are not faces, whose tracks are not drawn. For one video or photo file, the one the edits were made on.")
@click.option("--report", "report", type=click.Path(dir_okay=False), default=None, help="Write a JSON report: per file input, output, vault, status (ok, failed, skipped), error, frames, faces, tracks, seconds; and totals. Written also when files failed.")
@click.option("--skip-existing", is_flag=True, help="Folder input: resume a run by skipping each file whose output (and, with --key-file, its vault) is complete and verified; an output a crash left incomplete is redone.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def run(input: str, **options) -> None:
    """Anonymize every face in INPUT.

    INPUT is a video file (mp4, mkv, mov, avi, webm, gif), an image, a folder
    of them, or - for a video stream on stdin (then -o is required). OUTPUT
    may also be - (MPEG-TS on stdout) or rtsp://... (a push).

    \b
      ffmpeg -i cam.mp4 -f matroska - | streamdeid run - -o out.mkv

    A folder is done file by file: a file that fails is reported and the
    run goes on (exit 1 if any failed); --skip-existing resumes it.

    \b
    Live feeds (rtsp://, /dev/video0) run with a latency bound, reconnect
    when the feed drops, and can rotate the recording into segments:
      streamdeid run rtsp://cam/stream -o rec.mp4 --segment-time 600
      streamdeid run rtsp://cam/stream -o - | ffplay -
    """
    from .run import run_options
    from .run.options import LIVE_OPTIONS
    from .run.outcome import FAILED

    ctx = click.get_current_context()
    given = [n for n in LIVE_OPTIONS if ctx.get_parameter_source(n) == click.core.ParameterSource.COMMANDLINE]
    opts = run_options({**options, "live_given": given})
    _warn_no_vault(ctx, opts, options["output"])
    report = options["report"]
    if opts.is_live(input):  # (a live feed stops on SIGTERM in live/runner.py)
        if report is not None or opts.skip_existing:
            raise UsageError("--report and --skip-existing are for files and folders, not live feeds")
        _run_live(input, options["output"], opts)
        return
    _end_on_sigterm()
    result = _anonymize_reporting(input, options["output"], opts, report)
    method = opts.config.anonymize.method
    # a push target may carry credentials (rtsp://user:secret@...)
    click.echo(f"streamdeid: {result.summary.line()} ({method}) -> {redact(str(result.output))}", err=True)
    model_path = options["model_path"]
    how = (" --mode model" + (f" --model {model_path}" if model_path else "")) if not opts.store_crops else ""
    _echo_vault(result, opts.key_file, how)
    if result.files:
        _echo_folder(result.files)
    if result.summary.interrupted:
        sys.exit(EXIT_TERMINATED if _TERMINATED else EXIT_INTERRUPTED)
    if any(f.status == FAILED for f in result.files):
        sys.exit(EXIT_ERROR)


def _warn_no_vault(ctx: click.Context, opts, output: str | None) -> None:
    """Say before the run, not after it, that options asking for a vault will get none."""
    from .video.stream_writer import is_stream_output

    log = logging.getLogger("streamdeid")
    if opts.key_file is not None and opts.vault and output is not None and is_stream_output(output):
        log.warning("a stream output (%s) gets no recovery vault: this output will be irreversible whatever "
                    "--key-file says (write a file to keep one)", redact(output))
    quality_given = ctx.get_parameter_source("vault_quality") == click.core.ParameterSource.COMMANDLINE
    if quality_given and (opts.key_file is None or not opts.vault):
        log.warning("--vault-quality sets how a recovery vault stores faces, and this run writes none (%s)",
                    "--no-vault" if opts.key_file is not None else "no --key-file")


def _anonymize_reporting(input: str, output: str | None, opts, report: str | None):
    """``anonymize``, then the --report (one entry per file; for a single file, one entry, also when it
    failed)."""
    from .api import anonymize
    from .run import Runner, default_output, file_outcome
    from .run.outcome import failed_outcome, write_report

    from .files import ClobberError

    try:
        result = anonymize(input, output, runner=Runner(opts))
    except StreamdeidError as exc:
        if report is not None and not isinstance(exc, ClobberError):  # (the report may be what it refused)
            dst = output if output is not None else default_output(input) if input != "-" else ""
            write_report(report, [failed_outcome(input, dst, str(exc))])
        raise
    if report is not None:
        write_report(report, result.files or [file_outcome(input, result)], interrupted=result.summary.interrupted)
    return result


def _echo_vault(result, key_file: str | None, how: str) -> None:
    from shlex import quote  # names with spaces: the command is meant to be pasted

    if result.vault is not None:
        click.echo(f"streamdeid: recovery vault {result.vault} (recover with `streamdeid recover"
                   f" {quote(str(result.output))} --key-file {quote(str(key_file))}{how} -o OUT`)", err=True)
    elif any(f.vault for f in result.files):
        click.echo(f"streamdeid: a recovery vault beside each video in {result.output} (VIDEO.sdv; recover with"
                   f" `streamdeid recover {quote(str(result.output))}/VIDEO --key-file {quote(str(key_file))}{how}"
                   " -o OUT`)", err=True)
    elif not result.files or any(f.status == "ok" for f in result.files):
        why = ""
        if key_file is not None:  # say why the key file did not give one
            from .video.images import is_image

            outputs = [Path(f.output) for f in result.files if f.status == "ok"] or [result.output]
            why = " (still images get no vault)" if all(is_image(str(o)) for o in outputs) else \
                " (a stream output gets no vault)" if not isinstance(result.output, Path) else ""
        click.echo(f"streamdeid: no recovery vault: this output is irreversible{why}", err=True)


def _echo_folder(files) -> None:
    """One line of counts, then one line per failed file with its reason."""
    from .run.outcome import FAILED, summary_line

    click.echo(f"streamdeid: {summary_line(files)}", err=True)
    for f in files:
        if f.status == FAILED:
            reason = str(f.error)
            if reason.startswith(f"{f.input}: "):  # most errors name the file already
                reason = reason[len(f.input) + 2:]
            click.echo(f"streamdeid: failed: {redact(f'{f.input}: {reason}')}", err=True)


def _run_live(source: str, output: str | None, opts) -> None:
    from .api import anonymize
    from .live import LiveSourceLost
    from .run import Runner

    runner = Runner(opts)
    try:
        result = anonymize(source, output, runner=runner)
    except LiveSourceLost as exc:
        click.echo(f"streamdeid: error: {redact(str(exc))}", err=True)
        kept = getattr(exc, "summary", None)  # what was recorded before the feed was lost is finished and kept
        if kept is not None and kept.frames and kept.segments:
            names = ", ".join(redact(str(p)) for p in kept.segments[:3]) + (" ..." if len(kept.segments) > 3 else "")
            click.echo(f"streamdeid: {kept.frames} frames recorded before the feed was lost, kept in {names}",
                       err=True)
        sys.exit(3)
    summary = result.summary
    if not summary.frames:  # (stopped while connecting, or every frame came too late): "-> OUT" named no file
        why = {"signal": "stopped before the feed sent one", "stop_after": "its time ran out first"}.get(
            summary.stop_reason, "the feed ended before one came")
        click.echo(f"streamdeid: no frame recorded ({why}): nothing written to {redact(str(result.output))}",
                   err=True)
        sys.exit(summary.exit_code)
    click.echo(f"streamdeid: {summary.line()} ({runner.config.anonymize.method}) -> {redact(str(result.output))}",
               err=True)
    if result.segment_vaults:
        click.echo(f"streamdeid: a recovery vault beside each recording (SEGMENT.sdv; recover with `streamdeid "
                   f"recover SEGMENT --key-file {runner.options.key_file} -o OUT`)", err=True)
    else:
        click.echo("streamdeid: no recovery vault: this output is irreversible", err=True)
    sys.exit(summary.exit_code)


@main.command()
@click.argument("anonymized", metavar="ANON")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the recovered video.")
@click.option("--key-file", required=True, type=click.Path(dir_okay=False), help="Master key, or a track key from `export-key`.")
@click.option("--vault", type=click.Path(dir_okay=False), help="Recovery vault. Default: ANON.sdv.")
@click.option("--track", "tracks", type=click.IntRange(0, 2**32 - 1), multiple=True, help="Restore only this track (repeatable); others stay anonymized.")
@click.option("--partial", is_flag=True, help="With a truncated vault, write what can be recovered and report the loss.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@click.option("--codec", default="libx264", show_default=True, help="Video encoder (ffv1 keeps restored faces bit-exact).")
@click.option("--crf", type=click.IntRange(0, 63), default=18, show_default=True, help="Quality: x264/x265 take 0-51, VP9 (.webm) 0-63; lower is better, 0 = lossless.")
@click.option("--mode", type=click.Choice(["exact", "model"]), default="exact", show_default=True, help="exact: put the stored original pixels back. model (dbaf outputs): regenerate each face with G(x_ano, P) from the track keys; works with --no-crops vaults.")
@click.option("--model", "model_path", type=click.Path(dir_okay=False), default=None, help="--mode model: the generator the run used. Default: the shipped weights.")
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="onnxrt", show_default=True, help="--mode model: what runs the generator.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def recover(anonymized: str, output: str, key_file: str, vault: str | None, tracks: tuple[int, ...],
            partial: bool, overwrite: bool, codec: str, crf: int, mode: str, model_path: str | None, backend: str,
            no_progress: bool) -> None:
    """Restore the original faces of ANON from its recovery vault.

    Exact (default): the pixels each anonymized face replaced are decrypted
    and put back. Model (dbaf outputs): each face is regenerated by the DBAF
    generator with its track key, using the track ids and geometry in the
    vault; the result is an approximation, and the generator cannot tell a
    wrong key from a right one. With --track only those people are restored.
    """
    from .api import MODEL_MODE_CAVEAT
    from .api import recover as do_recover

    if mode == "exact" and model_path is not None:
        raise UsageError("--model is for --mode model")
    if output == "-":  # it read "unsupported output extension ''"
        raise UsageError("recover writes a file (the originals, which a pipe could leak): give -o PATH")
    options = {"codec": codec, "crf": crf, "overwrite": overwrite, "no_progress": no_progress}
    config = pipeline_config(options, RECOVER_OPTIONS)
    _end_on_sigterm(hangup=True)
    if mode == "model":
        click.echo(f"streamdeid: note: {MODEL_MODE_CAVEAT}", err=True)
    res = do_recover(anonymized, output, key_file=key_file, vault=vault, tracks=list(tracks) or None,
                     config=config, allow_partial=partial, mode=mode, model=model_path, backend=backend)
    for note in res.notes:
        click.echo(f"streamdeid: warning: {note}", err=True)
    extra = f", {res.faces_skipped} solid-filled faces left as they are" if res.faces_skipped else ""
    if res.faces_within_others:  # so the count adds up to the run's faces
        extra += f"; {res.faces_within_others} more lay wholly under another face's cover, restored with it"
    click.echo(f"streamdeid: {res.frames} frames, {res.faces_restored} faces restored ({res.mode} mode){extra}"
               f" -> {res.output}", err=True)
    if res.damage:
        click.echo(f"streamdeid: warning: {res.damage}", err=True)


@main.command()
@click.argument("key_file", type=click.Path(dir_okay=False))
def keygen(key_file: str) -> None:
    """Create a new master key file (32 random bytes, mode 0600; never overwrites)."""
    from .keys import generate_master_key

    if key_file == "-":  # a key on a terminal or in a pipe would end up in scrollback and logs
        raise UsageError("keygen writes the key to a file, not to stdout: give a path (such as owner.key)")
    key = generate_master_key(key_file)
    click.echo(f"streamdeid: wrote master key {key_file} (id {key.key_id}); keep it safe", err=True)


@main.command("export-key")
@click.option("--key-file", required=True, type=click.Path(dir_okay=False), help="Master key.")
@click.option("--vault", required=True, type=click.Path(dir_okay=False), help="Vault of the video.")
@click.option("--track", required=True, type=click.IntRange(0, 2**32 - 1), help="Track (person) to disclose.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Track key file to write.")
def export_key(key_file: str, vault: str, track: int, output: str) -> None:
    """Write a key that opens only one track of one video (selective disclosure)."""
    from .keys import MasterKey, export_track_key
    from .restore import load_recovery_key
    from .vault import VaultReader

    if output == "-":  # as keygen: a key on a terminal or in a pipe would end up in scrollback and logs
        raise UsageError("export-key writes the key to a file, not to stdout: give a path (such as track3.key)")
    master = load_recovery_key(key_file)
    if not isinstance(master, MasterKey):
        raise StreamdeidError(f"{key_file} is a track key; export-key needs the master key")
    if not Path(vault).exists():
        raise StreamdeidError(f"{vault}: no such vault")
    with VaultReader(vault) as reader:
        reader.check_key(master, [track])
        export_track_key(master, reader.video_id, track, output)
    click.echo(f"streamdeid: wrote {output}: opens track {track} of this video only", err=True)


@main.command()
@click.argument("vault", type=click.Path(dir_okay=False))
def inspect(vault: str) -> None:
    """Show a vault's header, frame range, tracks and sizes (no key needed, nothing secret shown)."""
    import json

    from .vault import VaultReader

    from .vault import vault_path_for

    if not Path(vault).exists():
        raise StreamdeidError(f"{vault}: no such vault")
    beside = vault_path_for(Path(vault))
    try:
        with VaultReader(vault) as reader:
            info = reader.inspect()
    except StreamdeidError as exc:
        if "not a streamdeid vault" in str(exc) and beside.is_file():  # the output given for its vault
            raise StreamdeidError(f"{exc}; its vault is {beside}") from None
        raise
    click.echo(json.dumps(info, indent=2, default=str))
    # the records are encrypted and authenticated with keys inspect does not have: say what was not checked
    click.echo("streamdeid: the layout was read without a key; the records' authenticity is checked by "
               "`streamdeid recover` with the key", err=True)


main.add_command(batch_command(run))  # built on run's options, so after run


@main.command()
@click.argument("output", metavar="OUT", type=click.Path(exists=True, dir_okay=False))
@click.option("--source", type=click.Path(exists=True, dir_okay=False), help="The run's input: the original faces beside the covered ones, and the tracks when there is no audit log.")
@click.option("--tracks", "tracks", type=click.Path(exists=True, dir_okay=False), help="The run's audit log (run --export-tracks). Default: OUT.tracks.jsonl, STEM.tracks.jsonl, STEM_tracks.jsonl or STEM.jsonl beside OUT; else the tracks are found again on --source.")
@click.option("--key-file", type=click.Path(exists=True, dir_okay=False), help="Master key: without --source, the original faces come from OUT's vault.")
@click.option("--edits", "edits", type=click.Path(dir_okay=False), help="Where Save writes the corrections. Default: OUT.edits.json.")
@click.option("--no-browser", is_flag=True, help="Print the URL only; do not open a browser.")
@click.option("--no-scan", is_flag=True, help="Skip the second opinion (CenterFace on sampled output frames).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port on 127.0.0.1 (0: a free one).")
@click.option("--threshold", type=FiniteRange(0.05, 0.99), default=None, help="Tracking pass (no audit log): the run's --threshold.")
@click.option("--detect-every", type=click.IntRange(min=1), default=None, help="Tracking pass: the run's --detect-every (give 1 for a dbaf run).")
@click.option("--detect-size", type=click.IntRange(0, 8192), default=None, help="Tracking pass: the run's --detect-size.")
@click.option("--min-face", type=click.IntRange(min=0), default=None, help="Tracking pass: the run's --min-face.")
@click.option("--hold", type=FiniteRange(0, 60), default=None, help="Tracking pass: the run's --hold.")
@click.option("--remember", type=FiniteRange(0, 60), default=None, help="Tracking pass: the run's --remember.")
@click.option("--rejoin", type=FiniteRange(0, 60), default=None, help="Tracking pass: the run's --rejoin.")
@click.option("--lookahead", type=FiniteRange(0, 10), default=None, help="Tracking pass: the run's --lookahead.")
def review(output: str, source: str | None, tracks: str | None, key_file: str | None, edits: str | None,
           no_browser: bool, no_scan: bool, port: int, **detection) -> None:
    """Review OUT in a local web page before it is published.

    The output plays with a timeline of its tracks, each track's covered
    face (and the original, from --source or the vault), the run's facts,
    and flags to look at first: faces a second detector finds left
    visible, covers that look empty. Draw a box on a face the run missed,
    mark a cover that is no face, and Save: OUT.edits.json, for
    `streamdeid run IN --edits OUT.edits.json`.

    \b
    Served on 127.0.0.1 only, with a random token in the URL; Ctrl-C stops it.
    Needs the review extra: pip install "streamdeid[review]".
    """
    from .review import ReviewSettings, run_review
    from .run.options import RUN_OPTIONS

    config = pipeline_config({**detection, "no_progress": True}, RUN_OPTIONS)
    settings = ReviewSettings(output=Path(output), source=Path(source) if source else None,
                              tracks=Path(tracks) if tracks else None, key_file=Path(key_file) if key_file else None,
                              edits=Path(edits) if edits else None, config=config, scan=not no_scan)

    def echo(line: str) -> None:
        if line.startswith("streamdeid: review page"):  # the URL alone on stdout, for scripts
            click.echo(line.rsplit(" ", 1)[-1])
            sys.stdout.flush()
        click.echo(line, err=True)

    run_review(settings, browser=not no_browser, echo=echo, port=port)

if __name__ == "__main__":
    main()
