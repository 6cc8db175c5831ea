"""The cost of checking a request's lengths and counts before kio reads it (issue 23).

``parse_request`` (kafkalog.server.requests.protocol) walks every request's bounds program
(kafkalog.server.requests.request_bounds) and then lets kio read the header and body. Measured here on the
requests of the hot paths, in the same run:

* ``before``: ``parse_request`` with the bounds walk replaced by a function that accepts
  everything (version check, kio's header and body readers: the parse before issue 23);
* ``after``: ``parse_request`` as the broker calls it (version check, bounds walk, kio);
* ``bounds``: the bounds walk alone (the compiled kernel, or the pure-Python twin with
  ``KAFKALOG_PURE_PYTHON=1``).

Requests: Produce v9 (librdkafka 2.x) and v11 (the Java client) with one partition holding a
145-record batch; Fetch v12 (librdkafka) and v17 (the Java client) of one partition; Fetch v17 of
100 partitions (a consumer of many partitions); Metadata v12 of 10 topics.

``dispatch``: the whole of ``Server.dispatch`` (parse, handler, response) in-process on a real
data directory, before and after the same way: Produce v9 appending the 145-record batch, and
Fetch v12 reading 145 records from offset 0.

Each figure is the median over ``--runs`` blocks of the mean CPU time per call (this thread's,
``time.thread_time``: the machine is shared) over ``--calls`` calls, in microseconds, the blocks
of before and after alternating; ``ratio`` is after / before (1.00: the check costs nothing).
JSON lines.

    python benchmarks/request_bounds_bench.py [--runs 41] [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import build_batch
from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer

from kafkalog.log.manager import LogManager
from kafkalog.server.broker import Broker
from kafkalog.server.config import Listener, ServerConfig
from kafkalog.server.handlers.kafka_apis import VERSIONS
from kafkalog.server.network.socket_server import Server
from kafkalog.server.requests import protocol
from kafkalog.server.requests.kio_build import build
from kafkalog.server.requests.protocol import _readers, parse_request
from kafkalog.server.requests.request_bounds import IMPLEMENTATION, walk


def accept_all(code: bytes, data: bytes) -> int:
    return len(data)


def frame(key: int, version: int, values: dict[str, Any]) -> bytes:
    """A request (without its size field) written by kio's encoder."""
    cls = load_request_schema(key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, build(header_cls, {
        "request_api_key": key, "request_api_version": version, "correlation_id": 7,
        "client_id": "bench"}))
    entity_writer(cls)(buf, build(cls, values))
    return buf.getvalue()


def produce(version: int, records: bytes) -> bytes:
    return frame(0, version, {"transactional_id": None, "acks": -1, "timeout": 30000,
                              "topic_data": [{"name": "bench", "topic_id": uuid.uuid4(),
                                              "partition_data": [{"index": 0, "records": records}]}]})


def fetch(version: int, partitions: int) -> bytes:
    key = "topic_id" if version >= 13 else "topic"
    topic: object = uuid.uuid4() if version >= 13 else "bench"
    return frame(1, version, {
        "cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{key: topic, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": 1000 * p,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1048576,
             "replica_directory_id": None} for p in range(partitions)]}],
        "forgotten_topics_data": []})


def metadata(version: int, topics: int) -> bytes:
    return frame(3, version, {"topics": [{"name": f"topic-{i}", "topic_id": None}
                                         for i in range(topics)],
                              "allow_auto_topic_creation": True,
                              "include_topic_authorized_operations": False})


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """CPU time of this thread per call (time descheduled on a busy machine is not counted)."""
    t0 = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - t0) / calls * 1e6


def before_and_after(fn: Callable[[], object], runs: int, calls: int,
                     extra: Callable[[], object] | None = None) -> dict[str, float]:
    """Medians of ``fn`` with the bounds walk replaced by ``accept_all`` (before) and as it is
    (after), interleaved so that a busy moment hits both; ``extra`` is timed as ``bounds``."""
    figures: dict[str, list[float]] = {"before": [], "after": [], "bounds": []}
    for _ in range(runs):
        protocol.walk = accept_all
        try:
            figures["before"].append(per_call_us(fn, calls))
        finally:
            protocol.walk = walk
        figures["after"].append(per_call_us(fn, calls))
        if extra is not None:
            figures["bounds"].append(per_call_us(extra, calls))
    return {k: statistics.median(v) for k, v in figures.items() if v}


def report(kind: str, name: str, size: int, med: dict[str, float]) -> None:
    print(json.dumps({"type": kind, "request": name, "bytes": size,
                      "implementation": IMPLEMENTATION,
                      **{f"{k}_us": round(v, 3) for k, v in med.items()},
                      "ratio": round(med["after"] / med["before"], 3)}), flush=True)


async def dispatch_cases(batch: bytes, runs: int, calls: int) -> None:
    d = tempfile.mkdtemp(prefix="kafkalog-bounds-bench-")
    cfg = ServerConfig({"num.partitions": 1})
    manager = LogManager(d, cfg.broker, background=False)
    try:
        manager.create_topic("bench", 1)
        server = Server(Broker(manager, cfg, Listener("127.0.0.1", 9092)))
        cases = {"dispatch_produce_v9_145_records": produce(9, batch),
                 "dispatch_fetch_v12_145_records": fetch(12, 1)}
        server.dispatch(cases["dispatch_produce_v9_145_records"])      # offset 0 has data
        for name, data in cases.items():
            def call(data: bytes = data) -> object:
                result = server.dispatch(data)
                if isinstance(result, list):                # close a fetch's file slices
                    for part in result:
                        if hasattr(part, "fd"):
                            os.close(part.fd)
                return result
            report("dispatch", name, len(data), before_and_after(call, runs, calls))
        await server.broker.stop_timers()
    finally:
        manager.close()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=41)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    batch = build_batch(145, 0)
    cases = {
        "produce_v9_145_records": produce(9, batch),
        "produce_v11_145_records": produce(11, batch),
        "fetch_v12_1_partition": fetch(12, 1),
        "fetch_v17_1_partition": fetch(17, 1),
        "fetch_v17_100_partitions": fetch(17, 100),
        "metadata_v12_10_topics": metadata(12, 10),
    }
    for name, data in cases.items():
        key, version = struct.unpack_from(">hh", data)
        code = _readers(key, version)[3].code

        def parse(data: bytes = data) -> object:
            return parse_request(data, VERSIONS)

        def bounds(code: bytes = code, data: bytes = data) -> object:
            return walk(code, data)

        report("request", name, len(data), before_and_after(parse, a.runs, a.calls, bounds))
    asyncio.run(dispatch_cases(batch, a.runs, max(200, a.calls // 10)))

if __name__ == "__main__":
    main()
