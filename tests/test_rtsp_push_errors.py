"""`streamdeid run IN -o rtsp://...` against RTSP servers that misbehave: one line, exit 1, in bounded time.

Each server is a thread of this process on a free 127.0.0.1 port (no rtsp-server-perl): it answers garbage,
an error, or nothing at some step of the push's handshake (OPTIONS, ANNOUNCE, SETUP, RECORD), or hangs up.
A refused SETUP or RECORD left FFmpeg's RTSP muxer without its streams, and closing the writer sent the header
again: the run died of SIGSEGV. A server that never answered held the run for good.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import make_video, run_cli

PASSWORD = "s3cret-pw"
GARBAGE = b"\x00\xff\x13 no rtsp here\r\n\r\n"
BAD_REQUEST = b"RTSP/1.0 400 Bad Request\r\nCSeq: 1\r\n\r\n"
OK_THEN_HANG_UP = b""  # an answer: 200 OK, then the connection is closed


def _request(conn: socket.socket) -> str | None:
    """One RTSP request's head (its body, ANNOUNCE's SDP, read and dropped); None when the client hung up."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while length and len(body) < int(length.group(1)):
        chunk = conn.recv(4096)
        if not chunk:
            return None
        body += chunk
    return head.decode("latin-1")


def _ok(head: str) -> bytes:
    cseq = re.search(r"(?im)^cseq:\s*(\d+)", head)
    extra = ""
    if head.startswith("SETUP"):
        transport = re.search(r"(?im)^transport:\s*(.*?)\s*$", head).group(1)
        extra = f"Transport: {transport}" + (";server_port=9-10" if "client_port" in transport else "") + "\r\n"
    return (f"RTSP/1.0 200 OK\r\nCSeq: {cseq.group(1) if cseq else 1}\r\nSession: 4711\r\n"
            f"Public: OPTIONS, ANNOUNCE, SETUP, RECORD, TEARDOWN\r\n{extra}\r\n").encode()


class FakeServer:
    """Answers every request 200 OK except ``method`` ("*": every one), which gets ``answer`` (None: the
    connection is closed there; OK_THEN_HANG_UP: closed after a 200 OK). ``hang``: accepts and never answers;
    ``hang_up``: closes each connection as soon as it is accepted."""

    def __init__(self, method: str = "*", answer: bytes | None = None, *, hang: bool = False,
                 hang_up: bool = False) -> None:
        self.method, self.answer, self.hang, self.hang_up = method, answer, hang, hang_up
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                if self.hang_up:
                    return
                if self.hang:
                    self.closed.wait(120)
                    return
                while (head := _request(conn)) is not None:
                    if self.method in ("*", head.split(" ", 1)[0]):
                        if self.answer is None:
                            return
                        conn.sendall(self.answer or _ok(head))
                        if self.answer == OK_THEN_HANG_UP:
                            return
                    else:
                        conn.sendall(_ok(head))
            except OSError:
                pass

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second of grey 25 fps video (no face needed: the push fails or not before any matters)."""
    frames = [np.full((120, 160, 3), 60 + 4 * i, np.uint8) for i in range(25)]
    return make_video(tmp_path_factory.mktemp("push") / "clip.mp4", frames)


def _push(clip: Path, server: FakeServer, *extra: str) -> tuple[int, str, float]:
    url = f"rtsp://cam:{PASSWORD}@127.0.0.1:{server.port}/live"
    t0 = time.monotonic()
    try:
        proc = run_cli("run", str(clip), "-o", url, "--anonymizer", "solid", "--no-progress", *extra, timeout=90)
    finally:
        server.close()
    return proc.returncode, proc.stderr.decode(errors="replace"), time.monotonic() - t0


CASES = {
    "garbage to OPTIONS": (dict(method="OPTIONS", answer=GARBAGE), "refused the push or answered invalid data"),
    "400 to OPTIONS": (dict(method="OPTIONS", answer=BAD_REQUEST), "refused the push (Server returned 400"),
    "garbage to SETUP": (dict(method="SETUP", answer=GARBAGE), "refused the push or answered invalid data"),
    "400 to RECORD": (dict(method="RECORD", answer=BAD_REQUEST), "refused the push or answered invalid data"),
    "hangs up at ANNOUNCE": (dict(method="ANNOUNCE", answer=None), "refused the push or answered invalid data"),
    "hangs up at once": (dict(hang_up=True), "refused the push or answered invalid data"),
    "never answers": (dict(hang=True), "did not answer within 10 s"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_server_that_refuses_the_push_is_one_line_and_exit_1(clip: Path, case: str) -> None:
    kwargs, said = CASES[case]
    server = FakeServer(**kwargs)
    rc, err, took = _push(clip, server)
    assert rc == 1, (rc, err)  # -11: the crash
    assert "Traceback" not in err and err.strip().count("\n") == 0, err
    assert err.startswith("streamdeid: error: the RTSP server at rtsp://cam:***@127.0.0.1:") and said in err, err
    assert PASSWORD not in err and "nothing was pushed" in err, err
    assert took < 45, took


def test_a_live_push_the_server_refuses_is_one_line_error(clip: Path) -> None:
    """The live runner's writer (a file read --live) fails the same way."""
    server = FakeServer(method="SETUP", answer=GARBAGE)
    rc, err, _ = _push(clip, server, "--live", "--stats-interval", "0")
    assert rc == 1, (rc, err)
    # (a live run ends with its statistics line: one error line after it)
    assert "Traceback" not in err and err.count("streamdeid: ") == 1 and err.count("WARNING") == 0, err
    assert err.strip().splitlines()[-1].startswith("streamdeid: error: the RTSP server at "), err
    assert "refused the push or answered invalid data" in err and PASSWORD not in err, err


def test_a_server_that_hangs_up_mid_push_is_one_line_error(clip: Path) -> None:
    """The server took RECORD and hung up: the error says the push failed, once (closing adds no second line)."""
    server = FakeServer(method="RECORD", answer=OK_THEN_HANG_UP)
    rc, err, _ = _push(clip, server)
    assert rc == 1, (rc, err)
    assert "Traceback" not in err and err.strip().count("\n") == 0, err
    assert err.startswith("streamdeid: error: ") and "rtsp://cam:***@127.0.0.1:" in err and PASSWORD not in err, err
