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
#: how long a race goes on past its ``seconds`` for a step still short of its ``at_least``: a
#: loaded CI machine runs fewer steps a second, and a race must not fail on the count alone
RACE_OVERTIME_S = 120.0


def race(*steps: Callable[[], None], seconds: float,
         at_least: tuple[int, ...] = ()) -> list[int]:
    """Call each of ``steps`` in a loop on a thread of its own for ``seconds``, and after that for
    as long as some step ran fewer times than its ``at_least`` (counted in the order of ``steps``;
    the others keep running with it), up to ``RACE_OVERTIME_S`` more; the first exception any step
    raised is raised here once all stopped. Returns how many times each step ran."""
    start = time.monotonic()
    counts = [0] * len(steps)
    wanted = list(at_least) + [0] * (len(steps) - len(at_least))
    errors: list[BaseException] = []

    def done() -> bool:
        elapsed = time.monotonic() - start
        if elapsed < seconds:
            return False
        return elapsed >= seconds + RACE_OVERTIME_S or all(
            c >= w for c, w in zip(counts, wanted))

    def loop(i: int, step: Callable[[], None]) -> None:
        try:
            while not errors and not done():
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
