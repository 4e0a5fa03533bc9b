"""A real browser for tests: Debian's chromium driven by Playwright (no browser download).

``.ci/setup-browser.sh`` installs chromium; Playwright comes with the test extras. Videos are
checked the way a person opening a shared file would meet them:
  * the duration, over plain HTTP without range requests (Python's http.server: a fragmented
    MP4 shows the length of what was parsed first there, 2-3 s of a 10 s clip);
  * seeking to the last second and drawing that frame to a canvas, from a file:// page.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path

CHROMIUM_PATHS = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser")

# Loads the video given as argument; resolves to its duration, or, with seek=true, to where a
# seek to the last second landed and the mean of that frame drawn on a canvas. Rejects on a media
# error or after 15 s (page.evaluate has no timeout of its own).
_PROBE = """
async ([src, seek]) => {
  const v = document.createElement('video');
  v.muted = true; v.preload = 'auto';
  document.body.appendChild(v);
  const wait = (ev) => new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error('timeout waiting for ' + ev)), 15000);
    v.addEventListener(ev, () => { clearTimeout(t); res(); }, {once: true});
    v.addEventListener('error', () => { clearTimeout(t); rej(new Error('media error ' + v.error.code)); },
                       {once: true});
  });
  const meta = wait('loadedmetadata');
  v.src = src;
  await meta;
  const out = {duration: v.duration, width: v.videoWidth, height: v.videoHeight};
  if (!seek) return out;
  out.target = Math.max(0, v.duration - 1);
  const seeked = wait('seeked');
  v.currentTime = out.target;
  await seeked;
  out.time = v.currentTime;
  const c = document.createElement('canvas');
  c.width = v.videoWidth; c.height = v.videoHeight;
  const ctx = c.getContext('2d');
  ctx.drawImage(v, 0, 0);
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  let s = 0;
  for (let i = 0; i < d.length; i += 4) s += d[i] + d[i + 1] + d[i + 2];
  out.mean = s / (3 * d.length / 4);
  return out;
}
"""


def chromium_path() -> str | None:
    for path in CHROMIUM_PATHS:
        if Path(path).is_file():
            return path
    return shutil.which("chromium")


class Browser:
    """One headless chromium for a test session: ``duration_over_http`` and ``seek_last_second``."""

    def __init__(self, executable: str) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(
            executable_path=executable, headless=True, timeout=60_000,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--allow-file-access-from-files"])

    @property
    def version(self) -> str:
        return self._browser.version

    def close(self) -> None:
        self._browser.close()
        self._pw.stop()

    def duration_over_http(self, video: Path) -> float:
        """``video.duration`` in a page served with the video by Python's http.server (no ranges)."""
        handler = functools.partial(_QuietHandler, directory=str(video.parent))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            return float(self._run(base, base + video.name, seek=False)["duration"])
        finally:
            server.shutdown()
            server.server_close()

    def seek_last_second(self, video: Path) -> dict:
        """{duration, target, time, mean}: a seek to the last second, and that frame's mean pixel."""
        page_file = video.parent / "_browser_probe.html"
        page_file.write_text("<!doctype html><html><body></body></html>")
        try:
            return self._run(page_file.as_uri(), video.resolve().as_uri(), seek=True)
        finally:
            page_file.unlink(missing_ok=True)

    def _run(self, page_url: str, src: str, *, seek: bool) -> dict:
        page = self._browser.new_page()
        try:
            if page_url.startswith("http"):
                page.route(page_url, lambda r: r.fulfill(body="<!doctype html><body></body>", content_type="text/html"))
            page.goto(page_url)
            return page.evaluate(_PROBE, [src, seek])
        finally:
            page.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def top_level_boxes(path: Path) -> list[str]:
    """The types of an MP4/MOV file's top-level boxes, in file order (``ftyp moov ... mdat``)."""
    boxes = []
    with open(path, "rb") as f:
        size = Path(path).stat().st_size
        pos = 0
        while pos + 8 <= size:
            f.seek(pos)
            head = f.read(16)
            length, kind = int.from_bytes(head[:4], "big"), head[4:8].decode("latin-1")
            if length == 1:  # 64-bit size follows
                length = int.from_bytes(head[8:16], "big")
            elif length == 0:  # to the end of the file
                length = size - pos
            if length < 8:
                raise ValueError(f"{path}: bad box size {length} at {pos}")
            boxes.append(kind)
            pos += length
    return boxes


def header_facts(path: Path) -> tuple[list[str], float, int]:
    """(top-level boxes, container duration in seconds, video frames) read from the header alone."""
    import av

    with av.open(str(path)) as c:
        return top_level_boxes(path), (c.duration or 0) / 1e6, c.streams.video[0].frames
