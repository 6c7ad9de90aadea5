"""Stopping a conversion on Ctrl-C or SIGTERM: at once, quietly, and resumable.

Only the main process reacts to SIGINT and SIGTERM; the processes it starts never see a
signal meant for it:

- :func:`catch_stop_signals` (the CLI): the first SIGINT or SIGTERM raises :class:`Interrupted`
  (a ``KeyboardInterrupt``) in the main thread, so the conversion unwinds through its
  ``finally`` blocks, killing its worker processes, and the command prints how to resume. A
  second signal ends the process at once (``os._exit``), quietly: the last checkpoint is always
  whole (written to a temporary file, then renamed), and ``--resume`` cuts the shards and the
  report back to it. Exit status: 128 + the signal's number, 130 for SIGINT and 143 for
  SIGTERM (a job scheduler's pre-emption), as a shell reports a process that a signal ended.
  A child forked meanwhile gets the handlers that were there before (they are not its own).
- :func:`start_child` and :func:`child_ignores_interrupts`: a child starts with SIGINT and
  SIGTERM blocked (no moment where the parent's handler runs in it), then ignores SIGINT (a
  terminal sends it to the whole process group) and takes SIGTERM's default action. On Linux a
  child is also killed when its parent dies, so nothing is left behind even after a SIGKILL.
- :func:`call_in_child`: a function run in a child process of its own process group (Energon's
  prepare step, which starts worker processes of its own): on any exit of the caller, a
  ``KeyboardInterrupt`` included, the whole group is killed, never waited for.
"""

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import Any

from energon_plugins.errors import ConvertError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1
_FORK_HOOK_REGISTERED = False
"""Whether :func:`_forget_stop_handlers` runs in forked children (registered once, on first use)."""
_ACTIVE: "SignalStop | None" = None
"""The handlers :func:`catch_stop_signals` installed, until :meth:`SignalStop.restore`."""


class Interrupted(KeyboardInterrupt):
    """The run was stopped by the signal ``signum`` (SIGINT or SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def __reduce__(self) -> tuple:
        return (Interrupted, (self.signum,))


def exit_status(exc: BaseException) -> int:
    """The exit status for a run stopped by ``exc``: 128 + the signal's number (130: SIGINT)."""
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


class SignalStop:
    """SIGINT and SIGTERM handlers installed by :func:`catch_stop_signals`."""

    def __init__(self, farewell: str) -> None:
        self.farewell = farewell
        self.farewell_printed = False
        self.signalled = False
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}

    def print_farewell(self) -> None:
        """Print the farewell on stderr (the command's last words after the first signal)."""
        sys.stderr.write(self.farewell + "\n")
        sys.stderr.flush()
        self.farewell_printed = True

    def restore(self) -> None:
        """Put the previous handlers back, unless a signal came: the process is ending then,
        and a further signal must still end it at once."""
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
        if not self.signalled:
            for signum, handler in self.previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self.previous = {}

    def _stop(self, signum: int, frame: Any) -> None:
        self.signalled, self.signum = True, signum
        for other in STOP_SIGNALS:  # from now on, a signal ends the process at once
            signal.signal(other, self._exit_now)
        raise Interrupted(signum)

    def _exit_now(self, signum: int, frame: Any) -> None:
        text = "" if self.farewell_printed else self.farewell + "\n"
        if os.isatty(2):
            text = "\x1b[?25h\n" + text  # a progress display may have hidden the cursor
        with contextlib.suppress(OSError):
            os.write(2, text.encode("utf-8", "replace"))
        os._exit(128 + signum)


def catch_stop_signals(farewell: str) -> SignalStop:
    """Make SIGINT and SIGTERM raise :class:`Interrupted` in the main thread, and a second one
    end the process at once (call :meth:`SignalStop.restore` when the work is done).

    ``farewell`` is written by a second signal if :meth:`SignalStop.print_farewell` has not
    been called yet (and on a terminal the cursor is shown again). Outside the main thread no
    handler is installed.
    """
    global _FORK_HOOK_REGISTERED
    stop = SignalStop(farewell)
    if threading.current_thread() is threading.main_thread():
        if not _FORK_HOOK_REGISTERED and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forget_stop_handlers)
            _FORK_HOOK_REGISTERED = True
        stop.previous = {signum: signal.signal(signum, stop._stop) for signum in STOP_SIGNALS}
        global _ACTIVE
        _ACTIVE = stop
    return stop


def raise_if_stopped() -> None:
    """Raise :class:`Interrupted` again if a stop signal has come.

    The handler raises it once, wherever the main thread is at that moment, and some code
    drops exceptions: a file object's finalizer (``io`` clears errors raised while it closes
    itself, e.g. in ``tarfile``'s ``flush``) ate it once, and the run went on to the end. The
    conversion's loops call this between steps, so the stop still happens at once.
    """
    stop = _ACTIVE
    if stop is not None and stop.signum is not None:
        raise Interrupted(stop.signum)


def _forget_stop_handlers() -> None:
    """In any forked child: the handlers that were there before :func:`catch_stop_signals`
    (they are the main process's; a child must not print the farewell or raise
    :class:`Interrupted`)."""
    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        stop = getattr(handler, "__self__", None)
        if isinstance(stop, SignalStop):
            previous = stop.previous.get(signum)
            with contextlib.suppress(ValueError):  # forked from another thread
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)


# ----------------------------------------------------------------------------- children
@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread meanwhile (a child forked here inherits it)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_child(process: multiprocessing.process.BaseProcess) -> None:
    """Start ``process``, whose target calls :func:`child_ignores_interrupts` first."""
    with _stop_signals_blocked():
        process.start()


def _die_with_parent(parent_pid: int) -> None:
    """On Linux: be killed when the parent dies (and exit now if it already has)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl in this libc
        return
    if os.getppid() != parent_pid:
        os._exit(1)


def _fresh_std_streams() -> None:
    """New ``sys.stdout`` / ``sys.stderr`` objects on the same files: a thread of the parent
    (a progress display) may have held their locks when it forked, for ever in the child."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # not a real file (captured output)
            continue
        fresh = open(os.dup(fd), "w", buffering=1, encoding=stream.encoding, errors=stream.errors)
        setattr(sys, name, fresh)


def child_ignores_interrupts(parent_pid: int) -> None:
    """In a child started by :func:`start_child`: ignore SIGINT, let SIGTERM end it, die with
    its parent (``parent_pid``), take fresh ``sys.stdout`` / ``sys.stderr`` objects, then
    unblock the signals (a pending SIGINT is dropped)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(parent_pid)
    _fresh_std_streams()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def describe_exit(exitcode: int | None) -> str:
    """``exit code 1`` or ``killed by SIGKILL`` (a process's ``exitcode``)."""
    if exitcode is not None and exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def stopped_by_signal(exitcode: int | None) -> Interrupted | None:
    """:class:`Interrupted` when a child was ended by SIGINT or SIGTERM (the job is being
    stopped: the same signal reaches this process), else None."""
    if exitcode is not None and -exitcode in STOP_SIGNALS:
        return Interrupted(-exitcode)
    return None


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a child process (its ``__cause__``)."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0]) if self.args else ""


def failure(exc: BaseException) -> tuple[BaseException, str]:
    """``exc`` (or a picklable stand-in) and its traceback text, to send to the parent."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - any pickling failure: send a description instead
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc, text


def _call_main(sender: Any, parent_pid: int, fn: Callable[..., Any], args: tuple) -> None:
    """A :func:`call_in_child` child: its own process group, its children die with it."""
    child_ignores_interrupts(parent_pid)
    if hasattr(os, "setpgid"):
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
    if hasattr(os, "register_at_fork"):
        own_pid = os.getpid()
        os.register_at_fork(after_in_child=lambda: _die_with_parent(own_pid))
    try:
        outcome: tuple = (True, fn(*args))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        outcome = (False, *failure(exc))
    try:
        sender.send(outcome)
    except OSError:  # the parent is gone
        return
    except Exception as exc:  # noqa: BLE001 - the result could not be pickled
        sender.send((False, *failure(exc)))


def call_in_child(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a child process in its own process group; its result (picklable).

    The child and everything it starts are killed (the whole group, ``SIGKILL``) as soon as
    this call ends for any other reason than the child's result, so a ``KeyboardInterrupt``
    here returns at once. ``what``
    names the step in the error raised when the child dies without a result.

    Raises:
        Interrupted: the child was ended by SIGINT or SIGTERM.
        ConvertError: the child died otherwise (e.g. killed for lack of memory).
        Exception: whatever ``fn`` raised (its traceback in ``__cause__``).
    """
    methods = multiprocessing.get_all_start_methods()
    context = (
        multiprocessing.get_context("fork") if "fork" in methods else multiprocessing.get_context("spawn")
    )
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_call_main, args=(sender, os.getpid(), fn, args), name=f"energon-plugins {what}"
    )
    outcome = None
    try:
        start_child(process)
        assert process.pid is not None  # set by start()
        if hasattr(os, "setpgid"):
            with contextlib.suppress(OSError):  # also set in the child: whichever comes first
                os.setpgid(process.pid, process.pid)
        sender.close()
        wait([receiver, process.sentinel])
        with contextlib.suppress(EOFError):  # EOF: the child died without a word
            outcome = receiver.recv()
            process.join(5)  # done: let it end by itself (killed below if it has not)
    finally:
        _kill_group(process)
        receiver.close()
        sender.close()
    if outcome is None:
        raise stopped_by_signal(process.exitcode) or ConvertError(
            f"{what} failed: its process ended ({describe_exit(process.exitcode)})"
        )
    if outcome[0]:
        return outcome[1]
    raise outcome[1] from RemoteTraceback(outcome[2])


def _kill_group(process: multiprocessing.process.BaseProcess) -> None:
    """SIGKILL to ``process``'s group (itself and its children), then reap it."""
    if process.pid is None:
        return
    if hasattr(os, "killpg"):
        with contextlib.suppress(OSError):  # before reaping it: the group's id stays ours
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(OSError, ValueError):  # (in case the group was not made)
        process.kill()
    process.join(5)
