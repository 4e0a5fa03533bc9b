"""benchmarks/thread_cpu.py: the CPU each thread of this process takes while a block runs."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from thread_cpu import ThreadCPU  # noqa: E402


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_thread_cpu_names_a_busy_thread_and_leaves_an_idle_one_near_zero() -> None:
    """A thread that spins 0.3 s of CPU is counted under its name, even after it has ended; one that
    sleeps is not; the main thread's own spin is counted under MainThread."""
    busy = threading.Thread(target=_spin, args=(0.3,), name="busy-worker")
    idle = threading.Thread(target=time.sleep, args=(0.3,), name="idle-worker")
    with ThreadCPU() as cpu:
        busy.start()
        idle.start()
        _spin(0.2)
        busy.join()
        idle.join()
    assert 0.2 <= cpu.seconds["busy-worker"] <= 0.5
    assert cpu.seconds.get("idle-worker", 0.0) <= 0.05
    assert 0.15 <= cpu.seconds[threading.main_thread().name] <= 0.5
