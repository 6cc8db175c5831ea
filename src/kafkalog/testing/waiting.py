"""Waiting for a condition with a deadline, and a failure that says what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time (an AssertionError, so a test reports it as a failure): the
    message names what was awaited, for how long, and the last value or error seen."""


def wait_for(condition: Callable[[], T], timeout: float = 30.0, what: str | None = None,
             interval: float = 0.02) -> T:
    """Call ``condition`` until it returns a true value, and return that value; :class:`WaitTimeout`
    after ``timeout`` seconds, naming ``what`` (else the condition) and its last value or the
    exception it last raised. An exception from ``condition`` counts as "not yet"."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            value = condition()
        except Exception as e:          # not yet (a topic not created yet, a broker restarting)
            error, value = e, None
        else:
            error = None
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            name = what or getattr(condition, "__name__", repr(condition))     # a partial has none
            seen = f"it last raised {type(error).__name__}: {error}" if error is not None \
                else f"its last value was {last!r}"
            raise WaitTimeout(f"waited {timeout:g} s for {name}; {seen}")
        time.sleep(interval)


__all__ = ["WaitTimeout", "wait_for"]
