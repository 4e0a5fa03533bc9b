"""``python -m training STAGE --data DIR --run RUN_DIR [--config FILE] [--preset NAME] [--resume] [--steps N]``

RUN_DIR is the experiment root: ``prepare`` writes ``RUN_DIR/data``, every
training stage writes ``RUN_DIR/STAGE`` and by default starts from the newest
checkpoint of the stage before it (stylegan2 -> e4e -> disentangle -> anonymize,
or reconstruct -> disentangle -> anonymize), ``export`` writes ``RUN_DIR/weights``
unless ``--out`` is given. Multi-GPU: ``torchrun --nproc_per_node N -m training ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .config import PRESET_NAMES, STAGES, TrainConfig, resolve


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m training", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__ + "\nAlso: python -m training composites --help (the composite donor bank, "
                                                  "docs/composite.md; no run dir, no torch).\n")
    ap.add_argument("stage", choices=STAGES, help="what to do (and `composites`, which has options of its own)")
    ap.add_argument("--data", help="prepare: folder of face photos; training: that folder or a prepared dir")
    ap.add_argument("--run", "--run-dir", dest="run", required=True,
                    help="experiment root, outside the repository (--run-dir: the same, for torchrun)")
    ap.add_argument("--config", help="JSON file deep-merged over the preset")
    ap.add_argument("--preset", choices=PRESET_NAMES, default="cpu-small",
                    help="the configuration to start from (training/config.py; default: cpu-small)")
    ap.add_argument("--resume", action="store_true", help="continue RUN/STAGE from its newest checkpoint")
    ap.add_argument("--steps", type=at_least(1), help="total steps of this stage (overrides the config)")
    ap.add_argument("--minutes", type=positive,
                    help="stop this stage after training that long in this call (a checkpoint is written)")
    ap.add_argument("--init", help="starting weights: a stage dir, state .pt or generator .safetensors; "
                                   "'none' for random weights (default: the previous stage in RUN)")
    ap.add_argument("--threads", type=at_least(1), help="torch intra-op threads (default: the preset's)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), help="default: the preset's (auto: CUDA if any)")
    ap.add_argument("--out", help="prepare: output dir (default RUN/data); export: default RUN/weights")
    ap.add_argument("--precision", choices=("fp16", "fp32"), default="fp16",
                    help="export: how the weights are stored (fp16 halves the shipped file)")
    ap.add_argument("--limit", type=at_least(0), default=0, help="prepare: only the first N files (0: all)")
    ap.add_argument("--resolution", type=between(16, 1024),
                    help="prepare: crop size, 16-1024 px (default: the config's resolution)")
    ap.add_argument("--overwrite", action="store_true",
                    help="prepare and export: replace what an earlier call wrote to the same place")
    return ap


def at_least(low: int):
    """An argparse type: an int of ``low`` or more."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    return parse


def between(low: int, high: int):
    """An argparse type: an int from ``low`` to ``high``."""
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low}-{high}, got {value}")
        return value
    return parse


def positive(text: str) -> float:
    """An argparse type: a finite number over 0 (nan and inf ran a stage without a limit)."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number over 0, got {text}")
    return value


def error_line(exc: BaseException) -> str:
    """A refusal of ours (ValueError, or an OSError we raised with a message) or the file system's, as one line."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"error: {exc.filename}: {exc.strerror}"
    return f"error: {exc}"


def load_config(args, stage_dir: Path) -> TrainConfig:
    saved = stage_dir / "config.json"
    if args.resume and saved.is_file():
        cfg = TrainConfig.from_dict(json.loads(saved.read_text(encoding="utf-8")))
        if args.steps is not None:
            cfg.stages[args.stage].steps = args.steps
    else:
        cfg = resolve(args.preset, args.config, args.steps, args.stage)
    if args.threads is not None:
        cfg.threads = args.threads
    if args.device is not None:
        cfg.device = args.device
    return cfg


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _stage(args)
    except (OSError, ValueError) as exc:  # a missing folder, nothing to train on, an output that exists
        print(error_line(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C during a step, or one outside training (prepare, export)
        print("interrupted", file=sys.stderr)
        return 130


def _stage(args) -> int:
    run = Path(args.run)
    if args.stage == "export":
        from .export import export

        export(run, args.out, init=args.init, precision=args.precision, overwrite=args.overwrite, log=_log)
        return 0
    if not args.data:
        print("--data is required for this stage", file=sys.stderr)
        return 2
    if args.stage == "prepare":
        from .data import prepare

        cfg = resolve(args.preset, args.config)
        prepare(args.data, args.out or run / "data", args.resolution or cfg.resolution, limit=args.limit,
                overwrite=args.overwrite, log=_log)
        return 0

    import torch

    from .data import find_prepared
    from .stages import INIT_CHAIN, STAGE_CLASSES
    from .trainer import latest_state

    stage_dir = run / args.stage
    cfg = load_config(args, stage_dir)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    data_dir = find_prepared(args.data, run)
    init = args.init
    resuming = args.resume and latest_state(stage_dir) is not None
    if args.resume and not resuming:
        _log(f"{args.stage}: --resume given but {stage_dir} has no checkpoint; starting fresh")
    if not resuming and init is None:
        for prev in INIT_CHAIN[args.stage]:
            if latest_state(run / prev) is not None:
                init = str(run / prev)
                break
        else:
            if INIT_CHAIN[args.stage]:
                print(f"{args.stage}: no checkpoint of {INIT_CHAIN[args.stage]} under {run}; train that first, "
                      "or pass --init PATH (or --init none for random weights)", file=sys.stderr)
                return 2
    if not resuming and latest_state(stage_dir) is not None:
        print(f"{stage_dir} already holds checkpoints: pass --resume, or choose another --run", file=sys.stderr)
        return 2
    trainer = STAGE_CLASSES[args.stage](cfg, run, data_dir, init=None if resuming else init, log=_log)
    if resuming:
        trainer.resume()
    _log(f"{args.stage}: {len(trainer.data)} training crops, step {trainer.step} -> {cfg.stages[args.stage].steps}, "
         f"batch {cfg.batch} x {trainer.dist.world}, {torch.get_num_threads()} thread(s), {trainer.device}")
    trainer.run(minutes=args.minutes)
    _log(f"{args.stage}: stopped at step {trainer.step}; checkpoints in {stage_dir / 'checkpoints'}")
    if trainer.interrupted:
        _log(f"{args.stage}: interrupted; --resume continues from step {trainer.step}")
        return 130
    return 0
