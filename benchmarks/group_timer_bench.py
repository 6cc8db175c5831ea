"""Idle groups: ``kafkalog serve`` and Kafka 4.4 holding many classic groups that nobody is at.

The guide: no cost grows with what is idle. Each peer in turn, on a fresh data directory, is given
``--groups`` classic groups (``group.initial.rebalance.delay.ms=0``): every group is joined and
synced by one member (JoinGroup v9 with MEMBER_ID_REQUIRED, then SyncGroup as leader) whose session
is ``group.max.session.timeout.ms`` (30 min: it never expires here); then every other group's
member leaves it (an Empty group, its generation kept), the rest stay silent (a consumer paused or
hung: a member, nothing due). Then nothing is sent for ``--idle-seconds`` and the broker's CPU
(user + system, % of one core) over that time is printed, with its resident memory.

Until 2 Dec kafkalog's group timer walked every group and member of each protocol ten times a
second (and every share partition's records in flight, and every transactional id every 10 s); now
it looks at what is due. ``kafkalog@<src>`` runs another source tree's kafkalog in the same run
(the version before, say).

JSON lines: one ``run`` line per peer and run, then a ``summary`` per peer (medians) and ``ratio``
lines (each kafkalog peer's median idle CPU over Kafka's; below 1 = kafkalog better).

    python benchmarks/group_timer_bench.py --groups 10000
    python benchmarks/group_timer_bench.py --groups 10000 --peers kafkalog,kafkalog@/tmp/old/src,kafka
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))       # tests.kafka44 starts Kafka 4.4; tests.server.raw frames

from scale_bench import KafkalogPeer, KafkaPeer, cpu_seconds, rss_mib, wait_port  # noqa: E402

#: every group's member: the longest session both brokers allow by default
SESSION_MS = 1_800_000
#: requests in flight at once, each on its own connection
CONNECTIONS = 64
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: asked again, as a client does
COORDINATOR_NOT_READY = (14, 15, 16)


def _subscription(topic: str) -> bytes:
    """A ConsumerProtocolSubscription v0 of one topic."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


class Member:
    """One connection's member: joins, syncs and maybe leaves its groups one after the other."""

    def __init__(self, port: int) -> None:
        from tests.server.raw import connect
        self.sock = connect(port, timeout=120)
        self.correlation = 0

    def call(self, api: int, version: int, values: Dict[str, Any]) -> Any:
        from tests.server.raw import recv_frame, request_frame, response_of
        self.correlation += 1
        self.sock.sendall(request_frame(api, version, self.correlation, values))
        frame = recv_frame(self.sock)
        if frame is None:
            raise SystemExit("the broker closed a connection")
        return response_of(frame, api, version)

    def make_group(self, group: str, leave: bool) -> None:
        join = {"group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": 60_000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": _subscription("t")}], "reason": None}
        r = self.call(11, 9, join)
        for _ in range(600):                         # Kafka: __consumer_offsets' partitions loading
            if r.error_code not in COORDINATOR_NOT_READY:
                break
            time.sleep(0.1)
            r = self.call(11, 9, join)
        if r.error_code == 79:                       # MEMBER_ID_REQUIRED: again with the id given
            r = self.call(11, 9, {**join, "member_id": r.member_id})
        if r.error_code != 0:
            raise SystemExit(f"JoinGroup {group}: error {r.error_code}")
        mid, generation = str(r.member_id), int(r.generation_id)
        s = self.call(14, 5, {"group_id": group, "generation_id": generation, "member_id": mid,
                              "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                              "assignments": [{"member_id": mid, "assignment": b""}]})
        if s.error_code != 0:
            raise SystemExit(f"SyncGroup {group}: error {s.error_code}")
        if leave:
            lv = self.call(13, 5, {"group_id": group, "members": [
                {"member_id": mid, "group_instance_id": None, "reason": None}]})
            if lv.error_code != 0:
                raise SystemExit(f"LeaveGroup {group}: error {lv.error_code}")

    def close(self) -> None:
        self.sock.close()


def make_groups(port: int, groups: int) -> float:
    """``groups`` groups (every other one left Empty) over ``CONNECTIONS`` connections; seconds taken."""
    import threading
    t0 = time.monotonic()
    errors: List[BaseException] = []
    first = Member(port)
    try:                                             # Kafka makes __consumer_offsets on this
        for _ in range(600):
            r = first.call(10, 4, {"key_type": 0, "coordinator_keys": ["idle-0"]})
            if r.coordinators[0].error_code == 0:
                break
            time.sleep(0.1)
    finally:
        first.close()

    def work(k: int) -> None:
        m = Member(port)
        try:
            for i in range(k, groups, CONNECTIONS):
                m.make_group(f"idle-{i}", leave=i % 2 == 1)
        except BaseException as e:      # reported below
            errors.append(e)
        finally:
            m.close()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - t0


def run_peer(peer: Any, groups: int, idle_s: float) -> Dict[str, Any]:
    peer.start()
    try:
        wait_port(peer.port)
        made_s = make_groups(peer.port, groups)
        time.sleep(2.0)                     # what the groups' requests left behind settles
        cpu0, t1 = cpu_seconds(peer.pid), time.monotonic()
        time.sleep(idle_s)
        cpu = 100 * (cpu_seconds(peer.pid) - cpu0) / (time.monotonic() - t1)
        return {"peer": peer.name, "groups": groups, "make_groups_s": round(made_s, 1),
                "idle_cpu_pct": round(cpu, 2), "idle_rss_mib": round(rss_mib(peer.pid), 1)}
    finally:
        peer.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--idle-seconds", type=float, default=30)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peers", default="kafkalog,kafka",
                    help="kafkalog, kafka, kafkalog@<src> (another source tree), comma-separated")
    ap.add_argument("--workdir", default=None, help="where the data directories go (default: a temp dir)")
    args = ap.parse_args()
    names = [p for p in args.peers.split(",") if p]
    results: Dict[str, List[Dict[str, Any]]] = {n: [] for n in names}
    for run in range(args.runs):
        for name in names:
            workdir = tempfile.mkdtemp(prefix="group-timer-bench-", dir=args.workdir)
            try:
                configs = {"group.initial.rebalance.delay.ms": "0"}
                if name == "kafka":
                    peer: Any = KafkaPeer(workdir, configs)
                else:
                    peer = KafkalogPeer(workdir, name.split("@", 1)[1] if "@" in name else None, configs)
                res = run_peer(peer, args.groups, args.idle_seconds)
                res.update(run=run, load=list(os.getloadavg()))
                print(json.dumps({"type": "run", **res}), flush=True)
                results[name].append(res)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    med = {n: statistics.median(r["idle_cpu_pct"] for r in rs) for n, rs in results.items() if rs}
    for n, rs in results.items():
        print(json.dumps({"type": "summary", "peer": rs[0]["peer"], "groups": args.groups,
                          "idle_cpu_pct": med[n], "idle_rss_mib": statistics.median(r["idle_rss_mib"] for r in rs),
                          "make_groups_s": statistics.median(r["make_groups_s"] for r in rs)}), flush=True)
    if "kafka" in med:
        for n in med:
            if n != "kafka":
                print(json.dumps({"type": "ratio", "peer": n, "groups": args.groups,
                                  "idle_cpu_vs_kafka": round(med[n] / med["kafka"], 3) if med["kafka"] else None}),
                      flush=True)


if __name__ == "__main__":
    socket.setdefaulttimeout(120)
    main()
