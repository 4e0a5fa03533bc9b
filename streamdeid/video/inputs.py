"""What an input address names, and opening its container.

An input is a file, ``-`` (stdin), a network stream (``rtsp://`` etc.) or a
V4L2 device (``/dev/videoN``). The kind decides how FFmpeg opens it and
whether it is live (a live source never counts as "truncated"). Opening
failures that are the user's to fix (missing file, empty file, no stdin pipe)
surface as ``StreamdeidError`` with a one-line message before FFmpeg sees
them, because FFmpeg's own wording for them is cryptic.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

import av

from streamdeid.redact import redact
from streamdeid.types import StreamdeidError

STDIN = "-"
STDIN_NAME = "<stdin>"  # how a run names stdin in its messages
# What reading or writing through PyAV raises on bad media, a full disk or a closed pipe.
AV_ERRORS = (av.FFmpegError, OSError, ValueError)
# What PyAV raises while opening or reading an input; EOFError comes from a
# stream that ends mid-packet.
READ_ERRORS = (*AV_ERRORS, EOFError)


def error_reason(exc: BaseException) -> str:
    """First line of an exception message, without PyAV's ``[Errno N]`` prefix and the file name it
    appends (the caller names the file once; for one-line errors)."""
    strerror, filename = getattr(exc, "strerror", None), getattr(exc, "filename", None)  # OSError, av.FFmpegError
    message = strerror if strerror and filename else str(exc)
    text = redact(message).strip().splitlines()  # FFmpeg quotes the URL it failed on, password and all
    return re.sub(r"^\[Errno -?\d+\]\s*", "", text[0]) if text else type(exc).__name__


# URL schemes read through FFmpeg's network demuxers (live, never "truncated").
STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "rtmps://", "srt://", "udp://", "tcp://")
DEVICE_PREFIX = "/dev/video"


def is_stream_url(path: str) -> bool:
    """Whether ``path`` names a network stream (``rtsp://...`` etc.)."""
    return str(path).lower().startswith(STREAM_SCHEMES)


def is_device(path: str) -> bool:
    """Whether ``path`` names a V4L2 capture device (``/dev/video0``)."""
    return str(path).startswith(DEVICE_PREFIX)


def is_live_input(path: str) -> bool:
    """Network streams, capture devices and stdin never end on their own terms."""
    return path == STDIN or is_stream_url(path) or is_device(path)


def refuse_unread_scheme(src: str) -> None:
    """A URL of a scheme that is neither a live feed streamdeid reads nor a file (http:// and the like)."""
    if "://" in src and not is_stream_url(src):
        raise StreamdeidError(f"{src.split('://', 1)[0]}:// is not a live feed or file streamdeid reads (live feeds: "
                              f"{', '.join(STREAM_SCHEMES)}; download a file first)")


def open_container(
    path_or_dash: str,
    format: str | None,
    options: dict[str, str] | None = None,
    timeout: float | tuple[float, float] | None = None,
) -> tuple[av.container.InputContainer, str, bool]:
    kwargs: dict[str, object] = {"options": dict(options or {})}
    if timeout is not None:
        kwargs["timeout"] = timeout
    if path_or_dash == STDIN:
        if sys.stdin is None or sys.stdin.isatty():
            raise StreamdeidError("input '-' needs a video piped into stdin (e.g. ffmpeg ... -f matroska -)")
        return av.open(sys.stdin.buffer, mode="r", format=format, **kwargs), STDIN_NAME, True
    if is_stream_url(path_or_dash):
        return av.open(path_or_dash, mode="r", format=format, **kwargs), redact(path_or_dash), True
    if is_device(path_or_dash):
        if not Path(path_or_dash).exists():
            raise StreamdeidError(f"capture device not found: {path_or_dash}")
        return av.open(path_or_dash, mode="r", format=format or "v4l2", **kwargs), path_or_dash, True
    path = Path(path_or_dash)
    if not path.exists():
        refuse_unread_scheme(path_or_dash)  # (Path() would also fold its "//" into one)
        raise StreamdeidError(f"input file not found: {path}")
    if path.is_dir():
        raise StreamdeidError(f"input is a directory, not a video: {path}")
    if not os.access(path, os.R_OK):
        raise StreamdeidError(f"input file is not readable (permissions): {path}")
    if stat.S_ISFIFO(path.stat().st_mode):  # a named pipe or <(cmd): no size, no seeking, no name to derive
        raise StreamdeidError(f"input {path} is a pipe, not a file: pipe it into stdin instead "
                              f"(... | streamdeid run - -o OUTPUT)")
    if path.stat().st_size == 0:
        raise StreamdeidError(f"input file is empty: {path}")
    return av.open(str(path), mode="r", format=format, **kwargs), str(path), False

