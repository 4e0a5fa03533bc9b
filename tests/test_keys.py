import os
import stat

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdeid.keys import (
    MasterKey,
    TrackKey,
    decode_key,
    encode_key,
    export_track_key,
    generate_master_key,
    key_check,
    key_id,
    kria_vector,
    load_key,
    new_video_id,
    track_key,
    track_key_check,
    vault_key,
)
from streamdeid.types import StreamdeidError


@pytest.fixture
def master(tmp_path):
    return generate_master_key(tmp_path / "owner.sdkey")


def test_generate_mode_0600_and_roundtrip(tmp_path):
    p = tmp_path / "m.sdkey"
    m = generate_master_key(p)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    assert os.path.getsize(p) == 47
    loaded = load_key(p)
    assert isinstance(loaded, MasterKey) and loaded.kind == "master"
    assert loaded == m and loaded.key_bytes == m.key_bytes and len(m.key_bytes) == 32


def test_generate_never_overwrites(tmp_path):
    p = tmp_path / "m.sdkey"
    generate_master_key(p)
    before = p.read_bytes()
    with pytest.raises(StreamdeidError, match="already exists"):
        generate_master_key(p)
    assert p.read_bytes() == before
    other = tmp_path / "other"
    other.write_bytes(b"precious")
    with pytest.raises(StreamdeidError):
        generate_master_key(other)
    assert other.read_bytes() == b"precious"


def test_keys_are_random(tmp_path):
    a = generate_master_key(tmp_path / "a")
    b = generate_master_key(tmp_path / "b")
    assert a.key_bytes != b.key_bytes and a != b


def test_repr_hides_key(master, tmp_path):
    vid = new_video_id()
    tk = export_track_key(master, vid, 7, tmp_path / "t7")
    for k in (master, tk, load_key(tmp_path / "t7")):
        for text in (repr(k), str(k)):
            assert k.key_bytes.hex() not in text and "hidden" in text
            assert str(list(k.key_bytes))[:20] not in text
    assert "track_id=7" in repr(tk)


def test_load_missing_and_directory(tmp_path):
    with pytest.raises(StreamdeidError, match="not found"):
        load_key(tmp_path / "nope")
    with pytest.raises(StreamdeidError, match="directory"):
        load_key(tmp_path)


@pytest.mark.parametrize("kind", ["master", "track"])
def test_every_single_byte_corruption_rejected(tmp_path, kind):
    m = generate_master_key(tmp_path / "m")
    if kind == "track":
        export_track_key(m, new_video_id(), 3, tmp_path / "k")
        data = (tmp_path / "k").read_bytes()
    else:
        data = (tmp_path / "m").read_bytes()
    secret = load_key(tmp_path / ("k" if kind == "track" else "m")).key_bytes
    p = tmp_path / "bad"
    for i in range(len(data)):
        for delta in (1, 0x80):
            bad = bytearray(data)
            bad[i] ^= delta
            p.write_bytes(bytes(bad))
            with pytest.raises(StreamdeidError) as ei:
                load_key(p)
            msg = str(ei.value)
            assert "\n" not in msg and secret.hex() not in msg and secret.hex()[:16] not in msg
    for bad in (data[:-1], data + b"\0", b"", b"SDKEY", b"hello world" * 10, data[:10]):
        p.write_bytes(bad)
        with pytest.raises(StreamdeidError):
            load_key(p)


def test_unsupported_version_message(master):
    data = bytearray(encode_key(master))
    data[5] = 9
    import hashlib

    data[-8:] = hashlib.sha256(bytes(data[:-8])).digest()[:8]
    with pytest.raises(StreamdeidError, match="unsupported key file version 9"):
        decode_key(bytes(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_random_bytes_only_streamdeid_error(data):
    try:
        k = decode_key(data)
    except StreamdeidError:
        return
    # only a genuinely valid encoding may decode
    assert encode_key(k) == data


def test_track_derivation_deterministic_and_distinct(master, tmp_path):
    v1, v2 = new_video_id(), new_video_id()
    assert v1 != v2 and len(v1) == 16
    k = track_key(master, v1, 1)
    assert len(k) == 32
    assert k == track_key(master, v1, 1) == track_key(master.key_bytes, v1, 1) == master.track_key(v1, 1)
    keys = {track_key(master, v, t) for v in (v1, v2) for t in (0, 1, 2, 10, 2**32 - 1)}
    assert len(keys) == 10
    other = generate_master_key(tmp_path / "other")
    assert track_key(other, v1, 1) != k
    # sub-keys are distinct from each other and from the track key
    derived = {k, vault_key(k), track_key_check(k), key_check(master, v1), master.key_bytes}
    assert len(derived) == 5
    assert len(track_key_check(k)) == 16 and len(key_check(master, v1)) == 16
    assert key_check(master, v1) != key_check(master, v2)
    assert key_id(master) == master.key_id and len(master.key_id) == 16


def test_derivation_argument_checks(master, tmp_path):
    vid = new_video_id()
    tk = export_track_key(master, vid, 1, tmp_path / "t")
    with pytest.raises(TypeError):
        track_key(tk, vid, 1)  # a track key is not a master
    with pytest.raises(ValueError):
        track_key(master, b"short", 1)
    with pytest.raises(ValueError):
        track_key(master, vid, -1)
    with pytest.raises(ValueError):
        track_key(master, vid, 2**32)


def test_kria_vector():
    vid = new_video_id()
    m = os.urandom(32)
    k1, k2 = track_key(m, vid, 1), track_key(m, vid, 2)
    v = kria_vector(k1, 512)
    assert v.shape == (512,) and v.dtype == np.float32 and np.all(np.isfinite(v))
    assert np.array_equal(v, kria_vector(k1, 512))
    assert not np.allclose(v, kria_vector(k2, 512))
    assert not np.allclose(v, kria_vector(track_key(m, new_video_id(), 1), 512))
    # prefix-consistent across dims, including across an HKDF block boundary (510 pairs/block)
    big = kria_vector(k1, 3001)
    assert big.shape == (3001,)
    assert np.array_equal(big[:512], v) and np.array_equal(big[:1021], kria_vector(k1, 1021))
    assert kria_vector(k1, 1).shape == (1,) and kria_vector(k1, 0).shape == (0,)
    # roughly standard normal
    z = kria_vector(k1, 40000).astype(np.float64)
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.02


def test_export_track_key(master, tmp_path):
    vid = new_video_id()
    p = tmp_path / "t5.sdkey"
    tk = export_track_key(master, vid, 5, p)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    assert os.path.getsize(p) == 67
    loaded = load_key(p)
    assert isinstance(loaded, TrackKey) and loaded.kind == "track"
    assert loaded == tk
    assert loaded.video_id == vid and loaded.track_id == 5
    assert loaded.key_bytes == track_key(master, vid, 5)
    assert loaded.opens(vid, 5) and not loaded.opens(vid, 6) and not loaded.opens(new_video_id(), 5)
    with pytest.raises(StreamdeidError, match="already exists"):
        export_track_key(master, vid, 6, p)
    assert load_key(p).track_id == 5


def test_key_file_others_can_read_is_warned_about(tmp_path, caplog):
    p = tmp_path / "m.sdkey"
    generate_master_key(p)
    with caplog.at_level("WARNING"):
        load_key(p)
    assert not caplog.records  # 0600: quiet
    os.chmod(p, 0o644)
    with caplog.at_level("WARNING"):
        load_key(p)
    (record,) = caplog.records
    assert "chmod 600" in record.getMessage() and "644" in record.getMessage()


def test_source_fingerprints_of_one_input_differ_between_vaults(tmp_path):
    """Two vaults made from one input with one key showed the same clear fingerprint, which links them (a
    security review); salted with each vault's video id they differ, and a resumed folder run still knows an
    input by either its salted or (older vaults) its unsalted form."""
    from streamdeid.run.runner import _fingerprints
    from streamdeid.vault import source_fingerprint

    src = tmp_path / "in.bin"
    src.write_bytes(os.urandom(5000))
    master = generate_master_key(tmp_path / "k")
    a, b = new_video_id(), new_video_id()
    fa, fb = source_fingerprint(src, master, a), source_fingerprint(src, master, b)
    assert fa != fb and fa.startswith("hmac-sha256-head:")
    legacy = source_fingerprint(src, master, None)
    assert set(_fingerprints(str(src), master, a.hex())) == {fa, legacy}
    src.write_bytes(os.urandom(5000))  # another input
    assert fa not in _fingerprints(str(src), master, a.hex())
