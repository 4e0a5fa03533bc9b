"""``streamdeid run``'s options for a batch: the same click options, mapped onto PipelineConfig by one table.

A batch passes the options around as a plain dict (picklable for Ray and process pools); a manifest
CSV row may override any of them for its file.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ..cli_config import RUN_OPTIONS, apply_selection, check_anonymizer_options
from ..config import PipelineConfig
from ..types import StreamdeidError

#: run's options that set PipelineConfig fields (cli_config's table; the audit log is per run, not per batch)
CONFIG_FIELDS = {k: v for k, v in RUN_OPTIONS.items() if k != "export_tracks"}
#: run's options that a batch takes besides the config fields (the live, report and folder ones are run's own)
OTHER_OPTIONS = ("key_file", "new_key", "no_vault", "no_crops", "no_progress", "keep", "only")
#: options a manifest row may set for its file (not the key: one master key per batch)
PER_FILE = tuple(CONFIG_FIELDS) + ("no_vault", "no_crops")


def run_params(run_command: click.Command) -> list[click.Parameter]:
    """``run``'s own option objects (same names, types, defaults and help) for the batch command."""
    wanted = set(CONFIG_FIELDS) | set(OTHER_OPTIONS)
    return [p for p in run_command.params if p.name in wanted]


def build_config(opts: dict[str, Any]) -> PipelineConfig:
    """A PipelineConfig for one file from the option dict (``run``'s names); checks what ``run`` checks."""
    config = PipelineConfig()
    for name, path in CONFIG_FIELDS.items():
        value = opts.get(name)
        if value is None:
            continue
        section, _, attr = path.rpartition(".")
        setattr(getattr(config, section) if section else config, attr, value)
    check_anonymizer_options({**opts, "method": config.anonymize.method, "backend": config.anonymize.backend})
    apply_selection(config, opts)  # --keep/--only: the same reference photos for every file
    config.progress = False  # workers draw no bars: the driver has one over files
    return config


def with_overwrite(config: PipelineConfig) -> PipelineConfig:
    return dataclasses.replace(config, output=dataclasses.replace(config.output, overwrite=True))


def parse_per_file(run_params_: list[click.Parameter], row: dict[str, str], where: str) -> dict[str, Any]:
    """A manifest row's option columns (``anonymizer``, ``--detect-every``, ``crf``...) converted by the
    same click types as on the command line. Empty cells are left out."""
    by_name: dict[str, click.Parameter] = {}
    for p in run_params_:
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
            raise StreamdeidError(f"{where}: unknown column {column!r} (per-file options: "
                                  f"{', '.join(sorted(k for k in by_name if k in PER_FILE))})")
        value = raw.strip()
        if getattr(param, "is_flag", False):
            value = value.lower() in ("1", "true", "yes", "y", "on")
        try:
            out[param.name] = param.type_cast_value(ctx, value)
        except click.BadParameter as exc:
            raise StreamdeidError(f"{where}: {column}: {exc.message}") from None
    return out
