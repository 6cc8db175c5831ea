"""Many partitions on one node: ``kafkalog serve`` and Kafka 4.4 side by side (issue 35).

For each partition count (``--partitions 1000,10000``; topics of ``--per-topic`` 100 partitions),
each peer in turn on a fresh data directory (peers alternate when ``--runs`` > 1, so load from other
jobs hits them alike), the steps, timed from the benchmark's side:

* ``create_s``: CreateTopics requests (confluent-kafka's AdminClient) of 50 topics each, one after
  the other, until every topic is answered; ``leaders_s``: from the same start until a Metadata
  request shows every partition with a leader (Kafka answers CreateTopics once its controller
  committed the records and makes the partitions afterwards, and so does kafkalog: a Produce to a
  partition not made yet waits for it); ``made_s``: from the same start until the data directory
  holds each topic's last partition's directory and kafkalog has no topic creation pending (the
  partitions' files made);
* ``metadata_all_ms``: one Metadata request for all topics (median of 3), confluent-kafka's
  ``list_topics`` (the client's decoding of every partition included); ``metadata_all_raw_ms``: the
  same request (v12) on a plain socket until the whole answer is read (median of 3: the broker's
  part; ``metadata_bytes``: the answer's size);
* ``produce_s``: one record to every partition (acks=all), until every delivery is reported;
* ``consume_s``: an assigned consumer reads them all back (until every partition gave its record;
  ``duplicates``: records beyond one a partition, which the producer's retries wrote twice);
* ``idle_cpu_pct``, ``idle_rss_mib``: the broker process's CPU (user + system, % of one core) over
  ``--idle-seconds`` with nothing to do, and its resident memory at the end;
* ``disk_mib``: blocks allocated under the data directory (``st_blocks``, sparse files count what
  they hold);
* ``shutdown_s``: SIGTERM to exit; ``restart_s``: start to every leader in Metadata after that
  clean shutdown; ``restart_after_kill_s``: the same after SIGKILL;
* ``worst_wait_<step>_ms``: the longest another client waited for an answer during that step: a
  thread on its own connection sends ApiVersions in a loop throughout (not during the stops and
  restarts, when there is no broker to ask).

JSON lines on stdout: one ``run`` line per peer and partition count, then per partition count a
``summary`` line per peer (medians over runs) and one ``ratio`` line (kafkalog's median over Kafka's,
below 1 = kafkalog better) with ``load`` (the machine's load averages: it is shared). With
``--peers kafkalog`` only kafkalog's figures (100,000 partitions: Kafka needs more memory than the
machine has to spare).

    python benchmarks/scale_bench.py --partitions 1000,10000
    python benchmarks/scale_bench.py --partitions 100000 --peers kafkalog
    python benchmarks/scale_bench.py --partitions 1000 --runs 5 --until produce   # creation only
    python benchmarks/scale_bench.py --peers kafkalog,kafka,kafkalog@/tmp/old/src  # two versions
"""

from __future__ import annotations

import argparse
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
from typing import Any, Dict, List, Optional, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))       # tests.kafka44 starts Kafka 4.4 (jars in ~/.m2)

#: topics per CreateTopics request: Kafka 4.4's controller refuses more than 10,000 records in one
#: operation ("excessively large batch operation"), a partition being one
TOPICS_PER_REQUEST = 50

#: ApiVersions v0, header v1 (api key 18, version 0, correlation id 7, client id "probe")
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 5) + b"probe"
#: Metadata v12 for all topics: header v2 (client id "probe", no tags), a null topics array, no
#: auto-creation, no authorized operations, no tags
METADATA_ALL_V12 = struct.pack(">hhih", 3, 12, 8, 5) + b"probe" + b"\x00" + b"\x00\x00\x00\x00"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ask(s: socket.socket) -> None:
    """One ApiVersions request and its whole answer."""
    s.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    left = struct.unpack(">i", head)[0]
    while left:
        chunk = s.recv(min(left, 65536))
        if not chunk:
            raise ConnectionError("closed")
        left -= len(chunk)


def _probe(port: int, conn: Any) -> None:
    """The prober process: ApiVersions in a loop on its own connection while resumed; answers
    ``window`` with the worst wait since the last one."""
    worst = 0.0
    paused = True
    sock: Optional[socket.socket] = None
    while True:
        while conn.poll(0 if not paused else 0.02):
            cmd = conn.recv()
            if cmd == "stop":
                return
            if cmd == "pause":
                paused = True
            elif cmd == "resume":
                paused, worst = False, 0.0
            elif cmd == "window":
                conn.send(worst)
                worst = 0.0
        if paused:
            if sock is not None:
                sock.close()
                sock = None
            continue
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=120)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t0 = time.perf_counter()
            _ask(sock)
            worst = max(worst, time.perf_counter() - t0)
        except OSError:
            if sock is not None:
                sock.close()
            sock = None
            time.sleep(0.05)
        time.sleep(0.005)


class Prober:
    """Another client: ApiVersions in a loop on its own connection, in a process of its own (a
    thread here would also measure this process's GIL, held by the clients under test);
    :meth:`window` gives the worst wait since the last call. Paused while the broker is down."""

    def __init__(self, port: int) -> None:
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_probe, args=(port, child), daemon=True)

    def start(self) -> None:
        self._proc.start()

    def resume(self) -> None:
        self._conn.send("resume")

    def pause(self) -> None:
        self._conn.send("pause")

    def stop(self) -> None:
        if self._proc.is_alive():
            self._conn.send("stop")
            self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()

    def window(self) -> float:
        """The worst wait (ms) since the last call, and start a new window."""
        self._conn.send("window")
        return round(float(self._conn.recv()) * 1000, 1)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory (``field``: VmRSS now, VmHWM its peak) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def allocated_mib(path: str) -> float:
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total / (1 << 20)


class KafkalogPeer:
    name = "kafkalog"

    def __init__(self, workdir: str, src: Optional[str] = None, configs: Optional[Dict[str, str]] = None) -> None:
        #: broker keys given to ``kafkalog serve`` (``--config``)
        self.configs = dict(configs or {})
        #: another source tree's kafkalog (``kafkalog@<src>``: two versions in the same run)
        self.env = dict(os.environ)
        if src:
            self.name = f"kafkalog@{src}"
            self.env["PYTHONPATH"] = src
        self.data_dir = os.path.join(workdir, "data")
        self.port = free_port()
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.stderr = open(os.path.join(workdir, "serve.stderr"), "ab")

    def start(self) -> None:
        cmd = [sys.executable, "-m", "kafkalog.cli.main", "serve", self.data_dir, "--port", str(self.port)]
        cmd += [a for k, v in self.configs.items() for a in ("--config", f"{k}={v}")]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.stderr, env=self.env)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(600)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)


class KafkaPeer:
    name = "kafka"

    def __init__(self, workdir: str, configs: Optional[Dict[str, str]] = None) -> None:
        from tests.kafka44 import KafkaBroker
        self.broker = KafkaBroker(workdir, {"num.recovery.threads.per.data.dir": "2", **(configs or {})},
                                  heap="2g", fast_start=False)
        self.broker.format()
        self.data_dir = str(self.broker.log_dir)
        self.port = self.broker.port

    def start(self) -> None:
        self.broker.start(timeout=900)

    @property
    def pid(self) -> int:
        assert self.broker.proc is not None
        return self.broker.proc.pid

    def stop(self, sig: int = signal.SIGTERM) -> None:
        proc = self.broker.proc
        assert proc is not None
        proc.send_signal(sig)
        proc.wait(900)

    def kill(self) -> None:
        self.broker.kill()


def wait_port(port: int, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
                if s.recv(4):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"nothing answered on port {port}")


def metadata_raw(port: int, runs: int = 3) -> tuple[float, int]:
    """Median ms of a Metadata request for all topics on a plain socket, from the send until the
    whole answer is read, and the answer's size."""
    frame = struct.pack(">i", len(METADATA_ALL_V12)) + METADATA_ALL_V12
    seconds, size = raw_round_trips(port, frame, runs)
    return round(seconds * 1000, 2), size


def raw_round_trips(port: int, frame: bytes, runs: int = 3, timeout: float = 120) -> tuple[float, int]:
    """Median seconds of ``runs`` sends of ``frame`` (a request with its size field) on one plain
    socket, each until its whole answer is read, and the answer's size (without its size field)."""
    times, size = [], 0
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(runs):
            t = time.perf_counter()
            s.sendall(frame)
            size = struct.unpack(">i", _recv_exact(s, 4))[0]
            _recv_exact(s, size)
            times.append(time.perf_counter() - t)
    return statistics.median(times), size


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise SystemExit("the broker closed the connection during an answer")
        buf += chunk
    return bytes(buf)


def all_led(admin: Any, topics: List[str], per_topic: int) -> bool:
    md = admin.list_topics(timeout=120)
    for t in topics:
        tm = md.topics.get(t)
        if tm is None or tm.error is not None or len(tm.partitions) != per_topic:
            return False
        if any(p.leader < 0 or p.error is not None for p in tm.partitions.values()):
            return False
    return True


def wait_led(bootstrap: str, topics: List[str], per_topic: int, timeout: float = 1800) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while not all_led(admin, topics, per_topic):
        if time.monotonic() > deadline:
            raise SystemExit("partitions without a leader")
        time.sleep(0.1)


def wait_made(data_dir: str, topics: List[str], per_topic: int, timeout: float = 3600) -> None:
    """Until the data directory holds each topic's last partition's directory and no topic
    creation is pending (kafkalog's ``kafkalog-creating-<topic>.json`` records: a topic's record
    is removed once its last partition's files are made). A stat or two per topic not seen made
    yet, every 0.2 s (a listing of 100,000 names each time took a core's share from the broker)."""
    deadline = time.monotonic() + timeout
    left = list(topics)
    while left:
        left = [t for t in left if not os.path.isdir(os.path.join(data_dir, f"{t}-{per_topic - 1}"))
                or os.path.exists(os.path.join(data_dir, f"kafkalog-creating-{t}.json"))]
        if not left:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(left)} of {len(topics)} topics not made")
        time.sleep(0.2)


#: the steps in order: ``--until`` stops after one of them (the broker is killed, not measured)
STEPS = ("create", "leaders", "metadata", "produce", "consume", "all")


def run_peer(peer: Any, partitions: int, per_topic: int, idle_s: float, until: str = "all") -> Dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topics = [f"scale-{i:05d}" for i in range(partitions // per_topic)]
    out: Dict[str, Any] = {"peer": peer.name, "partitions": partitions}
    prober = Prober(peer.port)
    prober.start()
    try:
        peer.start()
        wait_port(peer.port)
        bootstrap = f"127.0.0.1:{peer.port}"
        # (a CreateTopics request may take longer than librdkafka's 60 s socket timeout on a
        # loaded machine: it would be abandoned, and the run with it)
        admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300000})
        admin.list_topics(timeout=60)
        prober.resume()
        prober.window()

        t0 = time.perf_counter()
        for i in range(0, len(topics), TOPICS_PER_REQUEST):
            futures = admin.create_topics([NewTopic(t, per_topic, 1) for t in topics[i:i + TOPICS_PER_REQUEST]],
                                          request_timeout=1800, operation_timeout=1800)
            for f in futures.values():
                f.result(1800)
        out["create_s"] = round(time.perf_counter() - t0, 3)
        out["worst_wait_create_ms"] = prober.window()
        if until == "create":
            return out
        wait_led(bootstrap, topics, per_topic)
        out["leaders_s"] = round(time.perf_counter() - t0, 3)
        out["worst_wait_leaders_ms"] = prober.window()
        wait_made(peer.data_dir, topics, per_topic)
        out["made_s"] = round(time.perf_counter() - t0, 3)
        out["worst_wait_made_ms"] = prober.window()
        if until == "leaders":
            return out

        times = []
        for _ in range(3):
            t1 = time.perf_counter()
            md = admin.list_topics(timeout=120)
            times.append(time.perf_counter() - t1)
        assert sum(len(md.topics[t].partitions) for t in topics) == partitions
        out["metadata_all_ms"] = round(statistics.median(times) * 1000, 1)
        out["metadata_all_raw_ms"], out["metadata_bytes"] = metadata_raw(peer.port)
        out["worst_wait_metadata_ms"] = prober.window()
        if until == "metadata":
            return out

        # (the step includes making the partitions: at 100,000 longer than librdkafka's default
        # 300 s message timeout here)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                      "queue.buffering.max.messages": max(100000, 2 * partitions),
                      "message.timeout.ms": 1800000})
        failed: List[Any] = []
        t1 = time.perf_counter()
        for t in topics:
            for i in range(per_topic):
                p.produce(t, b"v", partition=i, on_delivery=lambda err, msg: err and failed.append(err))
            p.poll(0)
        left = p.flush(3600)
        out["produce_s"] = round(time.perf_counter() - t1, 3)
        assert left == 0 and not failed, (left, failed[:3])
        out["worst_wait_produce_ms"] = prober.window()
        if until == "produce":
            return out

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-bench", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 100})
        c.assign([TopicPartition(t, i, 0) for t in topics for i in range(per_topic)])
        # every partition's record read; a record the producer's retries wrote twice (Kafka 4.4
        # under this load, librdkafka not idempotent here: 10,005 records in one run) is counted,
        # not taken for a partition
        seen: Set[Tuple[str, int]] = set()
        got = 0
        t1 = time.perf_counter()
        deadline = time.monotonic() + 600
        while len(seen) < partitions and time.monotonic() < deadline:
            # at most the records still to come: a batch asked for more waits out its timeout
            # (1,000 partitions: consume_s was that 1.0 s for both brokers)
            for m in c.consume(min(10000, partitions - len(seen)), 1.0):
                if m.error() is None:
                    got += 1
                    seen.add((m.topic(), m.partition()))
        out["consume_s"] = round(time.perf_counter() - t1, 3)
        c.close()
        assert len(seen) == partitions, (len(seen), got)
        out["duplicates"] = got - partitions
        out["worst_wait_consume_ms"] = prober.window()
        if until == "consume":
            return out

        del admin, p
        prober.pause()                      # idle: nobody asks anything
        time.sleep(2)
        cpu0 = cpu_seconds(peer.pid)
        t1 = time.monotonic()
        time.sleep(idle_s)
        out["idle_cpu_pct"] = round(100 * (cpu_seconds(peer.pid) - cpu0) / (time.monotonic() - t1), 2)
        out["idle_rss_mib"] = round(rss_mib(peer.pid), 1)
        out["disk_mib"] = round(allocated_mib(peer.data_dir), 1)

        prober.pause()
        t1 = time.perf_counter()
        peer.stop()
        out["shutdown_s"] = round(time.perf_counter() - t1, 3)

        t1 = time.perf_counter()
        peer.start()
        wait_port(peer.port)
        wait_led(bootstrap, topics, per_topic)
        out["restart_s"] = round(time.perf_counter() - t1, 3)

        peer.stop(signal.SIGKILL)
        t1 = time.perf_counter()
        peer.start()
        wait_port(peer.port)
        wait_led(bootstrap, topics, per_topic)
        out["restart_after_kill_s"] = round(time.perf_counter() - t1, 3)
        peer.stop()
    finally:
        prober.stop()
        peer.kill()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="1000,10000", help="comma-separated partition counts")
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--peers", default="kafkalog,kafka")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--idle-seconds", type=float, default=60)
    ap.add_argument("--until", default="all", choices=STEPS,
                    help="stop after this step (the figures of the steps before it only)")
    ap.add_argument("--workdir", default=None, help="where the data directories go (default: a temp dir)")
    args = ap.parse_args()
    peers = {"kafkalog": KafkalogPeer, "kafka": KafkaPeer}
    names = [n for n in args.peers.split(",") if n]
    for n in names:
        if n.split("@", 1)[0] not in peers:
            raise SystemExit(f"unknown peer {n!r}: {', '.join(peers)} (kafkalog@<src dir>: another tree)")
    if args.workdir is not None and not os.path.isdir(args.workdir):
        raise SystemExit(f"--workdir {args.workdir}: not a directory (make it first)")
    done_dirs: List[str] = []
    try:
        for count in (int(x) for x in args.partitions.split(",")):
            run_count(args, peers, names, count, done_dirs)
    finally:
        for work in done_dirs:
            shutil.rmtree(work, ignore_errors=True)


def run_count(args: argparse.Namespace, peers: Dict[str, Any], names: List[str], count: int,
              done_dirs: List[str]) -> None:
    """Every run at ``count`` partitions, then its summaries and ratios. Each run's directory is
    removed when the invocation ends, not before the next run: on a file system without a journal
    (this machine's ext4), each inode made in the minute after a mass deletion costs a scan past
    the deleted ones (ext4's ``recently_deleted``; 0.3 ms a partition became 1.4-2.8 ms), which
    would charge one peer's cleanup to the next peer's creation."""
    runs: Dict[str, List[Dict[str, Any]]] = {n: [] for n in names}
    for r in range(args.runs):
        order = names if r % 2 == 0 else list(reversed(names))
        for n in order:
            work = tempfile.mkdtemp(prefix=f"scale-{n.split('@', 1)[0]}-{count}-", dir=args.workdir)
            try:
                kind, _, src = n.partition("@")
                peer = peers[kind](work, src) if src else peers[kind](work)
                res = run_peer(peer, count, args.per_topic, args.idle_seconds, args.until)
            except (Exception, SystemExit) as e:     # one failed run does not end the others
                print(json.dumps({"type": "failed", "peer": n, "partitions": count, "run": r,
                                  "error": repr(e)[:500]}), flush=True)
                continue
            finally:
                done_dirs.append(work)
            res.update(type="run", run=r, load=[round(x, 2) for x in os.getloadavg()])
            print(json.dumps(res), flush=True)
            runs[n].append(res)
    summaries = {}
    for n in [n for n in names if runs[n]]:
        keys = [k for k in runs[n][0] if isinstance(runs[n][0][k], (int, float)) and k not in ("partitions", "run")]
        summaries[n] = {k: round(statistics.median(x[k] for x in runs[n]), 3) for k in keys}
        print(json.dumps({"type": "summary", "peer": n, "partitions": count, "runs": args.runs,
                          **summaries[n]}), flush=True)
    for n in summaries:
        if n.split("@", 1)[0] != "kafkalog" or "kafka" not in summaries:
            continue
        a, b = summaries[n], summaries["kafka"]
        ratio = {k: (round(a[k] / b[k], 3) if b[k] else None) for k in a if k in b and k != "duplicates"}
        print(json.dumps({"type": "ratio", "partitions": count, "peer": n, "kafkalog_over_kafka": ratio,
                          "load": [round(x, 2) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()
