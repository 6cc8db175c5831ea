"""What one connection can make the broker hold, and for how long, in Kafka's order of checks
(issue 23), from outside over real sockets:

* ``socket.request.max.bytes`` is checked on the size field, before any of the body arrives;
* a client that pipelines requests faster than it reads its responses does not grow the broker's
  memory: the broker stops reading that socket (one request in flight, at most one receive of
  pipelined bytes buffered), and serves it again once the client reads;
* ``queued.max.requests`` (Kafka's key and default, 500) is honoured and refused below 1;
* ``connections.max.idle.ms`` closes connections that never send, that stop half-way through a
  frame, that stop reading their responses; a client's FIN ends its connection at once;
* a client that sends one frame a byte at a time holds nothing up and is answered at the end.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests.server.broker_process import BrokerProcess, lines_about, watch_log
from tests.server.frame_fuzz import rss_kib
from tests.server.raw import (
    answers_api_versions,
    api_versions_v0,
    connect,
    fetch_frame,
    recv_frame,
    request_frame,
)

MiB = 1 << 20


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Kafka's default idle time (10 minutes): a close seen here is not the idle timer's."""
    d = str(tmp_path_factory.mktemp("bounds") / "data")
    b = BrokerProcess(d, ["socket.request.max.bytes=4096", "queued.max.requests=1"]).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.stderr()[-5000:]


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    d = str(tmp_path_factory.mktemp("idle") / "data")
    b = BrokerProcess(d, ["connections.max.idle.ms=1000"]).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.stderr()[-5000:]


def _closed(s: socket.socket) -> bool:
    """The broker closed ``s`` (EOF or reset), read within the socket's timeout."""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# --- the order of checks -----------------------------------------------------------------------

def test_an_oversized_frame_is_refused_on_its_size_field(patient: BrokerProcess) -> None:
    """Only the 4 bytes of the size field are sent: the broker closes without waiting for a body
    (its idle timer is 10 minutes, this socket waits 30 s)."""
    watch = watch_log(patient)
    with connect(patient.port, timeout=30) as s:
        local = s.getsockname()[1]
        s.sendall(struct.pack(">i", 4097))
        assert _closed(s)
    lines = lines_about(watch, local)
    assert len(lines) == 1
    assert "Invalid receive (size = 4097 larger than socket.request.max.bytes 4096)" in lines[0]
    with connect(patient.port, timeout=30) as s:              # 4096 is allowed: the body is awaited
        s.sendall(struct.pack(">i", 4096) + b"\x00" * 100)
        s.settimeout(1)
        assert not _closed(s)


# --- pipelining faster than reading -------------------------------------------------------------

def _metadata_v1(correlation_id: int) -> bytes:
    # Metadata v1, topics null (all topics): the answer names the broker, ~60 bytes
    body = struct.pack(">hhih", 3, 1, correlation_id, 4) + b"pipe" + struct.pack(">i", -1)
    return struct.pack(">i", len(body)) + body


def test_a_client_that_pipelines_without_reading_does_not_grow_the_broker(
        tmp_path: os.PathLike[str]) -> None:
    """A client writes ApiVersions requests (18 bytes, answered with ~190) as fast as the socket
    takes them and reads nothing. The broker reads its socket only while it can send the answers:
    the client's writes stop after a few MiB (the kernel's buffers), the broker's RSS does not grow
    with what the client wants to send, other clients are served; once the client reads, the
    answers arrive in order."""
    b = BrokerProcess(os.path.join(str(tmp_path), "data")).start()
    try:
        assert b.proc is not None
        rss_before = rss_kib(b.proc.pid)
        hog = connect(b.port)
        one = api_versions_v0(0)
        chunk = b"".join(api_versions_v0(i) for i in range(4096))
        sent, stalled_since = 0, None
        hog.setblocking(False)
        while sent < 256 * MiB:
            at = sent % len(chunk)                  # the stream is the chunk, over and over
            try:
                sent += hog.send(chunk[at:])
                stalled_since = None
            except BlockingIOError:
                now = time.monotonic()
                stalled_since = stalled_since or now
                if now - stalled_since > 1:
                    break
                time.sleep(0.01)
        assert sent < 64 * MiB, f"the broker took {sent} bytes from a client that reads nothing"
        assert answers_api_versions(b.port)
        rss_after = rss_kib(b.proc.pid)
        assert rss_after - rss_before < 64 * 1024, (rss_before, rss_after)
        hog.setblocking(True)
        hog.settimeout(60)
        for i in range(min(sent // len(one), 20000)):       # the client reads: in order
            resp = recv_frame(hog)
            assert resp is not None and struct.unpack_from(">i", resp)[0] == i % 4096, i
        hog.close()
    finally:
        assert b.stop() == 0, b.stderr()[-5000:]


def test_queued_max_requests_1_serves_everyone_in_order(patient: BrokerProcess) -> None:
    """With room for one queued request, 40 connections get, all at once, a long-poll Fetch (it
    waits 300 ms for data that never comes: its connection's task takes it over) followed by 20
    ApiVersions: the sockets read while the queue is full wait for room, and everything is
    answered, each connection in order."""
    topic = "queued"
    with connect(patient.port) as s:              # Metadata v4 creates the topic
        s.sendall(request_frame(3, 4, 1, {"topics": [{"name": topic}],
                                          "allow_auto_topic_creation": True}))
        assert recv_frame(s) is not None
    wait = fetch_frame(4, 1000, [(topic, [(0, 0, 1 << 20)])], max_wait_ms=300, min_bytes=1)
    burst = wait + b"".join(api_versions_v0(2000 + i) for i in range(20))
    expected = [1000] + [2000 + i for i in range(20)]
    socks = [connect(patient.port, timeout=60) for _ in range(40)]
    try:
        for s in socks:                             # each accepted and served once
            s.sendall(api_versions_v0(1))
            assert recv_frame(s) is not None
        for s in socks:
            s.sendall(burst)
        for s in socks:
            got = [struct.unpack_from(">i", recv_frame(s) or b"\xff\xff\xff\xff")[0]
                   for _ in range(21)]
            assert got == expected
    finally:
        for s in socks:
            s.close()
    assert patient.alive()


@pytest.mark.parametrize("value,ok", [("0", False), ("-5", False), ("1", True)])
def test_queued_max_requests_is_validated(tmp_path: os.PathLike[str], value: str, ok: bool) -> None:
    d = os.path.join(str(tmp_path), "data")
    cmd = [sys.executable, "-m", "kafkalog.cli.main", "serve", d, "--port", "0", "--config",
           f"queued.max.requests={value}"]
    if ok:
        b = BrokerProcess(d, [f"queued.max.requests={value}"]).start()
        assert answers_api_versions(b.port)
        assert b.stop() == 0
        return
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    err = json.loads(r.stdout.strip().splitlines()[-1])
    assert err["error"] == "InvalidConfigError"
    assert f"Invalid value {value} for configuration queued.max.requests" in err["message"]


# --- idle, half-open and slow connections -------------------------------------------------------

def test_a_connection_that_never_sends_is_closed(impatient: BrokerProcess) -> None:
    with connect(impatient.port, timeout=30) as s:
        assert _closed(s)


def test_a_connection_that_stops_half_way_through_a_frame_is_closed(impatient: BrokerProcess) -> None:
    with connect(impatient.port, timeout=30) as s:
        s.sendall(api_versions_v0()[:9])
        assert _closed(s)


def test_a_connection_that_stops_reading_is_closed(impatient: BrokerProcess) -> None:
    """A client that never reads its answers: once the broker's sends have made no progress for
    connections.max.idle.ms, it closes the connection (its log says so while the client still has
    read nothing) and serves everyone else."""
    watch = watch_log(impatient)
    with connect(impatient.port, timeout=30) as s:
        local = s.getsockname()[1]
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        frames = b"".join(_metadata_v1(i) for i in range(50000))
        try:
            s.send(frames)
        except BlockingIOError:
            pass
        closes = [ln for ln in lines_about(watch, local, wait_s=30)
                  if "idle for connections.max.idle.ms=1000" in ln]
        assert closes, "the broker kept a connection whose client reads nothing"
        assert answers_api_versions(impatient.port)


def test_a_client_fin_ends_its_connection_at_once(patient: BrokerProcess) -> None:
    """Half-closed by the client, nothing sent: the broker closes its side (no idle wait: the
    broker's idle time is 10 minutes, this socket waits 30 s)."""
    with connect(patient.port, timeout=30) as s:
        s.shutdown(socket.SHUT_WR)
        assert _closed(s)
    with connect(patient.port, timeout=30) as s:        # after a request: answered, then closed
        s.sendall(api_versions_v0(5))
        s.shutdown(socket.SHUT_WR)
        resp = recv_frame(s)
        assert resp is not None and struct.unpack_from(">i", resp)[0] == 5
        assert _closed(s)


def test_a_slow_sender_holds_nothing_up(impatient: BrokerProcess) -> None:
    """One client sends an ApiVersions frame one byte every 0.25 s (longer than the broker's idle
    time in total, each byte is progress); meanwhile other clients are served; at the end the slow
    one is answered."""
    frame = api_versions_v0(77)
    done: list[bytes | None] = []

    def slow() -> None:
        with connect(impatient.port, timeout=60) as s:
            for i in range(len(frame)):
                s.sendall(frame[i:i + 1])
                time.sleep(0.25)
            done.append(recv_frame(s))

    t = threading.Thread(target=slow)
    t.start()
    served = 0
    while t.is_alive():
        assert answers_api_versions(impatient.port)
        served += 1
        time.sleep(0.05)
    t.join()
    assert served > 10
    assert done and done[0] is not None and struct.unpack_from(">ih", done[0]) == (77, 0)


def test_a_negative_idle_time_never_closes(tmp_path: os.PathLike[str]) -> None:
    """connections.max.idle.ms=-1 turns idle expiry off, as in Kafka (it used to close every
    connection at once)."""
    b = BrokerProcess(os.path.join(str(tmp_path), "data"), ["connections.max.idle.ms=-1"]).start()
    try:
        with connect(b.port, timeout=30) as s:
            for i in range(3):
                s.sendall(api_versions_v0(i))
                resp = recv_frame(s)
                assert resp is not None and struct.unpack_from(">i", resp)[0] == i
                time.sleep(0.5)
    finally:
        assert b.stop() == 0, b.stderr()[-5000:]
