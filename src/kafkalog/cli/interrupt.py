"""The signals that end a command: SIGINT (Ctrl-C) and SIGTERM, handled alike.

While a ``kafkalog`` command runs, either signal raises :class:`Interrupted` in the main thread (a
``BaseException``, so no ``except Exception`` swallows it and click does not turn it into
"Aborted!"). A command that must finish something first catches it (``produce`` appends what it
read and prints its summary; ``consume`` commits what it printed) or asks to be told between two
steps instead (:func:`flagged`); the command group ends every other command quietly. Either way the
exit status is the shell's for a process ended by that signal: 128 + the signal number, 130 for
SIGINT and 143 for SIGTERM. :func:`ignored` keeps a second signal from cutting a flush or a
clean shutdown.

This module imports nothing but :mod:`signal`: ``kafkalog.cli.main`` installs the handlers before
it imports anything else, so a Ctrl-C at any moment of a command's start-up ends it quietly too.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from types import FrameType
from typing import Any, Iterator, List, Mapping, Optional

__all__ = ["Interrupted", "SIGNALS", "install", "install_at_start", "check", "handled", "restore",
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


def _raise(signum: int, frame: Optional[FrameType]) -> None:
    _received.append(signum)
    raise Interrupted(signum)


def _exit(signum: int, frame: Optional[FrameType]) -> None:
    _received.append(signum)
    raise SystemExit(exit_code(signum))


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


def handled() -> None:
    """The :class:`Interrupted` raised was caught and is being handled: :func:`check` must not
    raise it again."""
    _received.clear()


def install() -> Mapping[Any, Any]:
    """SIGINT and SIGTERM raise :class:`Interrupted` from now on; returns the previous handlers."""
    return {sig: signal.signal(sig, _raise) for sig in SIGNALS}


def install_at_start() -> None:
    """While the command's modules are imported (nothing to finish yet), either signal ends the
    process at once with its exit status: ``SystemExit`` prints no traceback, even mid-import."""
    for sig in SIGNALS:
        signal.signal(sig, _exit)


def restore(previous: Mapping[Any, Any]) -> None:
    for sig, handler in previous.items():
        if handler is not None:
            signal.signal(sig, handler)


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
    got: List[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: got.append(signum)) for sig in SIGNALS}
    try:
        yield got
    finally:
        restore(previous)
