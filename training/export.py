"""``export``: trained generator -> safetensors (+ JSON header), ONNX (streamdeid.models.onnx_export), manifest.

The output directory (``--out``, default ``RUN/weights``) receives::

    dbaf{R}.safetensors   streamdeid.models.io checkpoint (strict keys/shapes, model_args header)
    dbaf{R}.onnx          G(x, P) with fixed noise, dynamic batch, parity-checked against torch
    manifest.json         sha256 and size of both files, model args, source run, licence note,
                          and ``models``: the file each runtime backend loads (onnxrt, torch)

``--out streamdeid/weights`` writes the package's shipped default directly
(the runtime checks each file against the manifest's sha256 before loading it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from streamdeid.files import sha256_file
from streamdeid.models.dbaf import DBAF
from streamdeid.models.io import load_checkpoint, save_checkpoint
from streamdeid.models.onnx_export import PARITY_ATOL, check_parity, export_dbaf

from .trainer import git_commit, latest_state, load_state

MANIFEST_SCHEMA = 1
EXPORT_ORDER = ("anonymize", "disentangle", "reconstruct", "e4e", "stylegan2")
DATA_LICENCE = ("Trained on the data named in 'dataset'. UTKFace is licensed for non-commercial research only; "
                "weights trained on it inherit that restriction.")


def find_source(run_root: Path, init: str | None) -> Path:
    if init:
        p = Path(init)
        return latest_state(p) if p.is_dir() else p
    for stage in EXPORT_ORDER:
        st = latest_state(run_root / stage)
        if st is not None:
            return st
    raise FileNotFoundError(f"no checkpoint under {run_root}/{{{','.join(EXPORT_ORDER)}}}; train a stage first")


def load_generator(src: Path) -> tuple[DBAF, dict]:
    if src.suffix == ".safetensors":
        model, header = load_checkpoint(src)
        return model, {"stage": header["extra"].get("stage", ""), "step": header["extra"].get("step", 0)}
    state = load_state(src)
    from streamdeid.models.config import DBAFConfig

    model = DBAF(DBAFConfig.from_dict(json.loads(state["model_args"])))
    model.load_state_dict(state["g_ema"] if state.get("g_ema") else state["g"], strict=True)
    cfg = json.loads(state["config"])
    return model.eval(), {"stage": state["stage"], "step": int(state["step"]),
                          "elapsed_hours": float(state["elapsed"]) / 3600, "preset": cfg.get("preset")}


def export(run_root: str | Path, out_dir: str | Path | None = None, *, init: str | None = None,
           dataset: str = "", opset: int = 17, log=print) -> dict:
    run_root = Path(run_root)
    out = Path(out_dir) if out_dir else run_root / "weights"
    out.mkdir(parents=True, exist_ok=True)
    src = find_source(run_root, init)
    model, info = load_generator(src)
    if info["stage"] != "anonymize":
        log(f"export: WARNING the newest checkpoint is of stage {info['stage']!r}, not 'anonymize': "
            "its KRIA is untrained and it does not anonymize")
    if not dataset:
        prep = run_root / "data" / "prepared.json"
        dataset = json.loads(prep.read_text())["source"] if prep.is_file() else ""
    r = model.cfg.resolution
    st_path, onnx_path = out / f"dbaf{r}.safetensors", out / f"dbaf{r}.onnx"
    commit = git_commit()
    save_checkpoint(st_path, model, training_commit=commit,
                    extra={**info, "dataset": Path(dataset).name if dataset else "", "source": str(src)})
    load_checkpoint(st_path)  # strict round trip
    with torch.no_grad():
        export_dbaf(model, onnx_path, opset=opset)
    diff = check_parity(model, onnx_path)
    if diff > PARITY_ATOL:
        raise RuntimeError(f"ONNX parity {diff:.2e} above {PARITY_ATOL}")
    manifest = {
        "schema_version": MANIFEST_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "training_commit": commit,
        "model_args": model.cfg.to_dict(),
        "resolution": r,
        "key_shape": list(model.cfg.key_shape),
        "source_checkpoint": str(src),
        **{k: v for k, v in info.items()},
        "dataset": Path(dataset).name if dataset else "",
        "licence": DATA_LICENCE,
        "onnx_parity_max_abs": diff,
        "files": {p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size,
                           "kind": "onnx" if p.suffix == ".onnx" else "safetensors"} for p in (st_path, onnx_path)},
    }
    # what streamdeid.anonymizers.dbaf.resolve_model_path reads: one file per backend
    manifest["models"] = {backend: {"file": p.name, "sha256": manifest["files"][p.name]["sha256"]}
                          for backend, p in (("onnxrt", onnx_path), ("torch", st_path))}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    log(f"export: {src} -> {out} (stage {info['stage']}, step {info['step']}, ONNX parity {diff:.1e})")
    return manifest
