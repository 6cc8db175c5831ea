"""Threads racing on shared state, with the interpreter switching between them every microsecond:
how the tests make a race on a container (iterated on one thread while another changes it without
a common lock) fail in seconds. From CPython 3.13 a thread may be switched out right after a
builtin call returns (between ``iter(d)`` and ``next(...)``), and CI failed on such a race that no
3.11 run had shown."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

#: the switch interval while the threads race (Python's default is 5 ms)
RACE_SWITCH_INTERVAL_S = 1e-6


def race(*steps: Callable[[], None], seconds: float) -> list[int]:
    """Call each of ``steps`` in a loop on a thread of its own for ``seconds``; the first exception
    any step raised is raised here once all stopped. Returns how many times each step ran."""
    stop = time.monotonic() + seconds
    counts = [0] * len(steps)
    errors: list[BaseException] = []

    def loop(i: int, step: Callable[[], None]) -> None:
        try:
            while time.monotonic() < stop and not errors:
                step()
                counts[i] += 1
        except BaseException as e:          # raised by the caller's thread
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(RACE_SWITCH_INTERVAL_S)
    try:
        threads = [threading.Thread(target=loop, args=(i, s)) for i, s in enumerate(steps)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    if errors:
        raise errors[0]
    return counts
