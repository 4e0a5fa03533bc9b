"""A camera password never reaches stderr, a log, stats, a report or a vault, whatever library wrote the text.

The CLI runs against real failures: a refused port, a server that accepts and never answers, an RTSP
server that answers 401 to everything, and a real rtsp-server-perl stream that drops mid-run.
"""

from __future__ import annotations

import io
import logging
import socket
import socketserver
import threading
import time
from pathlib import Path

import pytest

from conftest import MEDIA, run_cli
from devtools.rtsp import SERVER, Publisher, RtspServer
from streamdeid.redact import RedactingFilter, redact

SECRET = "s3cretPW"
CLIP = MEDIA / "short_hamilton_clip.mp4"


def _with_password(url: str) -> str:
    return url.replace("rtsp://", f"rtsp://user:{SECRET}@", 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_redact_masks_passwords_in_any_text() -> None:
    assert redact("rtsp://user:s3cretPW@10.0.0.2:554/x") == "rtsp://user:***@10.0.0.2:554/x"
    # as FFmpeg quotes it; a password with an "@" in it; query-string secrets of some NVRs
    assert SECRET not in redact(f"Connection refused: 'rtsp://u:{SECRET}@h/x'")
    assert redact("rtsp://u:p@ss@h/x") == "rtsp://u:***@h/x"
    assert redact("rtsp://h/cam?user=admin&password=abc&ch=1") == "rtsp://h/cam?user=admin&password=***&ch=1"
    # text without credentials is left alone
    for plain in ("rtsp://10.0.0.2:554/x", "/data/a:b@c.mp4", "http://user@host/x", "12:30 @ home"):
        assert redact(plain) == plain


def test_log_filter_redacts_messages_args_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    log = logging.getLogger("test_redact.library")
    log.addHandler(handler)
    try:
        log.warning("opening %s", f"rtsp://u:{SECRET}@h/x")
        try:
            raise OSError(f"cannot open 'rtsp://u:{SECRET}@h/x'")
        except OSError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert "rtsp://u:***@h/x" in text and "OSError" in text and SECRET not in text


def _assert_clean(proc, *files: Path) -> str:
    err = proc.stderr.decode()
    assert proc.returncode != 0 and "Traceback" not in err, err[-2000:]
    assert SECRET not in err and "user:***@" in err, err[-2000:]
    for f in files:
        if f.exists():
            assert SECRET.encode() not in f.read_bytes(), f
    return err


def test_refused_connection(tmp_path: Path) -> None:
    url = _with_password(f"rtsp://127.0.0.1:{_free_port()}/x")
    proc = run_cli("-v", "run", url, "-o", str(tmp_path / "o.mp4"), "--max-retries", "2",
                   "--stats-json", str(tmp_path / "stats.jsonl"), timeout=60)
    err = _assert_clean(proc, tmp_path / "stats.jsonl")
    assert "Connection refused" in err and "over UDP" not in err  # refused is refused over either transport
    assert not (tmp_path / "o.mp4").exists()


def test_server_that_never_answers(tmp_path: Path) -> None:
    with socket.socket() as listener:  # accepts (the kernel does) but never says a word
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = _with_password(f"rtsp://127.0.0.1:{listener.getsockname()[1]}/x")
        proc = run_cli("run", url, "-o", str(tmp_path / "o.mp4"), "--max-retries", "1", "--read-timeout", "1",
                       timeout=90)
    _assert_clean(proc)


class _Unauthorized(socketserver.StreamRequestHandler):
    """An RTSP server that answers every request 401, as a camera does to a wrong password."""

    def handle(self) -> None:
        while True:
            lines = []
            while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                lines.append(line.decode("latin-1"))
            if not lines:
                return
            cseq = next((x.split(":", 1)[1].strip() for x in lines if x.lower().startswith("cseq")), "1")
            self.wfile.write(f"RTSP/1.0 401 Unauthorized\r\nCSeq: {cseq}\r\n"
                             'WWW-Authenticate: Basic realm="camera"\r\nContent-Length: 0\r\n\r\n'.encode())


def test_wrong_password(tmp_path: Path) -> None:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Unauthorized)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = _with_password(f"rtsp://127.0.0.1:{server.server_address[1]}/x")
        proc = run_cli("-v", "run", url, "-o", str(tmp_path / "o.mp4"), "--max-retries", "1", timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    err = _assert_clean(proc)
    assert "401" in err and "over UDP" not in err  # a wrong password is not a transport problem


@pytest.mark.skipif(SERVER is None, reason="rtsp-server-perl not installed (run .ci/setup-rtsp.sh as root)")
@pytest.mark.skipif(not CLIP.exists(), reason=f"shared media not found: {CLIP}")
def test_dropped_stream_default_transport(tmp_path: Path) -> None:
    """rtsp-server-perl speaks only UDP: the default transport falls back to it and says so; then the
    server dies and every reconnect attempt, the stats, the audit log, the segments' vaults and the last error line
    carry the masked URL only."""
    server = RtspServer(tmp_path)
    server.start()
    pub = Publisher(server.publish_url(), CLIP, seconds=30)
    try:
        key = tmp_path / "k.bin"
        assert run_cli("keygen", str(key)).returncode == 0
        killer = threading.Timer(8.0, lambda: (pub.end(), server.kill()))
        killer.start()
        time.sleep(2.0)  # the publisher is up
        proc = run_cli("-v", "run", _with_password(server.url()), "-o", str(tmp_path / "rec.mp4"),
                       "--key-file", str(key), "--segment-time", "2", "--max-retries", "2", "--read-timeout", "1",
                       "--stats-json", str(tmp_path / "stats.jsonl"), "--stats-interval", "1",
                       "--export-tracks", str(tmp_path / "tracks.jsonl"), timeout=120)
        killer.join()
    finally:
        pub.end()
        server.kill()
    written = sorted(tmp_path.glob("rec*"))
    err = _assert_clean(proc, tmp_path / "stats.jsonl", tmp_path / "tracks.jsonl", *written)
    assert proc.returncode == 3 and "RTSP over UDP" in err and "connection attempt" in err, err[-2000:]
    assert any(p.suffix == ".sdv" for p in written) and any(p.suffix == ".mp4" for p in written), written
    assert (tmp_path / "stats.jsonl").read_text().count("input_fps") >= 2
    assert (tmp_path / "tracks.jsonl").read_text().count('"track"') >= 10  # the audit log was written
