"""A local RTSP lab for the live tests and benchmarks/live_soak.py: rtsp-server-perl on loopback
(install: .ci/setup-rtsp.sh) and a looping camera stand-in. Development only: not packaged.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

from .publish import publish_loop

SERVER = shutil.which("rtsp-server-perl")  # None: not installed (the live tests skip)


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_udp_base(count: int = 40) -> int:
    for _ in range(50):
        base = random.randrange(30000, 60000, 2)
        try:
            socks = []
            for p in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free UDP port range")


class RtspServer:
    """rtsp-server-perl on loopback: publishers on ``source_port``, viewers on ``client_port``."""

    def __init__(self, log_dir: Path) -> None:
        self.client_port, self.source_port = _free_tcp_port(), _free_tcp_port()
        self.rtp_base = _free_udp_base()
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def url(self, path: str = "cam") -> str:
        return f"rtsp://127.0.0.1:{self.client_port}/{path}"

    def publish_url(self, path: str = "cam") -> str:
        return f"rtsp://127.0.0.1:{self.source_port}/{path}"

    def start(self) -> None:
        self.starts += 1
        log = (self.log_dir / f"rtsp-server-{self.starts}.log").open("w")
        self.proc = subprocess.Popen(
            [SERVER, "-c", str(self.client_port), "-s", str(self.source_port),
             "--client_listen_address", "127.0.0.1", "--source_listen_address", "127.0.0.1",
             "--rtp_start_port", str(self.rtp_base + 20 * (self.starts % 2)), "-l", "1"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.source_port), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"rtsp-server-perl did not start: see {log.name}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


class Publisher:
    """A looping camera stand-in on a thread: ``clip`` published to ``url`` for ``seconds`` at most."""

    def __init__(self, url: str, clip: Path, seconds: float, stamp: bool = False) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=publish_loop, args=(str(clip), url, seconds, self.stop),
                                       kwargs={"transport": "udp", "stamp": stamp}, daemon=True)
        self.thread.start()

    def end(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)


def rss_kb() -> int:
    """This process's resident memory (kB), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
