"""The group coordinators against Kafka 4.4, by seeded random sequences of requests
(tests/server/group_sequences.py): JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and
TxnOffsetCommit from dynamic and static members of a classic group, ConsumerGroupHeartbeat,
OffsetCommit and TxnOffsetCommit from members of a consumer group, crashes, joins that outlast a
session, rejoins with and without member ids, commits inside and outside transactions. The same
sequence goes to both brokers; the normalised transcripts (error codes, member ids kept or changed,
generations and epochs, assignment shapes) must be equal. A failure prints the seed, the first
difference, and a shorter sequence that still fails (delta debugging).

Then the sequences of issue 34's defects, each failing before its fix: a consumer-protocol member's
TxnOffsetCommit (v3 after AddOffsetsToTxn, v5, a stale epoch), a static classic member rejoining with
its own member id, a member whose JoinGroup waited longer than its session, a regular expression
matching ``__consumer_offsets``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.group_sequences import Step, comparable, first_difference, generate, run_both, shrink

#: the seeds the default suite plays, all at once (each on its own groups)
SEEDS = (5, 14, 24)
#: runs of a failing sequence spent on shrinking it
SHRINK_BUDGET = 4


def _differs(kafka: kafka44.KafkaBroker, ours: BrokerProcess, steps: list[Step]) -> str | None:
    theirs, mine = run_both(kafka.port, ours.port, steps)
    return first_difference(theirs, mine)


def test_random_sequences_as_kafka(kafka44_fast_groups: kafka44.KafkaBroker,
                                   kafkalog_fast_groups: BrokerProcess) -> None:
    kafka, ours = kafka44_fast_groups, kafkalog_fast_groups
    results: dict[int, Any] = {}

    def play(seed: int) -> None:
        try:
            results[seed] = run_both(kafka.port, ours.port, generate(seed))
        except BaseException as e:      # reported below
            results[seed] = e

    threads = [threading.Thread(target=play, args=(seed,)) for seed in SEEDS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    compared = 0
    failures = []
    for seed in SEEDS:
        got = results[seed]
        if isinstance(got, BaseException):
            raise AssertionError(f"seed {seed}: {got!r}") from got
        theirs, mine = got
        difference = first_difference(theirs, mine)
        if difference is not None:
            failures.append((seed, difference, theirs, mine))
        compared += min(comparable(theirs, mine), len(generate(seed)))
    if failures:
        seed, difference, theirs, mine = failures[0]
        steps = generate(seed)
        smaller = shrink(steps, lambda s: _differs(kafka, ours, s) is not None, SHRINK_BUDGET)
        pytest.fail("\n".join(f"seed {sd}: {d}" for sd, d, _t, _m in failures)
                    + f"\nseed {seed}: sequence {steps}\nshrunk ({len(smaller)} steps): {smaller}\n"
                    f"Kafka 4.4: {theirs}\nkafkalog: {mine}")
    # the comparison stops at a leader Kafka elects from a hash map: most steps must be compared
    assert compared >= 0.6 * sum(len(generate(seed)) for seed in SEEDS), compared


START: list[Step] = [("join", "D1", True), ("join", "S1", True), ("sync",)]

DEFECTS: dict[str, list[Step]] = {
    # 1: a consumer-protocol member commits offsets in transactions (v5; v3 after AddOffsetsToTxn;
    # with a stale epoch), then outside one
    "txn-offset-commit-consumer-member": START + [
        ("cg_join", "C1", "names"), ("txn", "C1", 5, 0), ("txn", "C1", 3, 0), ("txn", "C1", 5, -1),
        ("txn", "C1", 3, 1), ("cg_join", "C2", "names"), ("txn", "C2", 3, 0), ("txn", "C2", 5, -1),
        ("commit", "C2", 0), ("txn", "C2", 5, 1)],
    # 2: the static member rejoins with its member id (kept), commits, then without one (a new id)
    "static-rejoin-keeps-id": START + [
        ("join", "S1", True), ("sync",), ("commit", "S1", 0), ("join", "S1", False), ("commit", "S1", 0),
        ("sync",), ("txn", "S1", 3, 0)],
    # 3: D1's JoinGroup waits 10 s (session 6 s) while S1 heartbeats; S1 rejoins: D1 syncs
    "join-outlasts-session": START + [("sleep", "D1"), ("join", "S1", True), ("sync",),
                                      ("hb", "D1"), ("commit", "D1", 0)],
    # 4: a regular expression that matches __consumer_offsets
    "regex-matches-internal-topic": START + [("cg_join", "C1", "regex"), ("cg_join", "C2", "regex"),
                                             ("commit", "C1", 0)],
}


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_defect_sequences_as_kafka(kafka44_fast_groups: kafka44.KafkaBroker, kafkalog_fast_groups: BrokerProcess,
                                   name: str) -> None:
    theirs, mine = run_both(kafka44_fast_groups.port, kafkalog_fast_groups.port, DEFECTS[name])
    difference = first_difference(theirs, mine)
    if difference is not None:      # whole: an assertion's message would be cut to a line
        pytest.fail(f"{difference}\nKafka 4.4: {theirs}\nkafkalog: {mine}")
    assert comparable(theirs, mine) > len(DEFECTS[name]), "a leader choice cut the comparison short"
