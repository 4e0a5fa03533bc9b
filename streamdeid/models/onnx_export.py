"""Export the DBAF generator G(x, P) to ONNX (opset >= 17, dynamic batch) and check parity.

The library half of ``engines/export_onnx.py`` (that script is its command
line); ``python -m training export`` and ``benchmarks/dbaf_speed.py`` call it
too. Needs the ``train`` extra (torch, onnx).

Graph: inputs ``x`` [B, 3, R, R] (RGB in [-1, 1]) and ``p`` [B, n_latent, w_dim];
output ``y`` [B, 3, R, R] clamped to [-1, 1]. Noise comes from the decoder's
fixed buffers, so the graph is deterministic. Tensor names are the constants in
``streamdeid.backends.base``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from streamdeid.backends.base import BATCH_AXIS_NAME, INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE

from .config import DBAFConfig
from .dbaf import DBAF, DBAFRuntime

DEFAULT_OPSET = 17
PARITY_ATOL = 1e-3


def example_inputs(cfg: DBAFConfig, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, 3, cfg.resolution, cfg.resolution, generator=gen) * 2 - 1  # [B, 3, R, R]
    p = torch.randn(batch, *cfg.key_shape, generator=gen)  # [B, L, D]
    return x, p


def export_dbaf(model: DBAF, out_path: str | Path, *, opset: int = DEFAULT_OPSET, batch: int = 2) -> Path:
    """Trace ``DBAFRuntime(model)`` with a batch of ``batch`` and write a dynamic-batch ONNX file."""
    if opset < 17:
        raise ValueError("opset must be >= 17")
    out_path = Path(out_path)
    runtime = DBAFRuntime(model).eval()
    x, p = example_inputs(model.cfg, batch)
    dyn = {INPUT_IMAGE: {0: BATCH_AXIS_NAME}, INPUT_KEY: {0: BATCH_AXIS_NAME}, OUTPUT_IMAGE: {0: BATCH_AXIS_NAME}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript-exporter deprecation / tracer notes
        torch.onnx.export(
            runtime, (x, p), str(out_path),
            input_names=[INPUT_IMAGE, INPUT_KEY], output_names=[OUTPUT_IMAGE],
            dynamic_axes=dyn, opset_version=opset, do_constant_folding=True, dynamo=False,
        )
    return out_path


def check_parity(model: DBAF, onnx_path: str | Path, *, batch: int = 3, threads: int = 0) -> float:
    """Max |ONNX Runtime - torch| on random inputs of ``batch`` (may differ from the export batch)."""
    from streamdeid.backends.onnxrt import OnnxRuntimeBackend

    x, p = example_inputs(model.cfg, batch, seed=1)
    with torch.inference_mode():
        ref = DBAFRuntime(model).eval()(x, p).numpy()
    got = OnnxRuntimeBackend(onnx_path, intra_op_threads=threads).run(x.numpy(), p.numpy())
    return float(np.abs(got - ref).max())
