"""The embedded share consumer (``DataLog.share_consumer``, KIP-932's queue semantics): explicit and
implicit acknowledgement, release up to ``share.delivery.count.limit`` then archived, reject, close
releasing what is held, bad settings refused with Kafka's messages; and several real processes
(read-only openers of the directory its owner writes) consuming one topic as a queue, one of them
SIGKILLed holding records that the others are delivered again once its locks expire: every record
accepted exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import kafkalog
from kafkalog.client.consumer import IllegalStateError
from kafkalog.client.share_consumer import SHARE_STATE_FILE
from kafkalog.errors import InvalidConfigError

EARLIEST = {"share.auto.offset.reset": "earliest"}


def _produce(dl: Any, topic: str, n: int, partitions: int = 1) -> None:
    for i in range(n):
        dl.produce(topic, value=b"v%d" % i, partition=i % partitions)


def test_release_until_the_limit_reject_and_accept(tmp_path) -> None:
    with kafkalog.open(tmp_path / "d") as dl:
        dl.create_topic("q")
        _produce(dl, "q", 3)
        c = dl.share_consumer("q", group_id="g", share_acknowledgement_mode="explicit",
                              group_config={**EARLIEST, "share.delivery.count.limit": 3})
        seen: list[tuple[int, int]] = []
        for _ in range(10):
            recs = c.poll(200)
            if not recs:
                break
            for r in recs:
                seen.append((r.offset, r.delivery_count))
                c.acknowledge(r, {0: "release", 1: "reject", 2: "accept" if r.delivery_count == 2 else "release"}
                              [r.offset])
            assert all(v is None for v in c.commit_sync().values())
        # offset 0 released until archived at the limit, 1 rejected at once, 2 accepted at its second delivery
        assert sorted(seen) == [(0, 1), (0, 2), (0, 3), (1, 1), (2, 1), (2, 2)]
        assert c.poll(100) == []
        c.close()
        other = dl.share_consumer("q", group_id="g")
        assert other.poll(100) == []                   # nothing left for the group
        other.close()
        fresh = dl.share_consumer("q", group_id="g2", group_config=EARLIEST)
        assert [r.value for r in fresh.poll(500)] == [b"v0", b"v1", b"v2"]      # another group: all of them
        fresh.close()
        state = json.loads((tmp_path / "d" / SHARE_STATE_FILE).read_text())
        assert state["g"]["q:0"]["start"] == 3


def test_implicit_mode_accepts_and_close_releases(tmp_path) -> None:
    with kafkalog.open(tmp_path / "d") as dl:
        dl.create_topic("q")
        _produce(dl, "q", 4)
        a = dl.share_consumer("q", group_id="g", group_config=EARLIEST, max_poll_records=2)
        first = a.poll(500)
        assert [r.offset for r in first] == [0, 1]
        second = a.poll(500)                           # accepts 0-1
        assert [r.offset for r in second] == [2, 3]
        b = dl.share_consumer("q", group_id="g", share_acknowledgement_mode="explicit")
        assert b.poll(100) == []                       # 2-3 are a's
        a.close()                                      # accepts 2-3 (implicit)
        assert b.poll(100) == []
        _produce(dl, "q", 2)
        got = b.poll(500)
        assert [(r.offset, r.delivery_count) for r in got] == [(4, 1), (5, 1)]
        with pytest.raises(IllegalStateError, match="must be acknowledged"):
            b.poll(0)
        b.acknowledge(got[0], "accept")
        b.close()                                      # 5 unacknowledged: released
        c = dl.share_consumer("q", group_id="g")
        assert [(r.offset, r.delivery_count) for r in c.poll(500)] == [(5, 2)]
        c.close()


def test_bad_settings_are_refused(tmp_path) -> None:
    with kafkalog.open(tmp_path / "d") as dl:
        dl.create_topic("q")
        with pytest.raises(InvalidConfigError, match="group.id"):
            dl.share_consumer("q")
        with pytest.raises(InvalidConfigError, match="share.acknowledgement.mode"):
            dl.share_consumer("q", group_id="g", share_acknowledgement_mode="sometimes")
        with pytest.raises(InvalidConfigError, match="unknown configuration 'share.lock.ms'"):
            dl.share_consumer("q", group_id="g", conf={"share.lock.ms": 1})
        with pytest.raises(InvalidConfigError, match="share.record.lock.duration.ms must be in the range"):
            dl.share_consumer("q", group_id="g", group_config={"share.record.lock.duration.ms": 1000})
        c = dl.share_consumer("q", group_id="g")
        _produce(dl, "q", 1)
        with pytest.raises(IllegalStateError, match="explicit"):
            c.acknowledge(kafkalog.client.share_consumer.ShareRecord("q", 0, 0, 0, 0, None, None, (), 1))
        c.close()
        with pytest.raises(IllegalStateError, match="closed"):
            c.poll(0)


WORKER = r"""
import json, sys, threading, time
import kafkalog
data, topic, group, mode = sys.argv[1:5]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
with kafkalog.open(data, read_only=True) as dl:
    c = dl.share_consumer(topic, group_id=group, share_acknowledgement_mode="explicit", max_poll_records=5)
    print(json.dumps({"ready": True}), flush=True)
    while not stop.is_set():
        recs = c.poll(200)
        for r in recs:
            print(json.dumps({"rec": [r.partition, r.offset, r.delivery_count, r.value.decode()]}), flush=True)
        if recs and mode == "hold":
            print(json.dumps({"held": len(recs)}), flush=True)
            while True:
                time.sleep(1)
        for r in recs:
            c.acknowledge(r, "accept")
        if recs:
            result = c.commit_sync()
            print(json.dumps({"acked": [[r.partition, r.offset] for r in recs],
                              "errors": [str(e) for e in result.values() if e is not None]}), flush=True)
        time.sleep(0.01)
    c.close()
print(json.dumps({"closed": True}), flush=True)
"""


class Worker:
    def __init__(self, data: str, topic: str, group: str, mode: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, data, topic, group, mode],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=dict(os.environ))
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def recs(self) -> list[tuple[int, int, int]]:
        return [tuple(x["rec"][:3]) for x in list(self.lines) if "rec" in x]  # type: ignore[misc]

    def acked(self) -> list[tuple[int, int]]:
        return [tuple(a) for x in list(self.lines) if "acked" in x for a in x["acked"]]  # type: ignore[misc]

    def errors(self) -> list[str]:
        return [e for x in list(self.lines) if "errors" in x for e in x["errors"]]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        rc = self.proc.wait(60)
        self._reader.join(10)
        assert rc == 0, self.proc.stderr.read() if self.proc.stderr else rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)


def _wait(cond: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def test_processes_consume_a_topic_as_a_queue(tmp_path) -> None:
    data = str(tmp_path / "d")
    n = 90
    with kafkalog.open(data) as dl:
        dl.create_topic("jobs", partitions=3)
        # the shortest lock Kafka's default bounds allow (group.share.min.record.lock.duration.ms)
        dl.share_consumer("jobs", group_id="workers", group_config={
            **EARLIEST, "share.record.lock.duration.ms": 15000}).close()
        _produce(dl, "jobs", 9, partitions=3)
        dl.flush()
        holder = Worker(data, "jobs", "workers", "hold")
        workers: list[Worker] = []
        try:
            _wait(lambda: any("held" in x for x in holder.lines), "the holder holds records")
            held = holder.recs()
            holder.kill()                              # a crash: its records stay locked until they expire
            workers = [Worker(data, "jobs", "workers", "accept") for _ in range(3)]
            _wait(lambda: all(any("ready" in x for x in w.lines) for w in workers), "the workers are ready")
            for i in range(9, n):                      # the owner appends while they consume
                dl.produce("jobs", value=b"v%d" % i, partition=i % 3)
                if i % 10 == 0:
                    dl.flush()
                    time.sleep(0.05)
            dl.flush()
            _wait(lambda: len({a for w in workers for a in w.acked()}) == n, "every record is accepted")
            for w in workers:
                w.stop()
        finally:
            holder.kill()
            for w in workers:
                if w.proc.poll() is None:
                    w.kill()
        acked = [a for w in workers for a in w.acked()]
        assert sorted(acked) == sorted({(i % 3, i // 3) for i in range(n)}), "each record accepted once"
        assert not [e for w in workers for e in w.errors()]
        redelivered = {(p, o): c for w in workers for p, o, c in w.recs() if c > 1}
        assert held and redelivered == {(p, o): 2 for p, o, _c in held}, (held, redelivered)
        # which worker took how many follows the machine's scheduling: not asserted
        late = dl.share_consumer("jobs", group_id="workers")
        assert late.poll(200) == []
        late.close()


def test_auto_offset_reset_latest_earliest_and_by_duration(tmp_path) -> None:
    """share.auto.offset.reset decides where a group without a state starts: latest (the default,
    the high watermark), earliest, and by_duration (the first record at or after now less the
    duration: records two hours old are skipped with PT1H)."""
    now = int(time.time() * 1000)
    with kafkalog.open(tmp_path / "d") as dl:
        dl.create_topic("q")
        for i in range(4):
            dl.produce("q", value=b"old%d" % i, partition=0, timestamp=now - 2 * 3600_000 + i)
        for i in range(3):
            dl.produce("q", value=b"new%d" % i, partition=0, timestamp=now - 60_000 + i)

        def first_poll(group: str, reset: str | None) -> list[bytes]:
            c = dl.share_consumer("q", group_id=group,
                                  group_config={} if reset is None else {"share.auto.offset.reset": reset})
            got = [r.value for r in c.poll(500)]
            c.close()
            return got

        assert first_poll("latest", None) == []
        assert first_poll("earliest", "earliest") == [b"old0", b"old1", b"old2", b"old3", b"new0", b"new1", b"new2"]
        assert first_poll("recent", "by_duration:PT1H") == [b"new0", b"new1", b"new2"]
        assert first_poll("future", "by_duration:PT0S") == []
        with pytest.raises(InvalidConfigError):
            first_poll("bad", "by_duration:-PT1H")
