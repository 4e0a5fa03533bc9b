"""Master and track keys: key files, HKDF derivation, selective disclosure.

Typical use::

    master = generate_master_key("owner.sdkey")       # or load_key(path)
    video_id = new_video_id()                          # once per run
    tk = track_key(master, video_id, track_id)         # 32 bytes, FaceContext.key
    kria = kria_vector(tk, dim)                        # DBAF KRIA key vector
    export_track_key(master, video_id, 3, "t3.sdkey")  # opens only track 3
"""

from .derive import (
    CHECK_LEN,
    KEY_LEN,
    VIDEO_ID_LEN,
    end_key,
    header_mac_key,
    key_check,
    key_id,
    kria_vector,
    new_video_id,
    track_key,
    track_key_check,
    vault_key,
)
from .keyfile import (
    KeyFile,
    MasterKey,
    TrackKey,
    decode_key,
    encode_key,
    export_track_key,
    generate_master_key,
    load_key,
    write_master_key,
)
from .run import RunKeys, run_keys

__all__ = [
    "CHECK_LEN",
    "KEY_LEN",
    "VIDEO_ID_LEN",
    "KeyFile",
    "MasterKey",
    "RunKeys",
    "TrackKey",
    "decode_key",
    "encode_key",
    "end_key",
    "export_track_key",
    "generate_master_key",
    "header_mac_key",
    "key_check",
    "key_id",
    "kria_vector",
    "load_key",
    "new_video_id",
    "run_keys",
    "track_key",
    "track_key_check",
    "vault_key",
    "write_master_key",
]
