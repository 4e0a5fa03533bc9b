"""Log lines and progress bars on one terminal (streamdeid/console.py)."""

from __future__ import annotations

import logging

from tqdm import tqdm

from streamdeid.console import FORMAT, BarSafeHandler


def test_a_warning_during_a_progress_bar_gets_a_line_of_its_own(capsys) -> None:
    log = logging.getLogger("streamdeid.test_console")
    handler = BarSafeHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    log.addHandler(handler)
    log.propagate = False
    try:
        with tqdm(total=10, desc="clip.mp4", dynamic_ncols=True) as bar:  # on stderr, as the run's
            bar.update(4)
            log.warning("leak guard: track 2 goes to solid fill")
            bar.update(6)
    finally:
        log.removeHandler(handler)
    lines = capsys.readouterr().err.replace("\r", "\n").splitlines()
    assert "streamdeid: WARNING: leak guard: track 2 goes to solid fill" in lines  # whole, not after the bar
