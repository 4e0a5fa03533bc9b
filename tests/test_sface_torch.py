"""SFace torch port (streamdeid.models.sface) vs ONNX Runtime on real faces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

from streamdeid.models.sface import (  # noqa: E402
    SFACE_INPUT_NAME,
    SFACE_INPUT_SIZE,
    SFACE_OUTPUT_NAME,
    SFace,
    default_sface_path,
    load_sface_onnx,
)

from conftest import MEDIA, SHARED  # noqa: E402
from conftest import UTK as CROPS  # noqa: E402
pytestmark = pytest.mark.skipif(not CROPS.is_dir() or not MEDIA.is_dir(),
                                reason=f"real face data not found under {SHARED}")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _ort_session(path: Path):
    """ORT session on the int8bq file: keep only ``data`` as graph input, batch symbolic."""
    model = onnx.load(str(path))
    graph = model.graph
    keep = [i for i in graph.input if i.name == SFACE_INPUT_NAME]
    del graph.input[:]
    graph.input.extend(keep)
    graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _faces() -> np.ndarray:
    """UTKFace crops plus the face region of the media stills, as the ONNX ``data`` input (RGB, 0..255)."""
    crops = [cv2.imread(str(p)) for p in sorted(CROPS.glob("*.jpg"))[:12]]
    obama = cv2.imread(str(MEDIA / "obama.jpg"))
    h, w = obama.shape[:2]
    crops.append(obama[: h * 3 // 5, w // 4 : w * 3 // 4])  # rough face box; alignment is irrelevant to parity
    crops.append(cv2.imread(str(MEDIA / "obama-240p.jpg")))
    crops = [cv2.resize(c, (SFACE_INPUT_SIZE,) * 2, interpolation=cv2.INTER_AREA) for c in crops if c is not None]
    return cv2.dnn.blobFromImages(crops, 1.0, (SFACE_INPUT_SIZE,) * 2, (0, 0, 0), swapRB=True).astype(np.float32)


@pytest.fixture(scope="module")
def sface():
    return SFace.from_onnx()


def test_sface_torch_matches_onnxruntime(sface):
    data = _faces()
    assert data.shape[1:] == (3, 112, 112) and len(data) >= 12
    (ref,) = _ort_session(default_sface_path()).run([SFACE_OUTPUT_NAME], {SFACE_INPUT_NAME: data})
    with torch.no_grad():
        out = sface(torch.from_numpy(data)).numpy()
    assert out.shape == ref.shape == (len(data), 128)
    assert np.abs(out - ref).max() <= 1e-4
    # distinct faces give distinct embeddings; the same face gives cosine 1
    n = out / np.linalg.norm(out, axis=1, keepdims=True)
    sims = n @ n.T
    assert np.allclose(np.diag(sims), 1, atol=1e-5) and (sims[~np.eye(len(n), dtype=bool)] < 0.99).all()


def test_sface_is_differentiable(sface):
    x = torch.zeros(2, 3, 64, 64, requires_grad=True)
    data = torch.nn.functional.interpolate(SFace.from_unit_range(x), size=112, mode="bilinear", align_corners=False)
    sface(data).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_sface_strict_shape_check():
    class Wider(SFace):
        def __init__(self):
            super().__init__()
            self.pre_fc1 = torch.nn.Linear(1024 * 7 * 7, 256)

    with pytest.raises(ValueError, match="pre_fc1"):
        load_sface_onnx(default_sface_path(), Wider())
