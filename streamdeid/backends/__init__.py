"""Backends that run the exported DBAF generator: ONNX Runtime, torch, TensorRT.

Each backend module imports its engine lazily, so ``streamdeid.backends`` itself
needs neither torch nor TensorRT.

    backend = create_backend("onnxrt", "dbaf64.onnx", intra_op_threads=2)
    y = backend.run(x, p)   # x [B,3,R,R] float32 in [-1,1], p [B,L,D] float32
"""

from __future__ import annotations

from pathlib import Path

from ..registry import BACKENDS, load
from .base import BATCH_AXIS_NAME, INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE, Backend

__all__ = ["Backend", "BACKENDS", "create_backend", "INPUT_IMAGE", "INPUT_KEY", "OUTPUT_IMAGE", "BATCH_AXIS_NAME"]


def create_backend(name: str, model_path: str | Path, **kwargs) -> Backend:
    """Instantiate backend ``name`` (one of ``BACKENDS``) on ``model_path``; kwargs go to its constructor."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose from {sorted(BACKENDS)}")
    return load(BACKENDS[name])(model_path, **kwargs)
