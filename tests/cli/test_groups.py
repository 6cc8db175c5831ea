"""``kafkalog groups`` as an operator runs it (a subprocess on real data directories): groups committed
by the embedded consumer and by a real kafka-python consumer through ``kafkalog serve``; list,
describe with lag, every reset scenario of kafka-consumer-groups.sh (plan by default, commit with
--execute, clamping with Kafka's warnings), delete, delete-offsets, and the careless paths."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import kafkalog
from kafkalog.coordinator.group_metadata import GroupMetadataValue, MemberMetadata
from kafkalog.log.naming import TopicPartition
from tests.cli.test_careless_paths import cli, json_lines, tree

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
BASE_TS = 1_700_000_000_000          # 2023-11-14T22:13:20Z


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Topic t: 3 partitions of 10 records (timestamps BASE_TS + offset * 1000); topic u: 1 of 4.
    Group g committed t-0 at 3 and t-1 at 5 through the embedded consumer; group h u-0 at 4."""
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 3)
        dl.create_topic("u", 1)
        for p in range(3):
            for i in range(10):
                dl.produce("t", b"v%d" % i, partition=p, timestamp=BASE_TS + i * 1000)
        for i in range(4):
            dl.produce("u", b"u%d" % i, partition=0)
        c = dl.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
        c.commit({T0: 3, T1: 5})
        c.close()
        h = dl.consumer("u", group_id="h", enable_auto_commit=False)
        h.commit({TopicPartition("u", 0): 4})
        h.close()
    return d


def committed(d: Path, group: str) -> dict[TopicPartition, int]:
    with kafkalog.open(d, read_only=True) as dl:
        return {tp: o.offset for tp, o in dl.offsets_store().fetch(group).items()}


def ok(*args: str) -> list[dict]:
    r = cli("groups", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return json_lines(r.stdout)


def test_list_and_describe_json(data_dir: Path) -> None:
    assert ok(str(data_dir), "--list") == [{"group": "g", "state": "Empty", "type": "classic"},
                                           {"group": "h", "state": "Empty", "type": "classic"}]
    lines = ok(str(data_dir), "--describe", "--group", "g")
    assert lines[0]["type"] == "group" and lines[0]["state"] == "Empty" and lines[0]["members"] == []
    rows = [(x["topic"], x["partition"], x["currentOffset"], x["logEndOffset"], x["lag"]) for x in lines[1:]]
    assert rows == [("t", 0, 3, 10, 7), ("t", 1, 5, 10, 5)]
    everything = ok(str(data_dir), "--describe", "--all-groups")
    assert [x["group"] for x in everything if x["type"] == "group"] == ["g", "h"]
    assert [x["lag"] for x in everything if x["type"] == "offset" and x["group"] == "h"] == [0]


def test_describe_and_list_text(data_dir: Path) -> None:
    r = cli("groups", str(data_dir), "--list", "--format", "text")
    assert r.returncode == 0 and r.stdout.split() == ["g", "h"]
    r = cli("groups", str(data_dir), "--describe", "--group", "g", "--format", "text")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Consumer group 'g' has no active members."
    assert lines[2].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[3].split() == ["g", "t", "0", "3", "10", "7", "-", "-", "-"]


def test_reset_dry_run_is_the_default_and_execute_commits(data_dir: Path) -> None:
    plan = ok(str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest")
    assert [(x["partition"], x["newOffset"], x["executed"]) for x in plan] == [(0, 0, False), (1, 0, False),
                                                                                (2, 0, False)]
    assert committed(data_dir, "g") == {T0: 3, T1: 5}
    ok(str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t:0,2", "--to-latest", "--execute")
    assert committed(data_dir, "g") == {T0: 10, T1: 5, T2: 10}
    r = cli("groups", str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t:1", "--to-offset", "2",
            "--execute", "--format", "text")
    assert r.returncode == 0 and r.stdout.splitlines()[1].split() == ["g", "t", "1", "2"]
    assert committed(data_dir, "g") == {T0: 10, T1: 2, T2: 10}
    # the embedded consumer resumes from the reset offset
    with kafkalog.open(data_dir, background=False) as dl:
        c = dl.consumer(group_id="g", enable_auto_commit=False)
        c.assign([T1])
        assert [r.offset for r in c.poll(timeout_ms=2000)[T1]][:1] == [2]
        c.close()


def test_reset_clamps_out_of_range_offsets_as_kafka_does(data_dir: Path) -> None:
    r = cli("groups", str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t:0", "--to-offset", "99")
    assert r.returncode == 0
    assert json_lines(r.stdout)[0]["newOffset"] == 10
    assert ("New offset (99) is higher than latest offset for topic partition t-0. Value will be set to 10"
            in r.stderr)
    r = cli("groups", str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t:1", "--shift-by", "-8")
    assert json_lines(r.stdout)[0]["newOffset"] == 0
    assert "New offset (-3) is lower than earliest offset for topic partition t-1. Value will be set to 0" in r.stderr
    assert ok(str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t:1", "--shift-by", "2")[0][
        "newOffset"] == 7


def test_reset_by_time_current_and_all_topics(data_dir: Path) -> None:
    at = ok(str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t:0", "--to-datetime",
            "2023-11-14T22:13:24.500Z")
    assert at[0]["newOffset"] == 5                          # first record at or after +4.5 s
    r = cli("groups", str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t:0", "--to-datetime",
            "2030-01-01T00:00:00Z")
    assert json_lines(r.stdout)[0]["newOffset"] == 10 and "Falling back to latest known offset" in r.stderr
    # records of u carry the time of this test: an hour back reaches the first of them
    assert ok(str(data_dir), "--reset-offsets", "--group", "h", "--topic", "u", "--by-duration",
              "PT1H")[0]["newOffset"] == 0
    cur = ok(str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t", "--to-current")
    assert [x["newOffset"] for x in cur] == [3, 5, 10]     # no committed offset: the log end
    every = ok(str(data_dir), "--reset-offsets", "--group", "g", "--all-topics", "--to-earliest")
    assert [(x["topic"], x["partition"]) for x in every] == [("t", 0), ("t", 1)]


def test_delete_offsets_and_delete_group(data_dir: Path) -> None:
    out = ok(str(data_dir), "--delete-offsets", "--group", "g", "--topic", "t:0")
    assert out == [{"group": "g", "topic": "t", "partition": 0, "deleted": True}]
    assert committed(data_dir, "g") == {T1: 5}
    assert ok(str(data_dir), "--delete", "--group", "g") == [{"group": "g", "deleted": True}]
    assert [x["group"] for x in ok(str(data_dir), "--list")] == ["h"]
    r = cli("groups", str(data_dir), "--delete", "--group", "g")
    assert r.returncode == 2 and json_lines(r.stdout)[0]["error"] == "GroupIdNotFoundError"


def _with_member(d: Path) -> None:
    member = MemberMetadata("consumer-1-abc", "consumer-1", "/127.0.0.1", 45000, b"", b"", 300000)
    with kafkalog.open(d, background=False) as dl:
        dl.offsets_store().store_group_metadata(
            "g", GroupMetadataValue("consumer", 3, "range", "consumer-1-abc", (member,), int(time.time() * 1000)))


def test_live_members_refuse_reset_and_delete(data_dir: Path) -> None:
    _with_member(data_dir)
    desc = ok(str(data_dir), "--describe", "--group", "g")[0]
    assert desc["state"] == "Stable" and desc["protocol"] == "range" and desc["generation"] == 3
    assert [m["clientId"] for m in desc["members"]] == ["consumer-1"]
    r = cli("groups", str(data_dir), "--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest",
            "--execute", "--format", "text")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("Error: Assignments can only be reset if the group 'g' is inactive, but the "
                                "current state is Stable.")
    assert committed(data_dir, "g") == {T0: 3, T1: 5}
    r = cli("groups", str(data_dir), "--delete", "--group", "g")
    assert r.returncode == 2 and json_lines(r.stdout)[0]["error"] == "NonEmptyGroupError"
    r = cli("groups", str(data_dir), "--delete-offsets", "--group", "g", "--topic", "t")
    assert r.returncode == 2 and "forbidden if the group is not empty" in json_lines(r.stdout)[0]["message"]


@pytest.mark.parametrize("args", [
    ["--describe", "--group", "nope"],
    ["--delete-offsets", "--group", "nope", "--topic", "t"],
    ["--reset-offsets", "--group", "g", "--topic", "missing", "--to-earliest"],
    ["--reset-offsets", "--group", "g", "--topic", "t:3", "--to-earliest"],
    ["--reset-offsets", "--group", "g", "--topic", "t:2", "--shift-by", "1"],     # nothing committed
    ["--reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "yesterday"],
    ["--reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "1 hour"],
])
def test_bad_input_is_a_typed_error(data_dir: Path, args: list[str]) -> None:
    before = tree(data_dir)
    r = cli("groups", str(data_dir), *args)
    assert r.returncode == 2, r.stdout + r.stderr
    err = json_lines(r.stdout)
    assert len(err) == 1 and err[0]["type"] == "error" and r.stderr == ""
    assert tree(data_dir) == before


@pytest.mark.parametrize("args", [
    ["--list", "--describe"],
    ["--reset-offsets", "--group", "g", "--topic", "t"],                     # no scenario
    ["--reset-offsets", "--group", "g", "--topic", "t", "--to-earlist"],     # a typo
    ["--reset-offsets", "--group", "g", "--to-earliest"],                    # no --topic
    ["--describe"],
    ["--list", "--to-earliest"],
    ["--delete", "--group", "g", "--execute"],
])
def test_usage_errors(data_dir: Path, args: list[str]) -> None:
    r = cli("groups", str(data_dir), *args)
    assert r.returncode == 2 and "Error" in r.stderr and r.stdout == ""
    assert committed(data_dir, "g") == {T0: 3, T1: 5}


def test_a_missing_or_wrong_directory_is_refused_and_never_created(tmp_path: Path, data_dir: Path) -> None:
    typo = tmp_path / "dta"
    for action in (["--list"], ["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest",
                                "--execute"], ["--delete", "--group", "g"]):
        r = cli("groups", str(typo), *action)
        assert r.returncode == 2 and json_lines(r.stdout)[0]["error"] == "LogDirError"
        assert not typo.exists()
    r = cli("groups", str(data_dir / "t-0"), "--list", "--format", "text")
    assert r.returncode == 2 and "partition directory" in r.stderr


def test_group_of_a_kafka_python_consumer_through_serve(tmp_path: Path) -> None:
    """A real kafka-python consumer in a group of ``kafkalog serve``: described (members, assignment)
    while it runs and refused a reset; after it leaves and the broker stops, reset and described."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    from tests.server.broker_process import BrokerProcess
    d = tmp_path / "data"
    b = BrokerProcess(str(d), ["group.initial.rebalance.delay.ms=0"]).start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        admin.create_topics([NewTopic("events", 2, 1)])
        admin.close()
        p = KafkaProducer(bootstrap_servers=b.bootstrap)
        for i in range(20):
            p.send("events", b"e%d" % i, partition=i % 2)
        p.flush()
        p.close()
        c = KafkaConsumer("events", bootstrap_servers=b.bootstrap, group_id="pyg", client_id="py-client",
                          auto_offset_reset="earliest", enable_auto_commit=False)
        # the topic's metadata before the first join: kafka-python 3.0.12 can drop the assignment of
        # the rejoin that late metadata causes (tests/server/group_members.py, KafkaPythonMember)
        assert "events" in c.topics()
        got = 0
        deadline = time.monotonic() + 60
        while got < 20 and time.monotonic() < deadline:
            got += sum(len(v) for v in c.poll(500).values())
        assert got == 20
        c.commit()
        desc = ok(str(d), "--describe", "--group", "pyg")        # read-only, beside the broker
        assert desc[0]["state"] == "Stable" and desc[0]["protocolType"] == "consumer"
        assert [m["clientId"] for m in desc[0]["members"]] == ["py-client"]
        assert sorted((a["topic"], a["partition"]) for a in desc[0]["members"][0]["assignment"]) == [
            ("events", 0), ("events", 1)]
        assert [(x["partition"], x["currentOffset"], x["lag"], x["clientId"]) for x in desc[1:]] == [
            (0, 10, 0, "py-client"), (1, 10, 0, "py-client")]
        r = cli("groups", str(d), "--reset-offsets", "--group", "pyg", "--topic", "events", "--to-earliest")
        assert r.returncode == 2 and "is inactive, but the current state is Stable" in r.stdout
        c.close()
    finally:
        assert b.stop() == 0, b.stderr()
    assert ok(str(d), "--describe", "--group", "pyg")[0]["state"] == "Empty"
    ok(str(d), "--reset-offsets", "--group", "pyg", "--topic", "events", "--to-offset", "4", "--execute")
    assert committed(d, "pyg") == {TopicPartition("events", 0): 4, TopicPartition("events", 1): 4}
