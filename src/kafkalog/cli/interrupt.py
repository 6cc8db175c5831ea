"""The signals that end a command: SIGINT (Ctrl-C) and SIGTERM, handled alike.

While a ``kafkalog`` command runs, either signal raises :class:`Interrupted` in the main thread (a
``BaseException``, so no ``except Exception`` swallows it and click does not turn it into
"Aborted!"). A command that must finish something first catches it (``produce`` appends what it
read and prints its summary; ``consume`` commits what it printed) or asks to be told between two
steps instead (:func:`flagged`); the command group ends every other command quietly. Either way the
exit status is the shell's for a process ended by that signal: 128 + the signal number, 130 for
SIGINT and 143 for SIGTERM. :func:`ignored` keeps a second signal from cutting a flush or a
clean shutdown.

This module imports nothing but the standard library's basics: ``kafkalog.cli.main`` installs the
handlers before it imports anything else, so a Ctrl-C at any moment of a command's start-up ends it
quietly too. A signal that arrives while a module is being imported ends the process at once (an
exception raised there can be lost, printed as "Exception ignored", or turned into another error),
and one whose exception was lost anyway is raised again by :func:`check` at the next safe point.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from types import FrameType
from typing import Any, Iterator, List, Mapping, Optional

__all__ = ["Interrupted", "SIGNALS", "install", "install_at_start", "check", "handled", "raised_in", "restore",
           "ignored", "flagged", "exit_code"]

#: the signals that end a command
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code(signum: int) -> int:
    """The exit status of a command ended by ``signum``: 128 + ``signum`` (130, 143)."""
    return 128 + int(signum)


class Interrupted(BaseException):
    """A command was ended by SIGINT or SIGTERM (``signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


#: signals received and not yet raised by :func:`check` (see there)
_received: List[int] = []


def _exit_now(signum: int) -> None:
    """End the process at once with the signal's status (what was printed is flushed)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(exit_code(signum))


def _importing(frame: Optional[FrameType]) -> bool:
    """The main thread is inside an import: a handler's exception raised there can be lost (in
    ``compile()``), reported as "Exception ignored" (in a module lock's callback) or turned into
    another error (in ``__set_name__``)."""
    depth = 0
    while frame is not None and depth < 200:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
        depth += 1
    return False


def _raise(signum: int, frame: Optional[FrameType]) -> None:
    _received.append(signum)
    if _importing(frame):
        _exit_now(signum)       # nothing of the command's work is under way inside an import
    raise Interrupted(signum)


def _exit(signum: int, frame: Optional[FrameType]) -> None:
    _exit_now(signum)


def _unraisable(hook: Any) -> Any:
    """``sys.unraisablehook`` that keeps quiet about an :class:`Interrupted` raised where Python
    cannot propagate it (a destructor, a weakref callback): it was recorded, :func:`check`
    raises it at the next safe point."""
    def quiet(info: Any) -> None:
        if not isinstance(info.exc_value, Interrupted):
            hook(info)
    return quiet


def check() -> None:
    """Raise :class:`Interrupted` for a signal whose handler's exception was lost. CPython 3.11
    drops an exception raised by a signal handler while ``compile()`` decodes bytes, which is
    what an import does when no bytecode cache is written (``PYTHONDONTWRITEBYTECODE``): a
    Ctrl-C during a command's imports would then be ignored, and an idle ``produce`` would wait
    for input forever. Called after the imports and before each wait."""
    if _received:
        signum = _received[0]
        _received.clear()
        raise Interrupted(signum)


def raised_in(error: BaseException) -> Optional[Interrupted]:
    """The :class:`Interrupted` behind ``error``, if one is: Python turns an exception raised
    while a class is created (a handler's, during an import) into ``RuntimeError: Error calling
    __set_name__`` with the original as its cause."""
    seen = 0
    e: Optional[BaseException] = error
    while e is not None and seen < 50:
        if isinstance(e, Interrupted):
            return e
        e = e.__cause__ or e.__context__
        seen += 1
    return None


def handled() -> None:
    """The :class:`Interrupted` raised was caught and is being handled: :func:`check` must not
    raise it again."""
    _received.clear()


def install() -> Mapping[Any, Any]:
    """SIGINT and SIGTERM raise :class:`Interrupted` from now on (or end the process at once
    inside an import); returns the previous handlers (and hook), for :func:`restore`."""
    previous: dict = {sig: signal.signal(sig, _raise) for sig in SIGNALS}
    previous["unraisablehook"] = sys.unraisablehook
    sys.unraisablehook = _unraisable(sys.unraisablehook)
    return previous


def install_at_start() -> None:
    """While the command's modules are imported (nothing to finish yet), either signal ends the
    process at once with its exit status."""
    for sig in SIGNALS:
        signal.signal(sig, _exit)


def restore(previous: Mapping[Any, Any]) -> None:
    """Put back the handlers (and hook) :func:`install` replaced; the signals are blocked
    meanwhile, so one arriving then goes to the handler put back."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        for sig, handler in previous.items():
            if sig == "unraisablehook":
                sys.unraisablehook = handler
            elif handler is not None:
                signal.signal(sig, handler)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@contextmanager
def ignored() -> Iterator[None]:
    """Both signals ignored inside (a flush, a commit, a clean shutdown), then handled again."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}
    try:
        yield
    finally:
        restore(previous)


@contextmanager
def flagged() -> Iterator[List[int]]:
    """Inside, a signal is only recorded: the list yielded gets its number, for a loop that stops
    between two steps (never inside a write of the library)."""
    got: List[int] = list(_received)      # a signal whose exception was lost (see check)
    _received.clear()
    previous = {sig: signal.signal(sig, lambda signum, frame: got.append(signum)) for sig in SIGNALS}
    try:
        yield got
    finally:
        restore(previous)
