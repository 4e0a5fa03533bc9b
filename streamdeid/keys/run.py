"""The keys of one run: a master key (the user's file, or ephemeral) and a fresh video id per video."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from streamdeid.types import StreamdeidError

from .derive import new_video_id, track_key
from .keyfile import MasterKey, generate_master_key, load_key

log = logging.getLogger(__name__)


@dataclass
class RunKeys:
    """The keys of one run: a master key (from the user's file, or ephemeral) and a video id."""

    master: MasterKey | bytes
    video_id: bytes
    ephemeral: bool  # True: the master was drawn for this run and never stored (irreversible)
    created: Path | None = None  # the key file this run made (--new-key); None: the user's, or none
    # the outputs a vault under this master was opened for, by every video of the run (shared by for_next_video):
    # a key file the run made is removed after a failure only when none of their vaults is on disk
    vault_outputs: list[Path] = field(default_factory=list, repr=False, compare=False)
    # Each track's key, derived once: the renderer asks for it per face and frame (a crowd: 270 a frame).
    _tracks: dict[int, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    def for_track(self, track_id: int) -> bytes:
        key = self._tracks.get(track_id)
        if key is None:
            key = self._tracks[track_id] = track_key(self.master, self.video_id, track_id)
        return key

    def for_next_video(self) -> "RunKeys":
        """Same master, a fresh video id (each video of a folder gets its own)."""
        return RunKeys(self.master, new_video_id(), self.ephemeral, self.created, self.vault_outputs)


def run_keys(key_file: str | None, *, new_key: bool = False) -> RunKeys:
    """Keys for ``run``: the master from ``key_file`` (created with ``new_key``), or an ephemeral one."""
    if key_file is None:
        return RunKeys(secrets.token_bytes(32), new_video_id(), ephemeral=True)
    path = Path(key_file)
    created = None
    if not path.exists():
        if not new_key:
            raise StreamdeidError(f"{key_file}: no such key file (create one with `streamdeid keygen {key_file}`"
                                  " or pass --new-key)")
        master, created = generate_master_key(path), path
        log.warning("created a new master key in %s: keep it safe, it is the only way to recover faces", path)
    else:
        master = load_key(path)
    if not isinstance(master, MasterKey):
        raise StreamdeidError(f"{key_file} is a track key; run needs a master key")
    return RunKeys(master, new_video_id(), ephemeral=False, created=created)
