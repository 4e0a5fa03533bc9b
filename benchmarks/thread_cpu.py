"""CPU seconds per thread of this process while a block runs (Linux: /proc/self/task).

On two cores a run is CPU-bound (docs/speed.md): its wall time follows the CPU all its threads take
together, and each stage's wall milliseconds (StageTimes) are inflated by the threads it shares the
cores with. This counts CPU instead, per thread: Python threads by name (streamdeid-render, ...),
threads that native libraries start (ONNX Runtime's second thread, x264's) as "native".
"""

from __future__ import annotations

import os
import threading

POLL_SECONDS = 0.05  # a thread that ends between two polls loses at most this much of its CPU


class ThreadCPU:
    """``with ThreadCPU() as cpu: ...``; then ``cpu.seconds``: {thread name: CPU seconds}."""

    def __init__(self) -> None:
        self._tick = os.sysconf("SC_CLK_TCK")
        self._start: dict[str, float] = {}
        self._last: dict[str, tuple[str, float]] = {}  # task id -> (name, CPU seconds so far)
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="thread-cpu-poll", daemon=True)
        self.seconds: dict[str, float] = {}

    def __enter__(self) -> "ThreadCPU":
        self._read()
        self._start = {t: c for t, (_, c) in self._last.items()}
        self._poller.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._poller.join()
        self._read()
        for task, (name, cpu) in self._last.items():
            if name != self._poller.name:
                self.seconds[name] = self.seconds.get(name, 0.0) + cpu - self._start.get(task, 0.0)

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._read()

    def _read(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended
                continue
            cpu = (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime
            # a Python thread's name while it lives (kept once it has ended), else a native library's thread
            name = names.get(int(task)) or self._last.get(task, ("native", 0.0))[0]
            self._last[task] = (name, cpu)
