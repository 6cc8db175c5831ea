"""A real Kafka broker for a test: ``kafkalog serve``'s broker on a free port of 127.0.0.1 over a
temporary data directory, on a thread of the test process or in a child process, with faults on
demand (:meth:`LocalBroker.fail`, :meth:`~LocalBroker.delay`, :meth:`~LocalBroker.drop`,
:meth:`~LocalBroker.hold`), stops and restarts on the same directory and port (clean or as a
crash), a disk that fills, and readers of what it holds."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from kafkalog.client import ConsumerRecord, TopicPartition
from kafkalog.errors import InvalidConfigError, KafkalogError
from kafkalog.testing import disk, reading
from kafkalog.testing.faults import Fault, Hold, When, error_code, fault_spec
from kafkalog.testing.runners import ProcessRunner, Runner, ThreadRunner
from kafkalog.testing.waiting import wait_for

#: the modes a broker runs in, as its runners name them (``kafkalog.testing.MODES`` lists the same;
#: this module does not import its package, which imports it for the type checker)
_MODES = (ThreadRunner.mode, ProcessRunner.mode)

_topic_numbers = itertools.count(1)


class LocalBroker:
    """One broker for a test (see :func:`broker`).

    Args:
        mode: ``"thread"`` (in the test process, on its own thread: fastest) or ``"process"`` (a
            child process: a crash is a real SIGKILL, and the broker does not share the test's
            GIL).
        config: Kafka broker keys, as ``kafkalog serve --config`` takes them (``num.partitions``,
            ``auto.create.topics.enable``, ``log.segment.bytes``, ``transaction.max.timeout.ms``,
            ``listeners`` ...); Kafka's defaults otherwise. Unknown keys are refused.
        data_dir: serve this directory (kept afterwards); default a new temporary one, removed
            by :meth:`close`.
        disk_size: put the data directory on a tmpfs of this size (``"64m"``) so that
            :meth:`fill_disk` can fill it; :class:`~kafkalog.testing.disk.DiskUnavailable` where
            mounting is not allowed.
        port: the port of the first listener (default: a free one, kept across restarts).
    """

    def __init__(self, mode: str = "thread", config: Mapping[str, Any] | None = None, *,
                 data_dir: str | os.PathLike[str] | None = None, disk_size: str | None = None,
                 port: int = 0) -> None:
        if mode not in _MODES:
            raise InvalidConfigError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
        if data_dir is not None and disk_size is not None:
            raise InvalidConfigError("disk_size makes a data directory of its own: give data_dir or "
                                     "disk_size, not both")
        if disk_size is not None and not re.fullmatch(r"[1-9][0-9]*[kmg]?", str(disk_size), re.I):
            raise InvalidConfigError(f"disk_size {disk_size!r}: expected a size as tmpfs takes it "
                                     f"(bytes, or a number with k, m or g: '64m')")
        self.mode = mode
        self.config = {str(k): _config_value(v) for k, v in (config or {}).items()}
        self.disk_size = disk_size
        self._own_dir = data_dir is None
        self._workdir = tempfile.mkdtemp(prefix="kafkalog-broker-")
        self._mount: str | None = None
        if disk_size is not None:
            self._mount = os.path.join(self._workdir, "disk")
            try:
                disk.mount_tmpfs(self._mount, disk_size)
            except BaseException:
                shutil.rmtree(self._workdir, ignore_errors=True)
                raise
            default_dir = os.path.join(self._mount, "data")
        else:
            default_dir = os.path.join(self._workdir, "data")
        self.data_dir = os.path.abspath(os.fspath(data_dir)) if data_dir is not None else default_dir
        self.log_path = os.path.join(self._workdir, "broker.log")
        self._ports = [port]
        self._runner: Runner | None = None
        self._started = False
        self._closed = False
        #: the listeners of the last start: name, protocol, host, port
        self.listeners: list[dict[str, Any]] = []
        #: the cluster id in the data directory's meta.properties
        self.cluster_id: str | None = None
        #: whether the last start found a clean shutdown (False after a crash: the logs were recovered)
        self.had_clean_shutdown: bool | None = None

    # --- life -----------------------------------------------------------------------------------

    def start(self) -> LocalBroker:
        """Open the data directory and listen (on the same ports as before, after a stop).

        A first start that fails (an unknown key, a port taken) closes the broker, removing what
        it made, before the error is raised: ``broker(...).start()`` and ``with broker(...)``
        leave no reference to close it by. A later start that fails leaves it stopped, its data
        kept for another start."""
        if self._closed:
            raise KafkalogError("this broker was closed; start a new one")
        if self._runner is not None:
            raise KafkalogError("the broker is already running")
        # a child broker whose test process dies removes what close() would have removed
        leaves = {"workdir": self._workdir, "mount": self._mount or ""}
        runner: Runner = ThreadRunner() if self.mode == "thread" else ProcessRunner(self.log_path, leaves)
        try:
            info = runner.start(self.data_dir, self.config, self._ports)
        except BaseException:
            runner.close()
            if not self._started:
                self.close()
            raise
        self._runner = runner
        self._started = True
        self.listeners = info["listeners"]
        self._ports = [lst["port"] for lst in self.listeners]
        self.cluster_id = info["cluster_id"]
        self.had_clean_shutdown = info["had_clean_shutdown"]
        return self

    def stop(self) -> bool:
        """A clean shutdown, as SIGTERM to ``kafkalog serve``: connections closed, logs flushed,
        checkpoints and ``.kafka_cleanshutdown`` written. Returns False when the stop could not be
        clean (the data directory went offline after a failed write: the next start recovers)."""
        runner = self._take_runner()
        try:
            return bool(runner.stop()["clean"])
        finally:
            runner.close()

    def crash(self) -> None:
        """Stop as a crash: in a child process SIGKILL; in the test process every connection is
        closed and the data directory abandoned without a flush, a checkpoint or the clean-shutdown
        marker (what a killed process leaves). The next start recovers the logs."""
        runner = self._take_runner()
        try:
            runner.stop(crash=True)
        finally:
            runner.close()

    def restart(self, crash: bool = False) -> LocalBroker:
        """Stop (cleanly, or as a crash) and start again on the same directory and port; faults
        armed before are gone."""
        if crash:
            self.crash()
        else:
            self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def pid(self) -> int:
        """The broker's process (the test's own in thread mode)."""
        return self._running().pid

    def close(self) -> None:
        """Stop the broker if it runs and remove what it made (the temporary data directory, the
        tmpfs). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._runner is not None:
                if self._own_dir:
                    # the directory is removed next: a crash-like stop spares the flush and checkpoints
                    self.crash()
                else:
                    self.stop()
        finally:
            disk.remove_workdir(self._workdir, self._mount)

    def __enter__(self) -> LocalBroker:
        if self._runner is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _running(self) -> Runner:
        if self._runner is None:
            raise KafkalogError("the broker is not running (start or restart it first)")
        return self._runner

    def _take_runner(self) -> Runner:
        runner = self._running()
        self._runner = None
        return runner

    # --- addresses --------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        """The first listener's port (the same across restarts)."""
        return int(self._ports[0])

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:PORT``, for a client's ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<LocalBroker {self.mode} {self.bootstrap_servers} {state} {self.data_dir}>"

    # --- topics -----------------------------------------------------------------------------------

    def create_topic(self, name: str | None = None, partitions: int = 1,
                     config: Mapping[str, Any] | None = None) -> str:
        """Create a topic (a fresh name ``topic-N`` when ``name`` is None) with ``partitions``
        partitions and topic ``config`` overrides (``cleanup.policy``, ``retention.ms`` ...);
        returns its name. An existing name is refused."""
        if name is None:
            name = f"topic-{next(_topic_numbers)}"
        self._running().call("create_topic", {"name": name, "partitions": partitions,
                                              "config": {str(k): _config_value(v)
                                                         for k, v in (config or {}).items()}})
        return name

    def topics(self) -> list[str]:
        """The topics of the data directory (internal ones left out)."""
        return reading.topics(self.data_dir)

    def records(self, topic: str, partition: int | None = None, *,
                isolation: str = "read_uncommitted") -> list[ConsumerRecord]:
        """Every record ``topic`` holds now (see :func:`kafkalog.testing.reading.records`)."""
        return reading.records(self.data_dir, topic, partition, isolation=isolation)

    def values(self, topic: str, partition: int | None = None, *,
               isolation: str = "read_uncommitted") -> list[bytes | None]:
        """The values of :meth:`records`."""
        return [r.value for r in self.records(topic, partition, isolation=isolation)]

    def end_offsets(self, topic: str, *, isolation: str = "read_uncommitted") -> dict[int, int]:
        return reading.end_offsets(self.data_dir, topic, isolation=isolation)

    def committed(self, group: str) -> dict[TopicPartition, int]:
        """The offsets ``group`` committed, by partition."""
        return reading.committed(self.data_dir, group)

    def wait_for_records(self, topic: str, count: int, timeout: float = 30.0, *,
                         isolation: str = "read_uncommitted") -> list[ConsumerRecord]:
        """Wait until ``topic`` holds at least ``count`` records; returns them all."""
        def enough() -> list[ConsumerRecord]:
            got = self.records(topic, isolation=isolation)
            return got if len(got) >= count else []
        return wait_for(enough, timeout, f"{count} record(s) in {topic} ({isolation}); it holds "
                        f"{len(self.records(topic, isolation=isolation))} now")

    def wait_for_committed(self, group: str, offsets: Mapping[TopicPartition | tuple[str, int], int],
                           timeout: float = 30.0) -> dict[TopicPartition, int]:
        """Wait until ``group`` committed at least ``offsets`` (by partition); returns its offsets."""
        want = {TopicPartition(*tp): o for tp, o in offsets.items()}

        def reached() -> dict[TopicPartition, int]:
            got = self.committed(group)
            return got if all(got.get(tp, -1) >= o for tp, o in want.items()) else {}
        return wait_for(reached, timeout, f"group {group} to commit {want}")

    # --- faults -----------------------------------------------------------------------------------

    def fail(self, api: str | int, error: str | int, count: int | None = 1, *, message: str | None = None,
             client_id: str | None = None, when: When | None = None) -> Fault:
        """The next ``count`` requests of ``api`` (``"Produce"``, ``"FindCoordinator"`` ...; None: every
        one until cancelled) fail with Kafka's ``error`` (``"NOT_LEADER_OR_FOLLOWER"``, a code): each
        gets the error response Kafka gives a request failing so, without being handled. A Produce
        with acks=0 has its connection closed instead, as Kafka tells such a producer."""
        spec = fault_spec(api, "fail", count, client_id, error=error_code(error), message=message)
        return self._arm(spec, when, Fault)

    def delay(self, api: str | int, seconds: float, count: int | None = 1, *, client_id: str | None = None,
              when: When | None = None) -> Fault:
        """Handle the next ``count`` requests of ``api`` ``seconds`` late (the requests after one on
        its connection wait too, as on Kafka, which reads no request of a connection while one is
        in flight)."""
        if seconds < 0:
            raise InvalidConfigError(f"a delay cannot be negative: {seconds}")
        spec = fault_spec(api, "delay", count, client_id, seconds=float(seconds))
        return self._arm(spec, when, Fault)

    def drop(self, api: str | int, count: int | None = 1, *, after: bool = False, client_id: str | None = None,
             when: When | None = None) -> Fault:
        """Close the connection of the next ``count`` requests of ``api`` without an answer: before
        the request is handled, or ``after`` it was (its effect stays, the client never learns it:
        a retried Produce is then a duplicate unless the producer is idempotent)."""
        spec = fault_spec(api, "drop", count, client_id, after=bool(after))
        return self._arm(spec, when, Fault)

    def hold(self, api: str | int, count: int | None = 1, *, client_id: str | None = None,
             when: When | None = None) -> Hold:
        """Handle the next ``count`` requests of ``api`` and keep their answers until
        :meth:`Hold.release` (or the end of a ``with`` block)."""
        spec = fault_spec(api, "hold", count, client_id)
        fault = self._arm(spec, when, Hold)
        assert isinstance(fault, Hold)
        return fault

    def clear_faults(self) -> None:
        """Disarm every fault (holds send what they keep)."""
        self._running().call("clear_faults")

    def _arm(self, spec: dict[str, Any], when: When | None, kind: type[Fault]) -> Fault:
        runner = self._running()
        if when is not None and runner.mode != "thread":
            raise InvalidConfigError("when= (a Python predicate over the request) needs mode='thread'; "
                                     "a process broker picks requests by client_id")
        args: dict[str, Any] = {"spec": spec}
        if when is not None:
            args["when"] = when
        return kind(runner, runner.call("arm", args), spec)

    # --- the disk -----------------------------------------------------------------------------------

    def fill_disk(self) -> int:
        """Take every free byte of the broker's tmpfs (``disk_size``): its next write fails with
        ENOSPC and, as Kafka's log directory failure, the data directory goes offline (every
        produce then gets KAFKA_STORAGE_ERROR until a restart). Returns the bytes taken."""
        return disk.fill(self._disk())

    def free_disk(self) -> None:
        """Give back what :meth:`fill_disk` took (restart the broker to bring the directory back)."""
        disk.free(self._disk())

    def _disk(self) -> str:
        if self._mount is None:
            raise KafkalogError("this broker has no disk of its own: start it with disk_size='64m'")
        return self._mount

    # --- state ------------------------------------------------------------------------------------

    @property
    def log_dir_failure(self) -> str | None:
        """Why the data directory went offline (a failed write), None while it is online."""
        failure: str | None = self._running().call("state")["log_dir_failure"]
        return failure

    @property
    def connection_count(self) -> int:
        return int(self._running().call("state")["connections"])

    def log_text(self) -> str:
        """The broker's log (a process broker's; a thread broker logs through ``logging``)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def broker(mode: str = "thread", config: Mapping[str, Any] | None = None, **options: Any) -> LocalBroker:
    """A broker for a test, started by ``with``::

        with kafkalog.testing.broker() as b:
            producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)

    (or ``b = broker().start()`` ... ``b.close()``). ``options``: ``data_dir``, ``disk_size``,
    ``port`` (see :class:`LocalBroker`)."""
    return LocalBroker(mode, config, **options)


def topic_name(base: str) -> str:
    """A legal, fresh topic name made from ``base`` (a test's name): Kafka's characters only."""
    cleaned = re.sub(r"[^a-zA-Z0-9._-]+", "-", base).strip("-.") or "topic"
    return f"{cleaned[:200]}-{next(_topic_numbers)}"


def _config_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


__all__ = ["LocalBroker", "broker", "topic_name"]
