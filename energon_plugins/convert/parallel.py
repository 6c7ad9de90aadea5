"""An ordered, bounded map over worker processes that stops at once.

Results come back in input order (so the output does not depend on the number of workers or
their timing), and at most ``window`` items are in flight or waiting for their turn, so a fast
reader never piles the whole input up in memory waiting for slow workers. With ``workers=0``
everything runs in this process (debugging, tiny inputs).

Stopping is the design's other half (Ctrl-C or SIGTERM during ``convert``). The workers ignore
SIGINT and start with it blocked (:mod:`~energon_plugins.convert.interrupt`), so a terminal's
Ctrl-C, which reaches the whole process group, is handled by this process alone. When the
consumer stops early (a ``KeyboardInterrupt``, an error, closing the iterator) the workers are
killed, never waited for. This process holds no helper thread and no shared queue (the
management thread of ``concurrent.futures.ProcessPoolExecutor``, joined at interpreter exit,
hangs when a worker dies in the middle of a message): each worker has its own pipe, gets one
item at a time and only while it waits for one, so neither side ever blocks on a full pipe
while the other does, however large the items and results. A worker whose parent is gone
reads the end of its pipe and exits (on Linux it is also killed with its parent).
"""

import collections
import contextlib
import dataclasses
import multiprocessing
import os
from collections.abc import Callable, Generator, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from energon_plugins.convert.interrupt import (
    RemoteTraceback,
    child_ignores_interrupts,
    describe_exit,
    failure,
    raise_if_stopped,
    start_child,
    stopped_by_signal,
)
from energon_plugins.errors import ConvertError

_END = object()
_JOIN_SECONDS = 5.0


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _worker_main(
    connection: Connection,
    inherited: list[Connection],
    parent_pid: int,
    fn: Callable[[Any], Any],
    initializer: Callable[..., None],
    initargs: tuple,
) -> None:
    """A worker: ``(index, item)`` in, ``(index, True, fn(item))`` or ``(index, False,
    exception, traceback)`` out, until ``None`` or the end of the pipe."""
    child_ignores_interrupts(parent_pid)
    for other in inherited:  # this process's copies of the parent's ends (fork)
        other.close()
    setup_failure = None
    try:
        initializer(*initargs)
    except Exception as exc:  # noqa: BLE001 - reported with every item
        setup_failure = failure(exc)
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if message is None:
            return
        index, item = message
        if setup_failure is not None:
            reply: tuple = (index, False, *setup_failure)
        else:
            try:
                reply = (index, True, fn(item))
            except Exception as exc:  # noqa: BLE001 - raised again in the parent
                reply = (index, False, *failure(exc))
        try:
            connection.send(reply)
        except OSError:  # the parent is gone
            return
        except Exception as exc:  # noqa: BLE001 - the result could not be pickled
            connection.send((index, False, *failure(exc)))


@dataclasses.dataclass(eq=False)
class _Worker:
    process: multiprocessing.process.BaseProcess
    connection: Connection
    """This process's end of the worker's pipe."""


class _Pool:
    """``count`` started workers; :meth:`ordered` maps over them, :meth:`close` or
    :meth:`kill` ends them."""

    def __init__(
        self, count: int, fn: Callable[[Any], Any], initializer: Callable[..., None], initargs: tuple
    ) -> None:
        context = _context()
        fork = context.get_start_method() == "fork"
        self.workers: list[_Worker] = []
        try:
            for number in range(count):
                ours, theirs = context.Pipe()
                inherited = [worker.connection for worker in self.workers] + [ours] if fork else []
                process = context.Process(
                    target=_worker_main,
                    name=f"energon-plugins convert worker {number}",
                    args=(theirs, inherited, os.getpid(), fn, initializer, initargs),
                    daemon=True,
                )
                self.workers.append(_Worker(process, ours))
                try:
                    start_child(process)
                finally:
                    theirs.close()
        except BaseException:
            self.kill()
            raise

    def ordered(self, items: Iterable[Any], window: int) -> Iterator[Any]:
        """``fn(item)`` for each item, in order, at most ``window`` items ahead."""
        iterator = iter(items)
        idle = collections.deque(self.workers)
        busy: dict[Connection, _Worker] = {}
        done: dict[int, Any] = {}
        sent = returned = 0
        exhausted = False
        while True:
            raise_if_stopped()
            while idle and not exhausted and sent - returned < window:
                item = next(iterator, _END)
                if item is _END:
                    exhausted = True
                    break
                worker = idle.popleft()
                worker.connection.send((sent, item))
                busy[worker.connection] = worker
                sent += 1
            if returned in done:
                yield done.pop(returned)
                returned += 1
            elif exhausted and returned == sent:
                return
            else:
                for worker, (index, result) in self._results(busy):
                    done[index] = result
                    idle.append(worker)

    def _results(self, busy: dict[Connection, _Worker]) -> list[tuple[_Worker, tuple[int, Any]]]:
        """Wait for results of busy workers: ``(worker, (index, result))`` each.

        Raises:
            Exception: what ``fn`` (or the initializer) raised in a worker.
            Interrupted: a worker was ended by SIGTERM (the job is being stopped).
            ConvertError: a worker died (killed for lack of memory, a crash).
        """
        by_sentinel = {worker.process.sentinel: worker for worker in self.workers}
        ready = wait([*busy, *by_sentinel])
        results = []
        for connection in [c for c in ready if c in busy]:
            worker = busy.pop(connection)
            try:
                index, ok, *value = connection.recv()
            except EOFError:
                raise self._died(worker) from None
            if not ok:
                raise value[0] from RemoteTraceback(value[1])
            results.append((worker, (index, value[0])))
        for sentinel in [s for s in ready if s in by_sentinel]:
            worker = by_sentinel[sentinel]
            if worker.connection not in busy or not worker.connection.poll():
                raise self._died(worker)
        return results

    def _died(self, worker: _Worker) -> BaseException:
        worker.process.join(_JOIN_SECONDS)
        code = worker.process.exitcode
        return stopped_by_signal(code) or ConvertError(
            f"a worker process ({worker.process.name}, pid {worker.process.pid}) ended while "
            f"loading records ({describe_exit(code)}; out of memory?): run again with --resume, "
            "with fewer --workers, or --workers 0 to see the error in this process"
        )

    def close(self) -> None:
        """End the (idle) workers: each is told to stop, and killed if it has not."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                worker.connection.send(None)
        for worker in self.workers:
            worker.process.join(_JOIN_SECONDS)
        self.kill()

    def kill(self) -> None:
        """Kill every worker (``SIGKILL``: no waiting for work in progress), reap them."""
        for worker in self.workers:
            if worker.process.pid is not None and worker.process.exitcode is None:
                with contextlib.suppress(OSError):
                    worker.process.kill()
        for worker in self.workers:
            if worker.process.pid is not None:
                worker.process.join(_JOIN_SECONDS)
            worker.connection.close()


def ordered_map(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    workers: int,
    initializer: Callable[..., None],
    initargs: tuple = (),
    window: int | None = None,
) -> Generator[Any, None, None]:
    """``fn(item)`` for each item, in order, on ``workers`` processes set up by ``initializer``.

    Closing the iterator early (or an exception in the consumer that closes it) kills the
    workers at once. An exception ``fn`` raises in a worker is raised here, with the worker's
    traceback as its ``__cause__``.

    Raises:
        ConvertError: a worker process died (e.g. killed for lack of memory).
        Interrupted: a worker was ended by SIGTERM (the job is being stopped).
    """
    if workers <= 0:
        initializer(*initargs)
        for item in items:
            yield fn(item)
        return
    pool = _Pool(workers, fn, initializer, initargs)
    finished = False
    try:
        yield from pool.ordered(items, window or 4 * workers)
        finished = True
    finally:
        if finished:
            pool.close()
        else:
            pool.kill()
