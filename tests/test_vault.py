import os
import stat
import struct

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdeid.keys import TrackKey, export_track_key, generate_master_key, load_key, new_video_id, track_key
from streamdeid.types import StreamdeidError
from streamdeid.vault import MaskParams, VaultReader, VaultWriter
from streamdeid.vault import format as fmt

TRACKS = (1, 2, 7)
N_FRAMES = 4


def _inverse(t, f):
    return np.array([[1.0 / 3 + t, 0.1, 12.25 + f], [-0.1, 1.0 / 7, 5.5]], dtype=np.float64)


def _crop(rng, t, f):
    c = rng.integers(0, 256, (12 + t, 10 + f, 3), dtype=np.uint8)
    return c


def _build(path, master, video_id, store_crops=True, seed=0, **kw):
    """Vault with 3 interleaved tracks; returns {(track, frame): (crop, inverse, pts, mask)}.

    Lossless crops (so they compare bit-exact) in chunks of 2 frames: every track has several chunks."""
    kw.setdefault("quality", "lossless")
    kw.setdefault("chunk_frames", 2)
    rng = np.random.default_rng(seed)
    truth = {}
    meta = {"video_id": video_id, "source_fingerprint": "sha256-head:ab:1", "output": "out.mp4"}
    with VaultWriter(path, meta, master, store_crops=store_crops, **kw) as vw:
        for f in range(N_FRAMES):
            for t in TRACKS:
                if t == 7 and f == 0:
                    continue  # track 7 appears later
                crop = _crop(rng, t, f)
                pts = None if f == 1 else 1001 * f
                mask = MaskParams(0.5 + t, 0.25, f % 2 == 1)
                vw.append(t, f, pts, _inverse(t, f), (crop.shape[1], crop.shape[0]), crop, mask_params=mask)
                truth[(t, f)] = (crop, _inverse(t, f), pts, mask)
    return truth


@pytest.fixture
def vault(tmp_path):
    master = generate_master_key(tmp_path / "m.sdkey")
    vid = new_video_id()
    path = tmp_path / "out.mp4.sdv"
    truth = _build(path, master, vid)
    return path, master, vid, truth


def _check(rec, truth, crops=True):
    crop, inv, pts, mask = truth[(rec.track_id, rec.frame_index)]
    assert np.array_equal(rec.inverse, inv) and rec.inverse.dtype == np.float64
    assert rec.pts == pts
    assert rec.mask_params == mask
    assert rec.crop_size == (crop.shape[1], crop.shape[0])
    if crops:
        assert rec.crop is not None and rec.crop.dtype == np.uint8 and np.array_equal(rec.crop, crop)
    else:
        assert rec.crop is None


def test_round_trip_bit_exact(vault):
    path, master, vid, truth = vault
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    r = VaultReader(path)
    recs = list(r.records(master))
    assert r.damage is None
    assert sorted((x.track_id, x.frame_index) for x in recs) == sorted(truth)
    for rec in recs:
        _check(rec, truth)
    # raw master bytes work too, and a second pass gives the same
    assert len(list(r.records(master.key_bytes))) == len(truth)


def test_mask_params_keep_their_stored_values():
    """MaskParams are stored as the float64 values vaults always held: x, y, generated; a vault from
    before the generated flag holds two, a face appended without parameters none."""
    assert fmt.mask_to_values(MaskParams(3, 4, True)).tolist() == [3.0, 4.0, 1.0]
    assert fmt.mask_to_values(MaskParams(3, 4)).tolist() == [3.0, 4.0]
    assert fmt.mask_to_values(None).tolist() == []
    assert fmt.mask_from_values(np.array([3.0, 4.0, 0.0])) == MaskParams(3, 4, False)
    assert fmt.mask_from_values(np.array([3.0, 4.0])) == MaskParams(3, 4, None)
    assert fmt.mask_from_values(np.zeros(0)) is None
    with pytest.raises(ValueError):
        fmt.mask_from_values(np.array([1.0]))


def test_geometry_only_mode(tmp_path):
    master = generate_master_key(tmp_path / "m")
    path = tmp_path / "g.sdv"
    truth = _build(path, master, new_video_id(), store_crops=False)
    assert b"\x89PNG" not in path.read_bytes()
    r = VaultReader(path)
    assert r.header["store_crops"] is False and r.header["crop_codec"] is None
    recs = list(r.records(master))
    assert len(recs) == len(truth)
    for rec in recs:
        _check(rec, truth, crops=False)


def test_no_plaintext_in_file(vault):
    path, master, vid, truth = vault
    data = path.read_bytes()
    assert b"\x89PNG" not in data and b"IDAT" not in data and b"IHDR" not in data
    for crop, inv, _, _ in truth.values():
        raw = crop.tobytes()
        assert raw[:24] not in data and raw[-24:] not in data
        assert inv.tobytes()[:16] not in data
    assert master.key_bytes not in data and master.key_bytes.hex().encode() not in data
    for t in TRACKS:
        assert track_key(master, vid, t) not in data


def test_never_overwrites(vault):
    path, master, vid, _ = vault
    before = path.read_bytes()
    with pytest.raises(StreamdeidError, match="already exists"):
        VaultWriter(path, {"video_id": vid}, master)
    assert path.read_bytes() == before
    with VaultWriter(path, {"video_id": vid}, master, overwrite=True) as vw:
        vw.append(1, 0, 0, np.eye(2, 3), 8, np.zeros((8, 8, 3), np.uint8))
    assert len(list(VaultReader(path).records(master))) == 1


def test_writer_refuses_track_key(tmp_path, vault):
    path, master, vid, _ = vault
    tk = export_track_key(master, vid, 1, tmp_path / "t1")
    with pytest.raises(StreamdeidError, match="master key"):
        VaultWriter(tmp_path / "x.sdv", {"video_id": vid}, tk)


def test_inspect_without_key(vault):
    path, master, vid, truth = vault
    info = VaultReader(path).inspect()
    assert info["video_id"] == vid.hex()
    assert info["header"]["output"] == "out.mp4"
    assert info["header"]["source_fingerprint"] == "sha256-head:ab:1"
    assert info["header"]["algorithms"].startswith("HKDF-SHA256/AES-256-GCM")
    assert info["header"]["crop_codec"] == "h264-rgb-lossless/source-yuv420p-lossless"
    assert info["format_version"] == 4
    assert info["track_ids"] == list(TRACKS)
    assert info["frame_records"] == len(truth)
    chunks = {(t, f // 2) for t, f in truth}  # one chunk per track and 2-frame group
    assert info["record_count"] == len(chunks) + 2 * len(TRACKS) + 1
    assert info["bytes_per_face_frame"] > 0
    assert info["frame_range"] == [0, N_FRAMES - 1]
    assert info["tracks"][7] == {"frames": N_FRAMES - 1, "first_frame": 1, "last_frame": N_FRAMES - 1}
    assert info["complete"] is True and info["damage"] is None
    assert info["file_size"] == os.path.getsize(path)
    assert master.key_bytes.hex() not in repr(info)


def test_selective_track_key(tmp_path, vault):
    path, master, vid, truth = vault
    p = tmp_path / "t2.sdkey"
    export_track_key(master, vid, 2, p)
    tk = load_key(p)
    r = VaultReader(path)
    recs = list(r.records(tk))
    assert r.damage is None
    assert [x.frame_index for x in recs] == list(range(N_FRAMES))
    assert all(x.track_id == 2 for x in recs)
    for rec in recs:
        _check(rec, truth)
    assert len(list(r.records(tk, tracks=[2]))) == N_FRAMES
    with pytest.raises(StreamdeidError, match="only track 2"):
        r.records(tk, tracks=[1])
    with pytest.raises(StreamdeidError, match="only track 2"):
        r.records(tk, tracks=[2, 7])
    # master with a track selection
    assert {x.track_id for x in r.records(master, tracks=[1, 7])} == {1, 7}
    with pytest.raises(StreamdeidError, match="not in this vault"):
        r.records(master, tracks=[99])


def test_wrong_keys_rejected(tmp_path, vault):
    path, master, vid, _ = vault
    r = VaultReader(path)
    other = generate_master_key(tmp_path / "other")
    with pytest.raises(StreamdeidError, match="wrong key"):
        r.records(other)
    # track key of another video (same master)
    with pytest.raises(StreamdeidError, match="another video"):
        r.records(export_track_key(master, new_video_id(), 2, tmp_path / "tv"))
    # track key for a track this vault doesn't have
    with pytest.raises(StreamdeidError, match="not in this vault"):
        r.records(export_track_key(master, vid, 3, tmp_path / "t3"))
    # right video/track ids but key from another master
    forged = TrackKey(track_key(other, vid, 2), vid, 2)
    with pytest.raises(StreamdeidError, match="wrong key"):
        r.records(forged)
    # a master for another video: vault of a second video, opened with the other master
    p2 = tmp_path / "v2.sdv"
    _build(p2, other, new_video_id())
    with pytest.raises(StreamdeidError, match="wrong key"):
        VaultReader(p2).records(master)
    # messages are one line and carry no key material
    for k in (other, forged):
        with pytest.raises(StreamdeidError) as ei:
            r.records(k)
        assert "\n" not in str(ei.value) and k.key_bytes.hex() not in str(ei.value)


def test_not_a_vault_and_version(tmp_path, vault):
    path, master, _, _ = vault
    p = tmp_path / "x"
    p.write_bytes(b"hello")
    with pytest.raises(StreamdeidError, match="not a streamdeid vault"):
        VaultReader(p)
    with pytest.raises(StreamdeidError, match="not found"):
        VaultReader(tmp_path / "missing.sdv")
    data = bytearray(path.read_bytes())
    data[7] = 5
    p.write_bytes(bytes(data))
    with pytest.raises(StreamdeidError, match="unsupported vault format version 5"):
        VaultReader(p)


def test_tampered_header_readable_without_key(tmp_path, vault):
    path, master, _, _ = vault
    data = path.read_bytes()
    tampered = data.replace(b'"output":"out.mp4"', b'"output":"evil.mp4"')
    (json_len,) = struct.unpack_from("<I", data, 8)
    tampered = tampered[:8] + struct.pack("<I", json_len + 1) + tampered[12:]
    p = tmp_path / "t.sdv"
    p.write_bytes(tampered)
    r = VaultReader(p)
    assert r.header["output"] == "evil.mp4"
    assert r.inspect()["frame_records"] > 0
    with pytest.raises(StreamdeidError, match="header failed authentication"):
        r.records(master)


def _record_spans(data):
    (json_len,) = struct.unpack_from("<I", data, 8)
    pos = 12 + json_len + 32
    spans = []
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        spans.append((pos, pos + 4 + n, data[pos + 4]))
        pos += 4 + n
    return 12 + json_len + 32, spans


def test_reordered_and_transplanted_records_rejected(tmp_path, vault):
    path, master, vid, _ = vault
    data = path.read_bytes()
    _, spans = _record_spans(data)
    frames = [(a, b) for a, b, t in spans if t == fmt.CHUNK]
    # swap two chunk records of the same track (track 1: frames 0-1 and 2-3; 3 chunks per group)
    (a0, b0), (a1, b1) = frames[0], frames[3]
    swapped = data[:a0] + data[a1:b1] + data[b0:a1] + data[a0:b0] + data[b1:]
    p = tmp_path / "s.sdv"
    p.write_bytes(swapped)
    with pytest.raises(StreamdeidError, match="failed authentication|out of order"):
        list(VaultReader(p).records(master))
    # a record dropped (track 2, frames 0-1)
    a, b = frames[1]
    p.write_bytes(data[:a] + data[b:])
    with pytest.raises(StreamdeidError):
        list(VaultReader(p).records(master))
    # a record from another vault of the same master at the same position
    p2 = tmp_path / "other.sdv"
    _build(p2, master, new_video_id())
    d2 = p2.read_bytes()
    _, spans2 = _record_spans(d2)
    a2, b2, _ = spans2[1]
    a, b, _ = spans[1]
    p.write_bytes(data[:a] + d2[a2:b2] + data[b:])
    with pytest.raises(StreamdeidError, match="failed authentication"):
        list(VaultReader(p).records(master))


def test_aborted_run_reads_as_truncated(tmp_path):
    master = generate_master_key(tmp_path / "m")
    path = tmp_path / "a.sdv"
    with pytest.raises(RuntimeError):
        with VaultWriter(path, {"video_id": new_video_id()}, master) as vw:
            for f in range(3):
                vw.append(4, f, f, np.eye(2, 3), 8, np.full((8, 8, 3), f, np.uint8))
            raise RuntimeError("crash")
    r = VaultReader(path)
    recs = list(r.records(master))
    assert [x.frame_index for x in recs] == [0, 1, 2]  # abort still writes the open group
    assert r.damage is not None and "truncated after record 2" in str(r.damage)
    assert r.damage.last_frame == 2 and "frames after 2" in r.damage.message
    assert r.inspect()["complete"] is False
    with pytest.raises(StreamdeidError, match="truncated"):
        list(r.records(master, strict=True))


# --------------------------------------------------------------------------- property tests


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("vault")
    master = generate_master_key(d / "m")
    vid = new_video_id()
    path = d / "v.sdv"
    _build(path, master, vid)
    data = path.read_bytes()
    r = VaultReader(path)
    originals = list(r.records(master))
    assert r.damage is None
    data_start, spans = _record_spans(data)
    return d, master, data, originals, data_start, spans


def _same(a, b):
    return (
        a.seq == b.seq
        and a.track_id == b.track_id
        and a.frame_index == b.frame_index
        and a.pts == b.pts
        and np.array_equal(a.inverse, b.inverse)
        and a.crop_size == b.crop_size
        and a.mask_params == b.mask_params
        and np.array_equal(a.crop, b.crop)
    )


def _read_all(path, master):
    """(records returned, outcome) where outcome is 'error', 'damage' or 'ok'."""
    got = []
    try:
        r = VaultReader(path)
        for rec in r.records(master):
            got.append(rec)
    except StreamdeidError as e:
        assert "\n" not in str(e) and master.key_bytes.hex() not in str(e)
        return got, "error"
    return got, ("damage" if r.damage is not None else "ok")


def _first_damaged_seq(positions, data_start, spans):
    """Index of the record holding the earliest damaged byte (-1 for the header)."""
    p = min(positions)
    if p < data_start:
        return -1
    for i, (a, b, _) in enumerate(spans):
        if a <= p < b:
            return i
    raise AssertionError(p)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_bit_flips_detected(built, data):
    d, master, blob, originals, data_start, spans = built
    n_flips = data.draw(st.integers(1, 4), label="flips")
    flips = [
        (data.draw(st.integers(0, len(blob) - 1), label="pos"), data.draw(st.integers(0, 7), label="bit"))
        for _ in range(n_flips)
    ]
    bad = bytearray(blob)
    for pos, bit in flips:
        bad[pos] ^= 1 << bit
    if bytes(bad) == blob:  # flips cancelled out
        return
    changed = [i for i in range(len(blob)) if bad[i] != blob[i]]
    path = d / "flipped.sdv"
    path.write_bytes(bytes(bad))
    got, outcome = _read_all(path, master)
    assert outcome in ("error", "damage")
    k = _first_damaged_seq(changed, data_start, spans)
    # every record before the damaged one, intact (in frame order within its group), nothing after it
    before = [o for o in originals if o.seq < k]
    assert len(got) == len(before) and all(_same(g, o) for g, o in zip(got, before))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_truncation_reported(built, data):
    d, master, blob, originals, data_start, spans = built
    cut = data.draw(st.integers(0, len(blob) - 1), label="cut")
    path = d / "cut.sdv"
    path.write_bytes(blob[:cut])
    if cut < data_start:
        with pytest.raises(StreamdeidError):
            VaultReader(path)
        return
    r = VaultReader(path)
    got = list(r.records(master))
    complete = [i for i, (a, b, _) in enumerate(spans) if b <= cut]
    expect = [o for o in originals if o.seq in complete]
    assert len(got) == len(expect) and all(_same(g, o) for g, o in zip(got, expect))
    assert r.damage is not None
    assert r.damage.records_ok == len(complete)
    assert r.damage.partial_bytes == cut - (spans[len(complete) - 1][1] if complete else data_start)
    assert f"after record {len(complete)}" in str(r.damage)
    info = r.inspect()
    assert info["complete"] is False and info["damage"] == str(r.damage)
    # a track key sees its own complete records and the same damage
    tk = TrackKey(track_key(master, r.video_id, 2), r.video_id, 2)
    try:
        got2 = list(r.records(tk))
    except StreamdeidError:
        pytest.fail("track key read of a truncated vault must not raise")
    assert [g.seq for g in got2] == [o.seq for o in expect if o.track_id == 2]
    assert r.damage is not None


def test_crops_roundtrip_lossless_exact_varied_sizes(tmp_path):
    master = generate_master_key(tmp_path / "m")
    path = tmp_path / "v.sdv"
    rng = np.random.default_rng(3)
    crops = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(1, 1), (3, 200), (128, 128)]]
    crops.append(np.ascontiguousarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)[::2, ::-1]))
    with VaultWriter(path, {"video_id": new_video_id().hex()}, master, quality="lossless") as vw:
        for i, c in enumerate(crops):
            vw.append(0, i, -5 if i == 0 else 2**40, np.full((2, 3), np.pi * i), c.shape[0], c)
    recs = list(VaultReader(path).records(master))
    assert [r.pts for r in recs] == [-5, 2**40, 2**40, 2**40]
    for r, c in zip(recs, crops):
        assert np.array_equal(r.crop, c)
        assert np.array_equal(r.inverse, np.full((2, 3), np.pi * r.frame_index))


def test_bgr_crop_with_owned_mask_reads_as_bgra(tmp_path):
    """append(crop_bgr=BGR, owned=mask) stores what the BGRA crop with that alpha stores; the unowned
    pixels (here noise) never reach the vault."""
    master = generate_master_key(tmp_path / "m")
    rng = np.random.default_rng(5)
    bgr = [rng.integers(0, 256, (37 + i, 29 + 2 * i, 3), dtype=np.uint8) for i in range(4)]
    owned = [rng.random(c.shape[:2]) < 0.6 for c in bgr]
    for quality in ("lossless", "high"):
        path = tmp_path / f"{quality}.sdv"
        with VaultWriter(path, {"video_id": new_video_id()}, master, quality=quality) as vw:
            for i, (c, m) in enumerate(zip(bgr, owned)):
                vw.append(1, i, None, np.eye(2, 3), 64, c, owned=m)
            with pytest.raises(ValueError):
                vw.append(1, 5, None, np.eye(2, 3), 64, bgr[0], owned=owned[1])
        for r, c, m in zip(VaultReader(path).records(master), bgr, owned):
            assert r.crop.shape == c.shape[:2] + (4,)
            assert np.array_equal(r.crop[..., 3] > 0, m) and not r.crop[~m].any()
            if quality == "lossless":
                assert np.array_equal(r.crop[m, :3], c[m])


def test_tracks_starting_mid_group_come_back_in_frame_order(tmp_path):
    """Chunks of one group are written track by track; the reader merges them by frame."""
    master = generate_master_key(tmp_path / "m")
    path = tmp_path / "v.sdv"
    spans = {1: range(0, 11), 2: range(15, 25), 3: range(5, 21), 4: range(24, 40)}
    with VaultWriter(path, {"video_id": new_video_id()}, master, chunk_frames=25, quality="small") as vw:
        for f in range(40):
            vw.advance(f)
            for t, frames in spans.items():
                if f in frames:
                    vw.append(t, f, f, np.eye(2, 3), 16, np.full((16, 16, 3), 10 * t, np.uint8))
    recs = list(VaultReader(path).records(master))
    assert [(r.frame_index, r.track_id) for r in recs] == sorted((f, t) for t, fr in spans.items() for f in fr)
    assert all(np.abs(r.crop.astype(int) - 10 * r.track_id).max() <= 2 for r in recs)
    with pytest.raises(ValueError, match="already written"):
        with VaultWriter(tmp_path / "w.sdv", {"video_id": new_video_id()}, master, chunk_frames=2) as vw:
            vw.append(1, 5, 0, np.eye(2, 3), 4, np.zeros((4, 4, 3), np.uint8))
            vw.append(1, 9, 0, np.eye(2, 3), 4, np.zeros((4, 4, 3), np.uint8))
            vw.append(1, 3, 0, np.eye(2, 3), 4, np.zeros((4, 4, 3), np.uint8))


def _chunk_count(path, tracks: int) -> int:
    """CHUNK records in a finished vault (each track adds a TRACK and an END-of-track record, plus one END)."""
    return VaultReader(path).inspect()["record_count"] - 2 * tracks - 1


@pytest.mark.parametrize("track_cap,total_cap,chunks", [
    (1 << 20, 1 << 20, 8),  # many small tracks: one chunk each per group, however many tracks there are
    (4096, 1 << 20, 8 * 5),  # one track's crops fill its cap every 6 frames: the group is written early
    (1 << 20, 32768, 8 * 5),  # all tracks' crops together fill the (memory) cap every 6 frames
])
def test_groups_are_written_early_by_one_tracks_bytes_or_all_tracks_bytes(tmp_path, monkeypatch,
                                                                          track_cap, total_cap, chunks):
    """A crowd (many tracks, small crops) keeps one chunk per track and group: a group is written early
    only when one track's crops reach MAX_TRACK_BYTES (a record's size) or all of them MAX_PENDING_BYTES."""
    from streamdeid.vault import writer

    monkeypatch.setattr(writer, "MAX_TRACK_BYTES", track_cap)
    monkeypatch.setattr(writer, "MAX_PENDING_BYTES", total_cap)
    master = generate_master_key(tmp_path / "m")
    path = tmp_path / "v.sdv"
    with VaultWriter(path, {"video_id": new_video_id()}, master, chunk_frames=25, quality="small") as vw:
        for f in range(25):
            vw.advance(f)
            for t in range(1, 9):  # 8 tracks of 768-byte crops: one track reaches 4 KB on its 6th frame
                vw.append(t, f, f, np.eye(2, 3), 16, np.full((16, 16, 3), 10 * t, np.uint8))
    assert _chunk_count(path, 8) == chunks
    assert len(list(VaultReader(path).records(master))) == 8 * 25  # every face is there


def _real_face_crops(media, n=30):
    """n face crops (BGRA, an elliptical owned mask) from a shared clip, as a run stores them."""
    import av

    crops = []
    with av.open(str(media / "head-pose-face-detection-male.mp4")) as c:
        for i, frame in enumerate(c.decode(video=0)):
            if i >= n:
                break
            img = frame.to_ndarray(format="bgr24")
            h, w = img.shape[:2]
            crop = img[h // 4:h // 4 + 120, w // 2 - 50 + i:w // 2 + 50 + i]
            mask = np.zeros(crop.shape[:2], np.uint8)
            cv2.ellipse(mask, (50, 60), (45, 58), 0, 0, 360, 255, -1)
            bgra = np.zeros(crop.shape[:2] + (4,), np.uint8)
            bgra[mask > 0, :3] = crop[mask > 0]
            bgra[..., 3] = mask
            crops.append(bgra)
    return crops


@pytest.mark.parametrize("quality,min_db", [("high", 44.0), ("small", 38.0)])
def test_lossy_crops_psnr_and_exact_masks(tmp_path, media, quality, min_db):
    master = generate_master_key(tmp_path / "m")
    path = tmp_path / "v.sdv"
    crops = _real_face_crops(media)
    with VaultWriter(path, {"video_id": new_video_id()}, master, quality=quality) as vw:
        for i, c in enumerate(crops):
            vw.append(3, i, i, np.eye(2, 3), 64, c)
    recs = list(VaultReader(path).records(master))
    assert len(recs) == len(crops)
    se = n = 0
    for r, c in zip(recs, crops):
        own = c[..., 3] > 0
        assert np.array_equal(r.crop[..., 3] > 0, own)  # ownership exact
        assert not r.crop[~own].any()  # nothing outside it
        d = r.crop[own, :3].astype(float) - c[own, :3]
        se, n = se + (d ** 2).sum(), n + d.size
    psnr = 10 * np.log10(255 ** 2 / (se / n))
    assert psnr >= min_db
    raw = sum(c.nbytes for c in crops)
    assert os.path.getsize(path) < raw / 10  # a video, not stored pixels


def test_format_1_vault_still_reads():
    """tests/data/vault_v1.sdv was written by the format-1 writer (PNG per face) with the master key
    bytes(range(32)): 2 tracks x 3 frames of seeded random BGRA crops."""
    from pathlib import Path

    from streamdeid.keys.keyfile import MasterKey

    path = Path(__file__).parent / "data" / "vault_v1.sdv"
    r = VaultReader(path)
    assert r.version == 1 and r.inspect()["complete"] is True
    recs = list(r.records(MasterKey(bytes(range(32)))))
    rng = np.random.default_rng(11)
    expect = []
    for f in range(3):
        for t in (1, 2):
            c = rng.integers(0, 256, (6 + t, 5 + f, 4), dtype=np.uint8)
            c[..., 3] = np.where(c[..., 3] > 80, 255, 0)
            c[c[..., 3] == 0] = 0
            expect.append((t, f, c))
    assert [(x.track_id, x.frame_index) for x in recs] == [(t, f) for t, f, _ in expect]
    for x, (t, f, c) in zip(recs, expect):
        assert np.array_equal(x.crop, c) and x.pts == 100 * f
        assert x.mask_params == MaskParams(t, f, False)
    with pytest.raises(StreamdeidError, match="wrong key"):
        list(r.records(MasterKey(bytes(32))))


def test_a_record_rewritten_with_a_track_key_fails_the_masters_recovery(tmp_path, vault):
    """Someone given one person's key can open that person's records and encrypt new ones that the key accepts
    (a security review: a red patch pasted beside the face passed recovery with the master key, exit 0). The END
    record, which only the master opens, holds a digest of every record's GCM tag: the master's recovery now
    fails on such a vault, while the person's own key still reads it (it cannot tell, and restores only them)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from streamdeid.keys import derive

    path, master, vid, truth = vault
    reader = VaultReader(path)
    data = bytearray(path.read_bytes())
    _, spans = _record_spans(bytes(data))
    seq, (a, b, _) = next((i, s) for i, s in enumerate(spans) if s[2] == fmt.CHUNK
                          and struct.unpack_from("<I", data, s[0] + 5)[0] == 2)
    tk = master.track_key(reader.video_id, 2)  # what export-key gives the holder of person 2's key
    aes = AESGCM(derive.vault_key(tk))
    rtype, tid, fi = fmt.REC.unpack_from(data, a + 4)
    body = bytes(data[a + 4 + fmt.REC.size:b])
    clear, nonce, ct = body[:fmt.CHUNK_CLEAR.size], body[fmt.CHUNK_CLEAR.size:][:12], body[fmt.CHUNK_CLEAR.size + 12:]
    ad = fmt.aad(reader.header_digest, seq, rtype, tid, fi, clear)
    plain = bytearray(aes.decrypt(nonce, ct, ad))
    plain[-1] ^= 0xFF  # any change the forger likes
    new_nonce = os.urandom(12)
    forged = clear + new_nonce + aes.encrypt(new_nonce, bytes(plain), ad)
    assert len(forged) == len(body)
    data[a + 4 + fmt.REC.size:b] = forged
    p = tmp_path / "forged.sdv"
    p.write_bytes(bytes(data))
    person = TrackKey(tk, reader.video_id, 2)
    assert {r.track_id for r in VaultReader(p).records(person)} == {2}  # the forged record passes its own key
    with pytest.raises(StreamdeidError, match="digest does not match"):
        list(VaultReader(p).records(master))
    assert len(list(VaultReader(path).records(master))) == len(truth)  # the vault as written passes


def test_format_3_vault_still_reads():
    """tests/data/vault_v3.sdv: written by the format-3 writer (no output thumbnails in its END record) with _build,
    the master key bytes(range(32)) and video id 00112233..eeff."""
    from pathlib import Path

    from streamdeid.keys.keyfile import MasterKey

    r = VaultReader(Path(__file__).parent / "data" / "vault_v3.sdv")
    assert r.version == 3 and r.inspect()["complete"] is True
    recs = list(r.records(MasterKey(bytes(range(32))), strict=True))
    assert r.damage is None and r.output_samples is None
    assert len(recs) == len(TRACKS) * N_FRAMES - 1


def test_the_end_record_remembers_the_output_and_a_changed_one_fails(tmp_path, vault):
    """Format 4: the END record holds thumbnails of every 50th output frame (vault/fingerprint.py), under the
    master key; they are bound like the rest of it."""
    path, master, vid, truth = vault
    r = VaultReader(path)
    list(r.records(master))
    assert r.output_samples == {}  # _build notes no output frames
    w = tmp_path / "with.sdv"
    meta = {"video_id": vid, "source_fingerprint": "sha256-head:ab:1", "output": "out.mp4"}
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (90, 160, 3), dtype=np.uint8) for _ in range(101)]
    with VaultWriter(w, meta, master, quality="lossless") as vw:
        for f, img in enumerate(images):
            vw.advance(f)
            vw.note_output(f, img)
    r = VaultReader(w)
    list(r.records(master))
    assert sorted(r.output_samples) == [0, 50, 100]
    from streamdeid.vault.fingerprint import thumbnail

    assert all(np.array_equal(r.output_samples[f], thumbnail(images[f])) for f in (0, 50, 100))
    data = bytearray(w.read_bytes())
    data[-20] ^= 1  # inside the END record's ciphertext
    w.write_bytes(bytes(data))
    with pytest.raises(StreamdeidError, match="tampered"):
        list(VaultReader(w).records(master))


def test_format_2_vault_still_reads():
    """tests/data/vault_v2.sdv: written by the format-2 writer (no digest in its END record) with _build, the
    master key bytes(range(32)) and video id 00112233..eeff."""
    from pathlib import Path

    from streamdeid.keys.keyfile import MasterKey

    r = VaultReader(Path(__file__).parent / "data" / "vault_v2.sdv")
    assert r.version == 2 and r.inspect()["complete"] is True
    recs = list(r.records(MasterKey(bytes(range(32)))))
    assert r.damage is None
    rng = np.random.default_rng(0)  # _build's crops, in its order
    expect = {}
    for f in range(N_FRAMES):
        for t in TRACKS:
            if t == 7 and f == 0:
                continue
            expect[(t, f)] = _crop(rng, t, f)
    assert sorted((x.track_id, x.frame_index) for x in recs) == sorted(expect)
    for x in recs:
        assert np.array_equal(x.crop, expect[(x.track_id, x.frame_index)])
