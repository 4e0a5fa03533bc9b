"""The models a runner loads once and every run it does reuses.

An anonymizer is made per video (it holds per-video state: track keys, a track cache), but the DBAF
generator inside it is the costly part (about 0.5 s to load on a CPU, more on a GPU) and stateless between
calls: ``Models`` keeps one per model file and backend and hands it to each video's ``DBAFAnonymizer``.
A batch worker keeps one ``Models`` for all its files; ``gpu`` runs the generator on CUDA (torch on
``cuda``, or ONNX Runtime's CUDA provider).
"""

from __future__ import annotations

from typing import Any

from ..anonymizers import Anonymizer, create_anonymizer
from ..config import AnonymizeConfig, PipelineConfig


class Models:
    def __init__(self, gpu: bool = False) -> None:
        self.gpu = gpu
        self._generators: dict[tuple, tuple[Any, Any]] = {}  # (model, backend, threads) -> (path, generator)

    def anonymizer(self, cfg: AnonymizeConfig) -> Anonymizer:
        """A new anonymizer for one video: ``cfg.method``'s (the registry's factory), with a DBAF generator
        loaded by the first video and shared by the others."""
        if cfg.method != "dbaf":
            return create_anonymizer(cfg)
        from ..anonymizers import DBAFAnonymizer
        from ..anonymizers.dbaf import resolve_model_path

        # keyed by what the config names: the file is found and its sha256 checked once, when first loaded
        key = (str(cfg.model_path), cfg.backend, cfg.threads)
        loaded = self._generators.get(key)
        if loaded is not None:
            path, generator = loaded
            return DBAFAnonymizer(path, cfg.backend, generator=generator)
        path = resolve_model_path(cfg.model_path, cfg.backend)
        anonymizer = DBAFAnonymizer(path, cfg.backend, generator=_gpu_generator(cfg.backend, path)) if self.gpu \
            else create_anonymizer(cfg)
        if getattr(anonymizer, "generator", None) is not None:  # a "dbaf" registered by a test may have none
            self._generators[key] = (path, anonymizer.generator)
        return anonymizer

    def warm(self, config: PipelineConfig) -> None:
        """Load what a file will need (the generator, the detector's runtime) before the first file, so a
        missing model fails a worker at its start and the first file is not slower than the others."""
        from ..detect.finder import FaceFinder

        self.anonymizer(config.anonymize)
        FaceFinder(config.detect)


def _gpu_generator(backend: str, path):
    from ..backends import create_backend

    if backend == "torch":
        return create_backend("torch", path, device="cuda")
    if backend == "onnxrt":
        return create_backend("onnxrt", path, providers=("CUDAExecutionProvider", "CPUExecutionProvider"))
    return create_backend(backend, path)  # tensorrt runs on the GPU anyway
