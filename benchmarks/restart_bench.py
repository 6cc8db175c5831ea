"""Restart a data directory of many partitions: ``kafkalog serve`` against another build of itself
(issue 35; Kafka 4.4 does not run at 100,000 partitions here: ``scale_bench.py`` compares with it up
to 10,000).

The directory is kept (``--data``): made once by ``--make N`` (topics of 100 partitions created by
``kafkalog serve`` through CreateTopics, then one record appended to the first ``--records``
partitions in-process with leader epoch 0, as the broker writes them; the made directory is
closed cleanly), then each peer in turn, alternating over ``--runs``:

* ``restart_s`` / ``restart_led_s``: start to the port answering, and to a Metadata request showing
  every partition led, after a clean shutdown (the page cache warm: the directory was just closed);
* ``worst_wait_restart_ms``: the longest another client (ApiVersions in a loop on its own
  connection, ``scale_bench.Prober``) waited from the port answering until every leader was shown;
* ``idle_cpu_pct``, ``idle_rss_mib``: the broker's CPU (% of one core) over ``--idle-seconds`` from
  ``--idle-after`` seconds after the start (the first run of the periodic tasks is at 30 s), nobody
  asking anything, and its resident memory;
* ``restart_after_kill_s`` / ``..._led_s``: the same start after SIGKILL of that broker (its
  recovery), with ``--kill``;
* ``consume_s``, ``consumed``: with ``--consume``, after that: a consumer (confluent-kafka, assigned
  every partition from offset 0, ``fetch.wait.max.ms`` 100) reads until every partition reported its
  end; ``worst_wait_consume_ms`` the longest another client waited meanwhile, and
  ``worst_wait_consume_tail_ms`` while the consumer goes on fetching every partition for
  ``--tail-seconds`` with nothing new (each of its Fetch requests names all of them: librdkafka
  uses no fetch session). ``consume_s`` is mostly librdkafka's: the broker answers its first Fetch
  with every record, and the client then took 2-27 s to hand them to the application here;
  ``fetch_all_raw_s`` is the broker's part: one Fetch (v12, read_committed) of every partition from
  offset 0 on a plain socket until the whole answer is read (median of 3; ``fetch_all_bytes`` its size);
* ``produce_all_raw_s``: with ``--produce``, after that: one Produce (v9, acks=all) of one record to
  every partition on a plain socket until it is answered, and ``worst_wait_produce_ms`` the longest
  another client waited meanwhile (each run appends a record to every partition of ``--data``);
* ``shutdown_s``: SIGTERM to exit.

JSON lines: a ``run`` line per peer and run, then a ``summary`` per peer (medians) and a ``ratio``
line (each other peer over the first: below 1 = better) with the load averages.

    python benchmarks/restart_bench.py --data /var/tmp/d100k --make 100000 --records 52164
    python benchmarks/restart_bench.py --data /var/tmp/d100k --peers kafkalog,kafkalog@/tmp/old/src --runs 2
    python benchmarks/restart_bench.py --data /var/tmp/d100k --idle-seconds 0 --consume
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scale_bench as sb  # noqa: E402  (the prober, waits and /proc readers)

PER_TOPIC = 100


def _topics(data: str) -> List[str]:
    names = {n.rsplit("-", 1)[0] for n in os.listdir(data) if "-" in n and os.path.isdir(os.path.join(data, n))}
    return sorted(t for t in names if not t.startswith("__"))


def make(data: str, partitions: int, records: int) -> None:
    """A data directory of ``partitions`` partitions, the first ``records`` holding one record."""
    from confluent_kafka.admin import AdminClient, NewTopic
    if os.path.exists(data):
        raise SystemExit(f"{data} exists: --make makes a new directory")
    os.makedirs(data)
    port = sb.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kafkalog.cli.main", "serve", data, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sb.wait_port(port)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        topics = [f"t{i:05d}" for i in range(partitions // PER_TOPIC)]
        for i in range(0, len(topics), sb.TOPICS_PER_REQUEST):
            futures = admin.create_topics([NewTopic(t, PER_TOPIC, 1) for t in topics[i:i + sb.TOPICS_PER_REQUEST]],
                                          request_timeout=600)
            for f in futures.values():
                f.result()
        sb.wait_led(f"127.0.0.1:{port}", topics, PER_TOPIC)
        del admin                   # (before the broker stops: no reconnection noise)
        print(json.dumps({"type": "progress", "made": len(topics) * PER_TOPIC}), flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(3600)          # every partition made before a clean shutdown
    from kafkalog.log._encode import encode_v2_batch
    from kafkalog.log.manager import LogManager
    m = LogManager(data, {}, background=False)
    try:
        batch = encode_v2_batch([b"v"], default_timestamp=int(time.time() * 1000))
        for n, tp in enumerate(sorted(m.partitions())[:records]):
            if not tp.topic.startswith("__"):
                m.get_log(tp.topic, tp.partition).append(bytearray(batch), leader_epoch=0)
            if n % 10000 == 0:
                print(json.dumps({"type": "progress", "records": n}), flush=True)
    finally:
        m.close()


#: the brokers' standard error (their log), kept in an unnamed temporary file: its end is printed
#: when a step fails
BROKER_LOG = tempfile.TemporaryFile()


def _start(data: str, port: int, env: Dict[str, str]) -> subprocess.Popen[bytes]:
    BROKER_LOG.seek(0)
    BROKER_LOG.truncate()
    return subprocess.Popen([sys.executable, "-m", "kafkalog.cli.main", "serve", data, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=BROKER_LOG, env=env)


def _broker_log_tail(lines: int = 40) -> str:
    BROKER_LOG.seek(0)
    return b"\n".join(BROKER_LOG.read().splitlines()[-lines:]).decode(errors="replace")


def _ready(proc: subprocess.Popen[bytes], port: int, topics: List[str], t0: float,
           prober: Any, out: Dict[str, Any], key: str) -> None:
    sb.wait_port(port)
    out[f"{key}_s"] = round(time.perf_counter() - t0, 2)
    prober.resume()
    sb.wait_led(f"127.0.0.1:{port}", topics, PER_TOPIC)
    out[f"{key}_led_s"] = round(time.perf_counter() - t0, 2)
    out[f"worst_wait_{key}_ms"] = prober.window()


def fetch_all_raw(port: int, topics: List[str], out: Dict[str, Any]) -> None:
    """One Fetch of every partition from offset 0, answered whole, three times (median)."""
    sys.path.insert(0, os.path.dirname(HERE))
    from tests.server.raw import fetch_frame
    frame = fetch_frame(12, 1, [(t, [(i, 0, 1 << 20) for i in range(PER_TOPIC)]) for t in topics],
                        max_wait_ms=100, min_bytes=1, max_bytes=52428800, isolation_level=1)
    seconds, size = sb.raw_round_trips(port, frame, 3, timeout=600)
    out["fetch_all_raw_s"] = round(seconds, 3)
    out["fetch_all_bytes"] = size


def produce_all_raw(port: int, topics: List[str], prober: Any, out: Dict[str, Any]) -> None:
    """One Produce (v9, acks=all) of one record to every partition on a plain socket, once (each
    run appends a record to every partition), and the other client's worst wait meanwhile."""
    sys.path.insert(0, os.path.dirname(HERE))
    from tests.server.raw import request_frame, response_of

    from kafkalog.record.builder import build_batch
    records = build_batch([(b"k", b"v", int(time.time() * 1000))])
    frame = request_frame(0, 9, 1, {"transactional_id": None, "acks": -1, "timeout": 600000, "topic_data": [
        {"name": t, "partition_data": [{"index": i, "records": records} for i in range(PER_TOPIC)]}
        for t in topics]})
    prober.resume()
    prober.window()
    with socket.create_connection(("127.0.0.1", port), timeout=600) as s:
        t0 = time.perf_counter()
        s.sendall(frame)
        size = struct.unpack(">i", sb._recv_exact(s, 4))[0]
        answer: Any = response_of(sb._recv_exact(s, size), 0, 9)
        out["produce_all_raw_s"] = round(time.perf_counter() - t0, 3)
    out["worst_wait_produce_ms"] = prober.window()
    prober.pause()
    failed = Counter((p.error_code, p.error_message) for t in answer.responses for p in t.partition_responses
                     if p.error_code)
    if failed:
        raise SystemExit(f"the Produce of every partition failed for {sum(failed.values())} partitions: "
                         f"{dict(failed.most_common(5))} (error code, message: count); the broker's "
                         f"log ends:\n{_broker_log_tail()}")


def consume(port: int, topics: List[str], tail_s: float, prober: Any, out: Dict[str, Any]) -> None:
    """Every partition read from offset 0 to its end by one assigned consumer, then fetched on for
    ``tail_s`` seconds with nothing new; the other client's worst waits over each."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "restart-bench",
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    try:
        prober.resume()
        prober.window()
        c.assign([TopicPartition(t, i, 0) for t in topics for i in range(PER_TOPIC)])
        ended: set = set()
        got = 0
        t0 = time.perf_counter()
        deadline = time.monotonic() + 1800
        while len(ended) < len(topics) * PER_TOPIC and time.monotonic() < deadline:
            for m in c.consume(10000, 1.0):
                err = m.error()
                if err is None:
                    got += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    ended.add((m.topic(), m.partition()))
        out["consume_s"] = round(time.perf_counter() - t0, 2)
        out["consumed"] = got
        out["worst_wait_consume_ms"] = prober.window()
        if len(ended) < len(topics) * PER_TOPIC:
            raise SystemExit(f"the consumer reached the end of {len(ended)} partitions of {len(topics) * PER_TOPIC}")
        t1 = time.monotonic()
        while time.monotonic() - t1 < tail_s:
            for m in c.consume(10000, 1.0):
                if m.error() is None:
                    raise SystemExit("a record after every partition's end: the directory changed")
        out["worst_wait_consume_tail_ms"] = prober.window()
    finally:
        c.close()
        prober.pause()


def run_peer(data: str, src: Optional[str], idle_after: float, idle_s: float, kill: bool,
             consume_tail_s: Optional[float] = None, produce: bool = False) -> Dict[str, Any]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    topics = _topics(data)
    port = sb.free_port()
    prober = sb.Prober(port)
    prober.start()
    out: Dict[str, Any] = {"partitions": len(topics) * PER_TOPIC}
    proc = None
    try:
        t0 = time.perf_counter()
        proc = _start(data, port, env)
        _ready(proc, port, topics, t0, prober, out, "restart")
        if idle_s > 0:
            time.sleep(max(idle_after - (time.perf_counter() - t0), 0))
            prober.pause()
            cpu0, t1 = sb.cpu_seconds(proc.pid), time.monotonic()
            time.sleep(idle_s)
            out["idle_cpu_pct"] = round(100 * (sb.cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t1), 2)
            out["idle_rss_mib"] = round(sb.rss_mib(proc.pid), 1)
        if consume_tail_s is not None:
            consume(port, topics, consume_tail_s, prober, out)
            fetch_all_raw(port, topics, out)
        if produce:
            produce_all_raw(port, topics, prober, out)
        if kill:
            prober.pause()
            proc.kill()
            proc.wait(60)
            t0 = time.perf_counter()
            proc = _start(data, port, env)
            _ready(proc, port, topics, t0, prober, out, "restart_after_kill")
        prober.pause()
        t1 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(3600)
        out["shutdown_s"] = round(time.perf_counter() - t1, 2)
    finally:
        prober.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(60)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the data directory (made by --make, kept)")
    ap.add_argument("--make", type=int, default=0, help="make the directory first, of this many partitions")
    ap.add_argument("--records", type=int, default=None, help="partitions given one record (default: all)")
    ap.add_argument("--peers", default="kafkalog", help="kafkalog, kafkalog@<src dir> (another tree)")
    ap.add_argument("--runs", type=int, default=1, help="0: only --make")
    ap.add_argument("--idle-after", type=float, default=50)
    ap.add_argument("--idle-seconds", type=float, default=60)
    ap.add_argument("--kill", action="store_true", help="also restart after SIGKILL")
    ap.add_argument("--consume", action="store_true", help="also read every partition with one consumer")
    ap.add_argument("--produce", action="store_true", help="also produce a record to every partition (appends)")
    ap.add_argument("--tail-seconds", type=float, default=20, help="--consume: fetching on with nothing new")
    args = ap.parse_args()
    if args.runs < 0:
        ap.error(f"--runs {args.runs}: 0 or more")
    names = [n for n in args.peers.split(",") if n]
    for n in names:
        if n.split("@", 1)[0] != "kafkalog":
            raise SystemExit(f"unknown peer {n!r}: kafkalog or kafkalog@<src dir>")
    if args.make:
        make(args.data, args.make, args.make if args.records is None else args.records)
    if not os.path.isdir(args.data):
        raise SystemExit(f"{args.data}: no such data directory (make one with --make N)")
    if not os.path.exists(os.path.join(args.data, ".kafka_cleanshutdown")):
        raise SystemExit(f"{args.data}: not closed cleanly (run a broker on it and stop it with SIGTERM)")
    runs: Dict[str, List[Dict[str, Any]]] = {n: [] for n in names}
    for r in range(args.runs):
        for n in (names if r % 2 == 0 else list(reversed(names))):
            res = run_peer(args.data, n.partition("@")[2] or None, args.idle_after, args.idle_seconds, args.kill,
                           args.tail_seconds if args.consume else None, args.produce)
            res.update(type="run", peer=n, run=r, load=[round(x, 2) for x in os.getloadavg()])
            print(json.dumps(res), flush=True)
            runs[n].append(res)
    if not args.runs:
        return                                      # (--make alone)
    summaries = {}
    for n in names:
        keys = [k for k, v in runs[n][0].items() if isinstance(v, (int, float)) and k not in ("run", "partitions")]
        summaries[n] = {k: round(statistics.median(x[k] for x in runs[n]), 3) for k in keys}
        print(json.dumps({"type": "summary", "peer": n, "runs": args.runs, **summaries[n]}), flush=True)
    first = names[0]
    for n in names[1:]:
        a, b = summaries[n], summaries[first]
        print(json.dumps({"type": "ratio", "peer": n, "over": first,
                          "ratio": {k: (round(a[k] / b[k], 3) if b[k] else None) for k in a if k in b},
                          "load": [round(x, 2) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()
