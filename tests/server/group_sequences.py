"""Seeded random sequences of group requests for the differential test of the group coordinators
(tests/server/test_group_coordinators_random.py): JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit and TxnOffsetCommit from the members of a classic group (two dynamic, one static) and
ConsumerGroupHeartbeat, OffsetCommit and TxnOffsetCommit from the members of a consumer group (one
dynamic, one static), with members that crash (go silent until their session expires), joins that
wait longer than a session timeout, rejoins with and without their member id, commits inside
(AddOffsetsToTxn + TxnOffsetCommit v3, TxnOffsetCommit v5) and outside transactions.

A sequence is a list of abstract steps (:func:`generate`); :class:`Driver` plays it against one
broker, each member on its own connections, and writes down a *transcript* with what legitimately
differs normalised: member ids as "new"/"kept"/"changed" (and members named by their labels),
assignments as their shapes (topic -> partition count), producer ids left out. The same sequence
goes to Kafka 4.4 and to kafkalog at once (:func:`run_both`), the transcripts must be equal.

Time is explicit and generous, for a loaded machine: sessions are 6 s, rebalances never end by
their timeout (2 min), a member that crashed is silent at most two steps before a long sleep
(10 s, during which the live members heartbeat every second) expires it, and a dynamic member's
rejoin without its member id (its old id left to expire) is followed by one at once; every other
member heartbeats after every step. An answer that a step does not give at once (a JoinGroup or
SyncGroup that waits) is collected within 1.5 s of the step that completes it (0.7 s was not
enough with four test workers on two cores: kafkalog's answer to a group's first SyncGroup came a
step late for all three seeds at once; the test takes ~90 s here instead of ~80).

One thing stays unordered in Kafka 4.4: when the leader of a classic group goes (left, expired,
replaced by a joined member), Kafka elects the next from a hash map. A transcript notes each
leader change among several members (``leader-choice``); two transcripts are compared up to the
first such note of either side (documented in docs/kafka-compatibility.md)."""

from __future__ import annotations

import random
import select
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.server.consumer_group_raw import RawClient
from tests.server.raw import connect, recv_frame, request_frame, response_of
from tests.server.side_by_side import run_side_by_side
from tests.server.txn_raw import TxnClient

SESSION_MS = 6000
#: a rebalance ends when every member joined (or left, or expired): never by its timeout here
REBALANCE_MS = 120000
LONG_SLEEP_S = 10.0
REPLY_WAIT_S = 1.5
CLASSIC = ("D1", "D2", "S1")          # S1 is static (group.instance.id "i-S1")
CONSUMER = ("C1", "C2")               # C2 is static (instance id "i-C2")
STATIC = {"S1": "i-S1", "C2": "i-C2"}
LEADER_CHOICE = "leader-choice"
#: how long after its JoinGroup answer a member syncs by itself (the broker's timers tick faster)
SYNC_DELAY_S = 0.5
#: REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION: a client rejoins (with its member id)
REJOIN = (27, 22)
#: CONCURRENT_TRANSACTIONS: the producer's last transaction is still completing; a client retries
CONCURRENT_TRANSACTIONS = 51
#: how long a TxnOffsetCommit is retried on CONCURRENT_TRANSACTIONS, 0.1 s apart
TXN_RETRY_S = 10.0

Step = tuple[Any, ...]


def generate(seed: int, length: int = 20) -> list[Step]:
    """A random sequence of ``length`` steps (plus the long sleeps crashes need), the same for a seed."""
    rnd = random.Random(seed)
    steps: list[Step] = []
    crashed_at: dict[str, int] = {}
    sleeps = 0

    def step() -> Step:
        kind = rnd.choices(["join", "sync", "hb", "leave", "commit", "txn", "crash", "sleep",
                            "cg_join", "cg_leave", "cg_settle"],
                           weights=[8, 5, 2, 1, 3, 4, 1, 2 if sleeps < 2 else 0, 3, 1, 1])[0]
        if kind == "join":
            return ("join", rnd.choice(CLASSIC), rnd.random() < 0.75)
        if kind == "sleep":
            return ("sleep", rnd.choice((None, *CLASSIC)))
        if kind in ("hb", "leave", "crash"):
            return (kind, rnd.choice(CLASSIC))
        if kind == "commit":
            return ("commit", rnd.choice(CLASSIC + CONSUMER), rnd.choice((0, 0, 0, -1, 1)))
        if kind == "txn":
            return ("txn", rnd.choice(CLASSIC + CONSUMER), rnd.choice((3, 5)), rnd.choice((0, 0, 0, -1, 1)))
        if kind == "cg_join":
            return ("cg_join", rnd.choice(CONSUMER), rnd.choice(("names", "regex")))
        if kind == "cg_leave":
            return ("cg_leave", rnd.choice(CONSUMER))
        return (kind,)

    # a start every sequence shares: the groups exist, with members
    steps += [("join", "D1", True), ("join", "S1", True), ("sync",), ("cg_join", "C1", rnd.choice(("names", "regex")))]
    while len(steps) < length:
        s = step()
        if s[0] == "crash" and (s[1] in crashed_at or sleeps >= 2):
            continue
        if s[0] == "sleep":
            sleeps += 1
            crashed_at.clear()
        elif len(s) > 1 and s[1] in crashed_at:
            continue                  # a crashed member stays silent until a sleep expired it
        if s[0] == "crash":
            crashed_at[s[1]] = len(steps)
        steps.append(s)
        if s[0] == "join" and not s[2] and s[1] not in STATIC:
            # its old member id stays in the group until its session ends, as a crashed member's:
            # a long sleep at once, or the expiry falls on the boundary of two steps (6 s after its
            # last heartbeat, ~4.5 s of steps later: CI's seed 14 saw the rebalance it completes a
            # step apart on the two brokers)
            steps.append(("sleep", None))
            sleeps += 1
            crashed_at.clear()
        if s[0] == "join" and rnd.random() < 0.5:
            steps.append(("sync",))
        if crashed_at and len(steps) - min(crashed_at.values()) >= 3:
            steps.append(("sleep", None))  # the crashed member expires: silent well past its session
            sleeps += 1
            crashed_at.clear()
    if crashed_at:
        steps.append(("sleep", None))
    return steps


def subscription(topic: str) -> bytes:
    """A ConsumerProtocolSubscription v0 of one topic."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


class Classic:
    """A classic member: its connection for JoinGroup/SyncGroup (which may wait), its id and generation."""

    def __init__(self, label: str, port: int) -> None:
        self.label = label
        self.instance = STATIC.get(label)
        self.sock = connect(port)
        self.mid = ""
        self.generation = -1
        self.leads = False
        self.synced = -1                                  # the generation it synced
        self.joined_at = 0.0                              # when its last JoinGroup answer came
        self.joined_round = 0                             # and in which round of heartbeats
        self.members: list[str] = []
        self.waiting: tuple[str, int] | None = None      # (api, version) of the request in flight
        self.correlation = 0
        self.alive = False

    def send(self, api: int, version: int, values: dict[str, Any], what: str) -> None:
        self.correlation += 1
        self.sock.sendall(request_frame(api, version, self.correlation, values))
        self.waiting = (what, api, version)

    def ready(self, timeout: float) -> bool:
        return bool(select.select([self.sock], [], [], timeout)[0])

    def read(self) -> Any:
        assert self.waiting is not None
        _what, api, version = self.waiting
        frame = recv_frame(self.sock)
        assert frame is not None, f"{self.label}: the broker closed the connection"
        self.waiting = None
        return response_of(frame, api, version)


class Driver:
    """One broker's side of a sequence; ``transcript`` the normalised answers, step by step."""

    def __init__(self, port: int, suffix: str) -> None:
        self.port = port
        self.suffix = suffix
        self.topic = f"gs-{suffix}"
        self.group = f"cl-{suffix}"
        self.cg = RawClient(port, f"cg-{suffix}")
        self.side = TxnClient(port)                # Heartbeat, LeaveGroup, commits, transactions
        self.call = self.side.call
        self.classic = {m: Classic(m, port) for m in CLASSIC}
        self.consumer_alive: set[str] = set()
        self.leader: str | None = None
        self.id_labels: dict[str, str] = {}       # every member id a classic member was given
        self.transcript: list[Any] = []
        self.step_no = 0
        self.rounds = 0                            # rounds of heartbeats so far
        self.offset = 0
        self.producers: dict[int, tuple[str, int, int]] = {}

    def close(self) -> None:
        for m in self.classic.values():
            m.sock.close()
        self.side.close()
        self.cg.close()

    def note(self, *entry: Any) -> None:
        self.transcript.append((self.step_no, *entry))

    # --- setup ----------------------------------------------------------------------------------

    def setup(self) -> None:
        self.cg.find_coordinator()
        self.cg.create_topic(self.topic, 4)
        for key, key_type in ((self.group, 0), (f"tx1-{self.suffix}", 1), (f"tx2-{self.suffix}", 1)):
            for _ in range(300):
                r = self.call(10, 4, {"key_type": key_type, "coordinator_keys": [key]})
                if r.coordinators[0].error_code == 0:
                    break
                time.sleep(0.2)
        for version in (3, 5):
            tid = f"tx{1 if version == 3 else 2}-{self.suffix}"
            r = self.call(22, 5, {"transactional_id": tid, "transaction_timeout": 60000,
                                  "producer_id": -1, "producer_epoch": -1})
            assert r.error_code == 0, r
            self.producers[version] = (tid, int(r.producer_id), int(r.producer_epoch))
        self.topic_metadata()

    def topic_metadata(self) -> None:
        """Every topic's id (the internal ones too: a regular expression may match them)."""
        m = self.call(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
        for t in m.topics:
            self.cg.topic_ids[t.name] = t.topic_id
            self.cg.topic_names[t.topic_id] = t.name

    # --- normalisation --------------------------------------------------------------------------

    def owner(self, member_id: str) -> str:
        """The label of the member that was given ``member_id``."""
        return self.id_labels.get(member_id, "?")

    def shape(self, assignment: dict[str, list[int]] | None) -> dict[str, int] | None:
        if assignment is None:
            return None
        return {t.replace(self.suffix, "*"): len(ps) for t, ps in sorted(assignment.items())}

    # --- the steps ------------------------------------------------------------------------------

    def play(self, steps: list[Step]) -> list[Any]:
        self.setup()
        for i, s in enumerate(steps):
            self.step_no = i
            getattr(self, "do_" + s[0])(*s[1:])
            self.collect(REPLY_WAIT_S)
            if self.keepalive():
                self.collect(REPLY_WAIT_S)      # the syncs and rejoins it sent answered first
        self.collect(REPLY_WAIT_S)
        for entry in self.transcript:
            if entry[1] == "join" and isinstance(entry[3], dict) and "members" in entry[3]:
                entry[3]["members"] = sorted(self.owner(x) for x in entry[3]["members"])
        return self.transcript

    def do_join(self, label: str, with_id: bool) -> None:
        m = self.classic[label]
        if m.waiting:
            self.note("join", label, "busy")
            return
        m.alive = True
        if not with_id:
            m.mid, m.generation = "", -1
        self._send_join(m)
        if m.ready(REPLY_WAIT_S):
            self._answer(m)
            if m.waiting is None and m.mid and m.generation < 0 and self._last_error == 79:
                self._send_join(m)          # MEMBER_ID_REQUIRED: again, with the id given

    def _send_join(self, m: Classic) -> None:
        m.send(11, 9, {"group_id": self.group, "session_timeout": SESSION_MS, "rebalance_timeout": REBALANCE_MS,
                       "member_id": m.mid, "group_instance_id": m.instance, "protocol_type": "consumer",
                       "protocols": [{"name": "range", "metadata": subscription(self.topic)}], "reason": None},
               "join")

    _last_error = 0

    def _answer(self, m: Classic) -> None:
        what = m.waiting[0] if m.waiting else "?"
        r = m.read()
        err = int(r.error_code)
        self._last_error = err
        if what == "join":
            got = str(r.member_id)
            change = "-" if not got else "new" if not m.mid else "kept" if got == m.mid else "changed"
            if got and err in (0, 79):
                m.mid = got
                self.id_labels[got] = m.label
            if err == 0:
                m.generation = int(r.generation_id)
                m.synced = -1
                m.joined_at = time.monotonic()
                m.joined_round = self.rounds
                m.leads = r.leader == m.mid
                entry: dict[str, Any] = {"error": err, "generation": m.generation, "id": change,
                                         "protocol": r.protocol_name, "leads": m.leads}
                if m.leads:
                    m.members = [str(x.member_id) for x in r.members]
                    entry["members"] = tuple(m.members)       # labelled at the end (ids not known yet)
                    if self.leader is not None and self.leader != m.label and len(m.members) > 1:
                        self.note(LEADER_CHOICE, self.leader, m.label)
                    self.leader = m.label
            else:
                entry = {"error": err, "id": change}
                if err == 25:
                    m.mid, m.generation = "", -1
            self.note("join", m.label, entry)
        else:
            assignment = bytes(r.assignment or b"").decode(errors="replace")
            if err == 25:
                m.mid, m.generation = "", -1
            if err == 0:
                m.synced = m.generation
            self.note("sync", m.label, {"error": err, "assignment": assignment})
            if err in REJOIN:
                self._send_join(m)

    def collect(self, wait: float) -> None:
        """The answers of waiting JoinGroup/SyncGroup requests that came within ``wait`` s."""
        deadline = time.monotonic() + wait
        while True:
            waiting = [m for m in self.classic.values() if m.waiting]
            if not waiting:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            ready = select.select([m.sock for m in waiting], [], [], left)[0]
            for m in sorted(waiting, key=lambda x: x.label):
                if m.sock in ready:
                    self._answer(m)
                    if m.waiting:        # it asked again (a rejoin): that answer belongs here too
                        deadline = max(deadline, time.monotonic() + wait)

    def do_sync(self) -> None:
        """Every member that joined and has not synced yet syncs, the leader first."""
        joined = [m for m in self.classic.values() if self._unsynced(m)]
        for m in sorted(joined, key=lambda x: (not x.leads, x.label)):
            self._send_sync(m)
            if m.ready(REPLY_WAIT_S):
                self._answer(m)
        if not joined:
            self.note("sync", "nobody")

    @staticmethod
    def _unsynced(m: Classic) -> bool:
        return bool(m.mid) and m.generation >= 0 and m.synced != m.generation and not m.waiting

    def _send_sync(self, m: Classic) -> None:
        assignments = [{"member_id": mid, "assignment": self.owner(mid).encode()}
                       for mid in m.members] if m.leads else []
        m.send(14, 5, {"group_id": self.group, "generation_id": m.generation, "member_id": m.mid,
                       "group_instance_id": m.instance, "protocol_type": "consumer", "protocol_name": "range",
                       "assignments": assignments}, "sync")

    def _heartbeat(self, m: Classic) -> int:
        r = self.call(12, 4, {"group_id": self.group, "generation_id": m.generation, "member_id": m.mid,
                              "group_instance_id": m.instance})
        err = int(r.error_code)
        if err == 25:
            m.mid, m.generation = "", -1
        return err

    def do_hb(self, label: str) -> None:
        m = self.classic[label]
        m.alive = True
        self.note("hb", label, self._heartbeat(m))

    def do_leave(self, label: str) -> None:
        m = self.classic[label]
        r = self.call(13, 5, {"group_id": self.group, "members": [
            {"member_id": m.mid, "group_instance_id": m.instance, "reason": None}]})
        self.note("leave", label, int(r.error_code), [int(x.error_code) for x in r.members])
        if not m.waiting:
            m.mid, m.generation, m.alive = "", -1, False

    def do_crash(self, label: str) -> None:
        """The member stops talking (its process is gone): its session will expire."""
        self.classic[label].alive = False
        self.note("crash", label)

    def do_sleep(self, joining: str | None) -> None:
        """``joining`` (if any) rejoins, then ten seconds pass with the live members heartbeating every
        second without rejoining (busy with a long batch; a JoinGroup waits longer than a session):
        the last answer of each."""
        if joining is not None:
            self.do_join(joining, True)
        end = time.monotonic() + LONG_SLEEP_S
        last: dict[str, Any] = {}
        while time.monotonic() < end:
            time.sleep(1.0)
            last = self.keepalive(record=False, rejoin=False)
            self.collect(0.2)
        self.note("slept", last)

    def keepalive(self, record: bool = True, rejoin: bool = True) -> dict[str, Any]:
        """A heartbeat of every live member not waiting, which rejoins when told to (``rejoin``) as
        a client does; the consumer members' unrecorded (their assignments move at their own pace:
        :meth:`do_cg_settle` writes them down)."""
        out: dict[str, Any] = {}
        self.rounds += 1
        for label, m in self.classic.items():
            if m.alive and self._unsynced(m):
                # a client syncs after its JoinGroup answer, not heartbeating meanwhile: here in
                # the next round, a while later (Kafka restarted the session when the join completed)
                if self.rounds > m.joined_round:
                    time.sleep(max(0.0, m.joined_at + SYNC_DELAY_S - time.monotonic()))
                    self._send_sync(m)
                    out[label] = "sync"
            elif m.alive and m.mid and not m.waiting:
                out[label] = self._heartbeat(m)
                if rejoin and out[label] in REJOIN:
                    self._send_join(m)
        if self.consumer_alive:
            self.topic_metadata()
        for label in sorted(self.consumer_alive):
            a = self.cg.heartbeat(label, record=False)
            if a["error"]:
                self.consumer_alive.discard(label)
                out[label] = a["error"]
        if record and out:
            self.note("alive", out)
        return out

    def _member_fields(self, label: str, delta: int) -> tuple[int, str, str | None]:
        """The member's generation (or epoch) plus ``delta`` (an old or a future one), id and instance id."""
        if label in self.classic:
            m = self.classic[label]
            return m.generation + delta if m.generation >= 0 else -1, m.mid, m.instance
        epoch = self.cg.epochs.get(label, 0) if label in self.consumer_alive else -1
        return epoch + delta if epoch > 0 else epoch, self.cg.members.get(label, ""), STATIC.get(label)

    def _assignment_blind(self, label: str, delta: int) -> bool:
        """A consumer member's commit with an older epoch is checked against the epochs its
        partitions were assigned at, which differ from Kafka 4.4's for partitions kept through a
        revocation (docs/kafka-compatibility.md): not compared."""
        return label in CONSUMER and delta < 0

    def _group_of(self, label: str) -> str:
        return self.group if label in self.classic else self.cg.group

    def do_commit(self, label: str, delta: int) -> None:
        if self._assignment_blind(label, delta):
            self.note("commit", label, delta, "not compared")
            return
        generation, mid, instance = self._member_fields(label, delta)
        self.offset += 1
        r = self.call(8, 9, {"group_id": self._group_of(label), "generation_id_or_member_epoch": generation,
                             "member_id": mid, "group_instance_id": instance, "topics": [
                                 {"name": self.topic, "partitions": [
                                     {"partition_index": p, "committed_offset": self.offset,
                                      "committed_leader_epoch": -1, "committed_metadata": ""} for p in range(4)]}]})
        self.note("commit", label, delta, [int(p.error_code) for t in r.topics for p in t.partitions])

    def do_txn(self, label: str, version: int, delta: int) -> None:
        """A transaction of offsets: AddOffsetsToTxn + TxnOffsetCommit v3 + EndTxn v3, or
        TxnOffsetCommit v5 + EndTxn v5; the member's id and generation (or epoch)."""
        tid, pid, epoch = self.producers[version]
        group = self._group_of(label)
        generation, mid, instance = self._member_fields(label, delta)
        out: list[Any] = []
        if version == 3:
            r = self.call(25, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                  "group_id": group})
            out.append(int(r.error_code))
        self.offset += 1
        out.append(self._txn_offset_commit(version, {
            "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": generation, "member_id": mid, "group_instance_id": instance,
            "topics": [{"name": self.topic, "partitions": [
                {"partition_index": p, "committed_offset": self.offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""} for p in range(4)]}]}))
        r = self.call(26, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                    "committed": True})
        out.append(int(r.error_code))
        if version == 5 and r.error_code == 0:
            self.producers[version] = (tid, int(r.producer_id), int(r.producer_epoch))
        self.note("txn", label, version, delta, out)
        self._fetch(group)

    def _txn_offset_commit(self, version: int, body: dict[str, Any]) -> list[int]:
        """A TxnOffsetCommit's partition errors, the request sent again while they hold
        CONCURRENT_TRANSACTIONS, as a client sends it (``TxnClient.call`` retries a top-level
        error, as AddOffsetsToTxn's and EndTxn's, only): Kafka 4.4 completes a transaction (its
        markers, then its CompleteCommit) after EndTxn answered, and a commit that failed still
        added ``__consumer_offsets`` to it (transactions v2), so the next commit can meet the last
        transaction completing."""
        deadline = time.monotonic() + TXN_RETRY_S
        while True:
            r = self.call(28, version, body)
            errors = [int(p.error_code) for t in r.topics for p in t.partitions]
            if CONCURRENT_TRANSACTIONS not in errors or time.monotonic() > deadline:
                return errors
            time.sleep(0.1)

    def _fetch(self, group: str) -> None:
        """The group's committed offsets (require_stable: Kafka writes the markers after EndTxn)."""
        for _ in range(100):
            r = self.call(9, 7, {"group_id": group, "require_stable": True, "groups": [],
                                 "topics": [{"name": self.topic, "partition_indexes": list(range(4))}]})
            if all(p.error_code != 88 for t in r.topics for p in t.partitions):
                break
            time.sleep(0.1)
        self.note("fetch", group.split("-")[0], sorted({int(p.committed_offset) for t in r.topics
                                                        for p in t.partitions}))

    def do_cg_join(self, label: str, subscribed: str) -> None:
        kw: dict[str, Any] = ({"topics": [self.topic]} if subscribed == "names"
                              else {"regex": f".*(?:(?:__consumer_offsets)|(?:{self.topic})).*"})
        epoch = self.cg.epochs.get(label, 0) if label in self.consumer_alive else 0
        self.topic_metadata()
        if epoch == 0:
            self.cg.owned.pop(label, None)
        a = self.cg.heartbeat(label, epoch, instance=STATIC.get(label), record=False, **kw)
        self.note("cg_join", label, subscribed, a["error"])
        if a["error"] == 0:
            self.consumer_alive.add(label)
        self.do_cg_settle()

    def do_cg_leave(self, label: str) -> None:
        if label not in self.consumer_alive:
            self.note("cg_leave", label, "not a member")
            return
        static = label in STATIC
        a = self.cg.heartbeat(label, -2 if static else -1, instance=STATIC.get(label), owned=None, record=False)
        self.consumer_alive.discard(label)
        self.cg.epochs[label] = 0
        self.note("cg_leave", label, a["error"], a.get("epoch"))

    def do_cg_settle(self) -> None:
        """The live consumer members heartbeat until a round changes nothing (at least 1.5 s, Kafka
        resolves regular expressions off the request path): each one's error, epoch, assignment shape."""
        start = time.monotonic()
        previous = None
        state: dict[str, Any] = {}
        while time.monotonic() - start < 20:
            state = {}
            self.topic_metadata()
            for label in sorted(self.consumer_alive):
                a = self.cg.heartbeat(label, record=False)
                state[label] = (a["error"], a.get("epoch"))
            # which member keeps which topic's partitions follows a hash map of topic ids in Kafka:
            # the shapes of the members' assignments, not whose each is
            state["assignments"] = sorted(str(self.shape(self.cg.owned.get(label)))
                                          for label in sorted(self.consumer_alive))
            if state == previous and time.monotonic() - start >= 1.5:
                break
            previous = state
            time.sleep(0.3)
        self.note("cg", state)


def run_both(kafka_port: int, ours_port: int, steps: list[Step]) -> tuple[list[Any], list[Any]]:
    """The sequence against both brokers at once (fresh groups, topic and transactional ids):
    the two transcripts, Kafka's first."""
    suffix = uuid.uuid4().hex[:8]
    theirs, mine = run_side_by_side(kafka_port, ours_port, lambda port: (Driver(port, suffix), suffix),
                                    lambda d, _suffix: d.play(steps))
    return theirs, mine


def comparable(theirs: list[Any], mine: list[Any]) -> int:
    """The steps both transcripts can be compared on: before the first leader choice of either."""
    choices = [e[0] for e in theirs + mine if e[1] == LEADER_CHOICE]
    return min(choices, default=1 << 30)


def first_difference(theirs: list[Any], mine: list[Any]) -> str | None:
    """Where two transcripts differ (step numbers up to :func:`comparable`), said; None if nowhere.
    The entries of a step compare in any order: answers that come together (a rebalance completing
    for several members) reach the client in an order of their own."""
    limit = comparable(theirs, mine)

    def steps(t: list[Any]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for e in t:
            if e[0] < limit:
                out.setdefault(e[0], []).append(repr(e))
        return {k: sorted(v) for k, v in out.items()}
    a, b = steps(theirs), steps(mine)
    for n in sorted(set(a) | set(b)):
        if a.get(n) != b.get(n):
            return f"step {n}: Kafka 4.4 {a.get(n)}, kafkalog {b.get(n)}"
    return None


def shrink(steps: list[Step], fails: Callable[[list[Step]], bool], budget: int) -> list[Step]:
    """A shorter failing sequence (delta debugging: chunks dropped while it still fails), at most
    ``budget`` runs."""
    n = 2
    while len(steps) > 4 and budget > 0:
        size = max(1, len(steps) // n)
        reduced = False
        for start in range(4, len(steps), size):     # the shared start stays
            candidate = steps[:start] + steps[start + size:]
            if candidate == steps or budget <= 0:
                continue
            budget -= 1
            if fails(candidate):
                steps, reduced = candidate, True
                break
        if not reduced:
            if size == 1:
                break
            n *= 2
    return steps
