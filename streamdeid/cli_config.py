"""CLI options -> config, in one table per command: the only place an option meets its config field.

An option left at None keeps the field's default (see config.py and live/config.py for why each
default is what it is); ``no_progress`` is the one option that sets its field inverted.
"""

from __future__ import annotations

from typing import Any

from .config import AnonymizeConfig, PipelineConfig
from .types import StreamdeidError

#: ``streamdeid run`` option -> PipelineConfig field ("section.field")
RUN_OPTIONS = {
    "detect_every": "detect.every",
    "detect_size": "detect.input_size",
    "min_face": "detect.min_face",
    "threshold": "detect.score_threshold",
    "hold": "track.hold_seconds",
    "remember": "track.remember_seconds",
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


def pipeline_config(options: dict[str, Any], table: dict[str, str]) -> PipelineConfig:
    """A PipelineConfig with every option of ``table`` that is not None set on its field."""
    config = PipelineConfig()
    for option, path in table.items():
        value = options[option]
        if value is None:
            continue
        *sections, name = path.split(".")
        target = config
        for section in sections:
            target = vars(target)[section]
        setattr(target, name, value)
    config.progress = not options["no_progress"]
    return config


def apply_selection(config: PipelineConfig, options: dict[str, Any]) -> None:
    """--keep / --only (one or the other) onto ``config.select``."""
    keep, only = tuple(options.get("keep") or ()), tuple(options.get("only") or ())
    if keep and only:
        raise StreamdeidError("--keep and --only exclude each other: keep some people visible, or anonymize only some")
    if keep or only:
        config.select.mode = "keep" if keep else "only"
        config.select.references = list(keep or only)


def check_anonymizer_options(options: dict[str, Any]) -> None:
    """--model and --no-crops only go with dbaf; a dbaf model is found (and checked) before any output.
    ``options`` may omit keys (a batch manifest row): missing means the default."""
    defaults = AnonymizeConfig()
    method, model_path = options.get("method") or defaults.method, options.get("model_path")
    if method == "dbaf":
        from .anonymizers.dbaf import resolve_model_path

        # fail before touching any output
        resolve_model_path(model_path, options.get("backend") or defaults.backend)
    elif model_path is not None:
        raise StreamdeidError("--model is for --anonymizer dbaf")
    if options.get("no_crops") and method != "dbaf":
        raise StreamdeidError("--no-crops keeps no face pixels: only --anonymizer dbaf can be recovered from such "
                              "a vault (recover --mode model)")


def live_config(options: dict[str, Any]):
    """The LiveConfig of a live run's options (validated by LiveConfig itself)."""
    from .live import LiveConfig

    return LiveConfig(**{name: options[option] for option, name in LIVE_OPTIONS.items()
                         if options[option] is not None})
