"""The broker SIGKILL soak (issues 14 and 23): ``kafkalog serve`` is killed again and again under
acks=all idempotent load, and nothing it acknowledged is lost or duplicated.

Two confluent-kafka producers (``enable.idempotence``, ``acks=all``) write numbered records to a
topic of 3 partitions, each with a random codec (none, gzip, snappy, lz4, zstd) that changes every
``rotate`` kills (the producers are flushed and made again). The producers live across kills: the
broker comes back on the same port and their retries meet the producer state it recovered. Each
cycle the broker runs for a random 0.2-1.5 s, is SIGKILLed, and ``kafkalog verify`` checks the
directory as the kill left it (only a crash's tails, as warnings). At the end the broker is stopped
cleanly, ``kafkalog verify`` must find nothing, and a consumer reads every partition from offset 0:
every acknowledged record is at its acknowledged offset, and no record is there twice.

    python -m tests.server.kill_soak --kills 200 [--seed 7]

prints a JSON line per ``--progress`` kills and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.kafka44 import free_port
from tests.server.broker_process import BrokerProcess

TOPIC = "soak"
PARTITIONS = 3
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CRASH_TAILS = {("zero-filled-tail", "warning"), ("partial-tail", "warning")}


class SoakFailure(AssertionError):
    """An acknowledged record lost, moved or duplicated; a directory verify refused; a producer's
    fatal error."""


@dataclass
class SoakReport:
    kills: int = 0
    produced: int = 0
    acknowledged: int = 0
    read_back: int = 0
    unacknowledged_present: int = 0
    #: records still queued in a producer when it was dropped (neither acknowledged nor failed)
    abandoned: int = 0
    #: delivery errors by name (not acknowledged: a record the broker may or may not have)
    delivery_errors: dict[str, int] = field(default_factory=dict)
    codecs: dict[str, int] = field(default_factory=dict)
    verify_warnings: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        return {"type": "summary", "kills": self.kills, "produced": self.produced,
                "acknowledged": self.acknowledged, "read_back": self.read_back,
                "unacknowledged_but_present": self.unacknowledged_present,
                "delivery_errors": self.delivery_errors, "abandoned": self.abandoned,
                "codecs": self.codecs, "verify_warnings_after_kills": self.verify_warnings,
                "seconds": round(self.seconds, 1)}


def verify(data: str) -> list[dict[str, Any]]:
    """``kafkalog verify`` of ``data``: its findings; :class:`SoakFailure` on exit != 0."""
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "verify", "--no-progress", data],
                       capture_output=True, text=True, timeout=300, check=False)
    if r.returncode != 0:
        raise SoakFailure(f"kafkalog verify exited {r.returncode}: {r.stdout[-3000:]}{r.stderr[-3000:]}")
    return [f for f in map(json.loads, r.stdout.splitlines()) if f.get("type") == "finding"]


class _Producers:
    """The two producers, their acknowledgements ((partition, offset) -> value) and fatal errors."""

    def __init__(self, bootstrap: str, rng: random.Random, report: SoakReport) -> None:
        self.bootstrap = bootstrap
        self.rng = rng
        self.report = report
        self.acked: dict[tuple[int, int], bytes] = {}
        self.fatal: list[str] = []
        self.generation = 0
        self.seq = 0
        self.producers: list[Producer] = []
        self.make()

    def _error(self, err: Any) -> None:
        if err.fatal():
            self.fatal.append(str(err))

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            name = err.name()
            self.report.delivery_errors[name] = self.report.delivery_errors.get(name, 0) + 1
        else:
            key = (msg.partition(), msg.offset())
            if key in self.acked and self.acked[key] != msg.value():
                raise SoakFailure(f"offset {key} acknowledged for two records")
            self.acked[key] = msg.value()
            self.report.acknowledged += 1

    def make(self) -> None:
        self.generation += 1
        self.producers = []
        for i in range(2):
            codec = self.rng.choice(CODECS)
            self.report.codecs[codec] = self.report.codecs.get(codec, 0) + 1
            self.producers.append(Producer({
                "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                "compression.type": codec, "linger.ms": self.rng.choice([0, 2, 10]),
                "message.timeout.ms": 60000, "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200, "error_cb": self._error, "log_level": 0,
                "client.id": f"soak-{self.generation}-{i}"}))

    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for p in self.producers:
                value = b"soak-%06d-%09d" % (self.generation, self.seq)
                try:
                    p.produce(TOPIC, value=value, partition=self.seq % PARTITIONS,
                              on_delivery=self._delivered)
                    self.seq += 1
                    self.report.produced += 1
                except BufferError:
                    pass
                p.poll(0)
            time.sleep(0.0005)
        self.check()

    def flush(self, timeout: float) -> None:
        """Wait until every record of the producers is acknowledged or failed; the ones still
        queued after ``timeout`` are counted as abandoned (neither)."""
        deadline = time.monotonic() + timeout
        for p in self.producers:
            while len(p) and time.monotonic() < deadline:
                p.flush(min(10.0, max(0.1, deadline - time.monotonic())))
            self.report.abandoned += len(p)
        self.check()

    def check(self) -> None:
        if self.fatal:
            raise SoakFailure(f"a producer's fatal error: {self.fatal[:3]}")


def read_back(bootstrap: str) -> dict[tuple[int, int], bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-reader",
                  "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(PARTITIONS)}
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 600
        while len(got) < sum(ends.values()) and time.monotonic() < deadline:
            for m in c.consume(10000, 1.0):
                if m.error() is not None:
                    raise KafkaException(m.error())
                got[(m.partition(), m.offset())] = m.value()
        return got
    finally:
        c.close()


def run(data: str, kills: int, *, seed: int = 7, rotate: int = 25, progress: int = 0) -> SoakReport:
    rng = random.Random(seed)
    report = SoakReport()
    started = time.monotonic()
    port = free_port()
    b = BrokerProcess(data, [f"num.partitions={PARTITIONS}"], port=port).start()
    producers = _Producers(b.bootstrap, rng, report)
    try:
        for kill in range(1, kills + 1):
            producers.run(rng.uniform(0.2, 1.5))
            b.kill()
            findings = verify(data)
            bad = [f for f in findings if (f["check"], f["level"]) not in CRASH_TAILS]
            if bad:
                raise SoakFailure(f"kill {kill}: kafkalog verify found {bad[:3]}")
            report.verify_warnings += len(findings)
            report.kills = kill
            b = BrokerProcess(data, [f"num.partitions={PARTITIONS}"], port=port).start()
            if kill % rotate == 0:              # new producers, new codecs
                producers.flush(300)
                producers.make()
            if progress and kill % progress == 0:
                report.seconds = time.monotonic() - started
                print(json.dumps({"type": "progress", **report.summary()}), flush=True)
        producers.flush(300)
        if b.stop() != 0:
            raise SoakFailure(f"the broker did not stop cleanly: {b.stderr()[-3000:]}")
        if verify(data):
            raise SoakFailure("kafkalog verify found something after a clean stop")
        b = BrokerProcess(data, port=port).start()
        got = read_back(b.bootstrap)
    finally:
        if b.alive():
            b.stop()
    lost = {k: v for k, v in producers.acked.items() if got.get(k) != v}
    if lost:
        raise SoakFailure(f"{len(lost)} acknowledged records lost or moved, e.g. {sorted(lost)[:5]}")
    seen: dict[bytes, tuple[int, int]] = {}
    for k, v in got.items():
        if v in seen:
            raise SoakFailure(f"{v!r} is in the log twice: at {seen[v]} and {k}")
        seen[v] = k
    report.read_back = len(got)
    report.unacknowledged_present = len(got) - len(producers.acked)
    report.seconds = time.monotonic() - started
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--progress", type=int, default=10)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kafkalog-kill-soak-") as d:
        report = run(os.path.join(d, "data"), a.kills, seed=a.seed, progress=a.progress)
    # run() raised had a record been lost, moved or duplicated
    print(json.dumps({**report.summary(), "lost": 0, "duplicated": 0, "seed": a.seed}), flush=True)


if __name__ == "__main__":
    main()
