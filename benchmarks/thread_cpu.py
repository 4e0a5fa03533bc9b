"""CPU seconds per thread of this process while a block runs (Linux: /proc/self/task).

On two cores a run is CPU-bound (docs/speed.md): its wall time follows the CPU all its threads take
together, and each stage's wall milliseconds (StageTimes) are inflated by the threads it shares the
cores with. This counts CPU instead, per thread: Python threads by name (streamdeid-render, ...),
threads that native libraries start (ONNX Runtime's second thread, x264's) as "native".

A thread's CPU is read while it lives, every POLL_SECONDS and at the block's end. A thread that ends
inside the block loses what it took after the last poll that saw it, and a poller starved of the GIL
sees it less often (under a test suite's load, a 0.3 s thread was missed whole). That CPU is reported
as ENDED, the process's own CPU (time.process_time, which counts ended threads) less every thread's, so
the figures always add up to what the block took.
"""

from __future__ import annotations

import os
import threading
import time

POLL_SECONDS = 0.05
ENDED = "ended between polls"  # the name the CPU of threads that ended unseen goes under


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
        # after the first read as the total's end is after the last: what threads take while a read
        # runs (each file read lets other Python threads run) then counts on both sides alike
        self._process_start = time.process_time()
        self._start = {t: c for t, (_, c) in self._last.items()}
        self._poller.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._poller.join()
        self._read()
        total = time.process_time() - self._process_start
        for task, (name, cpu) in self._last.items():
            self.seconds[name] = self.seconds.get(name, 0.0) + cpu - self._start.get(task, 0.0)
        total -= self.seconds.pop(self._poller.name, 0.0)  # the measuring's own cost is no thread's
        # /proc counts in clock ticks (10 ms), so the threads may add up to a little more than the total
        self.seconds[ENDED] = max(0.0, total - sum(self.seconds.values()))

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._read()

    def _read(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):  # the thread ended (its stat gone, or read empty)
                continue
            cpu = (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime
            # a Python thread's name while it lives (kept once it has ended), else a native library's thread
            name = names.get(int(task)) or self._last.get(task, ("native", 0.0))[0]
            self._last[task] = (name, cpu)
