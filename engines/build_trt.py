"""Build an FP16 TensorRT engine from the exported DBAF ONNX graph (TensorRT >= 10 Python API).

    python engines/build_trt.py dbaf64.onnx dbaf64.engine --min-batch 1 --opt-batch 8 --max-batch 32

Needs a CUDA GPU and the ``tensorrt`` package; never run on the CPU-only
development machines. The engine keeps float32 I/O (``x``, ``p`` -> ``y``) and
runs internally in FP16; one optimisation profile covers batches min..max.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from streamdeid.backends.base import INPUT_IMAGE, INPUT_KEY


def build_engine(onnx_path: str | Path, engine_path: str | Path, *, min_batch: int = 1, opt_batch: int = 8,
                 max_batch: int = 32, fp16: bool = True, workspace_gib: float = 2.0) -> Path:
    if not 1 <= min_batch <= opt_batch <= max_batch:
        raise ValueError("need 1 <= min_batch <= opt_batch <= max_batch")
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):  # implicit in TensorRT 10
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "\n".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {onnx_path}:\n{errors}")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gib * (1 << 30)))
    if fp16:
        if not builder.platform_has_fast_fp16:
            logger.log(trt.Logger.WARNING, "this GPU has no fast FP16; building anyway")
        config.set_flag(trt.BuilderFlag.FP16)

    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        if tensor.name not in (INPUT_IMAGE, INPUT_KEY):
            raise ValueError(f"unexpected network input {tensor.name!r}")
        rest = tuple(tensor.shape)[1:]  # static non-batch dims
        profile.set_shape(tensor.name, (min_batch, *rest), (opt_batch, *rest), (max_batch, *rest))
    config.add_optimization_profile(profile)

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT engine build failed")
    engine_path = Path(engine_path)
    engine_path.write_bytes(bytes(serialized))
    return engine_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("onnx", type=Path)
    ap.add_argument("engine", type=Path)
    ap.add_argument("--min-batch", type=int, default=1)
    ap.add_argument("--opt-batch", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--fp32", action="store_true", help="do not enable FP16 kernels")
    ap.add_argument("--workspace-gib", type=float, default=2.0)
    ap.add_argument("--overwrite", action="store_true", help="replace an existing engine file")
    args = ap.parse_args(argv)
    if not args.onnx.is_file():
        ap.exit(2, f"error: {args.onnx}: no such ONNX file (python engines/export_onnx.py writes one)\n")
    if args.engine.exists() and not args.overwrite:
        ap.exit(2, f"error: {args.engine} exists; pass --overwrite to replace it\n")
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        ap.exit(2, "error: TensorRT is not installed (pip install tensorrt, on a machine with an NVIDIA GPU; "
                   "docs/gpu.md)\n")
    path = build_engine(args.onnx, args.engine, min_batch=args.min_batch, opt_batch=args.opt_batch,
                        max_batch=args.max_batch, fp16=not args.fp32, workspace_gib=args.workspace_gib)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
