"""Export the DBAF generator G(x, P) to ONNX (opset >= 17, dynamic batch) and check parity.

The library half of ``engines/export_onnx.py`` (that script is its command
line); ``python -m training export`` and ``benchmarks/dbaf_speed.py`` call it
too. Needs the ``train`` extra (torch, onnx).

Graph: inputs ``x`` [B, 3, R, R] (RGB in [-1, 1]) and ``p`` [B, n_latent, w_dim];
output ``y`` [B, 3, R, R] clamped to [-1, 1]. Noise comes from the decoder's
fixed buffers, so the graph is deterministic. Tensor names are the constants in
``streamdeid.backends.base``.

A shipped export keeps one copy of the weights: ``export_dbaf(..., fold_constants=False)``
(every initializer is then a state-dict tensor) and ``link_weights`` make the
ONNX file a graph that reads its weights from the safetensors checkpoint beside
it (ONNX external data), fp16 tensors through a Cast to float32 that ONNX
Runtime folds when the session starts.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from streamdeid.backends.base import BATCH_AXIS_NAME, INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE
from streamdeid.files import sha256_file

from .config import DBAFConfig
from .dbaf import DBAF, DBAFRuntime

DEFAULT_OPSET = 17
PARITY_ATOL = 1e-3
#: ONNX metadata of a linked graph: the weights file it reads, and that file's sha256 (so the graph's own
#: sha256, which a vault records, names the weights too)
WEIGHTS_FILE_KEY = "streamdeid.weights_file"
WEIGHTS_SHA256_KEY = "streamdeid.weights_sha256"


def example_inputs(cfg: DBAFConfig, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, 3, cfg.resolution, cfg.resolution, generator=gen) * 2 - 1  # [B, 3, R, R]
    p = torch.randn(batch, *cfg.key_shape, generator=gen)  # [B, L, D]
    return x, p


def export_dbaf(model: DBAF, out_path: str | Path, *, opset: int = DEFAULT_OPSET, batch: int = 2,
                fold_constants: bool = True) -> Path:
    """Trace ``DBAFRuntime(model)`` with a batch of ``batch`` and write a dynamic-batch ONNX file.
    ``fold_constants=False`` keeps the weights as the model's own tensors (for :func:`link_weights`);
    ONNX Runtime folds the rest when it loads the graph."""
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
            dynamic_axes=dyn, opset_version=opset, do_constant_folding=fold_constants, dynamo=False,
        )
    return out_path


def link_weights(onnx_path: str | Path, checkpoint_path: str | Path, *, prefix: str = "model.") -> Path:
    """Rewrite the graph at ``onnx_path`` to read its weights from ``checkpoint_path`` (a safetensors
    checkpoint of the same model, in the same folder) instead of holding a copy.

    Each initializer ``prefix + name`` becomes an external reference to tensor ``name`` of the checkpoint;
    an fp16 tensor is read as fp16 and cast to float32 by a Cast node. The graph must come from
    ``export_dbaf(..., fold_constants=False)``: an initializer the checkpoint lacks (a folded constant)
    or stores with another shape raises ValueError. Check the result with :func:`check_parity`."""
    import onnx
    from onnx import TensorProto, helper

    from .io import tensor_layout

    onnx_path, checkpoint_path = Path(onnx_path), Path(checkpoint_path)
    if checkpoint_path.resolve().parent != onnx_path.resolve().parent:
        raise ValueError(f"{checkpoint_path} must be in the folder of {onnx_path}")
    layout = tensor_layout(checkpoint_path)
    dtypes = {"F32": TensorProto.FLOAT, "F16": TensorProto.FLOAT16}
    model = onnx.load(str(onnx_path))
    graph = model.graph
    inits, casts = [], []
    for init in graph.initializer:
        entry = layout.get(init.name.removeprefix(prefix)) if init.name.startswith(prefix) else None
        if entry is None or entry["shape"] != list(init.dims) or init.data_type != TensorProto.FLOAT:
            raise ValueError(f"{onnx_path}: initializer {init.name} is not a float32 tensor of "
                             f"{checkpoint_path.name} (export with fold_constants=False)")
        if entry["dtype"] not in dtypes:
            raise ValueError(f"{checkpoint_path}: tensor {init.name} is {entry['dtype']}, not F32 or F16")
        ref = TensorProto(name=init.name, dims=list(init.dims), data_type=dtypes[entry["dtype"]],
                          data_location=TensorProto.EXTERNAL)
        for key, value in (("location", checkpoint_path.name), ("offset", entry["offset"]),
                           ("length", entry["length"])):
            ref.external_data.add(key=key, value=str(value))
        if entry["dtype"] == "F16":
            ref.name = f"{init.name}.fp16"
            casts.append(helper.make_node("Cast", [ref.name], [init.name], to=TensorProto.FLOAT))
        inits.append(ref)
    graph.ClearField("initializer")
    graph.initializer.extend(inits)
    nodes = list(graph.node)
    graph.ClearField("node")
    graph.node.extend(casts + nodes)
    helper.set_model_props(model, {WEIGHTS_FILE_KEY: checkpoint_path.name,
                                   WEIGHTS_SHA256_KEY: sha256_file(checkpoint_path)})
    onnx_path.write_bytes(model.SerializeToString())  # not onnx.save: the data stays where it is
    onnx.checker.check_model(str(onnx_path))
    return onnx_path


def check_parity(model: DBAF, onnx_path: str | Path, *, batch: int = 3, threads: int = 0) -> float:
    """Max |ONNX Runtime - torch| on random inputs of ``batch`` (may differ from the export batch)."""
    from streamdeid.backends.onnxrt import OnnxRuntimeBackend

    x, p = example_inputs(model.cfg, batch, seed=1)
    with torch.inference_mode():
        ref = DBAFRuntime(model).eval()(x, p).numpy()
    got = OnnxRuntimeBackend(onnx_path, intra_op_threads=threads).run(x.numpy(), p.numpy())
    return float(np.abs(got - ref).max())
