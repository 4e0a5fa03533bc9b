"""benchmarks/thread_cpu.py: the CPU each thread of a process takes while a block runs.

Each case runs in a fresh interpreter, as benchmarks/fps.py does: threads an earlier test left running in
this one (Ray's, a live server's) would share the GIL and the measure with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

_PRELUDE = f"""
import json, sys, threading, time
sys.path.insert(0, {str(BENCHMARKS)!r})
import thread_cpu
from thread_cpu import ThreadCPU

def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
"""


def _measure(body: str) -> dict[str, float]:
    """``cpu.seconds`` of the ``with ThreadCPU() as cpu`` block that ``body`` runs, from a fresh process."""
    code = _PRELUDE + body + "\nprint(json.dumps(cpu.seconds))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_thread_cpu_names_a_busy_thread_and_leaves_an_idle_one_near_zero() -> None:
    """A thread alive at the block's end that spun 0.3 s of CPU is counted under its name, whatever the
    polls saw; one that waits is not; the main thread's own spin is counted under MainThread."""
    seconds = _measure("""
spun, release = threading.Event(), threading.Event()
def work():
    spin(0.3)
    spun.set()
    release.wait()
busy = threading.Thread(target=work, name="busy-worker")
idle = threading.Thread(target=release.wait, name="idle-worker")
with ThreadCPU() as cpu:
    busy.start()
    idle.start()
    spin(0.2)
    spun.wait()
release.set()
""")
    assert 0.28 <= seconds["busy-worker"] <= 0.5
    assert seconds["idle-worker"] <= 0.05
    assert 0.18 <= seconds["MainThread"] <= 0.5


def test_the_cpu_of_threads_that_ended_unseen_goes_under_ended() -> None:
    """Threads that start, spin and end between two polls (here no poll runs inside the block at all):
    their CPU is still reported, under ENDED, so the figures add up to what the block took."""
    sys.path.insert(0, str(BENCHMARKS))
    from thread_cpu import ENDED

    seconds = _measure("""
thread_cpu.POLL_SECONDS = 60.0
with ThreadCPU() as cpu:
    for _ in range(4):
        t = threading.Thread(target=spin, args=(0.1,), name="short-lived")
        t.start()
        t.join()
""")
    assert "short-lived" not in seconds  # never seen alive
    # 0.4 s spun; each live thread's /proc figure is whole 10 ms ticks, and the difference carries their rounding
    assert 0.3 <= seconds[ENDED] <= 0.7
