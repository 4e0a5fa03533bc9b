"""The batch driver: collect and shard the inputs, keep the workers busy, retry, report."""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..files import refuse_clobbering
from ..run.outcome import FAILED, INTERNAL_ERROR, OK, SKIPPED, summary_line, write_report
from ..redact import redact
from ..types import StreamdeidError
from .inputs import Task, collect_tasks, shard
from .worker import BatchOutcome, failed

log = logging.getLogger(__name__)

REPORT_NAME = "streamdeid-batch"
FLUSH_SECONDS = 15.0  # the report is rewritten this often while the batch runs (a killed driver loses little)
WORKER_LOST = "worker lost"  # how a report's error line starts when the worker died on the file


@dataclass
class BatchResult:
    outcomes: list[BatchOutcome]
    report: Path
    seconds: float
    pool: str
    interrupted: bool = False
    retried: int = 0  # attempts that were retried (lost workers and unexpected errors)
    totals: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        t = self.totals
        rate = f"{t['files_per_minute']:.1f} files/min, {t['frames_per_second']:.1f} frames/s"
        earlier = sum(o.frames for o in self.outcomes if o.status == SKIPPED)  # figures of the runs that made them
        of_them = f" ({earlier} of them from the skipped files' earlier runs)" if earlier else ""
        return (f"{len(self.outcomes)} files: {summary_line(self.outcomes)}"
                f"{f' ({self.retried} retried)' if self.retried else ''}; {t['frames']} frames{of_them}, "
                f"{t['faces']} faces, {t['tracks']} tracks in {self.seconds:.1f} s ({rate}) on {self.pool}")


def report_paths(out_dir: Path, report: str | None, shard_index: int | None, shard_count: int | None
                 ) -> tuple[Path, Path]:
    """(JSON, CSV) report paths. A shard writes its own (shards of one batch run at the same time)."""
    if report is not None:
        p = Path(report)
    else:
        suffix = f".shard-{shard_index}-of-{shard_count}" if shard_count else ""
        p = out_dir / f"{REPORT_NAME}{suffix}.json"
    return (p.with_suffix(".json"), p.with_suffix(".csv")) if p.suffix.lower() in (".json", ".csv") else \
        (p, p.with_name(p.name + ".csv"))


def run_batch(sources: list[str], out_dir: str | Path, opts: dict[str, Any], *, ray: str | None = None,
              workers: int | None = None, cpus_per_worker: float = 1.0, shard_index: int | None = None,
              shard_count: int | None = None, retries: int = 2, report: str | None = None,
              progress: bool = True, run_params=None) -> BatchResult:
    """Anonymize every file of ``sources`` into ``out_dir`` (see ``streamdeid batch --help``)."""
    out = Path(out_dir)
    tasks = collect_tasks(sources, out, run_params)
    if shard_count is not None or shard_index is not None:
        if shard_count is None or shard_index is None:
            raise StreamdeidError("--shard-index and --shard-count go together")
        tasks = shard(tasks, shard_index, shard_count)
    from ..run import Runner, batch_options

    json_path, csv_path = report_paths(out, report, shard_index, shard_count)
    # a bad option, a missing model or key fails here, before any worker starts (the key is created once, here)
    keyed = Runner(batch_options(opts))
    result = BatchResult([], json_path, 0.0, "no worker")
    failed = True  # (an exception, Ctrl-C included, too)
    try:
        _drive(result, tasks, out, opts, ray, workers, cpus_per_worker, retries, csv_path, progress)
        failed = result.interrupted or any(o.status == FAILED for o in result.outcomes)
    finally:
        if failed:  # a key made for a batch that kept no vault
            keyed.drop_new_key([Path(t.output) for t in tasks])
    return result


def _drive(result: BatchResult, tasks: list[Task], out: Path, opts: dict[str, Any], ray: str | None,
           workers: int | None, cpus_per_worker: float, retries: int, csv_path: Path, progress: bool) -> None:
    """The batch's files through a pool of workers into ``result`` (its outcomes, reports written on the way
    and at the end, also when it stops)."""
    json_path = result.report
    # the reports are rewritten by every run of the batch, but never over what it reads, nor over a file
    # that is no report without --overwrite
    reads = [("key file", opts.get("key_file"))] + [("input", t.input) for t in tasks]
    refuse_clobbering(reads, [("report", json_path), ("CSV report", csv_path)], overwrite=bool(opts.get("overwrite")),
                      rewritten=("report", "CSV report"))
    out.mkdir(parents=True, exist_ok=True)
    previous = _previous(json_path)
    t0 = time.perf_counter()
    outcomes: dict[str, BatchOutcome] = {}
    pool = _pool(opts, ray, workers if workers else min(len(tasks), os.cpu_count() or 1) or 1, cpus_per_worker)
    result.pool = pool.description if pool else "no worker"
    bar = tqdm(total=len(tasks), unit="file", disable=not progress, dynamic_ncols=True, desc="batch")
    last_flush = time.monotonic()
    try:
        for task in tasks:
            if task.refused:
                log.warning("%s: %s", task.input, task.refused)
                outcomes[task.key] = failed(task, task.refused, 0)
                bar.update(1)
        queue = deque((t, 1) for t in tasks if not t.refused)
        inflight = 0
        while queue or inflight:
            inflight += pool.assign(queue)
            for task, attempt, got in pool.wait():
                inflight -= 1
                outcome = got if isinstance(got, BatchOutcome) else _lost(task, got, attempt)
                if outcome.status == FAILED and attempt <= retries and _may_pass_again(outcome):
                    log.warning("%s: attempt %d failed (%s); retrying", task.input, attempt, outcome.error)
                    result.retried += 1
                    queue.append((task, attempt + 1))
                    continue
                outcomes[task.key] = _with_previous(outcome, previous)
                bar.update(1)
                bar.set_postfix(frames=sum(o.frames for o in outcomes.values()), failed=sum(
                    o.status == FAILED for o in outcomes.values()), refresh=False)
            if time.monotonic() - last_flush > FLUSH_SECONDS:
                _write(result, tasks, outcomes, json_path, csv_path, t0, interrupted=True)
                last_flush = time.monotonic()
    except KeyboardInterrupt:
        result.interrupted = True
        raise
    finally:
        bar.close()
        pool.close()
        _write(result, tasks, outcomes, json_path, csv_path, t0, interrupted=result.interrupted)


def _lost(task: Task, exc: BaseException, attempt: int) -> BatchOutcome:
    lines = str(exc).strip().splitlines()
    return failed(task, f"{WORKER_LOST}: {type(exc).__name__}{': ' + lines[0] if lines else ''}", attempt)


def _may_pass_again(outcome: BatchOutcome) -> bool:
    """A lost worker (killed, out of memory, a node gone) or an unexpected error may not happen again; a file
    the run refused (missing, corrupt, not a video, a bad manifest row) fails the same way every time."""
    return (outcome.error or "").startswith((WORKER_LOST, INTERNAL_ERROR))


def _pool(opts: dict[str, Any], ray: str | None, workers: int, cpus_per_worker: float):
    from .pools import LocalPool, RayPool

    if ray is not None:
        return RayPool(opts, ray, workers if workers else None, cpus_per_worker)
    return LocalPool(opts, workers)


def _write(result: BatchResult, tasks: list[Task], outcomes: dict[str, BatchOutcome], json_path: Path,
           csv_path: Path, t0: float, *, interrupted: bool) -> None:
    """Both reports, in input order; files not done yet are left out (``interrupted`` says so)."""
    result.outcomes = [outcomes[t.key] for t in tasks if t.key in outcomes]
    result.seconds = time.perf_counter() - t0
    frames = sum(o.frames for o in result.outcomes if o.status == OK)
    done = sum(o.status == OK for o in result.outcomes)
    result.totals = {"frames": sum(o.frames for o in result.outcomes), "faces": sum(o.faces for o in result.outcomes),
                     "tracks": sum(o.tracks for o in result.outcomes), "files_per_minute":
                     60 * done / result.seconds if result.seconds else 0.0,
                     "frames_per_second": frames / result.seconds if result.seconds else 0.0}
    write_report(json_path, result.outcomes, interrupted=interrupted or len(result.outcomes) < len(tasks))
    try:  # the batch's own figures beside the per-file totals write_report keeps
        doc = json.loads(json_path.read_text())
        doc["batch"] = {"wall_seconds": round(result.seconds, 3), "pool": result.pool, "retried": result.retried,
                        "files_per_minute": round(result.totals["files_per_minute"], 2),
                        "frames_per_second": round(result.totals["frames_per_second"], 2)}
        tmp = json_path.with_name(f".{json_path.name}.{os.getpid()}.tmp")
        tmp.write_text(redact(json.dumps(doc, indent=2)) + "\n")
        os.replace(tmp, json_path)
        tmp = csv_path.with_name(f".{csv_path.name}.{os.getpid()}.tmp")
        with tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=[f.name for f in dataclasses.fields(BatchOutcome)])
            writer.writeheader()
            writer.writerows({k: redact(v) if isinstance(v, str) else v for k, v in dataclasses.asdict(o).items()}
                            for o in result.outcomes)
        os.replace(tmp, csv_path)
    except OSError as exc:
        raise StreamdeidError(f"cannot write the report {csv_path}: {exc.strerror}") from None


def _previous(json_path: Path) -> dict[str, dict]:
    """The entries of the report a previous run of this batch left, by output: a skipped file keeps the
    figures of the run that made it."""
    try:
        return {f["output"]: f for f in json.loads(json_path.read_text())["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _with_previous(outcome: BatchOutcome, previous: dict[str, dict]) -> BatchOutcome:
    before = previous.get(outcome.output)
    if outcome.status != SKIPPED or not before or before.get("status") not in (OK, SKIPPED):
        return outcome
    return dataclasses.replace(outcome, **{k: before[k] for k in ("frames", "faces", "tracks", "fps")
                                           if k in before})
