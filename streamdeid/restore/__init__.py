"""Recovery: putting the original faces back with a key (``streamdeid recover``).

``video.py`` restores a whole anonymized video from its vault, exactly (the stored pixels) or by the model
(DBAF regenerates each face from its track key); ``exact.py`` is the per-frame work: the key, the vault's
records grouped by frame, and the copy of a record's owned pixels back into a frame.
"""

from .exact import load_recovery_key
from .video import MODEL_MODE_CAVEAT, RecoverResult, recover

__all__ = ["MODEL_MODE_CAVEAT", "RecoverResult", "load_recovery_key", "recover"]
