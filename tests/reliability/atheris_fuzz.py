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

import atheris

with atheris.instrument_imports(include=["kafkalog"]):
    import kafkalog.cli.main
    import kafkalog.log.log
    import kafkalog.log.manager  # noqa: F401
    from tests.reliability import fuzz_targets as ft

from kafkalog.errors import KafkalogError

NAMES = sorted(ft.TARGETS)
# the file-system targets are slow: give them 1 selector value in 8 between them
FAST = [n for n in NAMES if n not in ("segment", "cli", "topic_names")]
SLOW = ["segment", "cli", "topic_names"]


def pick(b: int) -> str:
    if b % 8 == 7:
        return SLOW[(b // 8) % len(SLOW)]
    return FAST[b % len(FAST)]


def test_one_input(data: bytes) -> None:
    if not data:
        return
    try:
        ft.TARGETS[pick(data[0])](data[1:])
    except KafkalogError:
        pass


_CHILD = "KAFKALOG_ATHERIS_CHILD"


def main() -> None:
    if os.environ.get(_CHILD) != "1":
        with tempfile.TemporaryDirectory(prefix="kafkalog-atheris-") as scratch:
            env = dict(os.environ, TMPDIR=scratch, **{_CHILD: "1"})
            code = subprocess.call([sys.executable, "-m", "tests.reliability.atheris_fuzz", *sys.argv[1:]],
                                   env=env)
        sys.exit(code)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
