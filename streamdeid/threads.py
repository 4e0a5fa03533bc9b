"""Decoding and encoding on their own threads, connected to the caller's by bounded queues.

FFmpeg, OpenCV and ONNX Runtime release the GIL, so on two cores the three overlap. A file
source waits when inference is slow; memory stays bounded by ``QUEUE_FRAMES``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from .summary import StageTimes
from .types import OutputClosed, StreamdeidError

_END = object()  # end-of-stream marker on the queues
QUEUE_FRAMES = 16  # frames in flight between threads (bounded memory)


class _Worker(threading.Thread):
    """A daemon thread that records the exception that ended it."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._target_fn = target
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._target_fn()
        except BaseException as exc:  # re-raised on the main thread
            self.error = exc


def prefetch(items: Iterable[object], depth: int, name: str) -> Iterator[object]:
    """``items``, produced up to ``depth`` ahead on a thread of their own called ``name`` (decoding overlaps
    the caller's work: PyAV and ONNX Runtime release the GIL); the producer's exception is raised here.
    Stopping early stops the producer (the queue is drained so that it is never left blocked)."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        finally:
            q.put(_END)

    worker = _Worker(produce, name)
    worker.start()
    try:
        while (item := q.get()) is not _END:
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass
        worker.join()
    if worker.error is not None:
        raise worker.error


def threaded_source(source: Iterable[object], times: StageTimes) -> Iterator[object]:
    """Decode on a background thread (``prefetch``, QUEUE_FRAMES ahead); yield its items on the caller's
    thread. The time each item took to produce goes to ``times`` as "decode"."""
    return prefetch(_timed(source, times), QUEUE_FRAMES, "streamdeid-decode")


def _timed(source: Iterable[object], times: StageTimes) -> Iterator[object]:
    it = iter(source)
    while True:
        t0 = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            return
        times.add("decode", time.perf_counter() - t0)
        yield item


class BackgroundQueue:
    """Calls ``handle(item)`` on its own thread for every item ``put``, in order. ``put`` blocks while
    ``maxsize`` items wait. The first error ``handle`` raises ends the thread; the next ``put`` or
    ``close`` raises it on the caller's thread (through ``_reraise``)."""

    def __init__(self, handle: Callable[[object], None], name: str, maxsize: int = QUEUE_FRAMES) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=maxsize)
        self._handle = handle
        self._worker = _Worker(self._consume, name)
        self._worker.start()

    def _consume(self) -> None:
        while True:
            item = self._q.get()
            if item is _END:
                return
            self._handle(item)

    def put(self, item: object) -> None:
        while True:
            if self._worker.error is not None:
                self._reraise(self._worker.error)
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """Wait for every queued item to be handled; re-raise the handler's error."""
        while self._worker.is_alive():  # the handler may die while the queue is full
            try:
                self._q.put(_END, timeout=0.1)
                break
            except queue.Full:
                continue
        self._worker.join()
        if self._worker.error is not None:
            self._reraise(self._worker.error)

    def _reraise(self, err: BaseException) -> None:
        raise err


class ThreadedSink(BackgroundQueue):
    """Encode/mux on a background thread; ``put`` blocks when the encoder lags."""

    def __init__(self, write: Callable[[object], None], times: StageTimes) -> None:
        def timed(item: object) -> None:
            t0 = time.perf_counter()
            write(item)
            times.add("encode", time.perf_counter() - t0)

        super().__init__(timed, "streamdeid-encode")

    def _reraise(self, err: BaseException) -> None:
        if isinstance(err, (StreamdeidError, OutputClosed)):
            raise err
        if "avcodec_open2" in str(err):  # the encoder refused its settings: say which, not FFmpeg's call
            raise StreamdeidError(f"the video encoder refused these settings "
                                  f"({getattr(err, 'strerror', None) or err}); try another --codec or "
                                  "output extension") from err
        raise StreamdeidError(f"encoding failed: {err}") from err
