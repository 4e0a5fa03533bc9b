"""The run layer: one ``Runner`` assembles every run (a file, a still, a folder, stdin, a live feed) from
``RunOptions``; the CLI, ``streamdeid.anonymize()`` and the batch workers all go through it."""

from .models import Models
from .options import RunOptions, batch_options, run_options
from .result import RunResult
from .runner import Runner, default_output, file_outcome

__all__ = ["Models", "RunOptions", "RunResult", "Runner", "batch_options", "default_output", "file_outcome",
           "run_options"]
