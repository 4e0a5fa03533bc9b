"""One worker of a batch: loads the models once, then anonymizes whole files through the public API.

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

from ..folder import FAILED, SKIPPED, FileOutcome, output_is_complete
from ..types import StreamdeidError
from .inputs import Task
from .options import build_config, with_overwrite

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
    """``opts``: run's options (see ``options.py``) for every file; ``gpu``: run the DBAF generator on
    this worker's GPU. Building one loads the models: a failure here (a missing model) fails fast."""

    def __init__(self, opts: dict[str, Any], gpu: bool = False) -> None:
        self.opts = dict(opts)
        self.gpu = gpu
        self.name = f"{socket.gethostname()}:{os.getpid()}{':gpu' if gpu else ''}"
        from . import models

        models.install(gpu=gpu)
        models.warm(build_config(self.opts))

    def pid(self) -> int:
        return os.getpid()

    def process(self, task: Task, attempt: int = 1) -> BatchOutcome:
        try:
            return self._process(task, attempt)
        except StreamdeidError as exc:
            return failed(task, str(exc), attempt, self.name)
        except Exception as exc:  # a bug of ours on this file: record it, do the others
            log.info("internal error on %s", task.input, exc_info=True)
            first = (str(exc).strip().splitlines() or [""])[0]
            return failed(task, f"internal error: {type(exc).__name__}: {first}", attempt, self.name)

    def _process(self, task: Task, attempt: int) -> BatchOutcome:
        from ..api import anonymize, file_outcome
        from ..vault_glue import vault_path_for

        opts = {**self.opts, **task.options}
        config = build_config(opts)
        dst = Path(task.output)
        vault = bool(opts.get("key_file")) and not opts.get("no_vault") and not task.is_image
        vault_path = vault_path_for(dst) if vault else None
        if not config.output.overwrite:
            if output_is_complete(dst, vault_path):
                return BatchOutcome(task.input, task.output, str(vault_path) if vault_path else None, SKIPPED,
                                    attempts=attempt, worker=self.name)
            if dst.exists() or (vault_path is not None and vault_path.exists()):
                log.warning("%s: the output a previous run left is incomplete; redoing it", dst)
                config = with_overwrite(config)
        dst.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        result = anonymize(task.input, dst, config, key_file=opts.get("key_file"), vault=vault,
                           store_crops=not opts.get("no_crops"))
        base = file_outcome(task.input, result)
        seconds = time.perf_counter() - t0
        fields = {k: getattr(base, k) for k in FileOutcome.__dataclass_fields__}
        fields["seconds"] = round(seconds, 3)
        return BatchOutcome(**fields, fps=round(base.frames / seconds, 2) if seconds > 0 else 0.0,
                            attempts=attempt, worker=self.name)
