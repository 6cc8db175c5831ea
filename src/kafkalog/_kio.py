"""kio, the protocol library (the broker's messages), imported without hypothesis.

kio registers hypothesis strategies for its types at import when hypothesis is importable; doing so
computes hypothesis's Unicode tables and caches them in ``.hypothesis/unicode_data`` under the
*current directory* (a side effect in a directory the user did not name: Kafka 4.4 then refuses to
start on a data directory someone ran ``kafkalog`` in), and costs ~100 ms and ~10 MiB of every
start. kafkalog never uses those strategies, so kio's first import runs with hypothesis hidden
from it. A process that imported hypothesis before (a test session using it) keeps kio's
strategies: hypothesis is then the process's own choice, and so is its storage.

Called by every package that imports kio (:mod:`kafkalog.server` before its modules load,
:mod:`kafkalog.cli.dump_kraft`), before their first ``import kio...``.
"""

from __future__ import annotations

import sys

__all__ = ["import_kio"]


def import_kio() -> None:
    """Import kio's base types with hypothesis hidden (once per process; nothing if kio or
    hypothesis is already imported)."""
    if "kio" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes `import hypothesis` fail
    try:
        import kio.static._phantom  # noqa: F401
    finally:
        del sys.modules["hypothesis"]
