"""``kafkalog serve`` against its peers, with confluent-kafka and the Java client (kafka-clients 3.9.1).

Peers, each a separate process on the same machine:

* Apache Kafka 4.4 (``--peers`` ``kafka``, issue 25): a single-node KRaft broker from
  ``tests/kafka44`` (jars in ``~/.m2``) run as in production: the JVM's full tiered compiler
  (``fast_start=False``) and a 1 GiB heap (``--kafka-heap``). For produce a fresh broker per run;
  for consume and the 1 MiB fetch a broker on its own data directory (``--data-dir``/kafka44-N,
  kept between runs) holding the same batches as kafkalog's prepared topic, sent to it raw, one
  Produce request per batch;

* the memory broker (``--memory-broker PORT``): the same protocol and network layers as kafkalog
  serve, batches kept in a Python list (no files, indexes or producer state) -- the client's own
  ceiling through this protocol code; for consume it is preloaded with the very batches of the
  prepared topic;
* the sendfile floor (``--sendfile-server PORT``): raw ``sendfile`` of the same bytes. Before it
  listens it asks kafkalog's ``Log.read`` for the answer to every fetch offset the raw requester
  will send (0, then the offset after the last whole batch of each answer) and keeps, per fetch
  offset, the Fetch v4 response bytes before the records (from the broker's encoder) and the
  segment file, position and length of the records. Serving (blocking socket): read a frame, take
  the fetch offset from its last 12 bytes, send the header (the request's correlation id put in,
  ``MSG_MORE``) and ``os.sendfile`` that file range.

Measured in each run (JSON lines), then one line of ratios: each the median over the runs of the
ratio within one run (the machine is shared; figures of one run are compared with each other):

* ``produce``: ``--produce-records`` 100-byte values, acks=all, idempotent, linger.ms=5, per client,
  memory broker vs kafkalog serve; single-record produce latency p50/p99 at a fixed rate;
* ``consume``: ``--records`` (default the issue's 10 M) from the beginning of a prepared topic
  (batches of 1,000 records written through kafkalog's log layer into ``--data-dir``, kept for later
  runs), per client, memory broker vs kafkalog serve on that directory. confluent-kafka's consumer
  runs with ``fetch.queue.backoff.ms=10``: at librdkafka's default (1000) it stops fetching for a
  second whenever its queue passes ``queued.min.messages``, and ``consume(10000, 1.0)`` then waits
  out the second, so the figure counted the client's pauses, not the broker;
* ``fetch_1mib``: a raw Fetch v4 requester (this process, one socket, one 1 MiB+ buffer, the next
  offset from the last whole batch, from the start again at the log end) reading ``--fetch-mib``
  MiB in 1 MiB answers, from kafkalog serve and from the sendfile floor (MiB/s). Both servers run
  side by side; an untimed pass over the log from each checks that their answers are the same
  bytes, then ``--fetch-blocks`` alternating blocks are timed; the servers' CPU time per answer
  is reported too;
* ``idle``: kafkalog serve's produce rate with ``--idle-connections`` idle connections open against
  its rate without them;
* ``metrics`` (issue 39): kafkalog serve with its Prometheus endpoint on (``--metrics-port 0``,
  scraped every ``--scrape-interval`` seconds, default 1, while the clients run) against the same
  broker with metrics off, in the same run and in alternating order: produce (as above) and consume
  (the prepared topic) rates per client, and the broker's CPU time per 1,000 records (steadier than
  a rate on a shared machine);
  the ratios are the rate on over off and the CPU per record off over on (goal: >= 0.97);
* ``start`` (with the Kafka peer): cold start, the seconds from spawning the broker process to the
  first answered ApiVersions (a poller tries every 20 ms), on the data directory of the consume
  topic, and to the first Fetch of that topic answered without error; then the idle resident set
  (VmRSS, MiB) two seconds later, before any client came.

Goals (issue 14): produce >= 0.80, consume >= 0.80, fetch_1mib >= 0.90, idle >= 0.90 against the
memory broker and the sendfile floor; issue 25: produce, consume and fetch_1mib >= 1.0 against
Kafka 4.4 (the ``*_vs_kafka`` ratios: kafkalog's rate over Kafka's in the same run).

    python benchmarks/broker_bench.py                          # 10 M records, 3 runs, medians
    python benchmarks/broker_bench.py --records 1000000 --runs 1 --clients confluent
    python benchmarks/broker_bench.py --peers memory             # without Kafka 4.4
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Coroutine
from typing import Any, cast

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))      # tests.server.java_client fetches the Java jars
TOPIC = "bench"
MiB = 1 << 20
FETCH_BYTES = MiB
JAVA_VERSION = "3.9.1"
MEASURES = ("produce", "consume", "fetch", "idle", "start", "metrics")
PEERS = ("memory", "kafka")


# --- the memory broker ------------------------------------------------------------------------------

def _segment_batches(data_dir: str) -> list[bytes]:
    """Every batch of partition 0 of the bench topic, in offset order, read from the .log files."""
    part = os.path.join(data_dir, f"{TOPIC}-0")
    out = []
    for name in sorted(f for f in os.listdir(part) if f.endswith(".log")):
        with open(os.path.join(part, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            size = struct.unpack_from(">i", data, pos + 8)[0] + 12
            out.append(data[pos:pos + size])
            pos += size
    return out


def run_memory_broker(port: int, preload: str | None = None) -> None:
    from kio.index import load_response_schema

    from kafkalog.server import error_codes
    from kafkalog.server.broker import Broker
    from kafkalog.server.config import Listener, ServerConfig
    from kafkalog.server.features import FeatureLevels
    from kafkalog.server.handlers.api_versions import handle_api_versions
    from kafkalog.server.handlers.fetch import PartitionData, encode_fetch_response
    from kafkalog.server.handlers.handler import Response
    from kafkalog.server.handlers.kafka_apis import KafkaApis
    from kafkalog.server.handlers.produce import PartitionResult, encode_produce_response
    from kafkalog.server.network.socket_server import Server
    from kafkalog.server.quota.quota_store import QuotaStore
    from kafkalog.server.quota.quotas import ClientQuotas
    from kafkalog.server.requests.kio_build import build
    from kafkalog.server.requests.protocol import Request, encode_response

    topic_id = uuid.uuid4()

    class MemoryBroker(Broker):
        """Answers from memory: one topic of one partition, batches in a list (the state and the
        handlers in one, served through :class:`MemoryApis`)."""

        def __init__(self) -> None:
            self.config = ServerConfig({})
            self.advertised = Listener("127.0.0.1", port)
            self.node_id = 0
            self.batches: list[bytes] = []
            self.bases: list[int] = []
            self.next_offset = 0
            self.next_pid = 0
            # no quota is set (the network layer asks the broker's quotas whether to mute): read from
            # a directory without a quotas file, nothing written
            self.client_quotas = ClientQuotas(QuotaStore(preload or tempfile.gettempdir()))
            # a new cluster's feature levels (ApiVersions advertises them), from the same directory
            self.features = FeatureLevels(preload or tempfile.gettempdir())
            for b in _segment_batches(preload) if preload else []:
                base, last = struct.unpack_from(">q", b, 0)[0], struct.unpack_from(">i", b, 23)[0]
                self.bases.append(base)
                self.batches.append(b)
                self.next_offset = base + last + 1

        def _meta(self, request: Request) -> Any:
            return build(load_response_schema(3, request.api_version), {
                "throttle_time": 0, "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.advertised.port}],
                "cluster_id": "memory", "controller_id": 0, "error_code": 0,
                "cluster_authorized_operations": -2147483648,
                "topics": [{"error_code": 0, "name": TOPIC, "topic_id": topic_id, "is_internal": False,
                            "topic_authorized_operations": -2147483648,
                            "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 0,
                                            "leader_epoch": 0, "replica_nodes": [0], "isr_nodes": [0],
                                            "offline_replicas": []}]}]})

        def dispatch(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
            """The answer at once (sent from the connection's readable callback, as kafkalog serve's
            are), or a coroutine for a fetch that finds nothing (it waits, as Kafka's long poll)."""
            key = request.api_key
            if key == 18:
                answer = handle_api_versions(self, request)     # its frame (an entity under quotas)
                return answer if type(answer) is bytes else encode_response(request, answer)
            if key == 3:
                return encode_response(request, self._meta(request))
            if key == 22:
                self.next_pid += 1
                return encode_response(request, build(load_response_schema(22, request.api_version), {
                    "throttle_time": 0, "error_code": 0, "producer_id": self.next_pid,
                    "producer_epoch": 0}))
            if key == 2:
                parts = [{"partition_index": p.partition_index, "error_code": 0, "timestamp": -1,
                          "offset": 0 if p.timestamp == -2 else self.next_offset}
                         for t in request.body.topics for p in t.partitions]
                return encode_response(request, build(load_response_schema(2, request.api_version), {
                    "throttle_time": 0, "topics": [{"name": TOPIC, "partitions": parts}]}))
            if key == 0:
                results = []
                for td in request.body.topic_data:
                    prs = []
                    for pd in td.partition_data:
                        buf = bytearray(pd.records)
                        count = struct.unpack_from(">i", buf, 57)[0]
                        struct.pack_into(">q", buf, 0, self.next_offset)
                        self.bases.append(self.next_offset)
                        self.batches.append(bytes(buf))
                        prs.append(PartitionResult(pd.index, 0, self.next_offset, -1, 0))
                        self.next_offset += count
                    results.append((td.topic_id if request.api_version >= 13 else td.name, prs))
                if request.body.acks == 0:
                    return None
                return encode_produce_response(request.correlation_id, request.api_version, results)
            if key == 1:
                import bisect
                topics = []
                for t in request.body.topics:
                    pds = []
                    for p in t.partitions:
                        i = max(bisect.bisect_right(self.bases, p.fetch_offset) - 1, 0)
                        out, size = [], 0
                        while i < len(self.batches) and (size == 0 or size + len(self.batches[i])
                                                         <= p.partition_max_bytes):
                            out.append(self.batches[i])
                            size += len(self.batches[i])
                            i += 1
                        pds.append(PartitionData(p.partition, 0, self.next_offset, self.next_offset, 0,
                                                 None, b"".join(out)))
                    topics.append((t.topic_id if request.api_version >= 13 else t.topic, pds))
                if not any(pd.size for _k, pl in topics for pd in pl):
                    return self._after_wait(request, topics)
                return encode_fetch_response(request.correlation_id, request.api_version, 0, topics)
            if key == 10:                   # FindCoordinator: librdkafka asks when group.id is set
                port = self.advertised.port
                keys = request.body.coordinator_keys if request.api_version >= 4 else ()
                return encode_response(request, build(load_response_schema(10, request.api_version), {
                    "throttle_time": 0, "error_code": 0, "error_message": None, "node_id": 0,
                    "host": "127.0.0.1", "port": port,
                    "coordinators": [{"key": k, "node_id": 0, "host": "127.0.0.1", "port": port,
                                      "error_code": 0, "error_message": None} for k in keys]}))
            raise ValueError(f"memory broker: api {key} ({error_codes.UNSUPPORTED_VERSION})")

        async def _after_wait(self, request: Request, topics: list[Any]) -> Response:
            await asyncio.sleep(min(request.body.max_wait.total_seconds(), 0.1))
            return encode_fetch_response(request.correlation_id, request.api_version, 0, topics)

    class MemoryApis(KafkaApis):
        """The request layer of the memory broker: every request to :meth:`MemoryBroker.dispatch`."""

        def dispatch(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
            return cast(MemoryBroker, self.broker).dispatch(request)

    async def main() -> None:
        broker = MemoryBroker()
        server = Server(broker, "127.0.0.1", port, apis=MemoryApis(broker))
        host, bound = await server.start()
        broker.advertised = Listener(host, bound)
        print(json.dumps({"type": "listening", "host": host, "port": bound}), flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(main())


# --- the sendfile floor -----------------------------------------------------------------------------

def fetch_answers(data_dir: str, chunk: int) -> dict[int, tuple[bytes, str, int, int]]:
    """The 1 MiB answers the raw requester will get, by fetch offset: for each offset it asks for
    (0, then the offset after the last whole batch of the previous answer), the Fetch v4 response
    bytes before the records (frame size included), and the segment file, position and length of
    the records -- from kafkalog's own ``Log.read`` (``min_one_message``, ``max_bytes`` = ``chunk``)
    and the broker's response encoder, so the floor sends exactly the bytes kafkalog serve sends."""
    from kafkalog.log.fetch_data_info import FileSlice
    from kafkalog.log.manager import LogManager
    from kafkalog.server.handlers.fetch import PartitionData, encode_fetch_response
    out: dict[int, tuple[bytes, str, int, int]] = {}
    with LogManager(data_dir, background=False) as m:
        log = m.get_log(TOPIC, 0)
        end = log.log_end_offset
        offset = log.log_start_offset
        while offset < end:
            sl = log.read(offset, chunk, min_one_message=True).records
            records = FileSlice(sl.path, -1, sl.position, sl.size)
            parts = encode_fetch_response(1, 4, 0, [(TOPIC, [PartitionData(
                0, 0, log.high_watermark, log.last_stable_offset, log.log_start_offset, None, records)])])
            if len(parts) != 3 or parts[2] != b"" or not isinstance(parts[0], bytes):
                raise SystemExit(f"fetch_answers: unexpected response layout at offset {offset}")
            out[offset] = (parts[0], sl.path, sl.position, sl.size)
            nxt = _next_offset(memoryview(parts[0][4:] + sl.read()))
            if nxt is None:
                raise SystemExit(f"fetch_answers: no whole batch in the answer at offset {offset}")
            offset = nxt
    return out


def run_sendfile_server(port: int, data_dir: str, chunk: int) -> None:
    """The floor: for each Fetch frame read, the precomputed response header of its fetch offset
    (:func:`fetch_answers`, the request's correlation id put in) and then the same segment file
    range kafkalog serve answers with, by ``os.sendfile`` (blocking socket)."""
    answers = fetch_answers(data_dir, chunk)
    fds: dict[str, int] = {}
    table: dict[int, tuple[bytes, int, int, int]] = {}
    for offset, (head, path, pos, n) in answers.items():
        if path not in fds:
            fds[path] = os.open(path, os.O_RDONLY)
        table[offset] = (head, fds[path], pos, n)
    srv = socket.create_server(("127.0.0.1", port))
    print(json.dumps({"type": "listening", "host": "127.0.0.1", "port": srv.getsockname()[1]}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        conn, _addr = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = conn.fileno()
        try:
            while True:
                size = conn.recv(4, socket.MSG_WAITALL)
                if len(size) < 4:
                    break
                frame = conn.recv(struct.unpack(">i", size)[0], socket.MSG_WAITALL)
                offset = struct.unpack_from(">q", frame, len(frame) - 12)[0]
                if offset not in table:
                    raise SystemExit(f"sendfile floor: no precomputed answer for fetch offset {offset}")
                head, fd, pos, n = table[offset]
                conn.sendall(head[:4] + frame[4:8] + head[8:], socket.MSG_MORE)  # correlation id
                sent = 0
                while sent < n:
                    sent += os.sendfile(out, fd, pos + sent, n - sent)
        finally:
            conn.close()


def _fetch_v4(offset: int, max_bytes: int) -> bytes:
    """Fetch v4 of partition 0 of the bench topic from ``offset``: the raw requester's frame."""
    name = TOPIC.encode()
    body = (struct.pack(">hhih", 1, 4, 1, 5) + b"bench"
            + struct.pack(">iiiib", -1, 500, 1, max_bytes, 0)
            + struct.pack(">ih", 1, len(name)) + name
            + struct.pack(">iiqi", 1, 0, offset, max_bytes))
    return struct.pack(">i", len(body)) + body


def _next_offset(resp: memoryview) -> int | None:
    """The offset after the last batch of a Fetch v4 response of one partition (None: no records)."""
    name_len = struct.unpack_from(">h", resp, 12)[0]
    pos = 14 + name_len + 4 + 4 + 2 + 8 + 8
    n_aborted = struct.unpack_from(">i", resp, pos)[0]
    pos += 4 + max(n_aborted, 0) * 16
    size = struct.unpack_from(">i", resp, pos)[0]
    pos += 4
    end = pos + size
    nxt = None
    while pos + 27 <= end:
        base, length = struct.unpack_from(">qi", resp, pos)
        if pos + 12 + length > end:
            break
        nxt = base + struct.unpack_from(">i", resp, pos + 23)[0] + 1
        pos += 12 + length
    return nxt


def fetch_1mib(port: int, total: int, chunk: int, end_offset: int,
               answers: list[tuple[int, int, bytes]] | None = None) -> tuple[int, float, int]:
    """(bytes, seconds, answers) of ``chunk``-byte Fetch answers read into one buffer, the next fetch offset
    taken from the last whole batch of each answer, from the log's start again at its end, until
    ``total`` bytes arrived. The same requester for kafkalog serve and the floor. With ``answers``
    (the check pass): one pass over the log, appending (fetch offset, size, digest) per answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(chunk + 64 * 1024)
    view = memoryview(buf)
    got, offset, count = 0, 0, 0
    t0 = time.perf_counter()
    try:
        while got < total:
            count += 1
            s.sendall(_fetch_v4(offset, chunk))
            head = s.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                raise SystemExit("fetch_1mib: the server closed the connection")
            n = struct.unpack(">i", head)[0]
            if n > len(buf):
                buf = bytearray(n)
                view = memoryview(buf)
            r = 0
            while r < n:
                k = s.recv_into(view[r:n])
                if k == 0:
                    raise SystemExit("fetch_1mib: the server closed the connection")
                r += k
            got += n + 4
            nxt = _next_offset(view[:n])
            if nxt is None:
                raise SystemExit(f"fetch_1mib: no whole batch in the answer at offset {offset}")
            if answers is not None:
                answers.append((offset, n, hashlib.blake2b(view[:n]).digest()))
                if nxt >= end_offset:
                    break
            offset = 0 if nxt >= end_offset else nxt
    finally:
        s.close()
    return got, time.perf_counter() - t0, count


# --- Apache Kafka 4.4 --------------------------------------------------------------------------------

KAFKA_HEAP = "1g"


def _kafka_broker(workdir: str, heap: str) -> Any:
    """A Kafka 4.4 broker of ``tests/kafka44`` under ``workdir``, run as in production."""
    from tests import kafka44
    try:
        kafka44.classpath()
    except kafka44.Kafka44Unavailable as e:
        raise SystemExit(f"--peers kafka: Apache Kafka 4.4 is not available: {e}") from None
    return kafka44.KafkaBroker(workdir, heap=heap, fast_start=False,
                               properties={"log.retention.ms": "-1", "log.segment.bytes": str(1 << 30)})


def _api_versions_answered(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            body = struct.pack(">hhih", 18, 0, 1, 4) + b"cold"
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(4, socket.MSG_WAITALL)
            return len(head) == 4
    except OSError:
        return False


def _first_answer(port: int, t0: float, timeout: float = 300) -> float:
    """Seconds from ``t0`` until ``port`` answers an ApiVersions request (polled every 20 ms)."""
    deadline = t0 + timeout
    while time.perf_counter() < deadline:
        if _api_versions_answered(port):
            return time.perf_counter() - t0
        time.sleep(0.02)
    raise SystemExit(f"no answer on port {port} in {timeout:.0f} s")


def _fetch_error(port: int) -> int:
    """The error code of a 1-byte Fetch v4 of the bench topic's partition 0 (-1: no answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(_fetch_v4(0, 1))
            head = s.recv(4, socket.MSG_WAITALL)
            resp = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
            return int(struct.unpack_from(">h", resp, 14 + len(TOPIC) + 4 + 4)[0])
    except (OSError, struct.error):
        return -1


def _first_fetch(port: int, t0: float, timeout: float = 300) -> float:
    """Seconds from ``t0`` until a Fetch of the bench topic is answered without error (Kafka answers
    NOT_LEADER_OR_FOLLOWER until its controller made it the partition's leader again)."""
    deadline = t0 + timeout
    while time.perf_counter() < deadline:
        if _fetch_error(port) == 0:
            return time.perf_counter() - t0
        time.sleep(0.02)
    raise SystemExit(f"the bench topic is not served on port {port} after {timeout:.0f} s")


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _send_raw_batches(port: int, batches: list[bytes]) -> None:
    """Each batch in its own Produce v7 request (acks=1), as a producer's batch lands."""
    name = TOPIC.encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        for i, b in enumerate(batches):
            b = bytes(8) + b[8:]            # a producer's batch starts at offset 0 (outside the CRC)
            body = (struct.pack(">hhih", 0, 7, i, 4) + b"load" + struct.pack(">hhi", -1, 1, 30000)
                    + struct.pack(">ih", 1, len(name)) + name + struct.pack(">iii", 1, 0, len(b)) + b)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(4, socket.MSG_WAITALL)
            resp = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
            err = struct.unpack_from(">h", resp, 4 + 4 + 2 + len(name) + 4 + 4)[0]
            if err:
                raise SystemExit(f"loading Kafka 4.4: batch {i} answered error {err}")


def prepare_kafka_topic(kafka_dir: str, data_dir: str, n: int, heap: str) -> None:
    """Kafka 4.4's copy of the consume topic: its own data directory, formatted, the topic created
    (no retention), and every batch of kafkalog's prepared topic sent to it, unless done already."""
    marker = os.path.join(kafka_dir, f".bench-{n}")
    if os.path.exists(marker):
        return
    shutil.rmtree(kafka_dir, ignore_errors=True)
    k = _kafka_broker(kafka_dir, heap)
    k.format()
    k.start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": k.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 1, 1, config={"retention.ms": "-1"})]).values():
            f.result(60)
        time.sleep(1)
        t0 = time.perf_counter()
        _send_raw_batches(k.port, _segment_batches(data_dir))
        print(json.dumps({"type": "progress", "kafka_loaded_records": n,
                          "s": round(time.perf_counter() - t0, 1)}), file=sys.stderr, flush=True)
    finally:
        k.stop()
    with open(marker, "w") as f:
        f.write(str(n))


class _KafkaPeer:
    """A running Kafka 4.4 peer (fresh, or on the consume topic's directory)."""

    def __init__(self, kafka_dir: str | None, heap: str) -> None:
        self.tmp = None if kafka_dir else tempfile.mkdtemp(prefix="broker-bench-kafka-")
        self.broker = _kafka_broker(kafka_dir or self.tmp, heap)

    def __enter__(self) -> _KafkaPeer:
        if self.tmp is not None:
            self.broker.format()
        self.t0 = time.perf_counter()
        self.broker.start()
        self.cold_start_s = _first_answer(self.broker.port, self.t0)
        if self.tmp is None:                # the consume topic's directory: its leader elected
            _first_fetch(self.broker.port, self.t0)
        return self

    @property
    def port(self) -> int:
        return int(self.broker.port)

    def __exit__(self, *exc: object) -> None:
        try:
            self.broker.stop()
        finally:
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)


def measure_start(data_dir: str, kafka_dir: str, heap: str) -> list[dict[str, Any]]:
    """Cold start to the first answered request and the idle RSS, kafkalog serve on the consume
    topic's directory and Kafka 4.4 on its copy."""
    rows = []
    port = _free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "kafkalog.cli.main", "serve", data_dir, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cold = _first_answer(port, t0)
        ready = _first_fetch(port, t0)
        time.sleep(2)
        rows.append({"type": "start", "broker": "kafkalog", "cold_start_s": round(cold, 3),
                     "first_fetch_s": round(ready, 3), "idle_rss_mib": round(_rss_mib(proc.pid), 1)})
    finally:
        _stop(proc)
    k = _kafka_broker(kafka_dir, heap)
    # the JVM's own start, not the bench's wait for its log line: spawn and poll as for kafkalog
    t0 = time.perf_counter()
    try:
        k.start()
        cold = _first_answer(k.port, t0)
        ready = _first_fetch(k.port, t0)
        time.sleep(2)
        assert k.proc is not None
        rows.append({"type": "start", "broker": "kafka", "cold_start_s": round(cold, 3),
                     "first_fetch_s": round(ready, 3), "idle_rss_mib": round(_rss_mib(k.proc.pid), 1),
                     "heap": heap})
    finally:
        k.stop()
    return rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- processes ---------------------------------------------------------------------------------------

def _start(cmd: list[str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"broker did not start: {cmd}")
    return proc, json.loads(line)["port"]


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- the client side ---------------------------------------------------------------------------------

def produce(bootstrap: str, n: int) -> float:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(50).hex().encode()
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(TOPIC, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(300) != 0:
        raise SystemExit("produce did not finish")
    return n / (time.perf_counter() - t0)


def consume(bootstrap: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
    rate = got / (time.perf_counter() - t0)
    c.close()
    return rate


def latency(bootstrap: str, count: int, rate: float) -> tuple[float, float]:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 0})
    lat: list[float] = []
    interval = 1.0 / rate
    warmup = 20                       # connection setup and InitProducerId are not latency
    done: list[float] = []

    def acked(_err: Any, _msg: Any) -> None:
        done.append(time.perf_counter())

    for i in range(count + warmup):
        t0 = time.perf_counter()
        done.clear()
        p.produce(TOPIC, value=b"x" * 100, partition=0, on_delivery=acked)
        while not done:
            p.poll(0.001)
        if i >= warmup:
            lat.append((done[0] - t0) * 1000)
        left = interval - (time.perf_counter() - t0)
        if left > 0:
            time.sleep(left)
    p.flush(30)
    qs = statistics.quantiles(lat, n=100)
    return qs[49], qs[98]


def open_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each made one ApiVersions v0 request and then stay idle."""
    body = struct.pack(">hhih", 18, 0, 1, 4) + b"idle"
    frame = struct.pack(">i", len(body)) + body
    conns = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(frame)
        conns.append(s)
    for s in conns:
        head = s.recv(4, socket.MSG_WAITALL)
        s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    return conns


class _Scraper:
    """Scrapes a metrics endpoint every ``interval`` seconds on a thread until stopped (a Prometheus
    server's load, much more often than its default 15 s)."""

    def __init__(self, url: str, interval: float = 1.0) -> None:
        import threading
        self.url, self.interval, self.scrapes, self.bytes = url, interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import urllib.request
        while not self._stop.wait(self.interval):
            with urllib.request.urlopen(self.url, timeout=30) as r:
                self.bytes += len(r.read())
            self.scrapes += 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        return self.scrapes


def measure_metrics(data_dir: str, produce_records: int, records: int, clients: list[str],
                    on_first: bool, scrape_interval: float = 1.0) -> list[dict[str, Any]]:
    """kafkalog serve with metrics off and on (scraped every ``scrape_interval`` s), produce and
    consume rates."""
    rows = []
    for on in ((True, False) if on_first else (False, True)):
        row: dict[str, Any] = {"type": "metrics", "broker": "kafkalog", "metrics": "on" if on else "off"}
        extra = ["--metrics-port", "0"] if on else []
        produce_dir = tempfile.mkdtemp(prefix="broker-bench-")
        for mode, d, n in (("produce", os.path.join(produce_dir, "d"), produce_records),
                           ("consume", data_dir, records)):
            proc = subprocess.Popen([*_broker_cmd("kafkalog", d), *extra], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
            assert proc.stdout is not None
            first = proc.stdout.readline()
            if not first:
                raise SystemExit(f"kafkalog serve {d} did not start")
            line = json.loads(first)
            scraper = _Scraper(line["metrics"], scrape_interval) if on else None
            try:
                bootstrap = f"127.0.0.1:{line['port']}"
                if mode == "produce":
                    _create_topic(bootstrap)
                for client in clients:
                    cpu0 = _cpu_ns(proc.pid)
                    row[f"{mode}_{client}_msgs_per_s"] = round(_client_rate(client, mode, bootstrap, n))
                    # the broker's CPU per 1,000 records (every thread: the scrapes' too): steadier
                    # than a rate on a shared machine
                    row[f"{mode}_{client}_cpu_us_per_krecord"] = round((_cpu_ns(proc.pid) - cpu0) / n, 1)
            finally:
                if scraper is not None:
                    row[f"{mode}_scrapes"] = scraper.stop()
                _stop(proc)
        shutil.rmtree(produce_dir, ignore_errors=True)
        rows.append(row)
    return rows


def measure_idle(records: int, idle: int) -> dict[str, Any]:
    data = tempfile.mkdtemp(prefix="broker-bench-")
    try:
        proc, port = _start([sys.executable, "-m", "kafkalog.cli.main", "serve",
                             os.path.join(data, "d"), "--port", "0"])
        try:
            bootstrap = f"127.0.0.1:{port}"
            without = produce(bootstrap, records)
            conns = open_idle(port, idle)
            try:
                with_idle = produce(bootstrap, records)
            finally:
                for c in conns:
                    c.close()
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return {"type": "idle", "idle_connections": idle, "produce_without": round(without),
            "produce_with_idle": round(with_idle), "ratio": round(with_idle / without, 3)}


def java(mode: str, bootstrap: str, n: int) -> float:
    """The Java client's rate (kafka-clients 3.9.1, ``tests/server/java/KafkalogBench.java``)."""
    from tests.server.java_client import classpath
    r = subprocess.run(["java", "-cp", classpath(JAVA_VERSION), "KafkalogBench", mode, bootstrap, TOPIC,
                        str(n)], capture_output=True, text=True, timeout=1800, check=False)
    if r.returncode != 0:
        raise SystemExit(f"java {mode} failed: {r.stderr[-2000:]}")
    return float(json.loads(r.stdout.strip().splitlines()[-1])["msgs_per_s"])


def _client_rate(client: str, mode: str, bootstrap: str, n: int) -> float:
    if client == "java":
        return java(mode, bootstrap, n)
    return produce(bootstrap, n) if mode == "produce" else consume(bootstrap, n)


def _broker_cmd(kind: str, data_dir: str, preload: bool = False) -> list[str]:
    if kind == "kafkalog":
        return [sys.executable, "-m", "kafkalog.cli.main", "serve", data_dir, "--port", "0"]
    if kind == "memory":
        return [sys.executable, os.path.abspath(__file__), "--memory-broker", "0",
                *(["--preload", data_dir] if preload else [])]
    return [sys.executable, os.path.abspath(__file__), "--sendfile-server", "0", "--preload", data_dir]


def prepare_topic(data_dir: str, n: int) -> None:
    """The consume topic: ``n`` records of 100-byte values in batches of 1,000, written through
    kafkalog's log layer (as a producer's batches would land), unless already there whole. The topic
    keeps its records (``retention.ms=-1``): the records' timestamps are fixed, and kafkalog serve,
    as Kafka, would otherwise delete them by time retention minutes into a run; a kept directory
    without that setting (an older run's) is prepared again."""
    from kafkalog.log.manager import LogManager
    from kafkalog.record.builder import build_batch
    marker = os.path.join(data_dir, f".bench-{n}")
    if os.path.exists(marker):
        with LogManager(data_dir, background=False) as m:
            log = m.get_log(TOPIC, 0)
            if (log.log_start_offset == 0 and log.log_end_offset == n
                    and m.topic_config(TOPIC).retention_ms == -1):
                return
    shutil.rmtree(data_dir, ignore_errors=True)
    per = 1000
    value = os.urandom(50).hex().encode()
    batch = build_batch([(None, value, 1_700_000_000_000 + i) for i in range(per)])
    t0 = time.perf_counter()
    with LogManager(data_dir, background=False) as m:
        log = m.create_topic(TOPIC, 1, {"retention.ms": -1})[0]
        done = 0
        while done < n:
            k = min(per, n - done)
            log.append(bytearray(batch if k == per else
                                 build_batch([(None, value, 1_700_000_000_000 + i) for i in range(k)])))
            done += k
            if done % 1_000_000 == 0:
                print(json.dumps({"type": "progress", "prepared_records": done,
                                  "s": round(time.perf_counter() - t0, 1)}), file=sys.stderr, flush=True)
    open(marker, "w").close()


def _create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        f.result(60)


def measure_produce(kind: str, records: int, clients: list[str], lat_count: int,
                    lat_rate: float, heap: str = KAFKA_HEAP) -> dict[str, Any]:
    if kind == "kafka":
        with _KafkaPeer(None, heap) as k:
            from confluent_kafka.admin import AdminClient, NewTopic
            admin = AdminClient({"bootstrap.servers": k.broker.bootstrap})
            for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
                f.result(60)
            time.sleep(1)                   # the controller's leader election
            return _produce_row(kind, k.broker.bootstrap, records, clients, lat_count, lat_rate)
    data = tempfile.mkdtemp(prefix="broker-bench-")
    try:
        proc, port = _start(_broker_cmd(kind, os.path.join(data, "d")))
        try:
            bootstrap = f"127.0.0.1:{port}"
            if kind == "kafkalog":
                _create_topic(bootstrap)
            return _produce_row(kind, bootstrap, records, clients, lat_count, lat_rate)
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _produce_row(kind: str, bootstrap: str, records: int, clients: list[str], lat_count: int,
                 lat_rate: float) -> dict[str, Any]:
    row: dict[str, Any] = {"type": "produce", "broker": kind}
    for client in clients:
        row[f"{client}_msgs_per_s"] = round(_client_rate(client, "produce", bootstrap, records))
    p50, p99 = latency(bootstrap, lat_count, lat_rate)
    row.update(latency_p50_ms=round(p50, 3), latency_p99_ms=round(p99, 3))
    return row


def measure_consume(kind: str, data_dir: str, records: int, clients: list[str], kafka_dir: str = "",
                    heap: str = KAFKA_HEAP) -> dict[str, Any]:
    if kind == "kafka":
        with _KafkaPeer(kafka_dir, heap) as k:
            row: dict[str, Any] = {"type": "consume", "broker": kind, "records": records}
            for client in clients:
                row[f"{client}_msgs_per_s"] = round(_client_rate(client, "consume", k.broker.bootstrap, records))
            return row
    proc, port = _start(_broker_cmd(kind, data_dir, preload=True))
    try:
        row: dict[str, Any] = {"type": "consume", "broker": kind, "records": records}
        for client in clients:
            row[f"{client}_msgs_per_s"] = round(_client_rate(client, "consume", f"127.0.0.1:{port}",
                                                             records))
    finally:
        _stop(proc)
    return row


def measure_fetch(data_dir: str, total: int, end_offset: int, blocks: int, kafka_dir: str = "",
                  heap: str = KAFKA_HEAP) -> list[dict[str, Any]]:
    """The floor, kafkalog serve and (with ``kafka_dir``) Kafka 4.4 side by side: one untimed pass
    over the log from each (the floor's answers must be byte for byte kafkalog's), then ``total``
    bytes from each in ``blocks`` rotating blocks (the order rotates too), so all see the same load."""
    kinds: tuple[str, ...] = ("sendfile", "kafkalog") + (("kafka",) if kafka_dir else ())
    procs: list[subprocess.Popen] = []
    peer: _KafkaPeer | None = None
    try:
        ports: dict[str, int] = {}
        pids: dict[str, int] = {}
        for kind in kinds[:2]:              # the floor first: it reads the log before serving
            proc, ports[kind] = _start(_broker_cmd(kind, data_dir, preload=True))
            procs.append(proc)
            pids[kind] = proc.pid
        if kafka_dir:
            peer = _KafkaPeer(kafka_dir, heap).__enter__()
            assert peer.broker.proc is not None
            ports["kafka"], pids["kafka"] = peer.port, peer.broker.proc.pid
        seen: dict[str, list[tuple[int, int, bytes]]] = {k: [] for k in kinds}
        for kind in kinds:
            fetch_1mib(ports[kind], total, FETCH_BYTES, end_offset, seen[kind])
        check_same_answers(seen["sendfile"], seen["kafkalog"])
        done = dict.fromkeys(kinds, 0)
        secs = dict.fromkeys(kinds, 0.0)
        count = dict.fromkeys(kinds, 0)
        cpu0 = {k: _cpu_ns(pids[k]) for k in kinds}
        for b in range(blocks):
            order = kinds[b % len(kinds):] + kinds[:b % len(kinds)]
            for kind in order:
                got, s, n = fetch_1mib(ports[kind], max(total // blocks, 1), FETCH_BYTES, end_offset)
                done[kind] += got
                secs[kind] += s
                count[kind] += n
        cpu = {k: _cpu_ns(pids[k]) - cpu0[k] for k in kinds}
    finally:
        for proc in procs:
            _stop(proc)
        if peer is not None:
            peer.__exit__()
    return [{"type": "fetch_1mib", "broker": k, "mib_per_s": round(done[k] / secs[k] / MiB, 1),
             "server_cpu_us_per_answer": round(cpu[k] / count[k] / 1000, 1), "answers": count[k],
             "load_avg_1m": round(os.getloadavg()[0], 2)} for k in kinds]


def _cpu_ns(pid: int) -> int:
    """CPU time a process has used so far, every thread (ns, from /proc/PID/stat's utime + stime;
    0 elsewhere): a JVM's work is in its threads, not its main thread."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0


def check_same_answers(floor: list[tuple[int, int, bytes]], served: list[tuple[int, int, bytes]]) -> None:
    """The floor must have sent byte for byte what kafkalog serve sent, for every fetch offset."""
    if floor != served:
        bad = next((i for i, (x, y) in enumerate(zip(floor, served)) if x != y), min(len(floor), len(served)))
        raise SystemExit(f"fetch_1mib: the floor's answers differ from kafkalog serve's at answer {bad} "
                         f"({len(floor)} vs {len(served)} answers)")


def _median(rows: list[dict[str, Any]], kind: str, field: str) -> float:
    return statistics.median(r[field] for r in rows if r["broker"] == kind)


def _ratio(rows: list[dict[str, Any]], peer: str, field: str) -> float:
    """The median over the runs of kafkalog's figure over the peer's in the same run."""
    by_run: dict[int, dict[str, float]] = {}
    for r in rows:
        by_run.setdefault(r["run"], {})[r["broker"]] = r[field]
    return round(statistics.median(v["kafkalog"] / v[peer] for v in by_run.values()), 3)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000,
                    help="records of the consume topic (the issue's 10 M; scale down here)")
    ap.add_argument("--produce-records", type=int, default=1_500_000,
                    help="records per client and broker in the produce measure (the Java client spends "
                         "most of a 300,000-record run warming up, which hid a gap in steady state)")
    ap.add_argument("--fetch-mib", type=int, default=512, help="MiB read by the 1 MiB fetch measure")
    ap.add_argument("--fetch-blocks", type=int, default=10,
                    help="alternating blocks of the 1 MiB fetch measure (floor and kafkalog in turn)")
    ap.add_argument("--clients", default="confluent,java", help="comma-separated: confluent, java")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--measure", default=",".join(MEASURES),
                    help=f"comma-separated, some of: {', '.join(MEASURES)}")
    ap.add_argument("--latency-requests", type=int, default=500)
    ap.add_argument("--latency-rate", type=float, default=200.0, help="single-record requests per second")
    ap.add_argument("--idle-connections", type=int, default=1000)
    ap.add_argument("--scrape-interval", type=float, default=1.0,
                    help="seconds between two scrapes of the metrics measure (Prometheus' default: 15)")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "kafkalog-broker-bench"),
                    help="where the consume topic is prepared (kept between runs)")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help=f"comma-separated, some of: {', '.join(PEERS)} (the sendfile floor always runs)")
    ap.add_argument("--kafka-heap", default=KAFKA_HEAP, help="the Kafka 4.4 peer's -Xmx (production-like)")
    ap.add_argument("--memory-broker", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--sendfile-server", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--preload", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_broker is not None:
        run_memory_broker(args.memory_broker, args.preload)
        return
    if args.sendfile_server is not None:
        run_sendfile_server(args.sendfile_server, args.preload, FETCH_BYTES)
        return
    clients = [c for c in args.clients.split(",") if c]
    if not set(clients) <= {"confluent", "java"}:
        raise SystemExit(f"--clients: unknown client in {args.clients!r}")
    measures = [m for m in args.measure.split(",") if m]
    if not measures or not set(measures) <= set(MEASURES):
        raise SystemExit(f"--measure: expected some of {','.join(MEASURES)}, got {args.measure!r}")
    peers = [p for p in args.peers.split(",") if p]
    if not set(peers) <= set(PEERS):
        raise SystemExit(f"--peers: expected some of {','.join(PEERS)}, got {args.peers!r}")
    data_dir = os.path.join(args.data_dir, str(args.records))
    kafka_dir = os.path.join(args.data_dir, f"kafka44-{args.records}") if "kafka" in peers else ""
    if {"consume", "fetch", "start", "metrics"} & set(measures):
        prepare_topic(data_dir, args.records)
        if kafka_dir:
            prepare_kafka_topic(kafka_dir, data_dir, args.records, args.kafka_heap)
    prod: list[dict[str, Any]] = []
    cons: list[dict[str, Any]] = []
    fetch: list[dict[str, Any]] = []
    idle: list[dict[str, Any]] = []
    start: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []

    def emit(rows: list[dict[str, Any]], row: dict[str, Any], run: int) -> None:
        row["run"] = run
        rows.append(row)
        print(json.dumps(row), flush=True)

    for run in range(args.runs):
        for kind in [*peers, "kafkalog"]:
            if "produce" in measures:
                emit(prod, measure_produce(kind, args.produce_records, clients, args.latency_requests,
                                           args.latency_rate, args.kafka_heap), run)
            if "consume" in measures:
                emit(cons, measure_consume(kind, data_dir, args.records, clients, kafka_dir, args.kafka_heap), run)
        if "fetch" in measures:
            for row in measure_fetch(data_dir, args.fetch_mib * MiB, args.records, args.fetch_blocks,
                                     kafka_dir, args.kafka_heap):
                emit(fetch, row, run)
        if "idle" in measures:
            emit(idle, measure_idle(args.produce_records, args.idle_connections), run)
        if "start" in measures and kafka_dir:
            for row in measure_start(data_dir, kafka_dir, args.kafka_heap):
                emit(start, row, run)
        if "metrics" in measures:
            for row in measure_metrics(data_dir, args.produce_records, args.records, clients, run % 2 == 1,
                                       args.scrape_interval):
                emit(metrics, row, run)
    out: dict[str, Any] = {"type": "ratio", "runs": args.runs, "records": args.records,
                           "produce_records": args.produce_records}
    for client in clients:
        f = f"{client}_msgs_per_s"
        if prod and "memory" in peers:
            out[f"produce_ratio_{client}"] = _ratio(prod, "memory", f)
        if cons and "memory" in peers:
            out[f"consume_ratio_{client}"] = _ratio(cons, "memory", f)
        if prod and "kafka" in peers:
            out[f"produce_{client}_vs_kafka"] = _ratio(prod, "kafka", f)
        if cons and "kafka" in peers:
            out[f"consume_{client}_vs_kafka"] = _ratio(cons, "kafka", f)
    if fetch:
        out["fetch_1mib_ratio"] = _ratio(fetch, "sendfile", "mib_per_s")
        if "kafka" in peers:
            out["fetch_1mib_vs_kafka"] = _ratio(fetch, "kafka", "mib_per_s")
    if idle:
        out["idle_ratio"] = statistics.median(r["ratio"] for r in idle)
    for client in clients if metrics else ():
        for mode in ("produce", "consume"):
            f = f"{mode}_{client}_msgs_per_s"
            by_run: dict[int, dict[str, float]] = {}
            for r in metrics:
                by_run.setdefault(r["run"], {})[r["metrics"]] = r[f]
            out[f"metrics_on_vs_off_{mode}_{client}"] = round(
                statistics.median(v["on"] / v["off"] for v in by_run.values()), 3)
            cpu: dict[int, dict[str, float]] = {}
            for r in metrics:
                cpu.setdefault(r["run"], {})[r["metrics"]] = r[f"{mode}_{client}_cpu_us_per_krecord"]
            # the broker's CPU per record with metrics off over on (1.0: metrics cost nothing)
            ratios = [v["off"] / v["on"] for v in cpu.values() if v["on"] > 0]      # (a tiny run: 0 ticks)
            if ratios:
                out[f"metrics_cpu_off_over_on_{mode}_{client}"] = round(statistics.median(ratios), 3)
    out["goals"] = {"produce_ratio": 0.80, "consume_ratio": 0.80, "fetch_1mib_ratio": 0.90,
                    "idle_ratio": 0.90, "produce_vs_kafka": 1.0, "consume_vs_kafka": 1.0,
                    "fetch_1mib_vs_kafka": 1.0, "metrics_on_vs_off": 0.97}
    if prod:
        out["latency_median_ms"] = {k: {"p50": _median(prod, k, "latency_p50_ms"),
                                        "p99": _median(prod, k, "latency_p99_ms")}
                                    for k in [*peers, "kafkalog"]}
    if start:
        out["start_median"] = {k: {"cold_start_s": _median(start, k, "cold_start_s"),
                                   "first_fetch_s": _median(start, k, "first_fetch_s"),
                                   "idle_rss_mib": _median(start, k, "idle_rss_mib")}
                               for k in ("kafka", "kafkalog")}
        out["cold_start_vs_kafka"] = _ratio(start, "kafka", "cold_start_s")
        out["idle_rss_vs_kafka"] = _ratio(start, "kafka", "idle_rss_mib")
    print(json.dumps(out), flush=True)

if __name__ == "__main__":
    main()
