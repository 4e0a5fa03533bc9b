"""Where a batch's workers run: a local pool of processes (no Ray needed), or Ray actors.

Both give the driver the same three calls: ``assign(queue)`` starts queued (task, attempt) pairs on idle
workers and returns how many it started, ``wait()`` blocks until at least one finishes and returns
``(task, attempt, outcome or exception)`` for each finished one (an exception: the worker was lost), and
``close()``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..types import StreamdeidError
from .inputs import Task
from .worker import BatchWorker

log = logging.getLogger(__name__)

_WORKER: BatchWorker | None = None  # the worker of a local pool process


ORPHAN_POLL_SECONDS = 1.0
INTERRUPT_WAIT_SECONDS = 15.0  # how long an interrupted driver waits for its workers' partial files


def _init_local(opts: dict[str, Any], level: int = logging.WARNING) -> None:
    global _WORKER
    # Ctrl-C reaches the whole process group: a worker between files has nothing to stop (the driver ends the
    # pool), so only a file in progress is interrupted (_run_local), and an idle worker prints no traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_the_driver()
    _log_as_the_driver(level)
    _WORKER = BatchWorker(opts)


def _log_as_the_driver(level: int) -> None:
    """A spawned process starts with no logging set up: its warnings get the CLI's form and level."""
    from ..console import setup_logging

    setup_logging(level)


def _exit_with_the_driver() -> None:
    """A driver killed outright (SIGKILL, OOM) leaves its workers to init: they would finish their file and
    then wait for work forever. Each leaves as soon as its parent is gone (the file in progress stays a
    partial file, which the next run redoes)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="streamdeid-orphan-watch", daemon=True).start()


def _run_local(task: Task, attempt: int):
    assert _WORKER is not None
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C stops this file (its partial is kept)
    try:
        return _WORKER.process(task, attempt)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalPool:
    """``workers`` processes on this machine, each holding one BatchWorker (models loaded once per process).
    A process that dies breaks the executor: the files in flight come back as lost and a new one starts."""

    def __init__(self, opts: dict[str, Any], workers: int) -> None:
        self.opts, self.workers = opts, max(1, workers)
        self.description = f"local pool of {self.workers} process{'es' if self.workers > 1 else ''}"
        self._executor = self._start()
        self._inflight: dict = {}

    def _start(self) -> ProcessPoolExecutor:
        level = logging.getLogger("streamdeid").getEffectiveLevel()
        return ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_local, initargs=(self.opts, level))

    def pids(self) -> list[int]:
        return list(getattr(self._executor, "_processes", {}) or {})

    def assign(self, queue: deque) -> int:
        started = 0
        while queue and len(self._inflight) < self.workers:
            task, attempt = queue.popleft()
            self._inflight[self._executor.submit(_run_local, task, attempt)] = (task, attempt)
            started += 1
        return started

    def wait(self) -> list[tuple[Task, int, Any]]:
        done, _ = wait_futures(list(self._inflight), return_when=FIRST_COMPLETED)
        out, broken = [], False
        for fut in done:
            task, attempt = self._inflight.pop(fut)
            try:
                out.append((task, attempt, fut.result()))
            except BrokenProcessPool as exc:
                broken = True
                out.append((task, attempt, exc))
        if broken:  # every other file in flight went down with the executor
            for fut, (task, attempt) in list(self._inflight.items()):
                out.append((task, attempt, BrokenProcessPool("the pool was restarted after a worker died")))
            self._inflight.clear()
            self._executor.shutdown(wait=True, cancel_futures=True)  # its processes are gone already
            self._executor = self._start()
        return out

    def close(self) -> None:
        # Wait for the executor's manager thread: left running, it closes its wakeup pipe while the interpreter's
        # exit hook writes to it (Python 3.11), and a batch that ended well printed "OSError: Bad file descriptor"
        # with a traceback. Files in flight (Ctrl-C) are waited for a bounded time: Ctrl-C reached the workers too,
        # and each is finishing its partial file and printing its "interrupted" line; a driver that left at once
        # made them orphans, which leave within ORPHAN_POLL_SECONDS, before that line under load.
        pending = self._finish_inflight()
        self._executor.shutdown(wait=not pending, cancel_futures=True)

    def _finish_inflight(self) -> bool:
        """True when files are still in flight after INTERRUPT_WAIT_SECONDS (or a second Ctrl-C)."""
        if not self._inflight:
            return False
        try:
            _, pending = wait_futures(list(self._inflight), timeout=INTERRUPT_WAIT_SECONDS)
        except KeyboardInterrupt:  # a second Ctrl-C: leave now
            return True
        return bool(pending)


def ray_module():
    try:
        import ray
    except ImportError:
        raise StreamdeidError("--ray needs Ray: pip install 'streamdeid[cluster]'") from None
    return ray


RAY_CONNECT_SECONDS = 5.0


def _reachable(address: str) -> None:
    """A host:port address must answer on its port before Ray is asked to join it: Ray retries an address
    where nothing listens for minutes, printing a line every 30 s. "auto" (Ray finds the cluster) and
    ray:// client addresses go to Ray as they are."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StreamdeidError(f"--ray {address}: give host:port (the cluster's GCS address), auto or local")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_SECONDS).close()
    except OSError as exc:
        raise StreamdeidError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc})") from None


class RayPool:
    """Ray actors, each a BatchWorker that loads the models once. ``address``: "auto" or host:port of an existing
    cluster, or "local" (start one in this process with ``workers`` CPUs). One CPU actor per
    ``cpus_per_worker`` CPUs of the cluster (or ``workers``), plus one GPU actor per GPU: GPU actors take
    the DBAF files first, CPU actors the others (and DBAF too when the cluster has no GPU).
    A killed actor is replaced by a new one; the file it was doing comes back as lost and is retried."""

    def __init__(self, opts: dict[str, Any], address: str, workers: int | None, cpus_per_worker: float = 1.0
                 ) -> None:
        ray = self.ray = ray_module()
        self.opts = opts
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                                      "log_to_driver": True}
            try:
                if address == "local":
                    ray.init(num_cpus=workers or None, **kwargs)
                else:
                    _reachable(address)
                    ray.init(address=address, **kwargs)
            except (ValueError, ConnectionError, RuntimeError, TimeoutError) as exc:
                lines = str(exc).strip().splitlines()
                raise StreamdeidError(f"--ray {address}: {lines[0] if lines else type(exc).__name__}") from None
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        cpus = int(resources.get("CPU", 1) // cpus_per_worker)
        n_cpu = workers if workers else max(1, cpus)
        self._remote, self._opts, self._cpus = ray.remote(BatchWorker), opts, cpus_per_worker
        self.actors: list[tuple[Any, bool]] = [(self._actor(gpu), gpu) for gpu in [True] * gpus + [False] * n_cpu]
        self.description = (f"Ray at {address}: {n_cpu} CPU actor{'s' if n_cpu > 1 else ''}"
                            + (f", {gpus} GPU actor{'s' if gpus > 1 else ''}" if gpus else ""))
        self._idle = list(range(len(self.actors)))
        self._inflight: dict = {}  # ObjectRef -> (task, attempt, actor index)
        self._has_gpu = gpus > 0

    def _actor(self, gpu: bool):
        return self._remote.options(num_cpus=0 if gpu else self._cpus, num_gpus=1 if gpu else 0,
                                    max_restarts=0, max_task_retries=0).remote(self._opts, gpu=gpu)

    def pids(self) -> list[int]:
        return self.ray.get([a.pid.remote() for a, _ in self.actors])

    def _prefers(self, task: Task, gpu: bool) -> bool:
        """GPU actors prefer DBAF files (the generator is what a GPU speeds up), CPU actors the others."""
        return ((task.options.get("method") or self.opts.get("method")) == "dbaf") == gpu

    def assign(self, queue: deque) -> int:
        started = 0
        while queue and self._idle:
            i = self._idle.pop(0)
            actor, gpu = self.actors[i]
            # with no file of its preference queued, an actor takes the next one all the same (no idling)
            pick = next((k for k, (t, _) in enumerate(queue) if self._prefers(t, gpu)), 0) if self._has_gpu else 0
            task, attempt = queue[pick]
            del queue[pick]
            self._inflight[actor.process.remote(task, attempt)] = (task, attempt, i)
            started += 1
        return started

    def wait(self) -> list[tuple[Task, int, Any]]:
        ray = self.ray
        ready, _ = ray.wait(list(self._inflight), num_returns=1)
        out = []
        for ref in ready:
            task, attempt, i = self._inflight.pop(ref)
            try:
                out.append((task, attempt, ray.get(ref)))
            except ray.exceptions.RayError as exc:  # the actor died (killed, out of memory, node lost)
                out.append((task, attempt, exc))
                actor, gpu = self.actors[i]
                ray.kill(actor, no_restart=True)
                self.actors[i] = (self._actor(gpu), gpu)  # a fresh one: calls wait while it loads the models
            self._idle.append(i)
        return out

    def close(self) -> None:
        for actor, _ in self.actors:
            self.ray.kill(actor)
