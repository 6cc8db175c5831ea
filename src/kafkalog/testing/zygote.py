"""The fork server of process brokers: one process per test process that imports the broker once
(``python -m kafkalog.testing.zygote FD``) and forks a broker process for each request, so that a
broker process is ready in milliseconds rather than after Python's start and imports.

It has no thread (forking is safe). Over its Unix socket (fd ``FD``) it takes spawn requests, each
with the socket its broker will talk over (SCM_RIGHTS), answers each with the broker's pid, and
reports each broker's end (``exited``, with its wait status) once it has reaped it, so the test
process knows when a killed broker's files and lock are released. It exits when the test process
closes its socket; its brokers then see their own sockets close and stop cleanly.

:class:`Zygote` is the test process's side."""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

_LEN = struct.Struct(">I")


def _send(sock: socket.socket, msg: Any, fds: list[int] | None = None) -> None:
    data = pickle.dumps(msg)
    payload = _LEN.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


class _Reader:
    """Length-prefixed pickles from a socket, with the descriptors that came with them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.fds: list[int] = []

    def read(self) -> list[tuple[Any, list[int]]] | None:
        """The complete messages received now (None: the peer closed)."""
        data, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, 4)
        if not data and not fds:
            return None
        self.buf += data
        self.fds += fds
        out = []
        while len(self.buf) >= _LEN.size:
            n = _LEN.unpack_from(self.buf)[0]
            if len(self.buf) < _LEN.size + n:
                break
            msg = pickle.loads(self.buf[_LEN.size:_LEN.size + n])
            self.buf = self.buf[_LEN.size + n:]
            take = 1 if isinstance(msg, tuple) and msg and msg[0] == "spawn" else 0
            out.append((msg, self.fds[:take]))
            self.fds = self.fds[take:]
        return out


# --- the fork server ----------------------------------------------------------------------------

def serve(sock: socket.socket) -> None:
    from kafkalog.testing import child  # the broker's imports, once
    child.warm_up()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_a: None)
    reader = _Reader(sock)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ev in sel.select():
            if key.fileobj == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
                _reap(sock)
                continue
            msgs = reader.read()
            if msgs is None:
                return
            for msg, fds in msgs:
                if msg[0] == "spawn":
                    pid = os.fork()
                    if pid == 0:
                        _become_broker(sock, wake_r, wake_w, fds[0], msg[1], child)
                    os.close(fds[0])
                    _send(sock, ("spawned", pid))
        _reap(sock)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, ("exited", pid, status))


def _become_broker(sock: socket.socket, wake_r: int, wake_w: int, fd: int, args: Mapping[str, Any],
                   child: Any) -> None:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        os.close(wake_r)
        os.close(wake_w)
        from multiprocessing.connection import Connection
        child.main(Connection(fd), **args)
        code = 0
    finally:
        os._exit(code)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    try:
        serve(sock)
    except (KeyboardInterrupt, BrokenPipeError, ConnectionError):
        pass


# --- the test process's side ----------------------------------------------------------------------

class Zygote:
    """The fork server of this test process (one, started on first use: :func:`zygote`)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        # the kafkalog this process imported, whatever sys.path found it through
        import kafkalog
        src = os.path.dirname(os.path.dirname(os.path.abspath(kafkalog.__file__)))
        env["PYTHONPATH"] = os.pathsep.join([src, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        self.proc = subprocess.Popen([sys.executable, "-m", "kafkalog.testing.zygote", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     start_new_session=True)
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._spawned: list[int] = []
        self._exited: dict[int, int] = {}
        self.alive = True
        self._reader = threading.Thread(target=self._read, name="kafkalog-testing-zygote", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        reader = _Reader(self.sock)
        try:
            while True:
                msgs = reader.read()
                if msgs is None:
                    break
                with self._cond:
                    for msg, _fds in msgs:
                        if msg[0] == "spawned":
                            self._spawned.append(msg[1])
                        elif msg[0] == "exited":
                            self._exited[msg[1]] = msg[2]
                    self._cond.notify_all()
        except OSError:
            pass
        with self._cond:
            self.alive = False
            self._cond.notify_all()

    def spawn(self, args: Mapping[str, Any], conn_fd: int, timeout: float) -> int:
        """Fork a broker process running ``child.main(conn, **args)`` over ``conn_fd``; its pid."""
        with self._lock:
            with self._cond:
                if not self.alive:
                    raise OSError("the broker fork server exited")
            _send(self.sock, ("spawn", dict(args)), [conn_fd])
            with self._cond:
                if not self._cond.wait_for(lambda: self._spawned or not self.alive, timeout):
                    raise TimeoutError(f"the broker fork server did not fork in {timeout} s")
                if not self._spawned:
                    raise OSError("the broker fork server exited")
                return self._spawned.pop(0)

    def wait(self, pid: int, timeout: float) -> int | None:
        """Wait until broker ``pid`` was reaped; its wait status (None: not in ``timeout`` s)."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exited or not self.alive, timeout)
            return self._exited.pop(pid, None)

    def exited(self, pid: int) -> bool:
        with self._cond:
            return pid in self._exited or not self.alive


_zygote_lock = threading.Lock()
_zygote: Zygote | None = None


def zygote() -> Zygote:
    """This process's fork server, started (again, if it died) on first use."""
    global _zygote
    with _zygote_lock:
        if _zygote is None or not _zygote.alive or _zygote.proc.poll() is not None:
            _zygote = Zygote()
        return _zygote


if __name__ == "__main__":
    main()
