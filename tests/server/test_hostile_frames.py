"""Hostile frames against a real ``kafkalog serve`` over real sockets (issue 23): the 131-byte
frame that aborted the broker, a huge length or count in every field of every advertised API
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
from tests.server.broker_process import BrokerProcess
from tests.server.raw import answers_api_versions, connect, recv_frame
from tests.server.request_wire import ADVERTISED, request_frame, with_huge_count
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


def _send_and_wait_close(port: int, frame: bytes) -> tuple[bytes | None, int]:
    """Send ``frame``; the response frame (None: the broker closed without one) and the local
    port of the connection (the peer the broker's log names)."""
    with connect(port) as s:
        local = s.getsockname()[1]
        s.sendall(frame)
        try:
            return recv_frame(s), local
        except ConnectionResetError:
            return None, local


def _log_lines_of(broker: BrokerProcess, local_port: int) -> list[str]:
    peer = f"'127.0.0.1', {local_port})"
    return [line for line in broker.stderr().splitlines() if peer in line]


def test_the_issue_frame_leaves_the_broker_serving(fuzzed: BrokerProcess) -> None:
    response, local = _send_and_wait_close(fuzzed.port, ISSUE_FRAME)
    assert response is None                         # Kafka closes the connection too
    assert fuzzed.alive()
    assert answers_api_versions(fuzzed.port)
    lines = _log_lines_of(fuzzed, local)
    assert len(lines) == 1, lines
    assert "apiKey: IncrementalAlterConfigs, apiVersion: 1" in lines[0]
    assert "Tried to allocate a collection of size" in lines[0]


def test_a_huge_count_in_every_advertised_version_closes_only_its_connection(
        fuzzed: BrokerProcess) -> None:
    """For each advertised API version, a well-formed request with one length or count made huge:
    the connection is closed without an answer and one line is logged for it, naming the API and
    version; the broker answers a fresh client after each."""
    rng = random.Random(17)
    for key, version in ADVERTISED:
        frame = with_huge_count(rng, request_frame(rng, key, version), key, version)
        response, local = _send_and_wait_close(fuzzed.port, frame)
        assert response is None, (key, version, frame.hex())
        lines = _log_lines_of(fuzzed, local)
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
    """The default suite's short fuzz run: 3,000 hostile frames over every advertised API key and
    version (the slow run sends a million)."""
    report = frame_fuzz.run(fuzzed, 3000, seed=2311, batch=1000, rss_limit_mib=768)
    assert report.frames == 3000
    assert report.answered > 100 and report.closed > 1000, report.summary()
    assert len(report.per_api) == len(ADVERTISED), report.summary()


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
    with connect(fuzzed.port) as s:
        local = s.getsockname()[1]
        s.sendall(ISSUE_FRAME)
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b""
    assert len(_log_lines_of(fuzzed, local)) == 1
