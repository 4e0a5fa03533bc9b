"""A run's options: ``RunOptions``, and the one mapping from ``run``'s option names onto it.

The command line (``streamdeid run``), a batch (the same options, passed around as a plain dict so Ray and
process pools can pickle them) and a manifest row (per-file columns) all name options as ``run`` does;
``run_options`` is the only place an option meets its config field. An option left at None keeps the
field's default (see config.py and live/config.py for why each default is what it is); ``no_progress``,
``no_vault`` and ``no_crops`` set their fields inverted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from ..config import AnonymizeConfig, PipelineConfig
from ..live.config import LiveConfig
from ..types import StreamdeidError, UsageError

#: ``streamdeid run`` option -> PipelineConfig field ("section.field")
RUN_OPTIONS = {
    "detect_every": "detect.every",
    "detect_size": "detect.input_size",
    "min_face": "detect.min_face",
    "threshold": "detect.score_threshold",
    "hold": "track.hold_seconds",
    "remember": "track.remember_seconds",
    "rejoin": "track.rejoin_seconds",
    "lookahead": "lookahead_seconds",
    "method": "anonymize.method",
    "model_path": "anonymize.model_path",
    "backend": "anonymize.backend",
    "leak_threshold": "anonymize.leak_threshold",
    "mask": "blend.mask",
    "mask_margin": "blend.margin",
    "mask_feather": "blend.feather",
    "codec": "output.codec",
    "crf": "output.crf",
    "preset": "output.preset",
    "overwrite": "output.overwrite",
    "vault_quality": "output.vault_quality",
    "export_tracks": "export_tracks",
}

#: ``streamdeid recover`` option -> PipelineConfig field (it only decodes and encodes)
RECOVER_OPTIONS = {
    "codec": "output.codec",
    "crf": "output.crf",
    "overwrite": "output.overwrite",
}

#: ``streamdeid run`` option of a live feed -> LiveConfig field
LIVE_OPTIONS = {
    "rtsp_transport": "transport",
    "read_timeout": "read_timeout",
    "max_retries": "max_retries",
    "max_latency": "max_latency",
    "segment_time": "segment_time",
    "stats_interval": "stats_interval",
    "stats_json": "stats_json",
    "stdout_format": "stream_container",
}

#: run's options that a batch takes: the config fields (not the audit log, which is one per run) and these
BATCH_OPTIONS = tuple(k for k in RUN_OPTIONS if k != "export_tracks") + (
    "key_file", "new_key", "no_vault", "no_crops", "no_progress", "keep", "only")
#: options a manifest row may set for its file (not the key: one master key per batch)
PER_FILE = tuple(k for k in RUN_OPTIONS if k != "export_tracks") + ("no_vault", "no_crops")


@dataclass
class RunOptions:
    """Everything a run needs besides its input and output (``Runner`` takes it once)."""

    config: PipelineConfig = field(default_factory=PipelineConfig)
    key_file: str | None = None  # the master key; None: an ephemeral key, never stored (irreversible output)
    new_key: bool = False  # create key_file when it is missing
    vault: bool = True  # False (--no-vault): no recovery vault even with a key file
    store_crops: bool = True  # False (--no-crops, dbaf): the vault keeps geometry and track ids only
    skip_existing: bool = False  # folders and batches: skip a finished output, redo a half-written one
    live: LiveConfig = field(default_factory=LiveConfig)  # settings of a live feed
    force_live: bool = False  # treat any input as live (a live pipe on stdin); URLs and devices always are
    edits: str | None = None  # --edits: a reviewer's corrections to one video's run (docs/edits.md)
    report: str | None = None  # --report: written by the CLI, checked with the run's other outputs (Runner)
    live_given: tuple[str, ...] = ()  # the live feed's options given on the command line (refused for a file)

    def is_live(self, src: str) -> bool:
        """A live feed: a URL or a capture device, or any input with ``force_live`` (a live pipe on stdin)."""
        from ..video.reader import is_live_input

        return self.force_live or (src != "-" and is_live_input(src))


def run_options(options: dict[str, Any]) -> RunOptions:
    """``RunOptions`` from ``run``'s option names (the CLI's parameters, a batch's dict, a manifest row merged
    into it); checks what ``run`` checks before any output exists. Missing names keep their defaults."""
    config = pipeline_config(options, RUN_OPTIONS)
    apply_selection(config, options)
    check_anonymizer_options(options)
    if options.get("new_key") and not options.get("key_file"):  # it was ignored: the run kept no key
        raise UsageError("--new-key creates the --key-file it is given; give --key-file PATH")
    return RunOptions(config, key_file=options.get("key_file"), new_key=bool(options.get("new_key")),
                      vault=not options.get("no_vault"), store_crops=not options.get("no_crops"),
                      skip_existing=bool(options.get("skip_existing")), live=live_config(options),
                      force_live=bool(options.get("force_live")), edits=options.get("edits"),
                      report=options.get("report"), live_given=tuple(options.get("live_given") or ()))


def batch_options(options: dict[str, Any]) -> RunOptions:
    """A batch file's options: no progress bar of its own (the driver has one over files), and a finished
    output is skipped unless --overwrite (a batch is resumed by running it again)."""
    opts = run_options(options)
    opts.config.progress = False
    return dataclasses.replace(opts, skip_existing=not opts.config.output.overwrite)


def pipeline_config(options: dict[str, Any], table: dict[str, str]) -> PipelineConfig:
    """A PipelineConfig with every option of ``table`` that is given and not None set on its field."""
    config = PipelineConfig()
    for option, path in table.items():
        value = options.get(option)
        if value is None:
            continue
        *sections, name = path.split(".")
        target = config
        for section in sections:
            target = vars(target)[section]
        setattr(target, name, value)
    config.progress = not options.get("no_progress")
    return config


def apply_selection(config: PipelineConfig, options: dict[str, Any]) -> None:
    """--keep / --only (one or the other) onto ``config.select``."""
    keep, only = tuple(options.get("keep") or ()), tuple(options.get("only") or ())
    if keep and only:
        raise UsageError("--keep and --only exclude each other: keep some people visible, or anonymize only some")
    if keep or only:
        config.select.mode = "keep" if keep else "only"
        config.select.references = list(keep or only)


def check_anonymizer_options(options: dict[str, Any]) -> None:
    """--model goes with dbaf (a generator file) or composite (a bank folder), --no-crops with dbaf only; the
    model or bank is found (and checked) before any output.
    ``options`` may omit keys (a batch manifest row): missing means the default."""
    defaults = AnonymizeConfig()
    method, model_path = options.get("method") or defaults.method, options.get("model_path")
    if method == "dbaf":
        from ..anonymizers.dbaf import resolve_model_path

        # fail before touching any output
        resolve_model_path(model_path, options.get("backend") or defaults.backend)
    elif method == "composite" and model_path is not None:
        from ..anonymizers.composite import load_bank

        if not Path(model_path).is_dir():
            raise StreamdeidError(f"{model_path}: --model with composite is a donor bank folder "
                                  "(python -m training composites --out DIR)")
        load_bank(model_path)  # damaged or unreadable: said before any output
    elif model_path is not None:
        raise UsageError("--model is for --anonymizer dbaf (a generator file) or composite (a bank folder)")
    if options.get("no_crops") and method != "dbaf":  # options that do not go together: exit 2, as README says
        raise UsageError("--no-crops keeps no face pixels: only --anonymizer dbaf can be recovered from such "
                              "a vault (recover --mode model)")


def live_config(options: dict[str, Any]) -> LiveConfig:
    """The LiveConfig of a live run's options (validated by LiveConfig itself)."""
    return LiveConfig(**{name: options[option] for option, name in LIVE_OPTIONS.items()
                         if options.get(option) is not None})


def run_params(run_command: click.Command) -> list[click.Parameter]:
    """``run``'s own option objects (same names, types, defaults and help) for the batch command."""
    return [p for p in run_command.params if p.name in BATCH_OPTIONS]


FLAG_WORDS = {w: True for w in ("1", "true", "yes", "y", "on", "t")} | {
    w: False for w in ("0", "false", "no", "n", "off", "f")}


def manifest_options(params: list[click.Parameter], row: dict[str, str], where: str) -> dict[str, Any]:
    """A manifest row's option columns (``anonymizer``, ``--detect-every``, ``crf``...) converted by the
    same click types as on the command line, under ``run``'s names. Empty cells are left out."""
    by_name: dict[str, click.Parameter] = {}
    for p in params:
        if p.name in PER_FILE:
            by_name[p.name] = p
            for opt in getattr(p, "opts", ()):
                by_name[opt.lstrip("-").replace("-", "_")] = p
    out: dict[str, Any] = {}
    ctx = click.Context(click.Command("batch"))
    for column, raw in row.items():
        if column is None or raw is None or not raw.strip():
            continue
        name = column.strip().lstrip("-").replace("-", "_")
        if name in ("input", "output"):
            continue
        param = by_name.get(name)
        if param is None:
            columns = sorted({max((o.lstrip("-") for o in getattr(q, "opts", ()) if o.startswith("--")), key=len,
                                  default=q.name) for q in by_name.values()})
            raise StreamdeidError(f"{where}: unknown column {column!r} (per-file options, named as run's: "
                                  f"{', '.join(columns)})")
        value = raw.strip()
        if getattr(param, "is_flag", False):  # click's own words for a boolean; anything else is a typo
            if value.lower() not in FLAG_WORDS:
                raise StreamdeidError(f"{where}: {column}: {value!r} is not a yes or no (one of "
                                      f"{', '.join(sorted(FLAG_WORDS))})")
            value = FLAG_WORDS[value.lower()]
        try:
            out[param.name] = param.type_cast_value(ctx, value)
        except click.BadParameter as exc:
            raise StreamdeidError(f"{where}: {column}: {exc.message}") from None
    return out
