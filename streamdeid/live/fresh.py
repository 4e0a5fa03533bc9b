"""Hand frames from a reader thread to the processor, keeping only fresh ones.

The reader thread must never wait for the processor: a blocked reader lets
the socket buffer fill, and RTSP over UDP then loses packets (smeared frames)
while TCP backs up into the camera. So ``put`` never blocks: each item is
stamped with its arrival time, and when the queue is full the oldest item is
discarded. ``take`` hands out the next frame that can still be emitted within
the latency budget; staler frames are dropped whole, before anything is done
to them, and counted. Nothing here ever emits a frame: dropping only removes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from streamdeid.types import Frame

END = object()  # the reader finished (or failed: see ``error``)


@dataclass
class Arrival:
    item: object
    arrived: float  # time.monotonic() when the reader got it


class FreshQueue:
    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = max(2, int(capacity))
        self._items: deque[Arrival] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.clock = clock
        self.dropped_overflow = 0  # frames discarded because the queue was full
        self.dropped_stale = 0  # frames discarded because they were too old
        self.error: BaseException | None = None

    @property
    def dropped(self) -> int:
        return self.dropped_overflow + self.dropped_stale

    def put(self, item: object) -> None:
        with self._cond:
            self._items.append(Arrival(item, self.clock()))
            while len(self._items) > self.capacity:
                old = self._items.popleft()
                if isinstance(old.item, Frame):
                    self.dropped_overflow += 1
            self._cond.notify()

    def close(self, error: BaseException | None = None) -> None:
        with self._cond:
            self._closed = True
            self.error = error
            self._cond.notify_all()

    def take(self, timeout: float, max_age: float | Callable[[], float]) -> Arrival | object | None:
        """The next item, ``END`` once closed and empty, or None after ``timeout``.

        Frames older than ``max_age`` seconds (a number or a function giving the
        current budget) are dropped and counted; other items pass regardless.
        """
        deadline = self.clock() + timeout
        with self._cond:
            while True:
                while self._items:
                    head = self._items.popleft()
                    if isinstance(head.item, Frame):
                        budget = max_age() if callable(max_age) else max_age
                        if self.clock() - head.arrived > budget:
                            self.dropped_stale += 1
                            continue
                    return head
                if self._closed:
                    return END
                left = deadline - self.clock()
                if left <= 0:
                    return None
                self._cond.wait(left)


def start_reader(source: Iterable[object], queue: FreshQueue, stop: threading.Event,
                 on_item: Callable[[object], None] | None = None) -> threading.Thread:
    """Iterate ``source`` on a daemon thread into ``queue`` until it ends or ``stop``."""

    def run() -> None:
        error = None
        try:
            for item in source:
                if stop.is_set():
                    break
                if on_item is not None:
                    on_item(item)
                queue.put(item)
        except BaseException as exc:  # handed to the consumer, re-raised there
            error = exc
        finally:
            queue.close(error)

    thread = threading.Thread(target=run, name="streamdeid-live-read", daemon=True)
    thread.start()
    return thread
