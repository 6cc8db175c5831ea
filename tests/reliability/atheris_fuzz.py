"""Coverage-guided fuzzing of every decoder with atheris (libFuzzer).

    python -m tests.reliability.atheris_fuzz -runs=200000 -timeout=10 -rss_limit_mb=2048 [CORPUS_DIR]

The first input byte picks the target of :mod:`tests.reliability.fuzz_targets`; a target may raise
only :class:`~kafkalog.errors.KafkalogError` -- anything else, a per-input time-out (``-timeout``) or
an RSS above ``-rss_limit_mb`` stops the run with the crashing input written by libFuzzer.
libFuzzer prints ``Done N runs`` at the end (the long run parses its final stats).

libFuzzer ends the process with C's ``exit``, so Python's ``atexit`` handlers never run: the
fuzzing runs in a child process whose temporary directory (the file-system targets' scratch) the
parent removes afterwards.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from types import ModuleType
from typing import List

import atheris

#: the targets (:mod:`tests.reliability.fuzz_targets`), imported instrumented by the fuzzing child
#: only (:func:`_instrumented_targets`: ~6 s of instrumenting the parent has no use for)
ft: ModuleType
# the file-system targets are slow: give them 1 selector value in 8 between them
SLOW = ["segment", "cli", "topic_names"]
FAST: List[str] = []


def _instrumented_targets() -> None:
    global ft
    with atheris.instrument_imports(include=["kafkalog"]):
        import kafkalog.cli.main
        import kafkalog.log.log
        import kafkalog.log.manager  # noqa: F401
        from tests.reliability import fuzz_targets
    ft = fuzz_targets
    FAST[:] = [n for n in sorted(ft.TARGETS) if n not in SLOW]


def pick(b: int) -> str:
    if b % 8 == 7:
        return SLOW[(b // 8) % len(SLOW)]
    return FAST[b % len(FAST)]


def test_one_input(data: bytes) -> None:
    if not data:
        return
    try:
        ft.TARGETS[pick(data[0])](data[1:])
    except ft.KafkalogError:           # (kafkalog.errors, imported instrumented with the targets)
        pass


_CHILD = "KAFKALOG_ATHERIS_CHILD"


def main() -> None:
    if os.environ.get(_CHILD) != "1":
        with tempfile.TemporaryDirectory(prefix="kafkalog-atheris-") as scratch:
            env = dict(os.environ, TMPDIR=scratch, **{_CHILD: "1"})
            code = subprocess.call([sys.executable, "-m", "tests.reliability.atheris_fuzz", *sys.argv[1:]],
                                   env=env)
        sys.exit(code)
    _instrumented_targets()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
