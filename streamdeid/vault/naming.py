"""How an output names its vault (``<output>.sdv`` beside it) and the video id tag that ties the two.

A run tags its output file with the vault's video id (a container comment); ``recover`` checks the tag
against the vault's header, so a vault is never applied to another video. A run with a reviewer's edits
(--edits) adds their digest to the comment (``EDITS_PREFIX``): the review's tracking pass applies the
edits file only to an output rendered with those very edits (review/session.py).
"""

from __future__ import annotations

from pathlib import Path

VIDEO_ID_TAG = "comment"  # container tag that names the vault's video id in the output
VIDEO_ID_PREFIX = "streamdeid-video-id:"
EDITS_PREFIX = "streamdeid-edits:"  # after the video id, one space apart: the digest of the edits applied


def vault_path_for(output: Path) -> Path:
    return output.with_name(output.name + ".sdv")


def video_id_tag(video_id: bytes, edits: str | None = None) -> dict[str, str]:
    """The output's tag: its video id, and ``edits`` (``Edits.digest()``) when the run applied a reviewer's edits."""
    return {VIDEO_ID_TAG: VIDEO_ID_PREFIX + video_id.hex() + (f" {EDITS_PREFIX}{edits}" if edits else "")}


def _tag_words(metadata: dict[str, str]) -> list[str]:
    for key, value in metadata.items():
        if key.lower() == VIDEO_ID_TAG and value.startswith(VIDEO_ID_PREFIX):
            return value.split()
    return []


def read_video_id_tag(metadata: dict[str, str]) -> str | None:
    words = _tag_words(metadata)
    return words[0][len(VIDEO_ID_PREFIX):] if words else None


def read_edits_tag(metadata: dict[str, str]) -> str | None:
    """The digest of the edits the run that wrote this output applied (None: it applied none)."""
    return next((w[len(EDITS_PREFIX):] for w in _tag_words(metadata)[1:] if w.startswith(EDITS_PREFIX)), None)
