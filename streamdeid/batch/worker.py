"""One worker of a batch: a ``Runner`` made once (models loaded, master key read), then whole files.

The same class runs in a local pool process and as a Ray actor. ``process`` never raises for a bad file:
it returns a ``BatchOutcome`` (failed, with the reason); only a crash of the process itself is seen by
the driver as a lost worker.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..run import Models, Runner, batch_options
from ..run.outcome import FAILED, OK, FileOutcome, error_line
from ..types import StreamdeidError
from .inputs import Task

log = logging.getLogger(__name__)


@dataclass
class BatchOutcome(FileOutcome):
    """A report entry: ``FileOutcome`` plus what a batch adds."""

    fps: float = 0.0  # frames per second of this file's run
    attempts: int = 1
    worker: str = ""  # host:pid that did it


def failed(task: Task, error: str, attempt: int, worker: str = "") -> BatchOutcome:
    return BatchOutcome(task.input, task.output, None, FAILED, error, attempts=attempt, worker=worker)


class BatchWorker:
    """``opts``: the batch's options under ``run``'s names, for every file (a manifest row may override some);
    ``gpu``: run the DBAF generator on this worker's GPU. Building one loads the models: a failure here
    (a missing model) fails fast."""

    def __init__(self, opts: dict[str, Any], gpu: bool = False) -> None:
        self.opts = dict(opts)
        self.name = f"{socket.gethostname()}:{os.getpid()}{':gpu' if gpu else ''}"
        self.runner = Runner(batch_options(self.opts), Models(gpu=gpu))
        self.runner.models.warm(self.runner.config)

    def pid(self) -> int:
        return os.getpid()

    def process(self, task: Task, attempt: int = 1) -> BatchOutcome:
        try:
            runner = self.runner.with_options(batch_options({**self.opts, **task.options})) if task.options \
                else self.runner
            dst = Path(task.output)
            dst.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            base, _ = runner.file(Path(task.input), dst)
            seconds = time.perf_counter() - t0
        except KeyboardInterrupt:
            # Ctrl-C (the driver's process group) outside the frame loop, which says what it kept itself: while
            # the output was being opened, the models set up. Said here too: under load the driver's own
            # "interrupted" line came alone, as if this worker had been lost (a test in a clean-clone CI)
            log.warning("interrupted: %s before its frames were written", task.input)
            return failed(task, "interrupted", attempt, self.name)
        except StreamdeidError as exc:  # a manifest row's options
            return failed(task, str(exc), attempt, self.name)
        except Exception as exc:  # a bug of ours on this file: record it, do the others
            log.info("internal error on %s", task.input, exc_info=True)
            return failed(task, error_line(exc), attempt, self.name)
        fields = {k: getattr(base, k) for k in FileOutcome.__dataclass_fields__}
        if base.status == OK:
            fields["seconds"] = round(seconds, 3)  # the whole file: opening and model set-up included
        fps = round(base.frames / seconds, 2) if seconds > 0 and base.frames else 0.0
        return BatchOutcome(**fields, fps=fps, attempts=attempt, worker=self.name)
