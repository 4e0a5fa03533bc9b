"""Backends that run the exported DBAF generator: ONNX Runtime, torch, TensorRT.

Each backend module imports its engine lazily, so ``streamdeid.backends`` itself
needs neither torch nor TensorRT.

    backend = create_backend("onnxrt", "dbaf64.onnx", intra_op_threads=2)
    y = backend.run(x, p)   # x [B,3,R,R] float32 in [-1,1], p [B,L,D] float32
"""

from __future__ import annotations

import importlib
from pathlib import Path

from .base import BATCH_AXIS_NAME, INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE, Backend

#: backend name -> (module, class). The model file each expects: .onnx, .safetensors, .engine/.plan.
BACKENDS = {
    "onnxrt": ("onnxrt", "OnnxRuntimeBackend"),
    "torch": ("torch", "TorchBackend"),
    "tensorrt": ("tensorrt", "TensorRTBackend"),
}

__all__ = ["Backend", "BACKENDS", "create_backend", "INPUT_IMAGE", "INPUT_KEY", "OUTPUT_IMAGE", "BATCH_AXIS_NAME"]


def create_backend(name: str, model_path: str | Path, **kwargs) -> Backend:
    """Instantiate backend ``name`` (one of ``BACKENDS``) on ``model_path``; kwargs go to its constructor."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose from {sorted(BACKENDS)}")
    module_name, cls_name = BACKENDS[name]
    module = importlib.import_module(f".{module_name}", __name__)
    return getattr(module, cls_name)(model_path, **kwargs)
