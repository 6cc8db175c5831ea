"""A test's broker from start to close, in both modes: clean stops and crashes on the same
directory and port, what it leaves behind, what it refuses, and a process broker outliving nothing
(its test process dies: it stops cleanly)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

import kafkalog.testing
from kafkalog.errors import InvalidConfigError, KafkalogError
from kafkalog.testing import LocalBroker, WaitTimeout, wait_for
from tests.server.raw import answers_api_versions

MODES = ["thread", "process"]
CLEAN = ".kafka_cleanshutdown"


def _produce(b: LocalBroker, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap_servers, "enable.idempotence": True})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


@pytest.mark.parametrize("mode", MODES)
def test_stop_is_clean_crash_is_not_and_both_come_back_on_the_same_port(mode: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with kafkalog.testing.broker(mode, data_dir=data) as b:
        port = b.port
        topic = b.create_topic("t", 2)
        _produce(b, topic, [b"a", b"b"])
        assert b.stop() is True
        assert (data / CLEAN).exists() and not answers_api_versions_or_refused(port)
        b.start()
        assert b.had_clean_shutdown is True and b.port == port and answers_api_versions(port)
        assert not (data / CLEAN).exists()          # a running broker's directory has none
        _produce(b, topic, [b"c"])
        b.crash()
        assert not (data / CLEAN).exists()
        b.start()
        assert b.had_clean_shutdown is False and b.port == port
        assert sorted(b.values(topic)) == [b"a", b"b", b"c"]
    # a directory the test gave is kept, shut down cleanly
    assert (data / CLEAN).exists()


def answers_api_versions_or_refused(port: int) -> bool:
    try:
        return answers_api_versions(port)
    except OSError:
        return False


def test_a_process_crash_is_a_sigkill(tmp_path: Path) -> None:
    with kafkalog.testing.broker("process", data_dir=tmp_path / "data") as b:
        pid = b.pid
        assert pid != os.getpid()
        b.crash()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)                 # reaped by the fork server before crash() returned
        assert "stopped" not in b.log_text().split("closing the logs")[-1]
        b.start()
        assert b.pid != pid


@pytest.mark.parametrize("mode", MODES)
def test_close_removes_what_the_broker_made(mode: str) -> None:
    b = kafkalog.testing.broker(mode).start()
    data, work = Path(b.data_dir), Path(b.data_dir).parent
    assert data.is_dir()
    b.close()
    b.close()                                  # idempotent
    assert not work.exists()
    with pytest.raises(KafkalogError, match="closed"):
        b.start()


def test_a_thread_broker_leaves_no_thread_behind() -> None:
    before = set(threading.enumerate())
    with kafkalog.testing.broker() as b:
        b.create_topic("t", 1)
        names = {t.name for t in set(threading.enumerate()) - before}
        assert "kafkalog-testing-broker" in names and any("cleaner" in n for n in names)
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert left == []


@pytest.mark.parametrize("own_dir", [False, True], ids=["given-dir", "own-dir"])
def test_a_process_broker_stops_cleanly_when_its_test_process_dies(tmp_path: Path, own_dir: bool) -> None:
    """The orphan stops cleanly, then removes what close() would have: its work directory (its
    log, and its own data directory), never a data directory it was given."""
    data = tmp_path / "data"
    given = "" if own_dir else f"data_dir={str(data)!r}"
    script = (f"import sys, time, kafkalog.testing\n"
              f"b = kafkalog.testing.broker('process', {given}).start()\n"
              f"print(b.port, b.pid, b.data_dir, b.log_path, flush=True)\n"
              f"time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port_s, pid_s, data_dir, log_path = proc.stdout.readline().split()
        port, pid = int(port_s), int(pid_s)
        workdir = os.path.dirname(log_path)
        assert os.path.isdir(workdir) and Path(data_dir).is_dir()
        assert answers_api_versions(port)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        wait_for(lambda: not _alive(pid), 60, "the orphaned broker to exit")
        assert not os.path.exists(workdir), os.listdir(workdir)
        if own_dir:
            assert not os.path.exists(data_dir)
        else:
            assert (data / CLEAN).exists(), "the orphan's stop was not clean"
    finally:
        if proc.poll() is None:
            proc.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("mode", MODES)
def test_faults_are_gone_after_a_restart(mode: str) -> None:
    with kafkalog.testing.broker(mode) as b:
        fault = b.fail("Metadata", "UNKNOWN_SERVER_ERROR", count=None)
        assert not fault.done
        b.restart()
        with pytest.raises(KafkalogError, match="stopped or restarted"):
            fault.taken
        assert answers_api_versions(b.port)


@pytest.mark.parametrize("mode", MODES)
def test_what_is_refused_is_refused_saying_why(mode: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="mode must be one of thread, process"):
        LocalBroker("docker")
    with pytest.raises(InvalidConfigError, match="give data_dir or disk_size"):
        LocalBroker(mode, data_dir=tmp_path, disk_size="64m")
    with pytest.raises(InvalidConfigError, match="disk_size"):
        LocalBroker(mode, disk_size="64 megs")
    # an unknown broker key: Kafka's words, from the broker (across the process boundary too)
    refused = kafkalog.testing.broker(mode, {"log.segmnet.bytes": 1})
    with pytest.raises(InvalidConfigError, match="log.segmnet.bytes"):
        refused.start()
    # a first start that fails leaves nothing behind (the caller holds no broker to close)
    assert not Path(refused.log_path).parent.exists()
    with pytest.raises(KafkalogError, match="closed"):
        refused.start()
    with kafkalog.testing.broker(mode) as b:
        with pytest.raises(KafkalogError, match="already running"):
            b.start()
        with pytest.raises(InvalidConfigError, match="unknown API 'Produse': expected one of Produce, Fetch"):
            b.fail("Produse", "NOT_ENOUGH_REPLICAS")
        with pytest.raises(InvalidConfigError, match="unknown Kafka error 'NOT_ENOUGH_REPLICA'"):
            b.fail("Produce", "NOT_ENOUGH_REPLICA")
        with pytest.raises(InvalidConfigError, match="other than NONE"):
            b.fail("Produce", 0)
        with pytest.raises(InvalidConfigError, match="count must be a positive number"):
            b.delay("Produce", 1, count=0)
        with pytest.raises(InvalidConfigError, match="negative"):
            b.delay("Produce", -1)
        with pytest.raises(KafkalogError, match="already exists"):
            b.create_topic("t")
            b.create_topic("t")
        if mode == "process":
            with pytest.raises(InvalidConfigError, match="needs mode='thread'"):
                b.fail("Produce", "NOT_ENOUGH_REPLICAS", when=lambda r: True)
        with pytest.raises(KafkalogError, match="no disk of its own"):
            b.fill_disk()
        b.stop()
        with pytest.raises(KafkalogError, match="not running"):
            b.stop()
        with pytest.raises(KafkalogError, match="not running"):
            b.create_topic("u")


def test_when_picks_requests_by_their_content() -> None:
    with kafkalog.testing.broker() as b:
        b.create_topic("keep")
        b.create_topic("lose")
        fault = b.fail("Produce", "NOT_ENOUGH_REPLICAS", count=None,
                       when=lambda request: any(t.name == "lose" for t in request.body.topic_data))
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "retries": 0})
        errors: list[object] = []
        p.produce("keep", b"k", on_delivery=lambda err, msg: errors.append(err))
        p.flush(30)
        p.produce("lose", b"l", on_delivery=lambda err, msg: errors.append(err))
        p.flush(30)
        assert errors[0] is None and errors[1] is not None
        assert fault.taken == 1 and b.values("keep") == [b"k"] and b.values("lose") == []


def test_wait_for_says_what_it_waited_for() -> None:
    with pytest.raises(WaitTimeout, match=r"waited 0.2 s for the moon; its last value was \[\]"):
        wait_for(list, 0.2, "the moon")

    def boom() -> bool:
        raise KeyError("k")
    with pytest.raises(WaitTimeout, match="boom; it last raised KeyError: 'k'"):
        wait_for(boom, 0.1)
    assert wait_for(lambda: 7, 1) == 7
    with kafkalog.testing.broker() as b:
        topic = b.create_topic()
        with pytest.raises(WaitTimeout, match=f"2 record\\(s\\) in {topic} .*it holds 0 now"):
            b.wait_for_records(topic, 2, timeout=0.3)
        fault = b.fail("Produce", "NOT_ENOUGH_REPLICAS")
        with pytest.raises(WaitTimeout, match=r"took 0 request\(s\) \(waiting for 1\)"):
            fault.wait(1, timeout=0.3)


def test_the_asyncio_form_holds_and_releases() -> None:
    from aiokafka import AIOKafkaProducer

    async def scenario() -> None:
        async with kafkalog.testing.async_broker() as b:
            topic = await b.create_topic("a")
            p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
            await p.start()
            try:
                held = await b.hold("Produce")
                sent = asyncio.ensure_future(p.send_and_wait(topic, b"x"))
                await held.wait_held()
                assert not sent.done() and await b.records(topic)
                await held.release()
                await asyncio.wait_for(sent, 30)
            finally:
                await p.stop()
    t0 = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - t0 < 60


def test_a_restart_that_fails_keeps_the_broker_and_its_data() -> None:
    """A start after a stop that fails (its port was taken meanwhile) keeps the data directory;
    the broker starts again once the port is free."""
    with kafkalog.testing.broker() as b:
        b.create_topic("kept", 1)
        b.stop()
        squatter = socket.socket()
        try:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", b.port))
            squatter.listen()
            with pytest.raises(KafkalogError, match="cannot bind: Address already in use"):
                b.start()
            assert Path(b.data_dir).is_dir() and not b.running
        finally:
            squatter.close()
        b.start()
        assert "kept" in b.topics()
