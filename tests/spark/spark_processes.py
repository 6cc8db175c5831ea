"""Spark's own daemons as real processes, started from the installed pyspark's scripts: a standalone
cluster (``org.apache.spark.deploy.master.Master`` and ``...worker.Worker`` through ``bin/spark-class``)
and a Spark Connect server (``bin/spark-submit --class ...SparkConnectServer``, what
``sbin/start-connect-server.sh`` runs). Everything listens on 127.0.0.1 (free ports), logs and works
under a test's directory with an empty ``SPARK_CONF_DIR``, and is always stopped (SIGTERM, then SIGKILL).
The daemons inherit this process's environment, so executors and their Python workers import the
kafkalog of ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.kafka44 import free_port

START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 60


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).resolve().parent


def spark_env(workdir: Path) -> dict[str, str]:
    """The environment of Spark's scripts here: loopback only, no user configuration, small daemons."""
    conf = workdir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_CONF_DIR=str(conf),
               SPARK_LOG_DIR=str(workdir / "logs"), SPARK_PID_DIR=str(workdir),
               SPARK_DAEMON_MEMORY="256m", PYSPARK_PYTHON=sys.executable)
    for var in ("MASTER", "SPARK_MASTER", "PYSPARK_SUBMIT_ARGS"):
        env.pop(var, None)
    return env


class SparkProcess:
    """One of Spark's scripts (it ``exec``s its JVM, so the pid is the JVM's), its output in ``log``."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, line: str, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.text():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.log.name}: exited {self.proc.returncode}: {self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.log.name}: no '{line}' in {timeout:.0f} s: {self.text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers (``cores`` and ``memory`` each), each worker
    with its own work directory (``work_dirs``: ``<app id>/<executor id>/stderr`` per executor)."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.workdir = workdir
        self.env = spark_env(workdir)
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.work_dirs = [workdir / f"worker-{i}" for i in range(workers)]
        self.cores, self.memory = cores, memory
        self.processes: list[SparkProcess] = []

    def _spark_class(self, name: str, *args: str) -> SparkProcess:
        p = SparkProcess([str(spark_home() / "bin" / "spark-class"), *args], self.workdir / f"{name}.out",
                         self.env)
        self.processes.append(p)
        return p

    def start(self) -> StandaloneCluster:
        try:
            master = self._spark_class("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                       "--port", str(self.port), "--webui-port", "0")
            workers = []
            for i, d in enumerate(self.work_dirs):
                d.mkdir(parents=True, exist_ok=True)
                workers.append(self._spark_class(
                    f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                    "--port", "0", "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(d)))
            master.wait_for("I have been elected leader! New state: ALIVE")
            for w in workers:
                w.wait_for("Successfully registered with master")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in reversed(self.processes):   # workers first (they stop their executors), then the master
            p.stop()

    def executor_logs(self, app_id: str) -> dict[str, list[Path]]:
        """The executors' stderr files of application ``app_id``, per worker work directory."""
        return {d.name: sorted((d / app_id).glob("*/stderr")) for d in self.work_dirs}


class ConnectServer:
    """pyspark's Spark Connect server (``local[2]``) on a free loopback port."""

    CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.process: SparkProcess | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> ConnectServer:
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", self.CLASS, "--name", "Spark Connect server",
               "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", f"spark.connect.grpc.binding.port={self.port}",
               "--conf", "spark.sql.session.timeZone=UTC", "spark-internal"]
        env = spark_env(self.workdir)
        del env["SPARK_DAEMON_MEMORY"]   # Spark's launcher sizes this server's driver with it
        self.process = SparkProcess(cmd, self.workdir / "connect-server.out", env)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    socket.create_connection(("127.0.0.1", self.port), 1).close()
                    break
                except OSError:
                    if self.process.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the Spark Connect server did not start: "
                                           f"{self.process.text()[-3000:]}") from None
                    time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
