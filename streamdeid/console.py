"""Log lines on the terminal: the CLI's form, URLs redacted, and never glued to a progress bar.

tqdm redraws its bar in place on stderr; a log line written beside it lands on the bar's line ("recover:  40%|##
...streamdeid: WARNING: ..."), where a user misses it. ``tqdm.write`` clears the bars, prints the line, and
draws them again below it.
"""

from __future__ import annotations

import logging
import sys

from tqdm import tqdm

from .redact import redact_logging

FORMAT = "streamdeid: %(levelname)s: %(message)s"


class BarSafeHandler(logging.Handler):
    """Writes each record on a line of its own above any progress bar (stderr)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001  a log line must never end the run
            self.handleError(record)


def setup_logging(level: int) -> None:
    """The CLI's logging (and a batch worker's): its form, its level, URLs redacted, bar-safe."""
    handler = BarSafeHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    redact_logging()  # a library's log line may quote a camera URL whole
