"""Seconds per training iteration of every stage: ``python -m training.timing --data PREPARED [--resolution 64]``.

Runs ``--steps`` steps of each stage from random weights in a scratch run dir
and prints the mean wall time of all but the first step (one JSON line per stage).
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="prepared dataset dir")
    ap.add_argument("--preset", default="cpu-small")
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stages", default="stylegan2,e4e,reconstruct,disentangle,anonymize")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        cfgfile = f"{tmp}/c.json"
        with open(cfgfile, "w") as f:
            json.dump({"resolution": args.resolution, "batch": args.batch, "threads": args.threads,
                       "log_every": 1000, "sample_every": 0, "ckpt_every": 10**9, "ckpt_minutes": 1e9}, f)
        for name in args.stages.split(","):
            cfg = resolve(args.preset, cfgfile)
            cfg.stages[name].r1_every = 2  # include R1 steps in the average (every other step)
            trainer = STAGE_CLASSES[name](cfg, f"{tmp}/run", args.data, init="none", log=lambda m: None)
            times = []
            for _ in range(args.steps):
                t0 = time.time()
                trainer.run(cfg.stages[name].steps, stop_after=1)
                times.append(time.time() - t0)
            print(json.dumps({"stage": name, "resolution": args.resolution, "batch": args.batch,
                              "threads": torch.get_num_threads(), "s_per_it": float(np.mean(times[1:])),
                              "first_s": times[0]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
