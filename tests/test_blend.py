import cv2
import numpy as np
import pytest

from streamdeid.blend import canonical_landmarks, face_mask, mask_support, paste_back
from streamdeid.config import AlignConfig, BlendConfig
from streamdeid.identity import estimate_similarity
from streamdeid.types import StreamdeidError

S = AlignConfig().crop_size


def _generated(**fields) -> BlendConfig:
    """A BlendConfig with a generated face's feather (the mask's soft seam), unless ``fields`` set one."""
    return BlendConfig(**fields).resolved(generated=True)


def _face_centre(lm: np.ndarray) -> np.ndarray:
    return (lm[:2].mean(0) + lm[3:].mean(0)) / 2.0


@pytest.mark.parametrize("kind", ["ellipse", "hull"])
@pytest.mark.parametrize("align_margin", [0.25, 0.4])
def test_mask_covers_face_and_is_zero_at_corners(kind, align_margin):
    cfg = _generated(mask=kind)
    m = face_mask(S, cfg, None, align_margin=align_margin)
    assert m.shape == (S, S) and m.dtype == np.float32
    assert m.min() >= 0.0 and m.max() <= 1.0
    lm = canonical_landmarks(S, align_margin)
    cx, cy = _face_centre(lm)
    assert m[int(round(cy)), int(round(cx))] == 1.0
    for x, y in lm:
        assert m[int(round(y)), int(round(x))] == 1.0
        # a ring of radius 3 px around each landmark is fully covered too
        for a in np.linspace(0, 2 * np.pi, 8, endpoint=False):
            assert m[int(round(y + 3 * np.sin(a))), int(round(x + 3 * np.cos(a)))] == 1.0
    for y, x in [(0, 0), (0, S - 1), (S - 1, 0), (S - 1, S - 1)]:
        assert m[y, x] == 0.0


@pytest.mark.parametrize("kind", ["ellipse", "hull"])
def test_feather_is_monotone_and_outside_the_face(kind):
    cfg = _generated(mask=kind, feather=0.1)
    m = face_mask(S, cfg, None, align_margin=0.4)
    lm = canonical_landmarks(S, 0.4)
    c = _face_centre(lm)
    for a in np.linspace(0, 2 * np.pi, 24, endpoint=False):
        r = np.arange(0, S, 0.5)
        xs = np.clip(np.round(c[0] + r * np.cos(a)).astype(int), 0, S - 1)
        ys = np.clip(np.round(c[1] + r * np.sin(a)).astype(int), 0, S - 1)
        v = m[ys, xs]
        # non-increasing away from the centre (up to pixel-grid sampling of the ray)
        assert (np.diff(v) <= 0.03).all()
        assert v[0] == 1.0
    # Soft edge exists but never eats into the face: growing the feather keeps
    # the full-coverage zone identical.
    hard = face_mask(S, _generated(mask=kind, feather=0.0), None, align_margin=0.4)
    assert ((m > 0) & (m < 1)).sum() > 100
    np.testing.assert_array_equal(m == 1.0, hard == 1.0)
    assert set(np.unique(hard)) <= {0.0, 1.0}


def test_a_large_crops_edge_stays_smooth_when_enlarged():
    """A 128 px crop pasted on a 500 px face is enlarged 4x: its mask's edge must not show the crop's pixel
    steps. Along the lower flank of the ellipse, where the 0.5 level crosses each row of the enlarged mask
    moves smoothly from row to row (a staircase jumps by whole crop pixels)."""
    cfg = BlendConfig().resolved(generated=False)  # a cover's thin feather: 2.6 crop pixels
    m = face_mask(128, cfg)
    big = cv2.resize(m, (512, 512), interpolation=cv2.INTER_LINEAR)
    xs = []
    for row in big[250:470, :256]:
        i = int(np.argmax(row >= 0.5))
        xs.append(i - 1 + (0.5 - row[i - 1]) / (row[i] - row[i - 1]))
    assert np.abs(np.diff(xs, 2)).max() < 2.0  # the staircase gave 5.6
    # the face zone is the one drawn at the crop's own size, covered whole
    hard = face_mask(128, BlendConfig(feather=0.0))
    np.testing.assert_array_equal(m == 1.0, hard == 1.0)


def test_margin_grows_the_mask_and_landmarks_place_it():
    small = face_mask(S, _generated(margin=0.0), None, align_margin=0.4)
    big = face_mask(S, _generated(margin=0.2), None, align_margin=0.4)
    assert (big >= small).all() and (big == 1).sum() > (small == 1).sum()
    # A face shifted/rotated inside the crop moves the mask with it.
    lm = canonical_landmarks(S, 0.5)
    rot = cv2.getRotationMatrix2D((S / 2, S / 2), 30, 1.0)
    lm2 = lm @ rot[:, :2].T + rot[:, 2] + (10, 0)
    m = face_mask(S, _generated(), lm2)
    for x, y in lm2:
        assert m[int(round(y)), int(round(x))] == 1.0
    assert m[0, 0] == 0.0


def test_mask_errors_and_cache_isolation():
    with pytest.raises(StreamdeidError):
        face_mask(S, _generated(mask="star"))
    a = face_mask(S, _generated())
    a[:] = 0  # callers get their own copy
    assert face_mask(S, _generated()).max() == 1.0


def _frame_and_face(face_px: float, centre: tuple[float, float], shape=(360, 640)):
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    # Place a face of width ~face_px (the ArcFace box) at centre.
    t112 = canonical_landmarks(112, 0.0)
    lm = (t112 - 56) * face_px / 112 + np.array(centre)
    m = estimate_similarity(lm, canonical_landmarks(S, AlignConfig().margin))
    return frame, lm, cv2.invertAffineTransform(m)


def test_paste_solid_changes_only_the_face_region():
    frame, lm, inv = _frame_and_face(60, (320, 180))
    before = frame.copy()
    mask = face_mask(S, _generated())
    crop = np.full((S, S, 3), (0, 255, 0), np.uint8)
    roi = paste_back(frame, crop, inv, mask)
    assert roi is not None
    x, y, w, h = roi
    changed = np.any(frame != before, axis=2)
    ys, xs = np.nonzero(changed)
    assert xs.min() >= x and xs.max() < x + w and ys.min() >= y and ys.max() < y + h
    assert w < 140 and h < 140  # only the face's neighbourhood
    # The face itself is fully replaced.
    for px, py in np.vstack([lm, _face_centre(lm)]):
        assert tuple(frame[int(round(py)), int(round(px))]) == (0, 255, 0)
    # Far from the face nothing moved.
    assert not changed[:, :200].any() and not changed[:, 450:].any()
    assert not changed[:60].any() and not changed[300:].any()


@pytest.mark.parametrize("centre", [(5, 180), (635, 10), (320, 355), (-20, -20)])
def test_paste_handles_faces_cut_by_the_border(centre):
    frame, lm, inv = _frame_and_face(60, centre)
    before = frame.copy()
    mask = face_mask(S, _generated())
    crop = np.full((S, S, 3), 7, np.uint8)
    roi = paste_back(frame, crop, inv, mask)
    assert roi is not None
    x, y, w, h = roi
    assert x >= 0 and y >= 0 and x + w <= 640 and y + h <= 360
    assert np.any(frame != before)
    inside = [(px, py) for px, py in lm if 0 <= px < 639 and 0 <= py < 359]
    for px, py in inside:
        assert (frame[int(round(py)), int(round(px))] == 7).all()


def test_paste_outside_frame_is_a_noop():
    frame, _, inv = _frame_and_face(60, (-300, -300))
    before = frame.copy()
    assert paste_back(frame, np.zeros((S, S, 3), np.uint8), inv, face_mask(S, _generated())) is None
    np.testing.assert_array_equal(frame, before)
    assert mask_support(np.zeros((S, S), np.float32)) is None


def test_colour_match_moves_crop_towards_surroundings():
    frame = np.full((200, 200, 3), 200, np.uint8)
    _, _, inv = _frame_and_face(80, (100, 100), shape=(200, 200))
    mask = face_mask(S, _generated())
    crop = np.full((S, S, 3), 20, np.uint8)
    plain, matched = frame.copy(), frame.copy()
    paste_back(plain, crop, inv, mask)
    paste_back(matched, crop, inv, mask, color_match=True)
    assert matched[100, 100].mean() > plain[100, 100].mean() + 100


def _render_one(method: str, h: float, scale_free: bool | None = None):
    """Render one upright face of box height ``h`` on a textured frame; return (crop side, changed mask)."""
    from streamdeid.anonymizers import create_anonymizer
    from streamdeid.config import PipelineConfig
    from streamdeid.render import FrameRenderer
    from streamdeid.types import Frame, FrameResult, TrackedFace

    cfg = PipelineConfig()
    cfg.anonymize.method = method
    anon = create_anonymizer(cfg.anonymize)
    if scale_free is not None:
        anon.scale_free = scale_free
    renderer = FrameRenderer(anon, align=cfg.align, blend=cfg.blend, anonymize=cfg.anonymize)
    rng = np.random.default_rng(0)
    image = cv2.resize(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8), (400, 300), interpolation=cv2.INTER_NEAREST)
    w = 0.8 * h
    box = np.array([200 - w / 2, 150 - h / 2, 200 + w / 2, 150 + h / 2])
    lm = np.array([[0.34, 0.46], [0.66, 0.46], [0.5, 0.64], [0.37, 0.82], [0.63, 0.82]]) * (w, h) + box[:2]
    result = FrameResult(Frame(0, image.copy(), 0, None), [TrackedFace(1, box, lm, 0.9)])
    (pasted,) = renderer.render(result)
    return len(pasted.aligned.crop), np.abs(result.frame.image.astype(int) - image).max(axis=2) > 0


@pytest.mark.parametrize("method", ["solid", "blur"])
def test_small_faces_get_small_crops_and_the_same_cover(method):
    side, small = _render_one(method, 20)
    assert side < AlignConfig.crop_size
    full_side, full = _render_one(method, 20, scale_free=False)
    assert full_side == AlignConfig.crop_size
    # the same region is covered at either crop size (edges differ by resampling only)
    assert (small & full).sum() / (small | full).sum() > 0.9
    assert _render_one(method, 90)[0] == AlignConfig.crop_size  # large faces keep the full crop


@pytest.mark.parametrize("centre", [(60, 50), (3, 97), (118, 2)])
def test_a_one_colour_crop_is_filled_not_warped_with_the_same_result(centre):
    """warp_to_frame(fill=) (solid fill) gives the pixels and mask a warp of the same one-colour crop gives,
    rotated and cut by the frame's border too; the cover rectangle is where the mask lands."""
    from streamdeid.blend.paste import paste_roi, warp_to_frame

    crop = np.empty((64, 64, 3), np.uint8)
    crop[...] = (40, 90, 200)
    mask = face_mask(64, _generated(), None, align_margin=AlignConfig().margin)
    inverse = cv2.getRotationMatrix2D((32, 32), 23, 0.7)
    inverse[:, 2] += np.subtract(centre, (32, 32))
    warped = warp_to_frame(crop, inverse, mask, 120, 100)
    filled = warp_to_frame(crop, inverse, mask, 120, 100, fill=crop[0, 0])
    assert warped is not None and filled is not None
    assert filled.roi == warped.roi
    assert np.array_equal(filled.pixels, warped.pixels) and np.array_equal(filled.alpha, warped.alpha)
    x, y, w, h = warped.roi
    assert warped.alpha.max() > 0.99  # the face's centre is in the frame in every case
    assert 0 <= x and 0 <= y and x + w <= 120 and y + h <= 100
    assert paste_roi(inverse, (0, 0, 64, 64), 120, 100) is not None
    assert paste_roi(np.array([[1, 0, 500.0], [0, 1, 500.0]]), (0, 0, 64, 64), 120, 100) is None  # off frame


def test_feather_is_chosen_by_anonymizer_and_never_thins_the_face():
    """A cover (blur, mosaic, solid) gets COVER_FEATHER, a generated face GENERATED_FEATHER, a set value
    wins; the fully covered zone is the same whichever, and an unresolved config is refused."""
    from streamdeid.config import COVER_FEATHER, GENERATED_FEATHER
    from streamdeid.anonymizers import create_anonymizer
    from streamdeid.config import AnonymizeConfig
    from streamdeid.render import FrameRenderer

    assert BlendConfig().resolved(generated=False).feather == COVER_FEATHER
    assert BlendConfig().resolved(generated=True).feather == GENERATED_FEATHER
    assert BlendConfig(feather=0.05).resolved(generated=True).feather == 0.05
    cover = face_mask(S, BlendConfig().resolved(generated=False))
    generated = face_mask(S, BlendConfig().resolved(generated=True))
    np.testing.assert_array_equal(cover == 1.0, generated == 1.0)
    assert (cover > 0).sum() < 0.8 * (generated > 0).sum()  # the soft ring is most of a generated mask
    with pytest.raises(ValueError, match="resolved"):
        face_mask(S, BlendConfig())
    anonymize = AnonymizeConfig(method="solid")
    renderer = FrameRenderer(create_anonymizer(anonymize), align=AlignConfig(), blend=BlendConfig(),
                             anonymize=anonymize)
    mask, _ = renderer._mask_for(S)
    np.testing.assert_array_equal(mask, cover)


def test_ownership_by_claim_and_a_lone_face_owns_what_it_changes():
    """render._ownership against a per-pixel count over the whole frame: faces that meet share their pixels
    by claim (in cores the nearest centre, then the larger weight; ties to the earlier face), a face that
    meets none owns its changed pixels."""
    from streamdeid.blend.paste import WarpedFace
    from streamdeid.render import _claim, _ownership

    rng = np.random.default_rng(3)
    rois = [(10, 10, 30, 20), (30, 15, 25, 25), (100, 60, 20, 20), (45, 30, 10, 10), (200, 5, 8, 8)]
    faces = []
    for x, y, w, h in rois:
        alpha = rng.choice([0.0, 0.5, 1.0], size=(h, w)).astype(np.float32)
        faces.append(WarpedFace((x, y, w, h), alpha, np.zeros((h, w, 3), np.uint8)))
    faces.insert(2, None)  # a face outside the frame
    owned = _ownership(faces)
    best = np.zeros((120, 240))
    owner = np.full((120, 240), -1)
    for i, f in enumerate(faces):
        if f is None:
            continue
        x, y, w, h = f.roi
        claim = _claim(f.alpha)
        wins = claim > best[y:y + h, x:x + w]
        best[y:y + h, x:x + w][wins] = claim[wins]
        owner[y:y + h, x:x + w][wins] = i
    assert owned[2] is None
    for i, f in enumerate(faces):
        if f is not None:
            x, y, w, h = f.roi
            np.testing.assert_array_equal(owned[i], owner[y:y + h, x:x + w] == i)
            np.testing.assert_array_equal(owned[i] & ~(f.alpha > 0), False)  # only pixels it changes


def test_a_small_face_under_a_large_cover_owns_its_own_pixels():
    """A small face inside a large face's cover, where both masks weigh 1: its pixels are its own, so the large
    face's track key does not restore it (by mask weight the large cover took them all: recovering one
    hamilton performer restored five audience faces under his cover)."""
    from streamdeid.blend.paste import WarpedFace
    from streamdeid.render import _ownership

    def disc(x, y, side):
        yy, xx = np.mgrid[:side, :side]
        alpha = (np.hypot(xx - side / 2 + 0.5, yy - side / 2 + 0.5) < side / 2).astype(np.float32)
        return WarpedFace((x, y, side, side), alpha, np.zeros((side, side, 3), np.uint8))

    large, small = disc(0, 0, 100), disc(60, 40, 16)  # the small one's centre 0.4 of the large radius out
    for order in ([large, small], [small, large]):
        owned = _ownership(order)
        o_small = owned[order.index(small)]
        o_large = owned[order.index(large)]
        assert o_small[small.alpha > 0].mean() > 0.95  # the small face's own disc
        assert not o_large[40:56, 60:76][o_small].any()  # each pixel one owner
        assert (o_large | np.pad(o_small, ((40, 44), (60, 24))))[large.alpha > 0].all()  # every pixel an owner
