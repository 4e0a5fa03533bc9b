"""TensorRT backend: runs an engine built by engines/build_trt.py (TensorRT >= 10 tensor API).

Device buffers are torch CUDA tensors when torch has CUDA; otherwise pycuda is
used when installed. Never run on the developer machines (no GPU there); the
tests skip it without ``torch.cuda.is_available()``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE, Backend


class _TorchCuda:
    """CUDA memory and stream owned by torch."""

    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(device=self.device)

    def run(self, context, x: np.ndarray, p: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        torch = self.torch
        with torch.cuda.stream(self.stream):
            xt = torch.from_numpy(x).to(self.device, non_blocking=True)
            pt = torch.from_numpy(p).to(self.device, non_blocking=True)
            yt = torch.empty(out_shape, dtype=torch.float32, device=self.device)
            for name, t in ((INPUT_IMAGE, xt), (INPUT_KEY, pt), (OUTPUT_IMAGE, yt)):
                context.set_tensor_address(name, t.data_ptr())
            if not context.execute_async_v3(self.stream.cuda_stream):
                raise RuntimeError("TensorRT execute_async_v3 failed")
            y = yt.cpu()  # synchronises this stream
        return y.numpy()


class _PyCuda:
    """CUDA memory and stream from pycuda (when torch has no CUDA)."""

    def __init__(self, device: str):
        import pycuda.driver as cuda

        cuda.init()
        index = int(device.split(":")[1]) if ":" in device else 0
        self.cuda = cuda
        self.ctx = cuda.Device(index).retain_primary_context()
        self.ctx.push()
        self.stream = cuda.Stream()

    def run(self, context, x: np.ndarray, p: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
        cuda = self.cuda
        y = cuda.pagelocked_empty(out_shape, dtype=np.float32)
        bufs = {INPUT_IMAGE: cuda.mem_alloc(x.nbytes), INPUT_KEY: cuda.mem_alloc(p.nbytes),
                OUTPUT_IMAGE: cuda.mem_alloc(y.nbytes)}
        cuda.memcpy_htod_async(bufs[INPUT_IMAGE], x, self.stream)
        cuda.memcpy_htod_async(bufs[INPUT_KEY], p, self.stream)
        for name, buf in bufs.items():
            context.set_tensor_address(name, int(buf))
        if not context.execute_async_v3(self.stream.handle):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        cuda.memcpy_dtoh_async(y, bufs[OUTPUT_IMAGE], self.stream)
        self.stream.synchronize()
        return np.array(y)

    def close(self) -> None:
        self.ctx.pop()


class TensorRTBackend(Backend):
    name = "tensorrt"

    def __init__(self, model_path: str | Path, *, device: str = "cuda"):
        """``device``: a CUDA device string ("cuda" = torch's current device, "cuda:1", ...)."""
        import tensorrt as trt

        try:
            import torch

            use_torch = torch.cuda.is_available()
        except ImportError:
            use_torch = False
        self.memory = _TorchCuda(device) if use_torch else _PyCuda(device)
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(Path(model_path).read_bytes())
        if self.engine is None:
            raise RuntimeError(f"{model_path}: TensorRT could not deserialize the engine")
        names = {self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)}
        if names != {INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE}:
            raise ValueError(f"{model_path}: engine tensors {sorted(names)}, expected "
                             f"{sorted({INPUT_IMAGE, INPUT_KEY, OUTPUT_IMAGE})}")
        self.context = self.engine.create_execution_context()
        r = self.engine.get_tensor_shape(INPUT_IMAGE)[2]
        self.resolution = int(r) if r > 0 else None
        l, d = self.engine.get_tensor_shape(INPUT_KEY)[1:]
        self.key_shape = (int(l), int(d))
        # Batch range of optimisation profile 0: (min, opt, max) shapes of x.
        self.max_batch = int(self.engine.get_tensor_profile_shape(INPUT_IMAGE, 0)[2][0])

    def run(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        x, p = self.check_inputs(x, p)
        if x.shape[0] > self.max_batch:  # split batches larger than the profile allows
            return np.concatenate([self.run(x[i:i + self.max_batch], p[i:i + self.max_batch])
                                   for i in range(0, x.shape[0], self.max_batch)])
        self.context.set_input_shape(INPUT_IMAGE, x.shape)
        self.context.set_input_shape(INPUT_KEY, p.shape)
        out_shape = tuple(self.context.get_tensor_shape(OUTPUT_IMAGE))
        return self.memory.run(self.context, x, p, out_shape)

    def close(self) -> None:
        if isinstance(self.memory, _PyCuda):
            self.memory.close()
