"""Video input/output: decode sources to ``Frame``s, encode them back.

``open_source`` reads files or stdin; ``VideoWriter`` writes crash-safe
outputs (partial file + rename, fragmented MP4) and copies audio.
"""

from streamdeid.video.images import is_image, is_image_path, is_video_path, list_media, read_image
from streamdeid.video.reader import AudioPacket, ColorInfo, VideoSource, open_source
from streamdeid.video.writer import VideoWriter, write_image

__all__ = [
    "AudioPacket",
    "ColorInfo",
    "VideoSource",
    "VideoWriter",
    "is_image",
    "is_image_path",
    "is_video_path",
    "list_media",
    "open_source",
    "read_image",
    "write_image",
]
