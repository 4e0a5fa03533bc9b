"""ONNX Runtime backend for an exported DBAF graph (see streamdeid.models.onnx_export)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .base import INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE, Backend

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)


class OnnxRuntimeBackend(Backend):
    name = "onnxrt"

    def __init__(self, model_path: str | Path, *, providers: Sequence[str] = DEFAULT_PROVIDERS,
                 intra_op_threads: int = 0, inter_op_threads: int = 1, log_severity_level: int = 3):
        """``providers`` is always passed explicitly (ORT's default list starts with Azure).
        ``intra_op_threads`` 0 lets ORT use one thread per physical core."""
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(intra_op_threads)
        opts.inter_op_num_threads = int(inter_op_threads)
        opts.log_severity_level = int(log_severity_level)
        # waiting threads do not spin: the generator runs on the render thread beside the detector
        # (dbaf on short_hamilton_clip.mp4, benchmarks/fps.py, alternating: 4.3 and 4.2 fps and 115-117 s of CPU
        # spinning, 4.4 and 4.5 fps and 110-111 s not)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(model_path), opts, providers=list(providers))
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name for o in self.session.get_outputs()}
        if set(inputs) != {INPUT_IMAGE, INPUT_KEY} or OUTPUT_IMAGE not in outputs:
            raise ValueError(f"{model_path}: expected inputs {INPUT_IMAGE!r}, {INPUT_KEY!r} and output "
                             f"{OUTPUT_IMAGE!r}; found inputs {sorted(inputs)}, outputs {sorted(outputs)}")
        r = inputs[INPUT_IMAGE].shape[2]
        self.resolution = r if isinstance(r, int) else None
        l, d = inputs[INPUT_KEY].shape[1:]
        self.key_shape = (l, d) if isinstance(l, int) and isinstance(d, int) else None

    def run(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        x, p = self.check_inputs(x, p)
        (y,) = self.session.run([OUTPUT_IMAGE], {INPUT_IMAGE: x, INPUT_KEY: p})
        return y
