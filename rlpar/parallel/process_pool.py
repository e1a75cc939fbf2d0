"""A pool of worker processes that survives workers dying mid-task.

Written from scratch rather than wrapping ``multiprocessing.Pool``, which hangs
forever when a worker is killed. Here one manager thread owns all worker state and
sends each worker one task at a time, so when a worker's process ends the manager
knows exactly which task it was running: that task fails with ChildDied, a new
worker replaces the dead one, and the rest of the work goes on.
"""

from __future__ import annotations

import collections
import itertools
import pickle
import threading
from collections.abc import Callable
from multiprocessing.connection import Pipe, wait
from typing import Any

import cloudpickle

from rlpar.errors import ChildDied, RlparError
from rlpar.parallel._pickling import SpawnPayload
from rlpar.parallel._report import child_error, describe_exitcode
from rlpar.parallel._worker import worker_main
from rlpar.parallel.pool import Pool, PoolClosed, check_processes, task_name
from rlpar.parallel.process import get_context
from rlpar.parallel.result import AsyncResult, check_timeout

_pool_ids = itertools.count(1)
# After this many worker deaths in a row with no task completed in between, the
# workers are failing at start-up (bad context factory, broken environment):
# stop replacing them instead of spawning forever.
_MAX_DEATHS_IN_A_ROW_PER_WORKER = 5


class _Task:
    __slots__ = ("result", "request", "name")

    def __init__(self, result: AsyncResult, request: bytes, name: str) -> None:
        self.result, self.request, self.name = result, request, name


class _Worker:
    def __init__(self, pool: ProcessPool, index: int) -> None:
        self.name = f"{pool.name}-worker-{index}"
        self.conn, child_conn = pool._ctx.Pipe(duplex=True)
        self.process = pool._ctx.Process(
            target=worker_main,
            args=(child_conn, pool._factory_payload, pool._num_threads),
            name=self.name,
            daemon=True,
        )
        self.process.start()
        child_conn.close()
        self.task: _Task | None = None


class ProcessPool(Pool):
    """``processes`` worker processes; callables and arguments travel with cloudpickle.

    Arguments and results are serialized (tensors are copied, not shared).
    ``context_factory`` runs once in each worker; its result is the first argument
    of every task. ``num_threads`` caps torch's intra-op threads in workers (None
    leaves torch's default). A worker that dies mid-task fails that task with
    ChildDied and is replaced.
    """

    def __init__(
        self,
        *,
        processes: int = 2,
        context_factory: Callable[[], Any] | None = None,
        start_method: str = "spawn",
        num_threads: int | None = 1,
        name: str | None = None,
    ) -> None:
        check_processes(processes)
        if context_factory is not None and not callable(context_factory):
            raise TypeError(f"context_factory must be callable, got {context_factory!r}")
        if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
            raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
        self._ctx = get_context(start_method)
        self.name = name or f"ProcessPool-{next(_pool_ids)}"
        self.processes = processes
        self._factory_payload = SpawnPayload(context_factory)
        self._num_threads = num_threads
        self._lock = threading.Lock()
        self._state = "running"  # -> closed | terminating -> stopped
        self._queue: collections.deque[_Task] = collections.deque()
        self._wake_reader, self._wake_writer = Pipe(duplex=False)
        self._wake_pending = False
        self._next_index = itertools.count()
        self._deaths_in_a_row = 0
        self._workers: list[_Worker] = []
        try:
            for _ in range(processes):
                self._workers.append(_Worker(self, next(self._next_index)))
        except BaseException:
            self._kill_workers()
            raise
        self._manager = threading.Thread(target=self._manage, name=f"{self.name}-manager",
                                         daemon=True)
        self._manager.start()

    @property
    def pids(self) -> list[int]:
        """Process ids of the current workers."""
        return [w.process.pid for w in list(self._workers) if w.process.pid is not None]

    # -- caller side -----------------------------------------------------------------
    def _wake(self) -> None:
        with self._lock:
            if self._wake_pending:
                return
            self._wake_pending = True
        try:
            self._wake_writer.send_bytes(b"!")
        except OSError:
            pass  # the manager already stopped and closed its end: nothing to wake

    def _submit(self, fn: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> AsyncResult:
        name = task_name(fn)
        request = cloudpickle.dumps((fn, args, kwargs))
        result = AsyncResult(description=f"task {name} in {self.name}")
        with self._lock:
            if self._state != "running":
                raise PoolClosed(f"{self.name} is {self._state}; it accepts no new tasks")
            self._queue.append(_Task(result, request, name))
        self._wake()
        return result

    def close(self) -> None:
        """Accept no more tasks; queued ones still run, then workers exit."""
        with self._lock:
            if self._state == "running":
                self._state = "closed"
        self._wake()

    def terminate(self) -> None:
        """Kill the workers now; every unfinished task fails with RlparError."""
        with self._lock:
            if self._state in ("running", "closed"):
                self._state = "terminating"
        self._wake()
        if threading.current_thread() is not self._manager:
            self._manager.join()

    def join(self, timeout: float | None = None) -> None:
        """Wait until all workers exited; the pool must be closed or terminated."""
        check_timeout(timeout)
        if self._state == "running":
            raise ValueError(f"{self.name}: call close() or terminate() before join()")
        self._manager.join(timeout)
        if self._manager.is_alive():
            raise TimeoutError(f"{self.name}: tasks still running after {timeout} s")

    # -- manager thread --------------------------------------------------------------
    def _manage(self) -> None:
        try:
            while True:
                with self._lock:
                    state = self._state
                if state in ("terminating", "broken"):
                    return
                self._dispatch()
                if state == "closed" and not self._queue and all(
                    w.task is None for w in self._workers
                ):
                    self._stop_workers()
                    return
                self._serve_once()
        except BaseException as exc:  # noqa: BLE001 - a manager bug must not hang callers
            self._fail_all(RlparError(f"{self.name} manager thread failed: {exc!r}"))
            raise
        finally:
            self._fail_all(RlparError(f"{self.name} was terminated before the task finished"))
            self._kill_workers()
            with self._lock:
                self._state = "stopped"
            self._wake_reader.close()

    def _dispatch(self) -> None:
        for worker in list(self._workers):
            if worker.task is not None:
                continue
            with self._lock:
                if not self._queue:
                    return
                task = self._queue.popleft()
            worker.task = task
            try:
                worker.conn.send_bytes(task.request)
            except OSError:
                # The worker was already gone, so the task never ran: queue it again
                # (the deaths-in-a-row limit stops this if workers cannot start).
                worker.task = None
                with self._lock:
                    self._queue.appendleft(task)
                self._on_death(worker)

    def _serve_once(self) -> None:
        by_conn = {w.conn: w for w in self._workers}
        by_sentinel = {w.process.sentinel: w for w in self._workers}
        ready = wait([self._wake_reader, *by_conn, *by_sentinel])
        if self._wake_reader in ready:
            with self._lock:
                while self._wake_reader.poll():
                    self._wake_reader.recv_bytes()
                self._wake_pending = False
        for obj in ready:
            if obj in by_conn and not self._receive(by_conn[obj]):
                self._on_death(by_conn[obj])
        for obj in ready:
            if obj in by_sentinel:
                self._on_death(by_sentinel[obj])

    def _receive(self, worker: _Worker) -> bool:
        """Deliver one reply from ``worker``; False if its pipe is closed (it died)."""
        if worker not in self._workers:
            return True
        try:
            reply = worker.conn.recv_bytes()
        except (EOFError, OSError):
            return False
        task, worker.task = worker.task, None
        if task is None:
            return True
        self._deaths_in_a_row = 0
        try:
            status, payload = pickle.loads(reply)
        except BaseException as exc:  # noqa: BLE001 - e.g. result type not importable here
            task.result.set_error(RlparError(f"could not unpickle the result of {task.name}: "
                                             f"{exc!r}"))
            return True
        if status == "ok":
            task.result.set_result(payload)
        elif status == "init_error":
            task.result.set_error(child_error(f"context_factory in worker {worker.name!r}",
                                              payload, child_name=worker.name))
        else:
            task.result.set_error(child_error(f"task {task.name} in worker {worker.name!r}",
                                              payload, child_name=worker.name))
        return True

    def _on_death(self, worker: _Worker) -> None:
        if worker not in self._workers:
            return
        # A reply sent just before dying is still in the pipe: deliver it first.
        try:
            while worker.task is not None and worker.conn.poll(0):
                if not self._receive(worker):
                    break
        except (EOFError, OSError):
            pass
        self._workers.remove(worker)
        worker.process.join(5.0)
        exitcode = worker.process.exitcode
        worker.conn.close()
        self._deaths_in_a_row += 1
        broken = self._deaths_in_a_row > _MAX_DEATHS_IN_A_ROW_PER_WORKER * self.processes
        if not broken:
            with self._lock:
                replace = self._state in ("running", "closed")
            if replace:
                # Before the task's error is delivered: a caller who sees the failure
                # sees the pool at full strength again (pids, the next task).
                self._workers.append(_Worker(self, next(self._next_index)))
        if worker.task is not None:
            worker.task.result.set_error(ChildDied(
                f"pool worker {worker.name!r} (pid {worker.process.pid}) "
                f"{describe_exitcode(exitcode)} while running task {worker.task.name}",
                child_name=worker.name,
                exitcode=exitcode,
            ))
        if broken:
            with self._lock:
                self._state = "broken"
            self._fail_all(ChildDied(
                f"{self.name}: {self._deaths_in_a_row} workers died in a row without "
                f"finishing a task (last {describe_exitcode(exitcode)}); pool is broken",
                child_name=worker.name, exitcode=exitcode))

    def _stop_workers(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send_bytes(b"")
            except OSError:
                pass
        for worker in self._workers:
            worker.process.join(5.0)

    def _kill_workers(self) -> None:
        for worker in self._workers:
            if worker.process.is_alive():
                worker.process.kill()
        for worker in self._workers:
            worker.process.join(5.0)
            worker.conn.close()
        self._workers = []

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            queued, self._queue = list(self._queue), collections.deque()
        tasks = queued + [w.task for w in self._workers if w.task is not None]
        for task in tasks:
            task.result.set_error(error)
