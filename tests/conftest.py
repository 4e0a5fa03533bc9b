"""Shared fixtures: the real media beside the repo, and small synthetic videos."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
MEDIA = SHARED / "media"
UTK = SHARED / "datasets" / "utkface-crops" / "images"  # the face training set (held-out split inside)


@pytest.fixture(scope="session")
def media() -> Path:
    if not MEDIA.is_dir():
        pytest.skip(f"shared media not found at {MEDIA} (clone the repo beside ../shared)")
    return MEDIA


@pytest.fixture(scope="session")
def browser():
    """A headless chromium (tests/browser.py); skips when chromium or Playwright is missing."""
    from browser import Browser, chromium_path

    path = chromium_path()
    if path is None:
        pytest.skip("chromium not installed (bash .ci/setup-browser.sh installs Debian's)")
    pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install -e '.[test]')")
    b = Browser(path)
    yield b
    b.close()


def run_cli(*args: str, input: bytes | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `streamdeid` command line in a subprocess (exit codes, stderr as users see them)."""
    return subprocess.run([sys.executable, "-m", "streamdeid.cli", *args], input=input,
                          capture_output=True, timeout=timeout)


def make_video(path: Path, frames: list[np.ndarray], *, fps: int = 25, codec: str = "libx264",
               pts: list[int] | None = None, time_base: Fraction | None = None, rotation: int = 0,
               metadata: dict[str, str] | None = None) -> Path:
    """Encode BGR frames ([H, W, 3] uint8) into ``path`` with PyAV (``rotation``: a display matrix's degrees,
    counter-clockwise, over frames given as stored)."""
    h, w = frames[0].shape[:2]
    with av.open(str(path), "w") as c:
        c.metadata.update(metadata or {})
        s = c.add_stream(codec, rate=fps)
        s.width, s.height = w, h
        if rotation:
            s.set_display_rotation(rotation)
        s.pix_fmt = "yuv444p" if (w % 2 or h % 2) and codec == "libx264" else "yuv420p"
        if time_base is not None:
            s.time_base = time_base
        for i, img in enumerate(frames):
            vf = av.VideoFrame.from_ndarray(img, format="bgr24")
            if pts is not None:
                vf.pts, vf.time_base = pts[i], time_base
            for p in s.encode(vf):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def set_mp4_matrix(path: Path, a: int, b: int, c: int, d: int) -> Path:
    """Write a display matrix ([a b; c d], entries -1, 0 or 1) into an MP4's first track header (tkhd), as
    ``ffmpeg -display_vflip`` and cameras do: PyAV can only set a rotation, and this one may also mirror."""
    data = bytearray(path.read_bytes())
    at = data.find(b"tkhd")
    at += 4 + (52 if data[at + 4] == 1 else 40)  # the matrix after version/flags, times, ids and volume
    fixed = [a << 16, b << 16, 0, c << 16, d << 16, 0, 0, 0, 1 << 30]  # 16.16, and 2.30 for the third column
    data[at:at + 36] = b"".join(v.to_bytes(4, "big", signed=True) for v in fixed)
    path.write_bytes(bytes(data))
    return path


def decode(path: Path | str) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


def face_frames(media: Path, n: int, size: tuple[int, int] = (320, 240)) -> list[np.ndarray]:
    """``n`` frames with obama.jpg's face moving left to right over a grey background."""
    import cv2

    face = cv2.imread(str(media / "obama.jpg"))
    h = size[1] * 2 // 3
    face = cv2.resize(face, (face.shape[1] * h // face.shape[0], h))
    out = []
    for i in range(n):
        img = np.full((size[1], size[0], 3), 90, np.uint8)
        x = (size[0] - face.shape[1]) * i // max(n - 1, 1)
        img[20:20 + face.shape[0], x:x + face.shape[1]] = face
        out.append(img)
    return out


def load_image(name: str) -> np.ndarray:
    """A still from the shared media (skips the test when the folder is absent)."""
    import cv2

    path = MEDIA / name
    if not path.exists():
        pytest.skip(f"{path} not available (clone the repo beside ../shared)")
    image = cv2.imread(str(path))
    assert image is not None
    return image


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread: on the shared 2-core machine OpenMP barriers under contention cost 10-40x."""
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def trained_kria(model):
    """Give a fresh DBAF's residual KRIA (cpu-small starts it as the identity) a non-zero last
    layer, as training does; otherwise G(x, P) ignores P. Returns the model."""
    import torch

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for blk in model.kria.blocks:
            blk.net[-1].weight.copy_(torch.randn(blk.net[-1].weight.shape, generator=g))
    return model
