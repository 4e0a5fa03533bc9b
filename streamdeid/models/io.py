"""DBAF checkpoints: safetensors tensors + a small JSON header. Never pickle.

Header (safetensors ``__metadata__``, all values strings)::

    format          "streamdeid.dbaf"
    schema_version  "1"
    model_args      JSON of DBAFConfig.to_dict() (primitives only)
    training_commit git commit of the training code, or ""
    extra           JSON object of caller-supplied primitives (e.g. step, stage)

Loading rebuilds the model from ``model_args`` and requires the tensor names
and shapes to match the model's state dict exactly (``CheckpointError``
otherwise). Tensors may be stored in fp16 (``save_checkpoint(half=True)``, what
ships): loading casts them to the model's fp32. ``read_checkpoint_header`` and
``tensor_layout`` parse the file without torch.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

CHECKPOINT_FORMAT = "streamdeid.dbaf"
SCHEMA_VERSION = 1


class CheckpointError(ValueError):
    """The file is not a DBAF checkpoint this code can load strictly."""


def _safetensors_header(path: str | Path) -> tuple[dict[str, Any], int]:
    """(the file's JSON header, the offset where its tensor data starts)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100_000_000:
            raise CheckpointError(f"{path}: implausible safetensors header size {n}")
        return json.loads(f.read(n)), 8 + n


def tensor_layout(path: str | Path) -> dict[str, dict[str, Any]]:
    """Where each tensor's bytes lie in a safetensors file (little-endian, C order). Torch-free.

    ``{name: {"dtype": "F16", "shape": [...], "offset": <from the start of the file>, "length": <bytes>}}``:
    what an ONNX graph's external data points at (``streamdeid.models.onnx_export.link_weights``)."""
    header, start = _safetensors_header(path)
    return {name: {"dtype": t["dtype"], "shape": list(t["shape"]), "offset": start + t["data_offsets"][0],
                   "length": t["data_offsets"][1] - t["data_offsets"][0]}
            for name, t in header.items() if name != "__metadata__"}


def read_checkpoint_header(path: str | Path) -> dict[str, Any]:
    """Header of a checkpoint as Python values (``model_args`` and ``extra`` decoded). Torch-free."""
    header, _ = _safetensors_header(path)
    meta = header.get("__metadata__") or {}
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: format {meta.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
    version = int(meta.get("schema_version", -1))
    if version != SCHEMA_VERSION:
        raise CheckpointError(f"{path}: schema_version {version}, this code reads {SCHEMA_VERSION}")
    return {
        "format": meta["format"],
        "schema_version": version,
        "model_args": json.loads(meta["model_args"]),
        "training_commit": meta.get("training_commit", ""),
        "extra": json.loads(meta.get("extra", "{}")),
    }


def check_state_dict(expected: dict, found: dict) -> None:
    """Raise CheckpointError listing missing / unexpected keys and shape mismatches."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    shapes = [
        f"{k}: checkpoint {tuple(found[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in sorted(set(expected) & set(found))
        if tuple(found[k].shape) != tuple(expected[k].shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {missing[:10]}{' ...' if len(missing) > 10 else ''}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:10]}{' ...' if len(unexpected) > 10 else ''}")
        if shapes:
            parts.append(f"shape mismatch {shapes[:10]}")
        raise CheckpointError("state dict does not match the model: " + "; ".join(parts))


def save_checkpoint(path: str | Path, model, *, training_commit: str = "", extra: dict | None = None,
                    half: bool = False) -> None:
    """Write ``model.state_dict()`` (a DBAF) and its config header to ``path`` (safetensors);
    ``half``: floating-point tensors in fp16 (half the bytes; :func:`load_checkpoint` casts them back)."""
    from safetensors.torch import save_file

    meta = {
        "format": CHECKPOINT_FORMAT,
        "schema_version": str(SCHEMA_VERSION),
        "model_args": json.dumps(model.cfg.to_dict(), sort_keys=True),
        "training_commit": training_commit,
        "extra": json.dumps(extra or {}, sort_keys=True),
    }
    tensors = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if half:
        tensors = {k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    save_file(tensors, str(path), metadata=meta)


def load_checkpoint(path: str | Path, device: str = "cpu"):
    """-> (DBAF in eval mode on ``device``, header dict). Strict on keys and shapes; fp16 tensors are
    cast to the model's fp32 as they load."""
    from safetensors.torch import load_file

    from .config import DBAFConfig
    from .dbaf import DBAF

    header = read_checkpoint_header(path)
    try:
        cfg = DBAFConfig.from_dict(header["model_args"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad model_args: {e}") from e
    model = DBAF(cfg)
    tensors = load_file(str(path), device="cpu")
    check_state_dict(model.state_dict(), tensors)
    model.load_state_dict(tensors, strict=True)
    return model.to(device).eval(), header
