"""Seconds per training iteration of every stage: ``python -m training.timing --data PREPARED [--resolution 64]``.

Runs ``--steps`` steps of each stage from random weights in a scratch run dir
and prints the mean wall time of all but the first step (one JSON line per stage).
``--config FILE`` merges a training config under the timing's own overrides (``--preset gpu-lease``
times the lease's layout); ``--profile`` also counts the top-level ATen calls of one step
(``torch.profiler`` on the CPU): each is at least one kernel launch on a GPU, so the count
bounds how fast a launch-bound step can be there.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import torch

from .config import resolve
from .stages import STAGE_CLASSES


def count_aten_calls(fn) -> int:
    """Top-level ``aten::`` calls made while ``fn()`` runs (calls nested inside another op not counted)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and _top_level(e))


def _top_level(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:  # an aten op under a Python-level/user scope still counts
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def time_stages(preset: str, over: dict, stages: list[str], data: str, steps: int, profile: bool = False):
    """Yield one record per stage: mean s/it of all but the first of ``steps`` steps from random
    weights, R1 included every other step; ``over`` is merged over the preset (config fields)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfgfile = f"{tmp}/c.json"
        with open(cfgfile, "w") as f:
            json.dump({**over, "log_every": 1000, "sample_every": 0, "ckpt_every": 10**9, "ckpt_minutes": 1e9}, f)
        for name in stages:
            cfg = resolve(preset, cfgfile)
            cfg.stages[name].r1_every = 2  # include R1 steps in the average (every other step)
            trainer = STAGE_CLASSES[name](cfg, f"{tmp}/run", data, init="none", log=lambda m: None)
            times = []
            for _ in range(steps):
                t0 = time.time()
                trainer.run(cfg.stages[name].steps, stop_after=1)  # ends with a flush: the GPU has finished
                times.append(time.time() - t0)
            rec = {"stage": name, "resolution": cfg.resolution, "batch": cfg.batch, "device": str(trainer.device),
                   "amp": cfg.amp, "channels_last": cfg.channels_last, "threads": torch.get_num_threads(),
                   "s_per_it": float(np.mean(times[1:] or times)), "first_s": times[0]}
            if trainer.device.type == "cuda":
                rec["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
                torch.cuda.reset_peak_memory_stats()
            if profile:
                rec["aten_calls_per_step"] = count_aten_calls(lambda: trainer.run(cfg.stages[name].steps, stop_after=1))
            yield rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="prepared dataset dir")
    ap.add_argument("--preset", default="cpu-small")
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stages", default="stylegan2,e4e,reconstruct,disentangle,anonymize")
    ap.add_argument("--config", help="training config JSON merged first (the timing's flags win)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--amp", choices=("off", "bf16"), help="override the config's autocast")
    ap.add_argument("--profile", action="store_true", help="count the top-level ATen calls of one step")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    over = json.loads(open(args.config, encoding="utf-8").read()) if args.config else {}
    over.update({"resolution": args.resolution, "batch": args.batch, "threads": args.threads, "device": args.device})
    if args.amp:
        over["amp"] = args.amp
    for rec in time_stages(args.preset, over, args.stages.split(","), args.data, args.steps, args.profile):
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
