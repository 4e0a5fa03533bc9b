"""Train the stages one after another within a time budget, then export:
``python -m training.plan --data PREPARED --run RUN --minutes reconstruct=11,disentangle=4,anonymize=5``.

For a lent GPU held for a fixed time: each stage trains for its minutes (``python -m
training STAGE --minutes M``, which writes a checkpoint when the time is up), starts from
the newest checkpoint of the stage before, and resumes its own newest checkpoint if the
run dir already has one (so the plan can be started again after an interruption).
``--config`` and ``--preset`` go to every stage; ``export`` runs last unless ``--no-export``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import cli
from .config import PRESET_NAMES, TRAIN_STAGES
from .trainer import latest_state

STEPS_UNBOUNDED = 10**9  # the time budget, not a step count, ends each stage


def parse_minutes(text: str) -> list[tuple[str, float]]:
    """``"reconstruct=11,disentangle=4"`` -> [("reconstruct", 11.0), ("disentangle", 4.0)]."""
    plan = []
    for item in text.split(","):
        stage, _, minutes = item.partition("=")
        if stage not in TRAIN_STAGES or not minutes:
            raise ValueError(f"--minutes: {item!r} is not STAGE=MINUTES with a training stage")
        try:
            value = float(minutes)
        except ValueError:
            value = float("nan")
        if not 0 < value < 10_000:  # (nan too: a stage with no time limit ran unbounded)
            raise ValueError(f"--minutes: {item!r}: MINUTES must be a number over 0")
        plan.append((stage, value))
    return plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.plan", description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="prepared dataset dir")
    ap.add_argument("--run", required=True, help="experiment root")
    ap.add_argument("--minutes", required=True, help="STAGE=MINUTES,... in training order")
    ap.add_argument("--config", help="JSON file deep-merged over the preset, for every stage")
    ap.add_argument("--preset", default="cpu-small", choices=PRESET_NAMES,
                    help="the configuration every stage starts from (training/config.py)")
    ap.add_argument("--init", default="none", help="the first stage's starting weights (default: random)")
    ap.add_argument("--out", help="export: output dir (default RUN/weights, which a resumed plan replaces)")
    ap.add_argument("--overwrite", action="store_true", help="export: replace weights already in --out")
    ap.add_argument("--no-export", action="store_true")
    args = ap.parse_args(argv)
    try:
        plan = parse_minutes(args.minutes)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    common = ["--data", args.data, "--run", args.run, "--preset", args.preset,
              *(["--config", args.config] if args.config else [])]
    for i, (stage, minutes) in enumerate(plan):
        t0 = time.time()
        argv_stage = [stage, *common, "--minutes", str(minutes), "--steps", str(STEPS_UNBOUNDED)]
        if latest_state(Path(args.run) / stage) is not None:
            argv_stage.append("--resume")
        elif i == 0:
            argv_stage += ["--init", args.init]
        rc = cli.main(argv_stage)
        if rc:
            return rc
        cli._log(f"plan: {stage} took {(time.time() - t0) / 60:.1f} min")
    if not args.no_export:
        # the run's own weights folder is the plan's to replace (a resumed plan exports again); --out is the user's
        replace = args.overwrite or not args.out
        return cli.main(["export", "--run", args.run, *(["--out", args.out] if args.out else []),
                         *(["--overwrite"] if replace else [])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
