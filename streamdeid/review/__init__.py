"""``streamdeid review OUT``: a local page to review an output before it is published (docs/review.md).

The output plays with its tracks under it (each with the covered face and, given --source or a key, the
original), the run's facts, and second-opinion flags (faces CenterFace finds left visible on sampled
output frames, covers that look empty), most doubtful first. The reviewer draws boxes on faces the run
missed and marks covers that are no face; Save writes an edits file (streamdeid.edits.format) that
``streamdeid run --edits`` applies.

Modules: ``video.py`` (frame timestamps, the preview copy), ``tracks.py`` (audit log or tracking pass),
``flags.py`` (the second opinion), ``session.py`` (all of it prepared once, and Save), ``server.py``
(127.0.0.1, token, Starlette + uvicorn from the ``review`` extra), ``static/`` (the page: plain HTML, JS
and CSS, no build step, nothing from a CDN).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .session import Review, ReviewSettings, default_edits_path

__all__ = ["Review", "ReviewSettings", "default_edits_path", "run_review"]


def run_review(settings: ReviewSettings, *, browser: bool = True, echo: Callable[[str], None] = print,
               port: int = 0) -> None:
    """Prepare the review, serve it on 127.0.0.1 until Ctrl-C, then remove the work folder."""
    from .server import ReviewServer, open_browser

    workdir = Path(tempfile.mkdtemp(prefix="streamdeid-review-"))
    try:
        review = Review(settings, workdir, echo)
        review.prepare()
        server = ReviewServer(review, port=port)

        def ready() -> None:
            echo(f"streamdeid: review page (only this machine can open it; Ctrl-C stops it): {server.url}")
            if browser and not open_browser(server.url):
                echo("streamdeid: no browser found here: open the URL above")

        try:
            server.run(on_ready=ready)
        except KeyboardInterrupt:  # uvicorn shut down cleanly, then re-raised the signal
            pass
        echo("streamdeid: review stopped")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
