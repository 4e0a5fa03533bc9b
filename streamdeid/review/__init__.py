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

import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .session import Review, ReviewSettings, default_edits_path

__all__ = ["Review", "ReviewSettings", "default_edits_path", "run_review"]


def run_review(settings: ReviewSettings, *, browser: bool = True, echo: Callable[[str], None] = print,
               port: int = 0) -> None:
    """Prepare the review, serve it on 127.0.0.1 until Ctrl-C (or SIGTERM, SIGHUP), then remove the work
    folder. With a key file the folder holds the originals recovered from the vault while the thumbnails
    are made (session.py deletes them then); a folder left by a review killed outright is removed by the
    next one (remove_stale_workdirs)."""
    from .server import bind_local, require_extra

    require_extra()
    remove_stale_workdirs()
    with _signals_stop_the_review():
        sock = bind_local(port)  # a busy --port is told now, not after the preparation
        workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        try:
            (workdir / OWNER_FILE).write_text(str(os.getpid()))
            _serve(Review(settings, workdir, echo), sock, browser, echo)
        finally:
            sock.close()
            shutil.rmtree(workdir, ignore_errors=True)


WORKDIR_PREFIX = "streamdeid-review-"
OWNER_FILE = "owner.pid"  # the reviewing process's id, in its work folder


def _serve(review: Review, sock, browser: bool, echo: Callable[[str], None]) -> None:
    from .server import ReviewServer, open_browser

    review.prepare()
    server = ReviewServer(review, sock=sock)

    def ready() -> None:
        echo(f"streamdeid: review page (only this machine can open it; Ctrl-C stops it): {server.url}")
        if browser and not open_browser(server.url):
            echo("streamdeid: no browser found here: open the URL above")

    try:
        server.run(on_ready=ready)
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then re-raised the signal
        pass
    echo("streamdeid: review stopped")


@contextmanager
def _signals_stop_the_review() -> Iterator[None]:
    """SIGTERM and SIGHUP (``kill``, a closed terminal) end the review as Ctrl-C does, so the work folder is
    removed: by default they end the process at once. uvicorn catches SIGTERM while it serves, shuts down and
    raises it again after putting these handlers back. The signal is raised again once the folder is gone,
    so the exit status still says which one it was."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def stop(signum, _frame) -> None:
        caught.append(signum)
        raise KeyboardInterrupt

    wanted = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {sig: signal.signal(sig, stop) for sig in wanted}
    try:
        yield
    except KeyboardInterrupt:
        if not caught:
            raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        signal.signal(caught[0], signal.SIG_DFL)
        signal.raise_signal(caught[0])


def remove_stale_workdirs(root: Path | None = None) -> list[Path]:
    """Remove the work folders of reviews whose process is gone (killed outright: SIGKILL, a power cut);
    they may hold originals recovered from a vault. Only folders with this module's prefix and owner file,
    owned by this user, are touched. Returns those removed."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for folder in root.glob(f"{WORKDIR_PREFIX}*"):
        try:
            if not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            pid = int((folder / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if _alive(pid):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
