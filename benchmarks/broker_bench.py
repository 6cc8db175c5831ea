"""``kafkalog serve`` against a memory broker of the same parsing, with confluent-kafka.

The peer ("memory broker", ``--memory-broker PORT`` runs it) parses every request with the same
protocol layer and network code as kafkalog serve but keeps the produced batches in a Python list:
no files, no indexes, no producer state. It is the client's own ceiling on this machine. Both run
as separate processes; the client runs here.

Measured, in one run, for both brokers (JSON lines, then a ratio line):

* ``produce``: N records of 100-byte values, acks=all, idempotent, linger.ms=5 (msgs/s);
* ``consume``: the same N records from offset 0 with an assign()ed consumer (msgs/s);
* ``latency``: single-record produce requests at a fixed rate (each waits for its ack): p50, p99 ms;
* ``idle``: kafkalog serve's produce rate with ``--idle-connections`` open, idle connections (each
  has sent one ApiVersions request) against its rate without them, in the same run.

    python benchmarks/broker_bench.py                 # 300,000 records, 3 runs, medians
    python benchmarks/broker_bench.py --records 50000 --runs 1
"""

from __future__ import annotations

import argparse
import asyncio
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
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TOPIC = "bench"


# --- the memory broker ------------------------------------------------------------------------------

def run_memory_broker(port: int) -> None:
    from kio.index import load_response_schema

    from kafkalog.server import error_codes
    from kafkalog.server.api_versions import handle_api_versions
    from kafkalog.server.broker import Broker, Response
    from kafkalog.server.config import Listener, ServerConfig
    from kafkalog.server.fetch import PartitionData, encode_fetch_response
    from kafkalog.server.kio_build import build
    from kafkalog.server.network import Server
    from kafkalog.server.produce import PartitionResult, encode_produce_response
    from kafkalog.server.protocol import Request, encode_response

    topic_id = uuid.uuid4()

    class MemoryBroker(Broker):
        """Answers from memory: one topic of one partition, batches in a list."""

        def __init__(self) -> None:
            self.config = ServerConfig({})
            self.advertised = Listener("127.0.0.1", port)
            self.node_id = 0
            self.batches: list[bytes] = []
            self.bases: list[int] = []
            self.next_offset = 0
            self.next_pid = 0

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

        async def handle(self, request: Request) -> Response:
            key = request.api_key
            if key == 18:
                return encode_response(request, handle_api_versions(self, request))
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
                    await asyncio.sleep(min(request.body.max_wait.total_seconds(), 0.1))
                return encode_fetch_response(request.correlation_id, request.api_version, 0, topics)
            raise ValueError(f"memory broker: api {key} ({error_codes.UNSUPPORTED_VERSION})")

    async def main() -> None:
        broker = MemoryBroker()
        server = Server(broker, "127.0.0.1", port)
        host, bound = await server.start()
        broker.advertised = Listener(host, bound)
        print(json.dumps({"type": "listening", "host": host, "port": bound}), flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(main())


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
                  "fetch.wait.max.ms": 100})
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


def measure(kind: str, records: int, lat_count: int, lat_rate: float) -> dict[str, Any]:
    data = tempfile.mkdtemp(prefix="broker-bench-")
    try:
        if kind == "kafkalog":
            cmd = [sys.executable, "-m", "kafkalog.cli.main", "serve", os.path.join(data, "d"),
                   "--port", "0"]
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--memory-broker", "0"]
        proc, port = _start(cmd)
        try:
            bootstrap = f"127.0.0.1:{port}"
            if kind == "kafkalog":
                from confluent_kafka.admin import AdminClient, NewTopic
                admin = AdminClient({"bootstrap.servers": bootstrap})
                for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
                    f.result(60)
            prod = produce(bootstrap, records)
            cons = consume(bootstrap, records)
            p50, p99 = latency(bootstrap, lat_count, lat_rate)
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return {"broker": kind, "produce_msgs_per_s": round(prod), "consume_msgs_per_s": round(cons),
            "latency_p50_ms": round(p50, 3), "latency_p99_ms": round(p99, 3)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--latency-requests", type=int, default=500)
    ap.add_argument("--latency-rate", type=float, default=200.0, help="single-record requests per second")
    ap.add_argument("--idle-connections", type=int, default=1000)
    ap.add_argument("--memory-broker", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_broker is not None:
        run_memory_broker(args.memory_broker)
        return
    rows: dict[str, list[dict[str, Any]]] = {"memory": [], "kafkalog": []}
    for run in range(args.runs):
        for kind in ("memory", "kafkalog"):
            row = measure(kind, args.records, args.latency_requests, args.latency_rate)
            row["run"] = run
            rows[kind].append(row)
            print(json.dumps(row), flush=True)
    idle_rows = []
    for run in range(args.runs):
        row = measure_idle(args.records, args.idle_connections)
        row["run"] = run
        idle_rows.append(row)
        print(json.dumps(row), flush=True)
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0] if f not in ("broker", "run")}
           for k, v in rows.items()}
    print(json.dumps({"type": "ratio", "runs": args.runs, "records": args.records,
                      "produce_ratio": round(med["kafkalog"]["produce_msgs_per_s"]
                                             / med["memory"]["produce_msgs_per_s"], 3),
                      "consume_ratio": round(med["kafkalog"]["consume_msgs_per_s"]
                                             / med["memory"]["consume_msgs_per_s"], 3),
                      "idle_ratio": statistics.median(r["ratio"] for r in idle_rows),
                      "median": med}), flush=True)


if __name__ == "__main__":
    main()
