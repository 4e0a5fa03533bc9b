"""Batch runs: whole archives of files spread over a pool of workers (Ray, or a local process pool).

    streamdeid batch /archive -o /anon --key-file k.bin               # a local pool on this machine
    streamdeid batch /archive -o /anon --key-file k.bin --ray auto    # an existing Ray cluster
    streamdeid batch files.csv -o /anon --shard-index 3 --shard-count 8   # one share, no cluster at all

The unit of work is one whole file (tracks, the vault and the audio need the whole file). Each worker
holds one ``streamdeid.run.Runner`` (models loaded once) and runs file after file through it, as a folder
run does, so every file gets what ``streamdeid run`` gives it: the batch's one master key, its own video id
and vault. A file whose output and vault are complete and verified (``run.outcome.output_is_complete``)
is skipped, a failed one is retried a bounded number of times: rerunning the same command finishes a job
that a kill (of the driver or of a worker) interrupted.

Options are ``run``'s, mapped by ``streamdeid.run.options``. Modules: ``inputs`` (files, folders, manifests, shards),
``worker`` (one file), ``pools`` (local process pool, Ray actors), ``driver`` (retries, progress, report).
Ray is optional (``pip install 'streamdeid[cluster]'``); only ``--ray`` needs it.
"""

from .driver import BatchResult, run_batch
from .inputs import Task, collect_tasks, shard
from .worker import BatchOutcome

__all__ = ["BatchOutcome", "BatchResult", "Task", "collect_tasks", "run_batch", "shard"]
