"""Models loaded once per worker process.

``streamdeid.api.anonymize`` builds its anonymizer per file through the anonymizer registry
(``register_anonymizer``). A worker registers a DBAF factory that keeps the generator (the costly part,
about 0.5 s to load on a CPU, more on a GPU) and hands it to each file's ``DBAFAnonymizer``: the generator
is stateless between calls, every per-file state (keys, track cache) stays in the new anonymizer.
On a GPU worker the generator runs on CUDA (torch backend on ``cuda``, or ONNX Runtime's CUDA provider).
"""

from __future__ import annotations

from typing import Any

_GENERATORS: dict[tuple, Any] = {}
_GPU = False


def install(gpu: bool = False) -> None:
    global _GPU
    from ..anonymizers import register_anonymizer

    _GPU = gpu
    register_anonymizer("dbaf", cached_dbaf)


def cached_dbaf(cfg):
    from ..anonymizers import DBAFAnonymizer
    from ..anonymizers.dbaf import resolve_model_path

    path = resolve_model_path(cfg.model_path, cfg.backend)
    key = (str(path), cfg.backend, cfg.threads, _GPU)
    generator = _GENERATORS.get(key)
    if generator is None:
        if _GPU:
            generator = _gpu_generator(cfg.backend, path)
        else:
            generator = DBAFAnonymizer(cfg.model_path, cfg.backend, threads=cfg.threads).generator
        _GENERATORS[key] = generator
    return DBAFAnonymizer(path, cfg.backend, generator=generator)


def _gpu_generator(backend: str, path):
    from ..backends import create_backend

    if backend == "torch":
        return create_backend("torch", path, device="cuda")
    if backend == "onnxrt":
        return create_backend("onnxrt", path, providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
    return create_backend(backend, path)  # tensorrt runs on the GPU anyway


def warm(config) -> None:
    """Load what a file will need (the generator, the detector's runtime) before the first file, so a
    missing model fails the worker at start and the first file is not slower than the others."""
    from ..anonymizers import create_anonymizer
    from ..detect.finder import FaceFinder

    create_anonymizer(config.anonymize)
    FaceFinder(config.detect)
