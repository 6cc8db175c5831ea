"""Per-group configs of consumer and streams groups (Kafka's ``GroupConfig``: ``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms``, ``streams.session.timeout.ms``, ``streams.heartbeat.interval.ms``,
``streams.num.standby.replicas``) against Kafka 4.4 and ``kafkalog serve`` in the same test: the same
IncrementalAlterConfigs answers (types, at-least, the broker's ``group.consumer.*``/``group.streams.*``
bounds, unknown keys), the same DescribeConfigs entries (values, sources, synonyms), the same effect on the
groups (the heartbeat interval answered, a session expiring by the group's timeout, standby tasks of a
streams group and a change of the count re-assigning), the same ``kafka-configs.sh --entity-type groups``
output; and the configs kept by a restart of ``kafkalog serve``."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.server.broker_process import BrokerProcess
from tests.server.test_streams_group_protocol import _call, _create, find_coordinator, heartbeat, topology

pytestmark = pytest.mark.kafka

#: both brokers: consumer sessions from 1 s (a session expiring within the test), streams assignments at once
PAIR_CONFIGS = {"group.consumer.min.session.timeout.ms": "1000", "group.consumer.min.heartbeat.interval.ms": "500",
                "group.streams.initial.rebalance.delay.ms": "0", "group.streams.assignment.interval.ms": "0"}

#: the group keys both brokers serve and this test compares (Kafka 4.4 has more: see docs/kafka-compatibility.md)
SERVED = ("consumer.assignment.interval.ms", "streams.assignment.interval.ms", "streams.initial.rebalance.delay.ms",
          "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "streams.session.timeout.ms",
          "streams.heartbeat.interval.ms", "streams.num.standby.replicas", "share.session.timeout.ms")


def ms(d: Any) -> int:
    """A duration field of a kio message in milliseconds."""
    return round(d.total_seconds() * 1000)


def both(kafka_pair: Any, scenario: Any) -> tuple[list[Any], list[Any]]:
    """``scenario(port, bootstrap, suffix)`` on Kafka 4.4, then on kafkalog: the two transcripts."""
    kafka, ours = kafka_pair
    sfx = uuid.uuid4().hex[:6]
    return scenario(kafka.port, kafka.bootstrap, sfx), scenario(ours.port, ours.bootstrap, sfx)


def alter(port: int, group: str, configs: dict[str, str | None], validate_only: bool = False) -> Any:
    """IncrementalAlterConfigs of one GROUP resource (SET, or DELETE for None): (error code, message)."""
    r = _call(port, 44, 1, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
        {"name": k, "config_operation": 0 if v is not None else 1, "value": v} for k, v in configs.items()]}],
        "validate_only": validate_only})
    return [(int(x.error_code), x.error_message) for x in r.responses]


def describe(port: int, group: str, synonyms: bool = True) -> list[Any]:
    """DescribeConfigs of the GROUP resource, the served keys' entries sorted by name (Kafka lists them in
    hash order)."""
    r = _call(port, 32, 4, {"resources": [{"resource_type": 32, "resource_name": group, "configuration_keys": None}],
                            "include_synonyms": synonyms, "include_documentation": False}).results[0]
    return [int(r.error_code), sorted(
        (e.name, e.value, e.read_only, int(e.config_source), e.is_sensitive, int(e.config_type),
         [(s.name, s.value, int(s.source)) for s in e.synonyms]) for e in r.configs if e.name in SERVED)]


def settled(port: int, group: str, key: str, value: str | None) -> None:
    """Until DescribeConfigs shows ``key`` of ``group`` as ``value`` (None: not overridden): Kafka's group
    coordinator learns a change from its metadata log, a moment after the answer."""
    for _ in range(100):
        entries = {e[0]: e for e in describe(port, group)[1]}
        if (entries[key][3] == 8 and entries[key][1] == value) if value is not None else entries[key][3] != 8:
            time.sleep(0.3)
            return
        time.sleep(0.1)
    raise AssertionError(f"{key} of {group} never became {value}")


#: (configs, validate_only) of IncrementalAlterConfigs on one group, in order
ALTERS: list[tuple[dict[str, str | None], bool]] = [
    ({"consumer.session.timeout.ms": "50000"}, True),
    ({"consumer.session.timeout.ms": "500"}, False),
    ({"consumer.session.timeout.ms": "0"}, False),
    ({"consumer.session.timeout.ms": "x"}, False),
    ({"consumer.session.timeout.ms": "70000"}, False),
    ({"consumer.heartbeat.interval.ms": "400"}, False),
    ({"consumer.heartbeat.interval.ms": "20000"}, False),
    ({"consumer.heartbeat.interval.ms": "3000", "consumer.session.timeout.ms": "2000"}, False),
    ({"consumer.session.timeout.ms": "3000"}, False),
    ({"consumer.heartbeat.interval.ms": "3000"}, False),
    ({"consumer.heartbeat.interval.ms": "1000"}, False),
    ({"streams.num.standby.replicas": "-1"}, False),
    ({"streams.num.standby.replicas": "3"}, False),
    ({"streams.num.standby.replicas": "two"}, False),
    ({"streams.num.standby.replicas": "2"}, False),
    ({"streams.session.timeout.ms": "1000"}, False),
    ({"streams.session.timeout.ms": "61000"}, False),
    ({"streams.heartbeat.interval.ms": "4999"}, False),
    ({"streams.heartbeat.interval.ms": "6000", "streams.session.timeout.ms": "50000"}, False),
    ({"group.consumer.session.timeout.ms": "50000"}, False),
    ({"consumer.assignment.interval.ms": "-1"}, False),
    ({"consumer.assignment.interval.ms": "16000"}, False),
    ({"consumer.assignment.interval.ms": "500"}, False),
    ({"streams.assignment.interval.ms": "100000"}, False),
    ({"streams.assignment.interval.ms": "0"}, False),
    ({"streams.initial.rebalance.delay.ms": "-1"}, False),
    ({"streams.initial.rebalance.delay.ms": "100"}, False),
    ({"consumer.session.timeout.ms": None}, False),
    ({"streams.num.standby.replicas": None, "no.such.key": None}, False),
]


def config_scenario(port: int, _bootstrap: str, sfx: str) -> list[Any]:
    group = "gc-" + sfx
    find_coordinator(port, group)
    out: list[Any] = [describe(port, group)]
    for configs, validate_only in ALTERS:
        out.append(alter(port, group, configs, validate_only))
    settled(port, group, "streams.heartbeat.interval.ms", "6000")
    out += [describe(port, group), describe(port, group, synonyms=False)]
    return out


def test_group_configs_alter_and_describe_as_kafka(kafka_pair: Any) -> None:
    """Valid and invalid consumer.*/streams.* values, SET and DELETE, validate-only: the same answers and
    the same described configs (values, sources, types, synonyms) on both brokers."""
    want, got = both(kafka_pair, config_scenario)
    for i, (w, o) in enumerate(zip(want, got, strict=True)):
        assert o == w, (i, o, w)
    assert [(0, None)] in got[1:-2] and got[2] != [(0, None)], got     # some taken, some refused


def consumer_heartbeat(port: int, group: str, member: str, epoch: int, topic: str) -> Any:
    values = {"group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
              "rebalance_timeout": 30000 if epoch == 0 else -1,
              "subscribed_topic_names": [topic] if epoch == 0 else None, "subscribed_topic_regex": None,
              "server_assignor": None, "topic_partitions": [] if epoch == 0 else None}
    for _ in range(100):
        r = _call(port, 68, 1, values)
        if int(r.error_code) not in (14, 15, 16):
            return r
        time.sleep(0.2)
    raise AssertionError("no coordinator")


def consumer_scenario(port: int, bootstrap: str, sfx: str) -> list[Any]:
    """A group with consumer.heartbeat.interval.ms and consumer.session.timeout.ms set, one without."""
    g, plain, topic = f"cg-{sfx}", f"cp-{sfx}", f"ct-{sfx}"
    _create(bootstrap, topic, 2)
    find_coordinator(port, g)
    find_coordinator(port, plain)
    out: list[Any] = [alter(port, g, {"consumer.heartbeat.interval.ms": "700", "consumer.session.timeout.ms": "2000"})]
    settled(port, g, "consumer.session.timeout.ms", "2000")
    a = consumer_heartbeat(port, g, f"a-{sfx}", 0, topic)
    b = consumer_heartbeat(port, g, f"b-{sfx}", 0, topic)
    p = consumer_heartbeat(port, plain, f"p-{sfx}", 0, topic)
    out.append([(int(x.error_code), x.member_epoch, ms(x.heartbeat_interval)) for x in (a, b, p)])
    # b keeps heartbeating, a stops: a's session (the group's 2 s, not the broker's 45 s) expires
    deadline = time.monotonic() + 4
    epoch = b.member_epoch
    while time.monotonic() < deadline:
        r = consumer_heartbeat(port, g, f"b-{sfx}", epoch, topic)
        epoch = r.member_epoch
        time.sleep(0.5)
    d = _call(port, 69, 0, {"group_ids": [g], "include_authorized_operations": False}).groups[0]
    out.append((int(d.error_code), sorted(m.member_id.replace(sfx, "") for m in d.members)))
    out.append(int(consumer_heartbeat(port, g, f"a-{sfx}", a.member_epoch, topic).error_code))
    # the interval changed: the next heartbeat answers the new one
    out.append(alter(port, g, {"consumer.heartbeat.interval.ms": "900"}))
    settled(port, g, "consumer.heartbeat.interval.ms", "900")
    out.append(ms(consumer_heartbeat(port, g, f"b-{sfx}", epoch, topic).heartbeat_interval))
    # consumer.assignment.interval.ms: the first member's assignment is computed at once, the second
    # member's waits for the group's interval (15 s, the broker's 1 s long past)
    slow = f"ca-{sfx}"
    find_coordinator(port, slow)
    out.append(alter(port, slow, {"consumer.assignment.interval.ms": "15000"}))
    settled(port, slow, "consumer.assignment.interval.ms", "15000")
    a = consumer_heartbeat(port, slow, f"a-{sfx}", 0, topic)
    b = consumer_heartbeat(port, slow, f"b-{sfx}", 0, topic)
    time.sleep(2)
    b = consumer_heartbeat(port, slow, f"b-{sfx}", b.member_epoch, topic)
    out.append([(int(x.error_code), x.member_epoch, None if x.assignment is None else
                 sorted(p for t in x.assignment.topic_partitions for p in t.partitions)) for x in (a, b)])
    return out


def test_consumer_group_uses_its_configs_as_kafka(kafka_pair: Any) -> None:
    """consumer.heartbeat.interval.ms is the interval a member's heartbeats are answered with, and
    consumer.session.timeout.ms the session after which a silent member is fenced, on both brokers."""
    want, got = both(kafka_pair, consumer_scenario)
    assert got == want
    assert got[1][0][2] == 700 and got[1][2][2] == 5000 and got[2][1] == ["b-"] and got[-3] == 900, got
    assert got[-1][0][2] == [0, 1] and not got[-1][1][2], got


def streams_scenario(port: int, bootstrap: str, sfx: str) -> list[Any]:
    """A streams group with streams.num.standby.replicas=1 and streams.heartbeat.interval.ms set, two members
    of a stateful subtopology of two tasks; then the count set back to 0."""
    g, m1, m2 = f"sg-{sfx}", f"m1-{sfx}", f"m2-{sfx}"
    src, changelog = f"src-{sfx}", f"sg-{sfx}-store-changelog"
    find_coordinator(port, g)
    out: list[Any] = [alter(port, g, {"streams.num.standby.replicas": "1", "streams.heartbeat.interval.ms": "6000"})]
    settled(port, g, "streams.heartbeat.interval.ms", "6000")
    _create(bootstrap, src, 2)
    _create(bootstrap, changelog, 2)        # (the group's epochs then do not depend on when a broker sees it)
    led(port, [src, changelog], 2)          # (nor on when Kafka's coordinator sees them: one more bump there)
    r = heartbeat(port, g, m1, 0, topology(src, changelog))
    deadline = time.monotonic() + 30
    while not r["active"] and time.monotonic() < deadline:
        time.sleep(0.5)
        r = heartbeat(port, g, m1, r["member_epoch"], tasks=[])
    out.append(r)
    owned = {m1: r["active"], m2: []}
    epochs = {m1: r["member_epoch"]}
    r2 = heartbeat(port, g, m2, 0, topology(src, changelog))
    out.append(r2)
    epochs[m2] = r2["member_epoch"]

    def rounds(n: int) -> None:
        for _ in range(n):
            for m in (m1, m2):
                x = heartbeat(port, g, m, epochs[m], tasks=[{"subtopology_id": s, "partitions": p}
                                                             for s, p in owned[m]])
                epochs[m] = x["member_epoch"]
                if x["active"] is not None:
                    owned[m] = x["active"]
                out.append((m.replace(sfx, ""), x))
    rounds(3)
    out.append(alter(port, g, {"streams.num.standby.replicas": "0"}))
    settled(port, g, "streams.num.standby.replicas", "0")
    rounds(2)
    return out


def led(port: int, topics: list[str], partitions: int) -> None:
    """Wait until the broker's Metadata lists every partition of ``topics`` with a leader (Kafka 4.4
    answers CreateTopics before its metadata image has the topic: a group heartbeat in between sees
    the topic appear later, and the group's epoch is bumped once more than on a broker that saw it)."""
    deadline = time.monotonic() + 30
    while True:
        md = _call(port, 3, 12, {"topics": [{"topic_id": None, "name": t} for t in topics],
                                 "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        if all(int(t.error_code) == 0 and len(t.partitions) == partitions
               and all(int(p.leader_id) >= 0 for p in t.partitions) for t in md.topics):
            time.sleep(0.5)     # (the group coordinator's image follows the broker's metadata cache)
            return
        assert time.monotonic() < deadline, md
        time.sleep(0.2)


def test_streams_group_standby_replicas_per_group_as_kafka(kafka_pair: Any) -> None:
    """streams.num.standby.replicas=1 set on the group (the broker's default is 0): each member gets the
    other's task as a standby task; set back to 0, the next heartbeat bumps the group epoch and the
    standby tasks go; the heartbeat interval is the group's. The transcript is Kafka 4.4's."""
    want, got = both(kafka_pair, streams_scenario)
    for i, (w, o) in enumerate(zip(want, got, strict=True)):
        assert o == w, (i, o, w)
    standby = [x[1]["standby"] for x in got if isinstance(x, tuple)]
    assert any(standby[:6]) and not any(standby[-2:]), got
    assert ms(got[1]["heartbeat_interval"]) == 6000, got


#: kafka-configs.sh runs on groups: alter, describe, refused values, delete
TOOL_RUNS = [
    "--alter --add-config consumer.heartbeat.interval.ms=6000,consumer.session.timeout.ms=50000 "
    "--entity-type groups --entity-name tg",
    "--alter --add-config streams.num.standby.replicas=1 --entity-type groups --entity-name tg",
    "--describe --entity-type groups --entity-name tg",
    "--alter --add-config consumer.heartbeat.interval.ms=100 --entity-type groups --entity-name tg",
    "--alter --add-config streams.num.standby.replicas=9 --entity-type groups --entity-name tg",
    "--alter --delete-config consumer.session.timeout.ms --entity-type groups --entity-name tg",
    "--describe --entity-type groups --entity-name tg",
]


def delay_scenario(port: int, bootstrap: str, sfx: str) -> list[Any]:
    """streams.initial.rebalance.delay.ms set on a group (the broker's is 0): its first assignment waits;
    the member's heartbeats during the delay and after it, until it has its tasks."""
    g, src, m = f"sd-{sfx}", f"sd-src-{sfx}", f"m-{sfx}"
    _create(bootstrap, src, 1)
    find_coordinator(port, g)
    out: list[Any] = [alter(port, g, {"streams.initial.rebalance.delay.ms": str(DELAY_MS)})]
    settled(port, g, "streams.initial.rebalance.delay.ms", str(DELAY_MS))
    joined = time.monotonic()
    r = heartbeat(port, g, m, 0, topology(src))
    out += [r, described(port, g)]
    r = heartbeat(port, g, m, r["member_epoch"], tasks=[])
    out += [r, described(port, g)]
    time.sleep(max(0.0, joined + DELAY_MS / 1000 + 1 - time.monotonic()))
    for _ in range(5):
        r = heartbeat(port, g, m, r["member_epoch"], tasks=[])
        out += [r, described(port, g)]
        if r["active"]:
            break
    return out


def described(port: int, group: str) -> list[Any]:
    """StreamsGroupDescribe of a group: its state and epochs, each member's epoch and tasks."""
    d = _call(port, 89, 0, {"group_ids": [group], "include_authorized_operations": False}).groups[0]
    return [int(d.error_code), d.group_state, d.group_epoch, d.assignment_epoch, sorted(
        (m.member_epoch, sorted((t.subtopology_id, list(t.partitions)) for t in m.assignment.active_tasks),
         sorted((t.subtopology_id, list(t.partitions)) for t in m.target_assignment.active_tasks))
        for m in d.members)]


#: the group's initial rebalance delay in the scenario
DELAY_MS = 3000


def test_streams_group_initial_rebalance_delay_per_group_as_kafka(kafka_pair: Any) -> None:
    """While the delay holds the first assignment back, the same answers as Kafka 4.4 (member epoch,
    no tasks, ASSIGNMENT_DELAYED); after it, the tasks at the group's epoch as Kafka 4.4 gives them."""
    want, got = both(kafka_pair, delay_scenario)
    for i, (w, o) in enumerate(zip(want, got, strict=True)):
        assert o == w, (i, o, w)
    assert "initial rebalance delay" in str(got[1]["status"]) and got[1]["member_epoch"] == 1, got
    assert got[-2]["active"] and got[-1][3] == got[-1][2], got      # (the tasks, the group's epoch assigned)


def test_kafka_configs_tool_on_groups(kafka_pair: Any, tmp_path: Any) -> None:
    """``kafka-configs.sh --entity-type groups`` on kafkalog as on Kafka 4.4: the same exit status, the
    same output lines of the served keys and the same first error line."""
    from tests.ecosystem import ToolSession
    from tests.server.test_scram_admin import CONFIGS_COMMAND
    transcripts = []
    with ToolSession(tmp_path / "tools") as tools:
        for broker in kafka_pair:
            out = []
            for run in TOOL_RUNS:
                args = run.split()
                r = tools.run(CONFIGS_COMMAND, "--bootstrap-server", broker.bootstrap, *args)
                if args[0] == "--alter":
                    time.sleep(1)             # Kafka's broker learns the change from its controller
                lines = r["stdout"].replace(broker.bootstrap, "<b>").splitlines()
                err = [x.replace(broker.bootstrap, "<b>") for x in r["stderr"].splitlines()
                       if x.strip() and not x.startswith("\tat ")][:1]
                out.append([run, r["exit"], _served_lines(lines), err])
            transcripts.append(out)
    diffs = [(a, b) for a, b in zip(*transcripts, strict=True) if a != b]
    assert not diffs, "kafka-configs printed differently on Kafka 4.4 and kafkalog:\n" + "\n".join(
        f"{a}\n  kafkalog: {b}" for a, b in diffs)
    described = transcripts[1][2][2]
    assert any("consumer.heartbeat.interval.ms=6000" in x for x in described), described


def _served_lines(lines: list[str]) -> list[str]:
    """The lines of the output about the served keys (and the lines about no key)."""
    keys = ("consumer.", "streams.", "share.", "errors.")
    return sorted(x for x in lines if not x.strip().startswith(keys)
                  or x.strip().split("=")[0] in SERVED)


def test_group_configs_survive_a_restart(tmp_path: Any) -> None:
    """The per-group configs are kept by a restart of ``kafkalog serve`` and still used: described as set,
    the group's heartbeat interval answered."""
    g, topic = "rg", "rt"
    b = BrokerProcess(str(tmp_path / "data"), []).start()
    try:
        _create(b.bootstrap, topic, 1)
        find_coordinator(b.port, g)
        assert alter(b.port, g, {"consumer.heartbeat.interval.ms": "8000",
                                 "streams.num.standby.replicas": "2"}) == [(0, None)]
        before = describe(b.port, g)
    finally:
        assert b.stop() == 0, b.stderr()
    b = BrokerProcess(str(tmp_path / "data"), []).start()
    try:
        find_coordinator(b.port, g)
        after = describe(b.port, g)
        assert after == before and ("consumer.heartbeat.interval.ms", "8000") in [e[:2] for e in after[1]], after
        assert ms(consumer_heartbeat(b.port, g, "m", 0, topic).heartbeat_interval) == 8000
    finally:
        assert b.stop() == 0, b.stderr()
