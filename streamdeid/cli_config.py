"""CLI options -> config, in one table per command: the only place an option meets its config field.

An option left at None keeps the field's default (see config.py and live/config.py for why each
default is what it is); ``no_progress`` is the one option that sets its field inverted.
"""

from __future__ import annotations

from typing import Any

from .config import PipelineConfig

#: ``streamdeid run`` option -> PipelineConfig field ("section.field")
RUN_OPTIONS = {
    "detect_every": "detect.every",
    "detect_size": "detect.input_size",
    "min_face": "detect.min_face",
    "threshold": "detect.score_threshold",
    "hold": "track.hold_seconds",
    "lookahead": "lookahead_seconds",
    "method": "anonymize.method",
    "model_path": "anonymize.model_path",
    "backend": "anonymize.backend",
    "leak_threshold": "anonymize.leak_threshold",
    "mask": "blend.mask",
    "mask_margin": "blend.margin",
    "codec": "output.codec",
    "crf": "output.crf",
    "preset": "output.preset",
    "overwrite": "output.overwrite",
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


def live_config(options: dict[str, Any]):
    """The LiveConfig of a live run's options (validated by LiveConfig itself)."""
    from .live import LiveConfig

    return LiveConfig(**{name: options[option] for option, name in LIVE_OPTIONS.items()
                         if options[option] is not None})
