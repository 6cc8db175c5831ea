"""Class-data-sharing archives (AppCDS) of the JVMs the suite starts again and again: Kafka 4.4's
(``tests.kafka44.class_archive``) and Spark's driver (``tests.spark.class_archive``). A JVM started
with ``-XX:ArchiveClassesAtExit`` writes the classes it loaded into an archive as it exits; a later
JVM of the same ``java`` on the same classpath (or one it begins) maps it instead of loading, parsing
and verifying those classes again. Each archive is made once, by one process (a lock beside it; the
others start their JVMs without it meanwhile), and kept beside the cached Maven classpaths.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

#: the JVM's messages about class-data sharing (an archive it cannot use, a class it leaves out of
#: one) silenced: they go to standard output, which the tests read (Kafka's dump, the clients' lines)
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def archive_path(cache: Path, name: str, *keys: str) -> Path | None:
    """Where the archive ``name`` of ``keys`` (a classpath, a Spark installation) is kept in
    ``cache`` for the ``java`` on ``PATH`` (``None`` without one). An archive of another build of
    the JVM is refused by the JVM, silently (:data:`QUIET`), so a stale one costs only its speed."""
    java = shutil.which("java")
    if java is None:
        return None
    java = os.path.realpath(java)
    stamp = "\0".join([java, str(os.stat(java).st_mtime_ns), *keys])
    return cache / f"{name}-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.jsa"


def options(archive: Path) -> tuple[str, ...]:
    """The JVM options mapping ``archive``."""
    return (f"-XX:SharedArchiveFile={archive}", *QUIET)


def unfinished(archive: Path, pid: int) -> Path:
    """Where process ``pid`` writes ``archive`` before renaming it into place (:func:`make_once`)."""
    return archive.with_suffix(f".{pid}.tmp")


def make_once(archive: Path, train: Callable[[Path], None]) -> bool:
    """Make ``archive`` unless it exists or another process is making it: ``train(made)`` runs a JVM
    with ``-XX:ArchiveClassesAtExit=made`` to its exit, and ``made`` is renamed into place (a reader
    never sees a half-written archive). Whether the archive exists now."""
    if archive.exists():
        return True
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.with_suffix(".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False                                  # being made by another process
        if archive.exists():
            return True
        made = unfinished(archive, os.getpid())
        try:
            train(made)
            if made.exists():
                os.replace(made, archive)
        finally:
            made.unlink(missing_ok=True)
    return archive.exists()


def wait_for_maker(archive: Path, timeout: float = 300) -> None:
    """Wait until no process is making ``archive`` (holds its lock), at most ``timeout`` seconds: a
    test of the archive on one xdist worker while another worker makes it."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with open(archive.with_suffix(".lock"), "a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return                                    # (released as the file closes)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{archive} has been in the making over {timeout:.0f} s") from None
                time.sleep(0.5)
