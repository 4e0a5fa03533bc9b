"""``streamdeid batch SRC... -o OUT_DIR``: the command, built on ``run``'s own options."""

from __future__ import annotations

import sys

import click

from ..cli_types import FiniteRange
from ..run.options import run_params


def batch_command(run: click.Command) -> click.Command:
    params = run_params(run)

    @click.command("batch")
    @click.argument("sources", metavar="SRC...", nargs=-1, required=True)
    @click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
                  help="Output folder: a folder's files keep their relative paths, a file or manifest line its name.")
    @click.option("--ray", "ray_address", metavar="auto|ADDRESS|local", default=None,
                  help="Run on Ray: auto or host:port joins an existing cluster (`ray start --head`), local starts "
                       "one in this process. Without it: a local pool of processes (no Ray needed).")
    @click.option("--workers", type=click.IntRange(min=1), default=None,
                  help="Workers (each loads the models once). Default: the cluster's CPUs with --ray, else this "
                       "machine's CPUs (at most one per file).")
    @click.option("--cpus-per-worker", type=FiniteRange(min=0.1), default=1.0, show_default=True,
                  help="--ray: CPUs Ray reserves for each CPU actor.")
    @click.option("--shard-index", type=click.IntRange(min=0), default=None,
                  help="Do only this share of the inputs (0-based; with --shard-count): for a Kubernetes Indexed "
                       "Job, a Slurm array or xargs, no cluster needed. Shards are a hash of each output path.")
    @click.option("--shard-count", type=click.IntRange(min=1), default=None, help="Number of shards.")
    @click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
                  help="Attempts after the first for a file whose worker was lost or that failed on an unexpected "
                       "error; then reported. A file the run refuses (missing, corrupt, not a video) is not "
                       "retried.")
    @click.option("--report", type=click.Path(dir_okay=False), default=None,
                  help="Report path (JSON, and CSV beside it). Default: OUT_DIR/streamdeid-batch.json and .csv "
                       "(per shard: streamdeid-batch.shard-I-of-N.json).")
    def batch(sources: tuple[str, ...], out_dir: str, ray_address: str | None, workers: int | None,
              cpus_per_worker: float, shard_index: int | None, shard_count: int | None, retries: int,
              report: str | None, **opts) -> None:
        """Anonymize whole archives: files, folders (recursive) and manifests, on a pool of workers.

        \b
        SRC: a file, a folder, or a manifest: .txt/.list (one path per line)
        or .csv (an 'input' column, optional 'output' and per-file options
        such as anonymizer, detect-every, crf). Same options as `run`.

        Resumable: a file whose output (and vault) is complete and verified
        is skipped; a file whose worker died is retried --retries times, then
        reported (a corrupt or missing file is reported at once).
        Rerun the same command after a kill to finish the job.

        \b
          streamdeid batch /archive -o /anon --key-file k.bin
          streamdeid batch /archive -o /anon --key-file k.bin --ray auto
          streamdeid batch /archive -o /anon --shard-index 0 --shard-count 4
        """
        from ..run.outcome import FAILED
        from ..redact import redact
        from .driver import run_batch

        result = run_batch(list(sources), out_dir, opts, ray=ray_address, workers=workers,
                           cpus_per_worker=cpus_per_worker, shard_index=shard_index, shard_count=shard_count,
                           retries=retries, report=report, progress=not opts.get("no_progress"),
                           run_params=params)
        click.echo(f"streamdeid: batch: {result.line()} -> {out_dir}", err=True)
        click.echo(f"streamdeid: report {result.report} (and .csv)", err=True)
        for o in result.outcomes:
            if o.status == FAILED:
                click.echo(f"streamdeid: failed: {redact(f'{o.input}: {o.error}')}", err=True)
        if any(o.status == FAILED for o in result.outcomes):
            sys.exit(1)

    batch.params.extend(params)
    return batch


__all__ = ["batch_command"]
