"""Where a test's broker runs: :class:`ThreadRunner` (its own thread and event loop in the test
process) or :class:`ProcessRunner` (a process forked by :mod:`.zygote`, which imported the broker
once, so a broker process is ready in milliseconds; a crash is a real SIGKILL). Both run a
:class:`~kafkalog.testing.runtime.BrokerRuntime` and carry calls to it by name."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from kafkalog.errors import KafkalogError
from kafkalog.testing.runtime import BrokerRuntime

#: how long a start, a stop or a call may take before the test is told the broker is stuck
CALL_TIMEOUT_S = 120.0


class BrokerExited(KafkalogError):
    """The broker's process ended while the test was talking to it."""


class Runner(Protocol):
    mode: str

    @property
    def running(self) -> bool: ...

    def start(self, data_dir: str, config: Mapping[str, str], ports: list[int]) -> dict[str, Any]: ...

    def call(self, op: str, kwargs: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any: ...

    def stop(self, crash: bool = False) -> dict[str, Any]: ...

    def close(self) -> None: ...

    @property
    def pid(self) -> int: ...


class ThreadRunner:
    """The broker on a daemon thread of the test process, with its own event loop (restarts reuse
    both)."""

    mode = "thread"

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runtime = BrokerRuntime()

    @property
    def pid(self) -> int:
        return os.getpid()

    @property
    def running(self) -> bool:
        return self._loop is not None

    def start(self, data_dir: str, config: Mapping[str, str], ports: list[int]) -> dict[str, Any]:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="kafkalog-testing-broker", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        result: dict[str, Any] = self.call("start", {"data_dir": data_dir, "config": dict(config),
                                                     "ports": list(ports)})
        return result

    def call(self, op: str, kwargs: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Run the runtime's ``op`` on the broker's loop and wait for it (``timeout``: seconds)."""
        if self._loop is None:
            raise KafkalogError("the broker's thread is not running")
        fut = asyncio.run_coroutine_threadsafe(self._runtime.call(op, kwargs or {}), self._loop)
        try:
            return fut.result(CALL_TIMEOUT_S if timeout is None else timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise

    def stop(self, crash: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = self.call("stop", {"crash": crash})
        return result

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self.stop()
        finally:
            self._loop = self._thread = None
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CALL_TIMEOUT_S)
            loop.close()


class ProcessRunner:
    """The broker in a child process: calls travel over a pipe (a reader thread hands each answer
    to its caller, so a thread waiting for a hold does not stop another from releasing it); the
    child stops cleanly when the test process goes away (its end of the pipe closes)."""

    mode = "process"

    def __init__(self, log_path: str, orphan_leaves: Mapping[str, str] | None = None) -> None:
        self.log_path = log_path
        #: what the child removes when the test process dies before closing it (see child.main)
        self.orphan_leaves = dict(orphan_leaves or {})
        self._pid = -1
        self._zygote: Any = None
        self._conn: Any = None
        self._reader: threading.Thread | None = None
        self._send_lock = threading.Lock()
        self._pending: dict[int, concurrent.futures.Future[Any]] = {}
        self._ids = itertools.count(1)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def running(self) -> bool:
        return self._pid > 0

    def start(self, data_dir: str, config: Mapping[str, str], ports: list[int]) -> dict[str, Any]:
        from multiprocessing.connection import Connection

        from kafkalog.testing.zygote import zygote
        fork_server = zygote()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = fork_server.spawn({"data_dir": data_dir, "config": dict(config), "ports": list(ports),
                                     "log_path": self.log_path, "orphan_leaves": self.orphan_leaves},
                                    theirs.fileno(), CALL_TIMEOUT_S)
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        self._pid, self._zygote, self._conn = pid, fork_server, conn
        try:
            if not conn.poll(CALL_TIMEOUT_S):
                raise BrokerExited(f"the broker process did not start in {CALL_TIMEOUT_S:.0f} s; "
                                   f"its log: {self._log_tail()}")
            kind, _id, value = conn.recv()
        except (EOFError, OSError):
            self._end(kill=True)
            raise BrokerExited(f"the broker process exited while starting; its log: {self._log_tail()}") from None
        except BaseException:
            self._end(kill=True)
            raise
        if kind == "error":
            self._end(kill=False)
            raise value
        self._reader = threading.Thread(target=self._read, name="kafkalog-testing-broker-pipe", daemon=True)
        self._reader.start()
        result: dict[str, Any] = value
        return result

    def _end(self, kill: bool) -> None:
        """SIGKILL the child (``kill``), or let it stop (it was told to, or its pipe closes when no
        reader has started), and wait until the fork server reaped it: its lock and files are
        released then. The pipe is closed last, once nothing reads it."""
        pid, conn = self._pid, self._conn
        if pid <= 0:
            return
        if kill:
            _kill(pid)
        elif self._reader is None and conn is not None:
            conn.close()
            conn = None
        if not self._reaped(pid):
            _kill(pid)          # it did not stop when told: as a crash
            self._reaped(pid)
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(CALL_TIMEOUT_S)
        if conn is not None:
            conn.close()
        self._pid, self._conn, self._reader = -1, None, None

    def _reaped(self, pid: int) -> bool:
        if self._zygote.wait(pid, CALL_TIMEOUT_S) is not None:
            return True
        deadline = time.monotonic() + CALL_TIMEOUT_S      # the fork server is gone: poll the pid
        while time.monotonic() < deadline and _exists(pid):
            time.sleep(0.01)
        return not _exists(pid)

    def _read(self) -> None:
        conn = self._conn
        try:
            while True:
                kind, call_id, value = conn.recv()
                fut = self._pending.pop(call_id, None)
                if fut is None:
                    continue
                if kind == "error":
                    fut.set_exception(value)
                else:
                    fut.set_result(value)
        except (EOFError, OSError):
            pass
        for fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(BrokerExited("the broker process exited during the call"))
        self._pending.clear()

    def call(self, op: str, kwargs: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Run the runtime's ``op`` in the child and wait for its answer (``timeout``: seconds)."""
        if self._conn is None:
            raise KafkalogError("the broker's process is not running")
        call_id = next(self._ids)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._pending[call_id] = fut
        try:
            with self._send_lock:
                self._conn.send(("call", call_id, op, dict(kwargs or {})))
        except (OSError, ValueError):
            self._pending.pop(call_id, None)
            raise BrokerExited(f"the broker process exited; its log: {self._log_tail()}") from None
        return fut.result(CALL_TIMEOUT_S if timeout is None else timeout)

    def stop(self, crash: bool = False) -> dict[str, Any]:
        """A clean stop through the pipe, or SIGKILL (``crash``)."""
        if self._pid <= 0:
            return {"clean": False, "running": False}
        result: dict[str, Any] = {"clean": False, "running": False}
        try:
            if not crash:
                result = self.call("stop")
                with self._send_lock:
                    self._conn.send(("exit", 0, None))
        except (BrokerExited, OSError, EOFError):
            pass
        finally:
            self._end(kill=crash)
        return result

    def close(self) -> None:
        if self._pid > 0:
            self.stop()

    def _log_tail(self, chars: int = 3000) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return "(none)"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["CALL_TIMEOUT_S", "BrokerExited", "ProcessRunner", "Runner", "ThreadRunner"]
