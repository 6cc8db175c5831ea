"""Where a broker of :mod:`kafkalog.testing` runs: a thread of the test process, or a child process
(:mod:`.runners`). Re-exported as ``kafkalog.testing.MODES``; here so that the package's modules
need not import the package itself."""

from __future__ import annotations

__all__ = ["MODES"]

#: where a broker runs: a thread of the test process, or a child process
MODES = ("thread", "process")
