"""A response of many parts is sent a slice of parts at a time (issue 35): a Fetch of every
partition answers with a file slice per partition holding records, each a ``sendfile`` and a
``close``, and while the socket took them one step of the event loop held it 107-121 ms at 100,000
partitions. Over a real socket pair: the loop turns while the parts go out, the bytes arrive whole
and in order, and every duplicated descriptor is closed."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.handlers.slices import PARTITIONS_PER_SLICE
from kafkalog.server.network.channel import PlainChannel
from kafkalog.server.network.socket_server import Server
from tests.server.loop_turns import loop_turns_during

SLICES = 10 * PARTITIONS_PER_SLICE


def test_a_response_of_many_file_slices_lets_the_loop_turn(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    data = bytes(range(256)) * 4
    seg.write_bytes(data)
    fds = [os.open(seg, os.O_RDONLY) for _ in range(SLICES)]
    response: list[bytes | FileSlice] = []
    want = bytearray()
    for i, fd in enumerate(fds):
        head = i.to_bytes(4, "big")
        response += [head, FileSlice(str(seg), fd, i % 512, 7)]
        want += head + data[i % 512:i % 512 + 7]
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)     # room for all of it: no wait
    a.setblocking(False)
    try:
        turns = asyncio.run(loop_turns_during(
            Server._send(None, PlainChannel(a, 30.0), response)))     # type: ignore[arg-type]
        got = bytearray()
        b.settimeout(5)
        while len(got) < len(want):
            got += b.recv(1 << 20)
        assert bytes(got) == bytes(want)
        assert turns >= SLICES // PARTITIONS_PER_SLICE        # the loop turned between slices
        for fd in fds:
            try:
                os.fstat(fd)
            except OSError:
                continue
            raise AssertionError(f"descriptor {fd} left open")
    finally:
        a.close()
        b.close()
