"""Members of a consumer group, one per real client, for the broker's group tests: each member
subscribes, consumes, commits synchronously after every non-empty poll and before its partitions are
revoked, and records what it did as events in order — ``("rec", partition, offset, value)`` for a
record consumed, ``("commit", partition, offset, b"")`` for a commit the broker accepted. A member
leaves cleanly (commit, close: LeaveGroup) on :meth:`Member.stop`.

kafka-python, aiokafka and confluent-kafka members are threads of the test process (aiokafka with its
own event loop); a Java member (kafka-clients 3.9.1 or 4.3.0) is a JVM running
``java/KafkalogGroupMember.java`` whose printed lines are the events."""

from __future__ import annotations

import asyncio
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
LIFETIME_S = 150
SESSION_TIMEOUT_MS = 10000
HEARTBEAT_MS = 500

Event = tuple[str, int, int, bytes]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``condition`` until it holds; fail the test naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting until {what}")
        time.sleep(0.05)


class Member:
    """The events of one member and the stop request; subclasses run the client."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.error: BaseException | None = None

    def record(self, kind: str, partition: int, offset: int, value: bytes = b"") -> None:
        with self._lock:
            self._events.append((kind, partition, offset, value))

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def consumed(self) -> int:
        """How many records it consumed so far."""
        return sum(1 for e in self.events() if e[0] == "rec")

    def committed(self) -> dict[int, int]:
        """The highest offset it committed per partition."""
        out: dict[int, int] = {}
        for kind, p, o, _v in self.events():
            if kind == "commit":
                out[p] = max(o, out.get(p, -1))
        return out

    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, timeout: float = 60) -> None:
        """Leave the group cleanly (commit, close) and wait until it did; fail if it did not."""
        raise NotImplementedError

    def abort(self) -> None:
        """After a failed test: end the member whatever state it is in."""
        raise NotImplementedError


class ThreadMember(Member):
    """A member running ``self.run`` in a thread of the test process."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str,
                 properties: dict[str, str] | None = None) -> None:
        super().__init__(name)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        #: client configuration on top of the member's own (the confluent-kafka member's)
        self.properties = dict(properties or {})
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self.run(time.monotonic() + LIFETIME_S)
        except BaseException as e:    # reported by stop()
            self.error = e

    def run(self, deadline: float) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 60) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"member {self.name} did not stop"
        if self.error is not None:
            raise AssertionError(f"member {self.name} failed: {self.error!r}") from self.error

    def abort(self) -> None:
        self._stop.set()
        self._thread.join(60)


class KafkaPythonMember(ThreadMember):
    def run(self, deadline: float) -> None:
        from kafka import AsyncConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
        from kafka.errors import KafkaError
        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                          fetch_max_wait_ms=200)
        pending: dict[TopicPartition, int] = {}

        def offsets_of(tps: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
            return {tp: OffsetAndMetadata(pending[tp], "", -1) for tp in tps if tp in pending}

        def committed(offsets: dict[TopicPartition, OffsetAndMetadata], result: object) -> None:
            if not isinstance(result, BaseException):
                for tp, om in offsets.items():
                    self.record("commit", tp.partition, om.offset)

        def commit(tps: list[TopicPartition]) -> None:
            offsets = offsets_of(tps)
            if not offsets:
                return
            try:
                c.commit(offsets)
            except KafkaError:        # the group moved on: another member re-reads these
                return
            committed(offsets, None)

        class Listener(AsyncConsumerRebalanceListener):
            """kafka-python 3 runs the listener on its network thread: a blocking commit() there is
            refused, so the revoke commit is awaited (the result arrives through the callback)."""

            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                offsets = offsets_of(list(revoked))
                for tp in revoked:
                    pending.pop(tp, None)
                if offsets:
                    try:
                        await c.commit_async(offsets, callback=committed)
                    except KafkaError:
                        pass

            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                del assigned

        c.subscribe([self.topic], listener=Listener())
        # the subscribed topic's metadata before the first join (topics() waits for a fresh
        # Metadata response): a leader that assigns without it rejoins when the metadata arrives,
        # and kafka-python 3.0.12 drops the assignment of that rejoin if a poll() times out while it
        # is in flight (need_rejoin() turns false before the join task is awaited: no partitions)
        assert self.topic in c.topics(), f"no metadata for {self.topic}"
        try:
            while not self.stopping() and time.monotonic() < deadline:
                batches = c.poll(200)
                for tp, recs in batches.items():
                    for r in recs:
                        self.record("rec", r.partition, r.offset, r.value)
                        pending[tp] = r.offset + 1
                if batches:
                    commit(list(c.assignment()))
            commit(list(c.assignment()))
        finally:
            c.close()


class AiokafkaMember(ThreadMember):
    def run(self, deadline: float) -> None:
        asyncio.run(self._run(deadline))

    async def _run(self, deadline: float) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
        from aiokafka.errors import KafkaError
        c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                             fetch_max_wait_ms=200)
        pending: dict[TopicPartition, int] = {}

        async def commit(tps: list[TopicPartition]) -> None:
            offsets = {tp: pending[tp] for tp in tps if tp in pending}
            if not offsets:
                return
            try:
                await c.commit(offsets)
            except KafkaError:
                return
            for tp, o in offsets.items():
                self.record("commit", tp.partition, o)

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
                await commit(list(revoked))
                for tp in revoked:
                    pending.pop(tp, None)

            async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
                del assigned

        await c.start()
        try:
            c.subscribe([self.topic], listener=Listener())
            while not self.stopping() and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=200)
                for tp, recs in batches.items():
                    for r in recs:
                        assert r.value is not None
                        self.record("rec", r.partition, r.offset, r.value)
                        pending[tp] = r.offset + 1
                if batches:
                    await commit(list(c.assignment()))
            await commit(list(c.assignment()))
        finally:
            await c.stop()


class ConfluentMember(ThreadMember):
    def run(self, deadline: float) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
                "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 200,
                **self.properties}
        if conf.get("group.protocol") != "consumer":    # KIP-848: the broker sets them
            conf.update({"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
        c = Consumer(conf)
        pending: dict[int, int] = {}

        def commit(partitions: list[int]) -> None:
            offsets = [TopicPartition(self.topic, p, pending[p]) for p in partitions if p in pending]
            if not offsets:
                return
            try:
                result = c.commit(offsets=offsets, asynchronous=False)
            except KafkaException:
                return
            for tp in result or []:
                if tp.error is None:
                    self.record("commit", tp.partition, tp.offset)

        def on_revoke(_consumer: Consumer, parts: list[TopicPartition]) -> None:
            commit([tp.partition for tp in parts])
            for tp in parts:
                pending.pop(tp.partition, None)

        def on_lost(_consumer: Consumer, parts: list[TopicPartition]) -> None:
            for tp in parts:
                pending.pop(tp.partition, None)

        c.subscribe([self.topic], on_revoke=on_revoke, on_lost=on_lost)
        try:
            while not self.stopping() and time.monotonic() < deadline:
                msgs = c.consume(500, 0.2)
                for m in msgs:
                    p, o, v = m.partition(), m.offset(), m.value()
                    if m.error() is not None or p is None or o is None or v is None:
                        continue
                    self.record("rec", p, o, v)
                    pending[p] = o + 1
                if msgs:
                    commit([tp.partition for tp in c.assignment()])
            commit([tp.partition for tp in c.assignment()])
            # leave through unsubscribe and let a poll serve the revocation: a revocation served
            # by close() calls rd_kafka_rebalance_protocol from the binding's rebalance callback,
            # which can hang for good with the GIL held (librdkafka #4041)
            c.unsubscribe()
            settle = time.monotonic() + 10
            while c.assignment() and time.monotonic() < settle:
                c.consume(1, 0.1)
        finally:
            c.close()


class JavaMember(Member):
    """``KafkalogGroupMember`` in a JVM: stdin closed = leave; the printed lines are the events."""

    def __init__(self, version: str, name: str, bootstrap: str, topic: str, group: str,
                 properties: dict[str, str] | None = None) -> None:
        super().__init__(name)
        try:
            cp = classpath(version)
        except JavaUnavailable as e:
            pytest.skip(str(e))
        fd, self.stderr_path = tempfile.mkstemp(prefix=f"kafkalog-member-{name}-", suffix=".stderr")
        self._stderr = os.fdopen(fd, "wb")
        props = [f"{k}={v}" for k, v in (properties or {}).items()]
        self.proc = subprocess.Popen(
            java_command("KafkalogGroupMember", bootstrap, topic, group, str(LIFETIME_S * 1000),
                         f"client.id={name}", *props, cp=cp),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self.closed = False
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name=name, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            words = raw.rstrip(b"\n").split(b" ", 3)
            if words[0] == b"rec":
                self.record("rec", int(words[1]), int(words[2]), words[3])
            elif words[0] == b"commit":
                self.record("commit", int(words[1]), int(words[2]))
            elif words[0] == b"closed":
                self.closed = True
            elif words[0] == b"ready":
                self.ready.set()

    def go(self, timeout: float = 120) -> None:
        """Started with ``kafkalog.wait.for.go=true``: wait until the JVM made its consumer, then let
        it subscribe."""
        assert self.ready.wait(timeout), f"member {self.name} never got ready: {self.stderr()}"
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 60) -> None:
        self._end(None, 0, timeout)
        assert self.closed, f"member {self.name} did not close: {self.stderr()}"

    def crash(self, timeout: float = 60) -> None:
        """Halt after the next non-empty poll, those records consumed but not committed, without
        leaving the group; wait until it did."""
        self._end(b"crash\n", 3, timeout)

    def _end(self, command: bytes | None, exit_code: int, timeout: float) -> None:
        """Send ``command`` (None: close stdin) and wait for the exit with ``exit_code``."""
        self._stop.set()
        assert self.proc.stdin is not None
        if command is None:
            self.proc.stdin.close()
        else:
            self.proc.stdin.write(command)
            self.proc.stdin.flush()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"member {self.name} did not end: {self.stderr()}") from None
        self._reader.join(timeout)
        assert rc == exit_code, f"member {self.name} exited {rc}: {self.stderr()}"
        self._stderr.close()

    def abort(self) -> None:
        self.kill()
        if os.path.exists(self.stderr_path):
            os.unlink(self.stderr_path)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._stderr.close()

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]


#: (name, bootstrap, topic, group) -> a started member
MemberFactory = Callable[[str, str, str, str], Member]
COOPERATIVE_STICKY = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


def _java(version: str, properties: dict[str, str] | None = None) -> MemberFactory:
    def make(name: str, bootstrap: str, topic: str, group: str) -> Member:
        return JavaMember(version, name, bootstrap, topic, group, properties)
    return make


def _confluent(properties: dict[str, str]) -> MemberFactory:
    def make(name: str, bootstrap: str, topic: str, group: str) -> Member:
        return ConfluentMember(name, bootstrap, topic, group, properties)
    return make


def _mixed(name: str, bootstrap: str, topic: str, group: str) -> Member:
    """Members of different clients in one group (their common assignor: range), by the last letter
    of the name: a = Java 4.4.0, b = kafka-python, c = confluent-kafka."""
    clients: dict[str, MemberFactory] = {"a": _java("4.4.0"), "b": KafkaPythonMember, "c": ConfluentMember}
    return clients[name[-1]](name, bootstrap, topic, group)


#: client name -> member factory; the cooperative variants rebalance incrementally (KIP-429)
MEMBERS: dict[str, MemberFactory] = {
    "kafka-python": KafkaPythonMember,
    "aiokafka": AiokafkaMember,
    "confluent-kafka": ConfluentMember,
    "java-3.9.1": _java("3.9.1"),
    "java-4.3.0": _java("4.3.0"),
    "confluent-kafka-cooperative": _confluent({"partition.assignment.strategy": "cooperative-sticky"}),
    "java-4.3.0-cooperative": _java("4.3.0", {"partition.assignment.strategy": COOPERATIVE_STICKY}),
    "mixed": _mixed,
}
