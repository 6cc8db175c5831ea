"""Hostile frames against a real ``kafkalog serve``, over real sockets (issue 23).

Each batch sends ``batch`` frames of :func:`tests.server.request_wire.mutations` (bit flips,
truncations, lying size fields, huge lengths and counts, random bodies under valid headers,
trailing garbage), 8 at a time for every API key and version the broker serves in turn, each
on its own connection (``concurrency`` at a time; a connection sends its frame and half-closes,
then takes whatever comes back within ``answer_s``). After each batch: the process is alive, a fresh client
is answered (ApiVersions), nothing in its log since the previous batch is a traceback or an
"unexpected error", and its RSS is recorded.

    python -m tests.server.frame_fuzz --frames 1000000 [--seed 23] [--batch 2000]

prints one JSON line per ``--progress`` frames and a summary (frames, answered / closed / held
connections, RSS before and at most, frames per second, log lines).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field

from tests.server.broker_process import BrokerProcess, LogWatch
from tests.server.raw import answers_api_versions
from tests.server.request_wire import SERVED, mutations

#: the broker's settings for fuzzing: no waiting in a JoinGroup's initial rebalance delay, no topic
#: created by a fuzzed Metadata (CreateTopics still creates what it names)
FUZZ_CONFIGS = ["group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false"]
BAD_LOG = ("Traceback", "unexpected error", "MemoryError")


class FuzzFailure(AssertionError):
    """The broker died, stopped answering, logged a traceback or grew past its RSS bound."""


@dataclass
class FuzzReport:
    frames: int = 0
    answered: int = 0
    closed: int = 0
    held: int = 0
    refused_log_lines: int = 0
    rss_start_kib: int = 0
    rss_max_kib: int = 0
    seconds: float = 0.0
    per_api: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        return {"type": "summary", "frames": self.frames, "answered": self.answered,
                "closed_without_answer": self.closed, "held_past_answer_s": self.held,
                "refused_log_lines": self.refused_log_lines,
                "rss_start_mib": round(self.rss_start_kib / 1024, 1),
                "rss_max_mib": round(self.rss_max_kib / 1024, 1),
                "seconds": round(self.seconds, 1),
                "frames_per_second": round(self.frames / self.seconds) if self.seconds else 0,
                "api_versions": len(SERVED)}


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _one(port: int, frame: bytes, answer_s: float, sem: asyncio.Semaphore) -> str:
    async with sem:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return "closed"
        try:
            writer.write(frame)
            try:
                await writer.drain()
                writer.write_eof()
            except OSError:
                return "closed"
            got = False
            try:
                while True:
                    chunk = await asyncio.wait_for(reader.read(65536), answer_s)
                    if not chunk:
                        return "answered" if got else "closed"
                    got = True
            except TimeoutError:
                return "held"
            except OSError:
                return "answered" if got else "closed"
        finally:
            writer.close()


async def _batch(port: int, frames: list[bytes], answer_s: float, concurrency: int) -> list[str]:
    sem = asyncio.Semaphore(concurrency)
    return await asyncio.gather(*(_one(port, f, answer_s, sem) for f in frames))


def run(broker: BrokerProcess, frames: int, *, seed: int = 23, batch: int = 2000,
        answer_s: float = 2.0, concurrency: int = 64, rss_limit_mib: int = 1024,
        progress: int = 0) -> FuzzReport:
    """Send ``frames`` hostile frames in batches; raise :class:`FuzzFailure` at the first batch
    after which the broker is dead, silent, logged a traceback or passed ``rss_limit_mib``."""
    assert broker.proc is not None
    pid = broker.proc.pid
    rng = random.Random(seed)
    watch = LogWatch(broker.stderr_path)
    watch.new()
    report = FuzzReport(rss_start_kib=rss_kib(pid))
    report.rss_max_kib = report.rss_start_kib
    started = time.monotonic()
    next_progress = progress
    order: list[tuple[int, int]] = []
    while report.frames < frames:
        n = min(batch, frames - report.frames)
        todo: list[bytes] = []
        while len(todo) < n:
            if not order:                   # every version in turn, in a new order each round
                order = list(SERVED)
                rng.shuffle(order)
            key, version = order.pop()
            name = f"{key}v{version}"
            for f in mutations(rng, key, version, min(8, n - len(todo))):
                todo.append(f)
                report.per_api[name] = report.per_api.get(name, 0) + 1
        outcomes = asyncio.run(_batch(broker.port, todo, answer_s, concurrency))
        report.frames += n
        report.answered += outcomes.count("answered")
        report.closed += outcomes.count("closed")
        report.held += outcomes.count("held")
        if not broker.alive():
            raise FuzzFailure(f"the broker died after {report.frames} frames: "
                              f"{broker.stderr()[-3000:]}")
        if not answers_api_versions(broker.port):
            raise FuzzFailure(f"the broker stopped answering after {report.frames} frames")
        log = watch.new()
        report.refused_log_lines += log.count("closing connection from")
        for bad in BAD_LOG:
            if bad in log:
                at = log.index(bad)
                raise FuzzFailure(f"{bad!r} in the broker's log after {report.frames} frames: "
                                  f"{log[max(0, at - 2000):at + 3000]}")
        rss = rss_kib(pid)
        report.rss_max_kib = max(report.rss_max_kib, rss)
        if rss > rss_limit_mib * 1024:
            raise FuzzFailure(f"the broker's RSS is {rss // 1024} MiB after {report.frames} frames "
                              f"(limit {rss_limit_mib} MiB)")
        report.seconds = time.monotonic() - started
        if progress and report.frames >= next_progress:
            print(json.dumps({"type": "progress", **report.summary()}), flush=True)
            next_progress += progress
    report.seconds = time.monotonic() - started
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--progress", type=int, default=50_000)
    ap.add_argument("--rss-limit-mib", type=int, default=1024)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kafkalog-frame-fuzz-") as d:
        b = BrokerProcess(os.path.join(d, "data"), FUZZ_CONFIGS).start()
        try:
            report = run(b, a.frames, seed=a.seed, batch=a.batch, progress=a.progress,
                         rss_limit_mib=a.rss_limit_mib)
        finally:
            rc = b.stop() if b.alive() else None
        print(json.dumps({**report.summary(), "seed": a.seed, "exit_code": rc}), flush=True)
        if rc != 0:
            sys.exit(f"the broker exited {rc}")


if __name__ == "__main__":
    main()
