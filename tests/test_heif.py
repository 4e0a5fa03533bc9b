"""HEIC and AVIF photos (streamdeid/video/heif.py): a phone's photo, stored turned, is read upright, its faces
covered, and written back in its own format without its metadata; without the heic extra, one clear line."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import run_cli

Image = pytest.importorskip("PIL.Image")


def _turned_photo(media: Path, fmt: str, path: Path) -> np.ndarray:
    """obama.jpg stored a quarter turn anticlockwise with EXIF orientation 6 (a phone held upright), as
    ``fmt``; returns the upright picture (BGR)."""
    upright = cv2.imread(str(media / "obama.jpg"))
    stored = Image.fromarray(cv2.cvtColor(upright, cv2.COLOR_BGR2RGB)).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: turn 90 degrees clockwise to show
    exif[0x010F] = "PhoneMaker"  # a make tag: metadata the output must not carry
    stored.save(path, format=fmt, quality=90, exif=exif.tobytes())
    return upright


@pytest.mark.parametrize("ext,fmt", [("avif", "AVIF"), ("heic", "HEIF")])
def test_a_phone_photo_is_read_upright_covered_and_written_in_its_format(tmp_path: Path, media: Path, ext: str,
                                                                          fmt: str) -> None:
    from PIL import features

    if fmt == "HEIF":
        pytest.importorskip("pillow_heif", reason="the heic extra is not installed")
        import pillow_heif

        pillow_heif.register_heif_opener()
    elif not features.check("avif"):
        pytest.skip("this Pillow has no AVIF support")
    src = tmp_path / f"phone.{ext}"
    upright = _turned_photo(media, fmt, src)
    proc = run_cli("run", str(src), "--anonymizer", "solid", "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()
    out = tmp_path / f"phone_anonymized.{ext}"
    data = out.read_bytes()
    assert data[4:8] == b"ftyp" and data[8:12] in ((b"avif",) if ext == "avif" else (b"heic", b"mif1"))
    with Image.open(io.BytesIO(data)) as im:
        assert im.size == (upright.shape[1], upright.shape[0])  # upright, as a viewer shows the input
        assert im.getexif().get(0x010F) is None  # the input's metadata stays behind
        got = cv2.cvtColor(np.asarray(im.convert("RGB")), cv2.COLOR_RGB2BGR)
    face = (slice(160, 360), slice(420, 560))  # obama.jpg's eyes, nose and mouth (its face box: 371-610, 91-420)
    background = (slice(0, 80), slice(0, 200))
    assert np.abs(got[face].astype(int) - upright[face]).mean() > 40  # covered
    assert np.abs(got[background].astype(int) - upright[background]).mean() < 12  # the rest as it was


def test_a_heic_without_the_extra_says_what_to_install(tmp_path: Path, media: Path) -> None:
    """pillow-heif missing (an import of it fails): one line naming the extra, exit 1, no output."""
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "pillow_heif.py").write_text("raise ImportError('not installed')\n")
    src = tmp_path / "phone.heic"
    src.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64))
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stub), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "streamdeid.cli", "run", str(src), "--no-progress"], env=env,
                          capture_output=True, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and 'pip install "streamdeid[heic]"' in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "phone_anonymized.heic").exists()


def test_a_cut_short_or_animated_avif_is_refused_in_one_line(tmp_path: Path, media: Path) -> None:
    from PIL import features

    if not features.check("avif"):
        pytest.skip("this Pillow has no AVIF support")
    picture = Image.fromarray(cv2.cvtColor(cv2.imread(str(media / "two_people.jpg")), cv2.COLOR_BGR2RGB))
    whole = tmp_path / "whole.avif"
    picture.save(whole, quality=80)
    (tmp_path / "cut.avif").write_bytes(whole.read_bytes()[:len(whole.read_bytes()) // 2])
    picture.save(tmp_path / "anim.avif", save_all=True, append_images=[picture.rotate(180)], duration=100)
    for name, why in (("cut", "damaged or cut short"), ("anim", "an AVIF of 2 images")):
        proc = run_cli("run", str(tmp_path / f"{name}.avif"), "--no-progress")
        err = proc.stderr.decode()
        assert proc.returncode == 1 and why in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / f"{name}_anonymized.avif").exists()
