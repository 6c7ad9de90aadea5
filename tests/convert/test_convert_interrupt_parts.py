"""The parts that stop ``convert`` on Ctrl-C or SIGTERM (issue 25), on real processes.

The ordered map (:mod:`energon_plugins.convert.parallel`) keeps the input order, raises a
worker's exception with its traceback, turns a worker's death into a clear error, and kills its
workers at once when closed early; its workers ignore SIGINT. A function run by
``call_in_child`` is killed, with the processes it started, when the caller stops. Under
``catch_stop_signals`` SIGTERM raises ``Interrupted`` (exit status 143) and leaves the
immediate-exit handlers for a second signal; a stop whose raise a file object's finalizer
dropped is raised again by ``raise_if_stopped``. The whole command is interrupted 50 times in
``test_convert_interrupt``.
"""

import io
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from energon_plugins.convert.interrupt import (
    Interrupted,
    call_in_child,
    catch_stop_signals,
    exit_status,
    raise_if_stopped,
)
from energon_plugins.convert.parallel import ordered_map
from energon_plugins.errors import ConvertError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def _no_setup() -> None:
    pass


def _pid_and_square(item: tuple[int, float]) -> tuple[int, int]:
    number, pause = item
    time.sleep(pause)
    return os.getpid(), number * number


def _refuse_seven(number: int) -> int:
    if number == 7:
        raise ValueError(f"seven is not welcome (item {number})")
    return number


def _die_on_three(number: int) -> int:
    if number == 3:  # as the kernel's out-of-memory killer would
        os.kill(os.getpid(), signal.SIGKILL)
    return number


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return "State:\tZ" not in pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_results_keep_the_input_order_and_workers_ignore_sigint():
    items = [(n, 0.02 * ((7 * n) % 5)) for n in range(40)]  # uneven durations
    results = ordered_map(_pid_and_square, items, workers=3, initializer=_no_setup, window=5)
    first = [next(results) for _ in range(3)]
    for pid in {pid for pid, _ in first}:
        os.kill(pid, signal.SIGINT)  # what a terminal's Ctrl-C does to every process
    rest = list(results)
    assert [square for _, square in first + rest] == [n * n for n in range(40)]
    assert len({pid for pid, _ in first + rest}) > 1


def test_a_worker_exception_is_raised_with_its_traceback():
    with pytest.raises(ValueError, match="seven is not welcome") as caught:
        list(ordered_map(_refuse_seven, range(20), workers=2, initializer=_no_setup))
    assert "_refuse_seven" in str(caught.value.__cause__)


def test_a_dead_worker_is_a_clear_error():
    with pytest.raises(
        ConvertError,
        match=r"worker process .* ended while loading records "
        r"\(killed by SIGKILL",
    ):
        list(ordered_map(_die_on_three, range(10), workers=2, initializer=_no_setup))


def test_closing_early_kills_the_workers_at_once():
    results = ordered_map(
        _pid_and_square, [(n, 0.0 if n < 2 else 30.0) for n in range(6)], workers=2, initializer=_no_setup
    )
    pids = {next(results)[0], next(results)[0]}
    started = time.monotonic()
    results.close()  # what a KeyboardInterrupt in the consumer does
    assert time.monotonic() - started < 2.0
    assert not any(_alive(pid) for pid in pids)


def _sleep_with_a_child(seconds: float, pid_file: pathlib.Path) -> None:
    helper = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    pid_file.with_suffix(".tmp").write_text(f"{os.getpid()} {helper.pid}")
    pid_file.with_suffix(".tmp").rename(pid_file)
    time.sleep(seconds)


class _Stopped(Exception):
    pass


def test_call_in_child_returns_raises_and_is_killed_with_its_children(tmp_path):
    assert call_in_child("a square", pow, 7, 2) == 49
    with pytest.raises(ZeroDivisionError):
        call_in_child("a division", divmod, 1, 0)
    pid_file = tmp_path / "pids"
    stopped = []

    def stop_once_started(signum, frame):  # the caller stops (as on Ctrl-C) during the step
        if not pid_file.exists():
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        stopped.append(time.monotonic())
        raise _Stopped

    previous = signal.signal(signal.SIGALRM, stop_once_started)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(_Stopped):
            call_in_child("a long step", _sleep_with_a_child, 30.0, pid_file)
        assert time.monotonic() - stopped[0] < 2.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    pids = [int(pid) for pid in pid_file.read_text().split()]
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)]


def test_sigterm_raises_interrupted_then_a_second_signal_would_end_the_process():
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    stop = catch_stop_signals("bye")
    try:
        with pytest.raises(Interrupted) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler runs before this ends
        assert exit_status(caught.value) == 143 and exit_status(KeyboardInterrupt()) == 130
        stop.restore()  # after a signal the immediate-exit handlers stay
        assert signal.getsignal(signal.SIGINT) == stop._exit_now
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    quiet = catch_stop_signals("bye")
    quiet.restore()
    assert {signum: signal.getsignal(signum) for signum in before} == before


class _SignalOnFlush(io.RawIOBase):
    """A file whose ``flush`` (called when its finalizer closes it) is where SIGTERM lands."""

    def readable(self) -> bool:
        return True

    signalled = False

    def flush(self) -> None:
        if not self.signalled:  # close() flushes more than once: a second signal would exit
            self.signalled = True
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler runs here and raises, inside the finalizer
        super().flush()


def test_a_stop_a_finalizer_dropped_is_raised_again():
    # seen in CI: the handler landed in tarfile's flush during a file object's finalizer, io
    # cleared the Interrupted, and convert ran to the end with exit status 0
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    stop = catch_stop_signals("bye")
    try:
        raise_if_stopped()  # no signal yet: nothing raised
        reader = io.BufferedReader(_SignalOnFlush())
        del reader  # closed by io's finalizer, which drops what flush raised
        assert stop.signalled, "the handler did not run"
        with pytest.raises(Interrupted) as caught:
            raise_if_stopped()
        assert caught.value.signum == signal.SIGTERM and exit_status(caught.value) == 143
        stop.restore()
        raise_if_stopped()  # no stop is active any more
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
