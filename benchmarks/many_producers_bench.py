"""1,000 idempotent producers at 50,000 records/s: ``kafkalog serve`` and Kafka 4.4 side by side (issue 35).

The load is ``benchmarks/many_producers/main.go``: ``--producers`` franz-go clients (v1.22.3, from the
Go module proxy into Go's module cache; built once into ``$KAFKALOG_GO_CACHE``, else
``~/.cache/kafkalog-go``), in one Go process, a goroutine per producer: a Python client needs a thread
per librdkafka producer and could not keep 1,000 of them paced on two cores; the generator took 25-67%
of one core for the whole load here. Each producer: idempotent (franz-go's default), acks=all,
``--value-bytes`` (100) values without key, ``--rate`` (50) records a second, paced open-loop
(producer i sends its k-th record at start + (i/N + k)/rate, and the latency of a record runs from
that scheduled time to its acknowledgement, so a stall cannot hide behind the producers it held up),
no compression, linger 0 (at one record every 20 ms, each record is a Produce request of its own while
the broker keeps up, ~50,000 requests a second in all), franz-go's default partitioner (sticky: a
producer changes partition every 64 KiB) and at most 5 requests in flight per producer (franz-go's
fixed limit with idempotence). Topic: ``--partitions`` (100) partitions, replication factor 1, created
before the clients start.

Each broker and the generator run in a session of their own (the kernel's autogroup scheduling
gives each session one share of the CPU; Kafka's JVM has always had its own). Per peer and run, on a
fresh data directory: start the broker, create the topic, start the load
(every client's first record acknowledged before the clock starts), ``--warmup`` seconds sent and not
measured, ``--measure`` seconds measured. Printed (JSON lines on stdout): per run and peer, the
records scheduled in the window and of those acknowledged, failed and unacknowledged by the end
of the drain, the achieved rate (records acknowledged while the window lasted over its length),
the Produce requests a second (records per request grow above 1 once the broker falls behind: a
franz-go producer has at most 5 requests in flight and batches what waits behind them), latency p50/p99/p99.9/max
(ms), the broker's CPU (% of one core over the window, and per Produce request) and resident
memory (MiB, at the window's end, and its peak), the generator's CPU, and how busy the machine was
(its load averages, and the CPU of everything else in the window as % of one core); then per peer
the medians over the runs, and a ratio line: kafkalog's p99 over Kafka's per run and the median of
those (<= 1 meets the goal). Peers alternate from run to run.

    python benchmarks/many_producers_bench.py --runs 3
    python benchmarks/many_producers_bench.py --producers 50 --warmup 2 --measure 5 --peers kafkalog
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))        # tests.kafka44 starts Kafka 4.4 (jars in ~/.m2)

from scale_bench import KafkalogPeer, KafkaPeer, cpu_seconds, rss_mib, wait_port  # noqa: E402

GENERATOR = HERE / "many_producers"


class OwnSessionKafkalogPeer(KafkalogPeer):
    """``kafkalog serve`` in a session of its own, as Kafka 4.4's JVM is (``tests/kafka44`` starts it
    with ``start_new_session``): with the kernel's autogroup scheduling (on here) each session shares
    the CPU with the machine's other sessions as one group, so in this benchmark's session kafkalog
    would share one group's share with the load generator while Kafka has a group of its own."""

    def start(self) -> None:
        cmd = [sys.executable, "-m", "kafkalog.cli.main", "serve", self.data_dir, "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.stderr, start_new_session=True)


def go_cache() -> Path:
    return Path(os.environ.get("KAFKALOG_GO_CACHE") or Path.home() / ".cache" / "kafkalog-go")


def build_generator() -> Path:
    """The load generator's binary, built once per source and Go version (``go build``; franz-go from
    Go's module cache, the module proxy if missing)."""
    if shutil.which("go") is None:
        raise SystemExit("`go` is not on PATH: the load generator is a Go program (franz-go)")
    import hashlib
    digest = hashlib.sha256(b"".join((GENERATOR / f).read_bytes() for f in ("main.go", "go.mod", "go.sum")))
    gover = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    binary = go_cache() / f"many-producers-{digest.hexdigest()[:12]}-{gover}"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
    r = subprocess.run(["go", "build", "-o", str(tmp), "."], cwd=GENERATOR, capture_output=True, text=True,
                       env={**os.environ, "GOFLAGS": "-mod=readonly"}, timeout=1200, check=False)
    if r.returncode != 0:
        raise SystemExit(f"go build of {GENERATOR} failed: {r.stderr[-2000:]}")
    os.replace(tmp, binary)
    return binary


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (``/proc/stat``)."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = vals[3] + vals[4]
    return (sum(vals) - idle) / tick, sum(vals) / tick


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=120).values():
        f.result(120)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        tm = admin.list_topics(topic, timeout=30).topics.get(topic)
        if tm is not None and tm.error is None and len(tm.partitions) == partitions \
                and all(p.leader >= 0 for p in tm.partitions.values()):
            return
        time.sleep(0.1)
    raise SystemExit(f"{topic}: partitions without a leader")


def run_peer(peer: Any, gen: Path, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"peer": peer.name}
    try:
        peer.start()
        wait_port(peer.port)
        bootstrap = f"127.0.0.1:{peer.port}"
        topic = "many-producers"
        create_topic(bootstrap, topic, args.partitions)
        cmd = [str(gen), "-bootstrap", bootstrap, "-topic", topic, "-producers", str(args.producers),
               "-rate", str(args.rate), "-value-bytes", str(args.value_bytes),
               "-warmup", f"{args.warmup}s", "-measure", f"{args.measure}s"]
        # its own session (autogroup) too: neither broker shares its group with the load
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        marks: dict[str, tuple[float, float, float, float]] = {}
        log: list[str] = []

        def watch() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                log.append(line)
                word = line.split(":", 1)[0].strip()
                if word in ("window start", "window end"):
                    busy, _ = machine_busy()
                    marks[word] = (time.monotonic(), cpu_seconds(peer.pid), busy, rss_mib(peer.pid))

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        assert proc.stdout is not None
        stdout = proc.stdout.read()             # the generator ends on its own (its -drain bounds it)
        proc.wait()
        th.join(10)
        if proc.returncode != 0 or not stdout.strip():
            raise SystemExit(f"the load generator failed ({proc.returncode}): {''.join(log)[-3000:]}")
        res = json.loads(stdout.strip().splitlines()[-1])
        out.update(res)
        if "window start" in marks and "window end" in marks:
            (t0, c0, b0, _), (t1, c1, b1, rss) = marks["window start"], marks["window end"]
            wall = t1 - t0
            out["broker_cpu_pct"] = round(100 * (c1 - c0) / wall, 1)
            if res["produce_requests_per_s"]:
                out["broker_cpu_us_per_request"] = round(1e6 * (c1 - c0) / (res["produce_requests_per_s"] * wall), 1)
            out["broker_rss_mib"] = round(rss, 1)
            out["broker_peak_rss_mib"] = round(rss_mib(peer.pid, "VmHWM"), 1)
            # everything else on the machine: busy CPU minus the broker's and (roughly) the generator's
            gen_share = res["generator_cpu_s"] * wall / max(wall + args.warmup, 1e-9)
            out["others_cpu_pct"] = round(100 * max(0.0, (b1 - b0) - (c1 - c0) - gen_share) / wall, 1)
        out["generator_cpu_pct"] = round(100 * res["generator_cpu_s"] / (args.warmup + args.measure), 1)
        peer.stop()
    finally:
        peer.kill()
    return out


FIELDS = ("achieved_rate", "produce_requests_per_s", "broker_cpu_us_per_request", "p50_ms", "p99_ms", "p999_ms",
          "max_ms", "broker_cpu_pct", "broker_rss_mib", "broker_peak_rss_mib", "generator_cpu_pct",
          "others_cpu_pct", "unacked", "failed")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--producers", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=50, help="records a second per producer")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--warmup", type=float, default=20, help="seconds sent, not measured")
    ap.add_argument("--measure", type=float, default=60, help="seconds measured")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peers", default="kafkalog,kafka")
    ap.add_argument("--workdir", default=None, help="where the data directories go (default: a temp dir)")
    args = ap.parse_args(argv)
    peers = {"kafkalog": OwnSessionKafkalogPeer, "kafka": KafkaPeer}
    names = [n for n in args.peers.split(",") if n]
    for n in names:
        if n not in peers:
            raise SystemExit(f"unknown peer {n!r}: {', '.join(peers)}")
    gen = build_generator()
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(args.runs):
        for n in (names if r % 2 == 0 else list(reversed(names))):
            work = tempfile.mkdtemp(prefix=f"many-producers-{n}-", dir=args.workdir)
            try:
                res = run_peer(peers[n](work), gen, args)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            res.update(type="run", run=r, partitions=args.partitions,
                       load=[round(x, 2) for x in os.getloadavg()])
            print(json.dumps(res), flush=True)
            runs[n].append(res)
    med: dict[str, dict[str, float]] = {}
    for n in names:
        med[n] = {k: round(statistics.median(x[k] for x in runs[n] if k in x), 3)
                  for k in FIELDS if any(k in x for x in runs[n])}
        print(json.dumps({"type": "summary", "peer": n, "runs": args.runs, "producers": args.producers,
                          "target_rate": args.producers * args.rate, **med[n]}), flush=True)
    if "kafkalog" in runs and "kafka" in runs:
        per_run = [round(a["p99_ms"] / b["p99_ms"], 3) if b["p99_ms"] > 0 else None
                   for a, b in zip(runs["kafkalog"], runs["kafka"])]
        valid = [x for x in per_run if x is not None]
        ratio = round(statistics.median(valid), 3) if valid else None
        print(json.dumps({"type": "ratio", "p99_kafkalog_over_kafka": ratio, "per_run": per_run,
                          "p99_of_medians": round(med["kafkalog"]["p99_ms"] / med["kafka"]["p99_ms"], 3)
                          if med["kafka"].get("p99_ms") else None,
                          "goal": "<= 1", "meets": ratio is not None and ratio <= 1,
                          "load": [round(x, 2) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()
