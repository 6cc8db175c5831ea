"""Members of a share group (KIP-932) for the broker tests: the Java client 4.4's ``KafkaShareConsumer``
(kafka-clients from Maven, ``java/KafkalogShareMember.java``) in a JVM, with explicit
acknowledgement in one of its modes (accept, release1, release, reject, hold, renew). What it printed
is kept as events: ``("rec", partition, offset, delivery count, value)`` for a record delivered,
``("ack", partition, offset, outcome)`` for an acknowledgement the broker answered."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable

import pytest

from tests.kafka44 import java_command
from tests.server.java_client import JavaUnavailable, classpath

#: the longest a member lives (a bound, not a synchronisation)
LIFETIME_S = 180

Event = tuple[object, ...]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting until {what}")
        time.sleep(0.05)


class ShareMember:
    """``KafkalogShareMember`` in a JVM: stdin closed = close the consumer (its records released)."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, mode: str,
                 properties: dict[str, str] | None = None) -> None:
        self.name = name
        try:
            cp = classpath("4.4.0")
        except JavaUnavailable as e:
            pytest.skip(str(e))
        fd, self.stderr_path = tempfile.mkstemp(prefix=f"kafkalog-share-{name}-", suffix=".stderr")
        self._stderr = os.fdopen(fd, "wb")
        props = [f"{k}={v}" for k, v in (properties or {}).items()]
        self.proc = subprocess.Popen(
            java_command("KafkalogShareMember", bootstrap, topic, group, mode, str(LIFETIME_S * 1000),
                         f"client.id={name}", *props, cp=cp),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self.closed = False
        self._reader = threading.Thread(target=self._read, name=name, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            words = raw.decode("utf-8", "replace").rstrip("\n").split(" ", 4)
            with self._lock:
                if words[0] == "rec":
                    self._events.append(("rec", int(words[1]), int(words[2]), int(words[3]), words[4]))
                elif words[0] == "ack":
                    self._events.append(("ack", int(words[1]), int(words[2]), words[3]))
                elif words[0] == "closed":
                    self.closed = True

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def deliveries(self) -> list[tuple[int, int]]:
        """(offset, delivery count) of every record delivered, in order."""
        return [(int(e[2]), int(e[3])) for e in self.events() if e[0] == "rec"]  # type: ignore[call-overload]

    def acked(self) -> set[int]:
        """The offsets whose acknowledgement the broker confirmed."""
        return {int(e[2]) for e in self.events() if e[0] == "ack" and e[3] == "ok"}  # type: ignore[call-overload]

    def stop(self, timeout: float = 60) -> None:
        """Close the consumer (stdin closed) and wait for its exit."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"share member {self.name} did not end: {self.stderr()}") from None
        self._reader.join(timeout)
        assert rc == 0 and self.closed, f"share member {self.name} exited {rc}: {self.stderr()}"

    def kill(self) -> None:
        """SIGKILL (a crash: no acknowledgement, no close)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._reader.join(30)

    def abort(self) -> None:
        self.kill()
        self._stderr.close()
        if os.path.exists(self.stderr_path):
            os.unlink(self.stderr_path)

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]
