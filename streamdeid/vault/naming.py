"""How an output names its vault (``<output>.sdv`` beside it) and the video id tag that ties the two.

A run tags its output file with the vault's video id (a container comment); ``recover`` checks the tag
against the vault's header, so a vault is never applied to another video.
"""

from __future__ import annotations

from pathlib import Path

VIDEO_ID_TAG = "comment"  # container tag that names the vault's video id in the output
VIDEO_ID_PREFIX = "streamdeid-video-id:"


def vault_path_for(output: Path) -> Path:
    return output.with_name(output.name + ".sdv")


def video_id_tag(video_id: bytes) -> dict[str, str]:
    return {VIDEO_ID_TAG: VIDEO_ID_PREFIX + video_id.hex()}


def read_video_id_tag(metadata: dict[str, str]) -> str | None:
    for key, value in metadata.items():
        if key.lower() == VIDEO_ID_TAG and value.startswith(VIDEO_ID_PREFIX):
            return value[len(VIDEO_ID_PREFIX):]
    return None
