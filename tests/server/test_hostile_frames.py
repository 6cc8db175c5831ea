"""Hostile frames against a real ``kafkalog serve`` over real sockets (issue 23): the 131-byte
frame that aborted the broker, a huge length or count in every field of every served API
version, and the fuzzer (tests/server/frame_fuzz.py) for every API key and version. A frame that
breaks a bound closes its connection with one log line naming the peer, the API and the version;
the broker goes on serving, logs no traceback and keeps its RSS."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterator

import pytest

from tests.server import frame_fuzz
from tests.server.broker_process import BrokerProcess, lines_about, watch_log
from tests.server.raw import answers_api_versions, connect, recv_frame
from tests.server.request_wire import SERVED, request_frame, with_huge_count
from tests.server.test_request_bounds import ISSUE_FRAME


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    d = str(tmp_path_factory.mktemp("hostile") / "data")
    b = BrokerProcess(d, frame_fuzz.FUZZ_CONFIGS).start()
    try:
        yield b
    finally:
        assert b.alive(), b.stderr()[-5000:]
        assert b.stop() == 0, b.stderr()[-5000:]


def _send_and_wait_close(broker: BrokerProcess, frame: bytes) -> tuple[bytes | None, list[str]]:
    """Send ``frame`` on a new connection; the response frame (None: the broker closed without
    one) and the lines the broker logged about that connection (its local port names the peer;
    only lines logged since the connection was made: ports are reused)."""
    watch = watch_log(broker)
    with connect(broker.port) as s:
        local = s.getsockname()[1]
        s.sendall(frame)
        try:
            response = recv_frame(s)
        except ConnectionResetError:
            response = None
    return response, lines_about(watch, local)


def test_the_issue_frame_leaves_the_broker_serving(fuzzed: BrokerProcess) -> None:
    response, lines = _send_and_wait_close(fuzzed, ISSUE_FRAME)
    assert response is None                         # Kafka closes the connection too
    assert fuzzed.alive()
    assert answers_api_versions(fuzzed.port)
    assert len(lines) == 1, lines
    assert "apiKey: IncrementalAlterConfigs, apiVersion: 1" in lines[0]
    assert "Tried to allocate a collection of size" in lines[0]


def test_a_huge_count_in_every_served_version_closes_only_its_connection(
        fuzzed: BrokerProcess) -> None:
    """For each API version served, a well-formed request with one length or count made huge:
    the connection is closed without an answer and one line is logged for it, naming the API and
    version; the broker answers a fresh client after each."""
    rng = random.Random(17)
    for key, version in SERVED:
        frame = with_huge_count(rng, request_frame(rng, key, version), key, version)
        response, lines = _send_and_wait_close(fuzzed, frame)
        assert response is None, (key, version, frame.hex())
        assert len(lines) == 1 and f"apiVersion: {version}," in lines[0], (key, version, lines)
    assert answers_api_versions(fuzzed.port)
    log = fuzzed.stderr()
    assert "Traceback" not in log and "unexpected error" not in log, log[-5000:]


def test_pipelined_requests_after_a_refused_one_are_not_served(fuzzed: BrokerProcess) -> None:
    """A refused frame closes the connection: requests pipelined behind it are not answered,
    requests before it are."""
    from tests.server.raw import api_versions_v0
    with connect(fuzzed.port) as s:
        s.sendall(api_versions_v0(1) + ISSUE_FRAME + api_versions_v0(2))
        first = recv_frame(s)
        assert first is not None and first[:4] == (1).to_bytes(4, "big")
        try:
            assert recv_frame(s) is None
        except ConnectionResetError:
            pass


def test_fuzzed_frames_of_every_api_version(fuzzed: BrokerProcess) -> None:
    """The default suite's short fuzz run: 3,000 hostile frames over every served API key and
    version (the slow run sends a million)."""
    report = frame_fuzz.run(fuzzed, 3000, seed=2311, batch=1000, rss_limit_mib=768)
    assert report.frames == 3000
    assert report.answered > 100 and report.closed > 1000, report.summary()
    assert len(report.per_api) == len(SERVED), report.summary()


@pytest.mark.slow
def test_a_million_fuzzed_frames(tmp_path: os.PathLike[str]) -> None:
    """``KAFKALOG_FRAME_FUZZ`` frames (default 1,000,000); figures in docs/reliability.md."""
    n = int(os.environ.get("KAFKALOG_FRAME_FUZZ", "1000000"))
    b = BrokerProcess(os.path.join(str(tmp_path), "data"), frame_fuzz.FUZZ_CONFIGS).start()
    try:
        report = frame_fuzz.run(b, n, seed=int(os.environ.get("KAFKALOG_SEED", "23")),
                                progress=100_000)
        print(report.summary())
    finally:
        rc = b.stop() if b.alive() else None
    assert rc == 0
    assert report.frames == n


def test_a_client_that_half_closes_after_a_refused_frame(fuzzed: BrokerProcess) -> None:
    """The refused frame, then the client's FIN: nothing hangs, nothing is logged twice."""
    watch = watch_log(fuzzed)
    with connect(fuzzed.port) as s:
        local = s.getsockname()[1]
        s.sendall(ISSUE_FRAME)
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b""
    assert len(lines_about(watch, local)) == 1
