"""Protocol fuzzing: mutated frames from the real captures, random frames, huge, negative and
lying sizes. Every attempt ends in responses or a closed connection, never a hang or a crash,
and the broker serves a valid request afterwards."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from tests.server.broker_process import BrokerProcess
from tests.server.raw import answers_api_versions, captured_requests, connect

SEED = 20261124
ROUNDS = 250
#: a broker that neither answers nor closes within this long is hanging
HANG_S = 30


def _mutations(rng: random.Random, captures: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(ROUNDS):
        base = bytearray(rng.choice(captures))
        kind = rng.randrange(7)
        if kind == 0:                                   # flip bytes after the size field
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(4, len(base))
                base[i] = rng.randrange(256)
            out.append(bytes(base))
        elif kind == 1:                                 # truncated body, consistent size
            cut = rng.randrange(4, len(base))
            body = base[4:cut]
            out.append(struct.pack(">i", len(body)) + bytes(body))
        elif kind == 2:                                 # body longer than it should be
            body = bytes(base[4:]) + rng.randbytes(rng.randint(1, 64))
            out.append(struct.pack(">i", len(body)) + body)
        elif kind == 3:                                 # random header fields
            struct.pack_into(">hh", base, 4, rng.choice([0, 1, 2, 3, 18, 19, 20, 32, 60, 999, -1]),
                             rng.randint(-2, 20))
            out.append(bytes(base))
        elif kind == 4:                                 # random bytes, valid size
            body = rng.randbytes(rng.randint(0, 300))
            out.append(struct.pack(">i", len(body)) + body)
        elif kind == 5:                                 # lying size: says more than is sent
            out.append(struct.pack(">i", len(base) + rng.randint(1, 10_000)) + bytes(base[4:]))
        else:                                           # huge or negative sizes
            size = rng.choice([-1, -2**31, 2**31 - 1, 200 * 1024 * 1024, 0])
            out.append(struct.pack(">i", size) + bytes(base[4:]))
    return out


def _attempt(port: int, frame: bytes) -> None:
    with connect(port, timeout=HANG_S) as s:
        try:
            s.sendall(frame)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            return                                     # closed on us while sending: fine
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return
            except TimeoutError:
                pytest.fail(f"broker neither answered nor closed within {HANG_S}s: {frame[:64].hex()}")
            if not chunk:
                return


def test_fuzzed_frames_never_crash_or_hang_the_broker(broker: BrokerProcess) -> None:
    rng = random.Random(SEED)
    captures = list(captured_requests().values())
    assert len(captures) >= 30
    for frame in _mutations(rng, captures):
        _attempt(broker.port, frame)
        assert broker.alive(), broker.stderr()[-3000:]
    assert answers_api_versions(broker.port)
    log = broker.stderr()
    assert "Traceback" not in log and "unexpected error" not in log, log[-5000:]
