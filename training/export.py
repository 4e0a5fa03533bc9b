"""``export``: trained generator -> safetensors (+ JSON header), ONNX (streamdeid.models.onnx_export), manifest.

The output directory (``--out``, default ``RUN/weights``) receives::

    dbaf{R}.safetensors   streamdeid.models.io checkpoint (strict keys/shapes, model_args header): the one
                          copy of the weights, fp16 unless ``--precision fp32``
    dbaf{R}.onnx          G(x, P) with fixed noise, dynamic batch: a graph that reads its weights from
                          dbaf{R}.safetensors (ONNX external data), parity-checked against torch
    manifest.json         sha256 and size of both files, model args, source run, licence note, precision,
                          and ``models``: the file each runtime backend loads (onnxrt, torch)

``--out streamdeid/weights`` writes the package's shipped default directly
(the runtime checks each file against the manifest's sha256 before loading it).
``--init`` may name an exported ``.safetensors``: re-exporting it keeps its provenance
(stage, step, source checkpoint, training commit).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from streamdeid.files import sha256_file
from streamdeid.models.dbaf import DBAF
from streamdeid.models.io import load_checkpoint, save_checkpoint
from streamdeid.models.onnx_export import PARITY_ATOL, check_parity, export_dbaf, link_weights

from .trainer import git_commit, latest_state, load_state

MANIFEST_SCHEMA = 1
PRECISIONS = ("fp16", "fp32")
EXPORT_ORDER = ("anonymize", "disentangle", "reconstruct", "e4e", "stylegan2")
DATA_LICENCE = ("Trained on the data named in 'dataset'. UTKFace is licensed for non-commercial research only; "
                "weights trained on it inherit that restriction.")


def find_source(run_root: Path, init: str | None) -> Path:
    if init:
        p = Path(init)
        if not p.exists():
            raise FileNotFoundError(f"--init {p}: no such file or folder")
        st = latest_state(p) if p.is_dir() else p
        if st is None:
            raise FileNotFoundError(f"--init {p}: no checkpoint in {p / 'checkpoints'}")
        return st
    for stage in EXPORT_ORDER:
        st = latest_state(run_root / stage)
        if st is not None:
            return st
    raise FileNotFoundError(f"no checkpoint under {run_root}/{{{','.join(EXPORT_ORDER)}}}; train a stage first")


def load_generator(src: Path) -> tuple[DBAF, dict]:
    if src.suffix == ".safetensors":  # an earlier export: its header carries the provenance
        model, header = load_checkpoint(src)
        extra = header["extra"]
        info = {"stage": extra.get("stage", ""), "step": extra.get("step", 0),
                **{k: extra[k] for k in ("elapsed_hours", "preset", "dataset", "source") if k in extra}}
        if header["training_commit"]:
            info["training_commit"] = header["training_commit"]
        return model, info
    state = load_state(src)
    from streamdeid.models.config import DBAFConfig

    model = DBAF(DBAFConfig.from_dict(json.loads(state["model_args"])))
    model.load_state_dict(state["g_ema"] if state.get("g_ema") else state["g"], strict=True)
    cfg = json.loads(state["config"])
    return model.eval(), {"stage": state["stage"], "step": int(state["step"]),
                          "elapsed_hours": float(state["elapsed"]) / 3600, "preset": cfg.get("preset")}


def export(run_root: str | Path, out_dir: str | Path | None = None, *, init: str | None = None,
           dataset: str = "", opset: int = 17, precision: str = "fp16", overwrite: bool = False,
           log=print) -> dict:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    run_root = Path(run_root)
    out = Path(out_dir) if out_dir else run_root / "weights"
    src = find_source(run_root, init)
    there = [p.name for p in (out / "manifest.json", *out.glob("dbaf*.onnx"), *out.glob("dbaf*.safetensors"))
             if p.exists()] if out.is_dir() else []
    if there and not overwrite:
        raise FileExistsError(f"{out} holds exported weights already ({', '.join(there)}); pass --overwrite to "
                              "replace them, or --out elsewhere")
    try:  # before anything is written: a file that is no checkpoint leaves no empty output folder
        model, info = load_generator(src)
    except (KeyError, RuntimeError, TypeError) as exc:  # a .safetensors or state of another shape
        raise ValueError(f"{src} is not a streamdeid generator checkpoint ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    out.mkdir(parents=True, exist_ok=True)
    if info["stage"] != "anonymize":
        log(f"export: WARNING the newest checkpoint is of stage {info['stage']!r}, not 'anonymize': "
            "its KRIA is untrained and it does not anonymize")
    commit = info.pop("training_commit", "") or git_commit()
    origin = info.pop("source", "") or str(src)
    source_dataset = info.pop("dataset", "")
    dataset = dataset or source_dataset
    if not dataset:
        prep = run_root / "data" / "prepared.json"
        dataset = json.loads(prep.read_text())["source"] if prep.is_file() else ""
    r = model.cfg.resolution
    st_path, onnx_path = out / f"dbaf{r}.safetensors", out / f"dbaf{r}.onnx"
    save_checkpoint(st_path, model, training_commit=commit, half=precision == "fp16",
                    extra={**info, "dataset": Path(dataset).name if dataset else "", "source": origin})
    stored, _ = load_checkpoint(st_path)  # strict round trip: the generator both backends will run
    with torch.no_grad():
        export_dbaf(stored, onnx_path, opset=opset, fold_constants=False)
    link_weights(onnx_path, st_path)
    diff = check_parity(stored, onnx_path)
    if diff > PARITY_ATOL:
        raise RuntimeError(f"ONNX parity {diff:.2e} above {PARITY_ATOL}")
    precision_diff = check_parity(model, onnx_path)  # against the fp32 source: what storing fp16 costs
    manifest = {
        "schema_version": MANIFEST_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "training_commit": commit,
        "model_args": model.cfg.to_dict(),
        "resolution": r,
        "key_shape": list(model.cfg.key_shape),
        "source_checkpoint": origin,
        **{k: v for k, v in info.items()},
        "dataset": Path(dataset).name if dataset else "",
        "licence": DATA_LICENCE,
        "precision": precision,
        "onnx_parity_max_abs": diff,
        "precision_max_abs": precision_diff,
        "files": {p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size,
                           "kind": "onnx" if p.suffix == ".onnx" else "safetensors"} for p in (st_path, onnx_path)},
    }
    # what streamdeid.anonymizers.dbaf.resolve_model_path reads: one file per backend, and the weights
    # file the ONNX graph reads (checked too)
    manifest["models"] = {backend: {"file": p.name, "sha256": manifest["files"][p.name]["sha256"]}
                          for backend, p in (("onnxrt", onnx_path), ("torch", st_path))}
    manifest["models"]["onnxrt"]["weights"] = dict(manifest["models"]["torch"])
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    log(f"export: {src} -> {out} (stage {info['stage']}, step {info['step']}, {precision}, ONNX parity "
        f"{diff:.1e}, {precision_diff:.1e} from the source)")
    return manifest
