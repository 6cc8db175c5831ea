"""A real ``kafkalog serve`` subprocess on an ephemeral loopback port, for the broker tests."""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

START_TIMEOUT_S = 60


class BrokerProcess:
    """``kafkalog serve DATA_DIR --port PORT [--config k=v ...]``; :attr:`port` once listening
    (``port`` 0: an ephemeral one; a fixed one lets a restarted broker take its clients back)."""

    def __init__(self, data_dir: str, configs: list[str] | None = None,
                 extra_args: list[str] | None = None, port: int = 0,
                 nofile: int | None = None) -> None:
        self.data_dir = data_dir
        #: the broker process's soft open-files limit (``RLIMIT_NOFILE``), when not inherited
        self.nofile = nofile
        self.configs = list(configs or [])
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen | None = None
        self.requested_port = port
        self.port = -1
        #: listener name -> bound port (every listener of ``listeners``)
        self.ports: dict[str, int] = {}
        self.stderr_path = os.path.join(os.path.dirname(data_dir.rstrip("/")) or ".",
                                        os.path.basename(data_dir.rstrip("/")) + ".stderr")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        cmd = [sys.executable, "-m", "kafkalog.cli.main", "serve", self.data_dir, "--port",
               str(self.requested_port)]
        for c in self.configs:
            cmd += ["--config", c]
        cmd += self.extra_args
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr,
                                     preexec_fn=None if self.nofile is None else self._limit_nofile)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        line = b""
        # a selector, not select.select: a long test session may hold descriptors past FD_SETSIZE
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    self.kill()
                    raise RuntimeError(f"broker did not start: {self.stderr()}")
                if sel.select(left):
                    ch = os.read(self.proc.stdout.fileno(), 1)
                    if not ch:
                        continue
                    line += ch
        msg = json.loads(line)
        assert msg["type"] == "listening"
        #: the whole listening line (``metrics``: the Prometheus endpoint, when on)
        self.listening = msg
        self.port = msg["port"]
        self.ports = {lst["name"]: lst["port"] for lst in msg.get("listeners", [])}
        #: the Prometheus endpoint's URL (``--metrics-port``/``metrics.listener``), None without one
        self.metrics_url: str | None = msg.get("metrics")
        return self

    def _limit_nofile(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (self.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    def stderr(self) -> str:
        try:
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60, sig: int = signal.SIGTERM) -> int:
        """``sig`` (SIGTERM) and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        finally:
            self._close_pipes()
        return rc

    @contextmanager
    def running(self) -> Iterator[BrokerProcess]:
        """The broker started, for a ``with`` block (a fixture's body): stopped at the end, where
        it must exit 0 (its stderr shown otherwise), or killed when it had died meanwhile."""
        self.start()
        try:
            yield self
        finally:
            if self.alive():
                assert self.stop() == 0, self.stderr()
            else:
                self.kill()

    def kill(self) -> None:
        """SIGKILL (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._close_pipes()

    def _close_pipes(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if getattr(self, "_stderr", None) is not None:
            self._stderr.close()


class LogWatch:
    """A broker's stderr since the last look."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0

    def new(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        return data.decode("utf-8", "replace")


def watch_log(broker: BrokerProcess) -> LogWatch:
    """A :class:`LogWatch` of ``broker`` that starts now."""
    w = LogWatch(broker.stderr_path)
    w.new()
    return w


def lines_about(watch: LogWatch, local_port: int, wait_s: float = 2.0) -> list[str]:
    """The lines logged since ``watch`` last looked about the connection whose client side is
    ``local_port`` (the broker names its peer); waits up to ``wait_s`` for the first one, which may
    follow the close by a moment. Only new lines: ports are reused over a broker's life."""
    peer = f"'127.0.0.1', {local_port})"
    deadline = time.monotonic() + wait_s
    found: list[str] = []
    while True:
        found += [line for line in watch.new().splitlines() if peer in line]
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.02)
