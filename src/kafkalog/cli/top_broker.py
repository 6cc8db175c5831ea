"""What ``kafkalog top HOST:PORT`` asks a broker (kafkalog's or Kafka's), once per refresh, over one
connection: Metadata (the topics and partitions), ListOffsets LATEST (log end offsets),
DescribeLogDirs (partition sizes), ListGroups and OffsetFetch (the groups' committed offsets).
Messages are kio's; nothing here writes anything. An unreachable server or a closed connection is
a :class:`~kafkalog.errors.KafkalogIOError` naming the bootstrap server."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kafkalog.cli.top_view import Sample
from kafkalog.errors import KafkalogIOError

#: (API key, version) of each request: versions Kafka 4.4 and kafkalog both serve
METADATA, LIST_OFFSETS, DESCRIBE_LOG_DIRS, LIST_GROUPS, OFFSET_FETCH = (3, 12), (2, 7), (35, 4), (16, 4), (9, 8)
LATEST = -1
_SIZE = struct.Struct(">i")


def parse_bootstrap(text: str) -> tuple[str, int] | None:
    """``host:port`` (the first of a comma-separated list), None when ``text`` is not one."""
    first = text.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


class BrokerSource:
    """One connection to the bootstrap server; :meth:`sample` takes a :class:`Sample`."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        addr = parse_bootstrap(bootstrap)
        assert addr is not None
        self.bootstrap = bootstrap
        self._timeout = timeout
        self._correlation = 0
        try:
            self._sock = socket.create_connection(addr, timeout=timeout)
        except OSError as e:
            raise KafkalogIOError(f"cannot connect to the bootstrap server {bootstrap}: "
                                  f"{e.strerror or e}") from None

    def close(self) -> None:
        self._sock.close()

    def _call(self, api: tuple[int, int], values: dict[str, Any]) -> Any:
        from kio.index import load_request_schema, load_response_schema
        from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
        from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
        from kio.serial import entity_reader, entity_writer

        from kafkalog.server.requests.kio_build import build
        key, version = api
        self._correlation += 1
        cls = load_request_schema(key, version)
        header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
        header = build(header_cls, {"request_api_key": key, "request_api_version": version,
                                    "correlation_id": self._correlation, "client_id": "kafkalog-top"})
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header)
        entity_writer(cls)(buf, build(cls, values))
        data = buf.getvalue()
        try:
            self._sock.sendall(_SIZE.pack(len(data)) + data)
            size = _SIZE.unpack(self._recv(4))[0]
            frame = self._recv(size)
        except OSError as e:
            raise KafkalogIOError(f"the bootstrap server {self.bootstrap} did not answer: "
                                  f"{e.strerror or e}") from None
        rcls = load_response_schema(key, version)
        return entity_reader(rcls)(frame, 5 if rcls.__flexible__ else 4)[0]

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise KafkalogIOError(f"the bootstrap server {self.bootstrap} closed the connection")
            buf += chunk
        return bytes(buf)

    def sample(self) -> Sample:
        meta = self._call(METADATA, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
        partitions = {t.name: sorted(p.partition_index for p in t.partitions)
                      for t in meta.topics if t.name and not t.is_internal}
        ends: dict[tuple[str, int], int] = {}
        if partitions:
            offs = self._call(LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": LATEST}
                                           for p in ps]} for t, ps in partitions.items()]})
            for t in offs.topics:
                for p in t.partitions:
                    if p.error_code == 0:
                        ends[(t.name, p.partition_index)] = p.offset
        sizes: dict[tuple[str, int], int] = {}
        dirs = self._call(DESCRIBE_LOG_DIRS, {"topics": None})
        for r in dirs.results:
            for t in r.topics:
                for p in t.partitions:
                    sizes[(t.name, p.partition_index)] = sizes.get((t.name, p.partition_index), 0) + p.partition_size
        groups = self._call(LIST_GROUPS, {"states_filter": ()})
        committed: dict[str, dict[tuple[str, int], int]] = {}
        names = sorted(g.group_id for g in groups.groups)
        if names:
            fetched = self._call(OFFSET_FETCH, {"groups": [{"group_id": g, "topics": None} for g in names],
                                                "require_stable": False})
            for g in fetched.groups:
                committed[g.group_id] = {(t.name, p.partition_index): p.committed_offset
                                         for t in g.topics for p in t.partitions if p.committed_offset >= 0}
        return Sample.of(partitions, ends, sizes, committed)
