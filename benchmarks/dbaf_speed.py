"""DBAF generator speed on CPU: milliseconds per face, ONNX Runtime vs torch, random weights.

    python benchmarks/dbaf_speed.py --resolutions 64 128 --batches 1 8 32 --threads 2
    python benchmarks/dbaf_speed.py --e2e ../shared/media/head-pose-face-detection-female-and-male.mp4
    python benchmarks/dbaf_speed.py --device cuda --resolutions 64 --batches 1 8 32 128 --repeats 50

``--device cuda`` times only the torch backend, on the GPU (the ONNX column stays CPU-only);
the backend copies each result back to the host, so every timed call includes the transfer.

Exports each cpu-small config to a temporary ONNX file, then times G(x, P)
(median of ``--repeats`` runs after one warm-up). Weights are random: speed only.
``--e2e CLIP`` also runs the whole pipeline (``--anonymizer dbaf``, leak guard
on, ONNX Runtime) on CLIP with the first of ``--resolutions`` and prints the
end-to-end fps and per-stage milliseconds, next to the default blur.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def end_to_end(clip: str, model_path: Path, tmp: Path, threads: int, backend: str = "onnxrt") -> None:
    """fps of the whole pipeline with dbaf (and blur for reference) on ``clip``."""
    from streamdeid.api import anonymize
    from streamdeid.config import PipelineConfig

    for method in ("blur", "dbaf"):
        config = PipelineConfig()
        config.progress = False
        config.anonymize.method = method
        config.anonymize.model_path = str(model_path)
        config.anonymize.backend = backend
        config.anonymize.threads = threads
        s = anonymize(clip, tmp / f"{method}.mp4", config).summary
        stages = " ".join(f"{k}={v / max(s.frames, 1):.1f}" for k, v in s.times.ms.items())
        print(f"e2e {method:>5} ({backend}): {s.frames} frames, {s.faces} faces, {s.fps:.1f} fps "
              f"(ms/frame per stage: {stages}; leak-guard fallbacks {s.leak_fallbacks})", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--resolutions", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--preset", default="cpu-small")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="torch backend device: cpu, cuda (then no ONNX column)")
    ap.add_argument("--e2e", metavar="CLIP", help="also time `run --anonymizer dbaf` end to end on CLIP")
    ap.add_argument("--e2e-backend", default="onnxrt", choices=("onnxrt", "torch"),
                    help="--e2e: the generator's runtime (torch runs on the GPU when there is one)")
    ap.add_argument("--model", help="--e2e: this generator file instead of random weights")
    ap.add_argument("--skip-table", action="store_true", help="with --e2e: only the end-to-end figures")
    args = ap.parse_args(argv)

    import torch

    from streamdeid.backends import create_backend
    from streamdeid.backends.torch import TorchBackend
    from streamdeid.models import DBAFConfig
    from streamdeid.models.dbaf import DBAF, count_parameters
    from streamdeid.models.onnx_export import export_dbaf

    torch.set_num_threads(args.threads)
    if not args.skip_table:
        print(f"threads={args.threads} preset={args.preset} device={args.device} "
              f"(ms per face, median of {args.repeats})")
        print(f"{'R':>5} {'params':>9} {'batch':>5} {'onnxrt':>9} {'torch':>9} {'faces/s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.e2e:
            model = DBAF(DBAFConfig.preset(args.preset, args.resolutions[0])).eval()
            if args.model:
                path = Path(args.model)
            elif args.e2e_backend == "torch":
                from streamdeid.models.io import save_checkpoint

                path = Path(tmp) / "e2e.safetensors"
                save_checkpoint(path, model)
            else:
                path = export_dbaf(model, Path(tmp) / "e2e.onnx")
            end_to_end(args.e2e, path, Path(tmp), args.threads, args.e2e_backend)
        for res in ([] if args.skip_table else args.resolutions):
            model = DBAF(DBAFConfig.preset(args.preset, res)).eval()
            path = export_dbaf(model, Path(tmp) / f"dbaf{res}.onnx")
            on_cpu = args.device == "cpu"
            ort_backend = create_backend("onnxrt", path, intra_op_threads=args.threads) if on_cpu else None
            torch_backend = TorchBackend.from_model(model, device=args.device)
            for b in args.batches:
                rng = np.random.default_rng(0)
                x = rng.uniform(-1, 1, (b, 3, res, res)).astype(np.float32)
                p = rng.standard_normal((b, *model.cfg.key_shape)).astype(np.float32)
                t_ort = _median_ms(lambda: ort_backend.run(x, p), args.repeats) / b if on_cpu else float("nan")
                t_torch = _median_ms(lambda: torch_backend.run(x, p), args.repeats) / b
                print(f"{res:>5} {count_parameters(model):>9,} {b:>5} {t_ort:>9.2f} {t_torch:>9.3f} "
                      f"{1e3 / t_torch:>9.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
