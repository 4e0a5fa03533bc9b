"""Finished outputs are ordinary videos: the header holds the true duration and the index comes first,
so a browser shows the right length over plain HTTP and seeks (issue 18).

The header checks run everywhere (PyAV, no decoding); the browser checks need Debian's chromium
(``bash .ci/setup-browser.sh``) and Playwright (test extras), and skip with a reason without them.
A live segment is checked in tests/test_live.py.
"""

from __future__ import annotations

from pathlib import Path

import av
import pytest

from browser import header_facts
from conftest import MEDIA, run_cli

CLIP = MEDIA / "short_hamilton_clip.mp4"  # 640x360, 275 frames, 10.02 s, AAC audio


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Path]:
    """A default run (with a key, so it has a vault) and the recovery of its output."""
    if not CLIP.is_file():
        pytest.skip(f"shared clip {CLIP} not found")
    d = tmp_path_factory.mktemp("browser")
    run = d / "run.mp4"
    proc = run_cli("run", str(CLIP), "-o", str(run), "--no-progress", "--key-file", str(d / "k.key"), "--new-key")
    assert proc.returncode == 0, proc.stderr.decode()
    rec = d / "recovered.mp4"
    proc = run_cli("recover", str(run), "--key-file", str(d / "k.key"), "-o", str(rec), "--no-progress")
    assert proc.returncode == 0, proc.stderr.decode()
    return {"run": run, "recover": rec}


@pytest.mark.parametrize("which", ["run", "recover"])
def test_header_has_true_duration_and_index_first(outputs, which) -> None:
    boxes, seconds, frames = header_facts(outputs[which])
    with av.open(str(CLIP)) as src:
        source_seconds, source_frames = src.duration / 1e6, src.streams.video[0].frames
    assert "moof" not in boxes, boxes  # not fragmented any more
    assert boxes.index("moov") < boxes.index("mdat"), boxes  # faststart
    assert frames == source_frames == 275
    assert abs(seconds - source_seconds) <= 1 / 25, (seconds, source_seconds)
    assert not any(p.name.endswith((".partial.mp4", ".finishing.mp4")) for p in outputs[which].parent.iterdir())


@pytest.mark.parametrize("which", ["run", "recover"])
def test_browser_shows_duration_and_seeks(outputs, which, browser) -> None:
    source = browser.duration_over_http(CLIP)
    assert source == pytest.approx(10.02, abs=0.05)
    shown = browser.duration_over_http(outputs[which])
    print(f"{browser.version}: {which} output {shown:.3f} s over plain HTTP, source {source:.3f} s")
    assert abs(shown - source) <= 1 / 25, (shown, source)
    seek = browser.seek_last_second(outputs[which])
    assert abs(seek["time"] - seek["target"]) < 0.1 and seek["target"] > 8.5, seek
    assert seek["mean"] > 5, seek  # a picture was drawn, not a blank canvas
    assert (seek["width"], seek["height"]) == (640, 360)
