"""Kafka 4.4's command-line tools against Apache Kafka 4.4 and ``kafkalog serve`` side by side (issue
28): the classes the ``bin/kafka-*.sh`` scripts run (``kafka-topics``, ``kafka-configs``,
``kafka-consumer-groups``, ``kafka-get-offsets``, ``kafka-delete-records``, ``kafka-transactions``,
``kafka-log-dirs``, ``kafka-features``, the console, verifiable and perf-test clients), each run
once per broker in one JVM (:class:`tests.ecosystem.ToolSession`), with the same arguments.

What each printed (exit status, stdout, the first line of stderr) is normalised (the broker's
address, cluster and topic ids, wall-clock times, the log directory and durations become tokens)
and compared line by line; a difference not listed in the differential table of
``docs/kafka-compatibility.md`` (rows whose case starts with ``tool ``) fails, and so does a row
no run shows any more."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import kafka44
from tests.ecosystem import ToolSession
from tests.server import differential as d
from tests.server.broker_process import BrokerProcess

Pair = tuple[kafka44.KafkaBroker, BrokerProcess]
#: both brokers check retention every second (Kafka's default: every 5 minutes, 30 s after the start),
#: so records a flow leaves to retention between two tools are gone in every run, not in the rare run
#: where the check falls between them (the verifiable consumer once waited 600 s for records the
#: check had deleted)
PAIR_CONFIGS = {"log.retention.check.interval.ms": "1000", "log.initial.task.delay.ms": "0"}
USED: set[d.Allowed] = set()
RAN: set[str] = set()

_ID = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{22}(?![A-Za-z0-9_-])")
_WALL_CLOCK = re.compile(r"(?<!\d)1[7-9]\d{11}(?!\d)")


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with ToolSession(tmp_path_factory.mktemp("tools")) as s:
        yield s


class Flow:
    """One broker's run of a flow: each tool's result under a broker-independent label."""

    def __init__(self, tools: ToolSession, bootstrap: str, log_dir: str, workdir: Path) -> None:
        self.tools = tools
        self.bootstrap = bootstrap
        self.log_dir = log_dir
        self.workdir = workdir
        self.transcript: list[tuple[str, Any]] = []

    def run(self, tool: str, *args: str, stdin: str = "", sort: bool = False,
            volatile: tuple[str, ...] = (), label: str | None = None) -> dict[str, Any]:
        """``tool --bootstrap-server BOOTSTRAP ARGS``; recorded normalised (``sort``: its lines
        sorted, for tools that print partitions in hash order; ``volatile``: columns of a table
        whose values are times or sizes, kept as ``<v>``)."""
        r = self.tools.run(tool, "--bootstrap-server", self.bootstrap, *args, stdin=stdin)
        lines = self._lines(r["stdout"], volatile)
        if sort:
            lines.sort()
        err = [x for x in self._lines(r["stderr"], ()) if x.strip() and not x.startswith("\tat ")]
        name = label or f"tool {tool} {' '.join(args)}"
        self.transcript.append((name, {"exit": r["exit"], "stdout": lines, "stderr": err[:1]}))
        return r

    def _lines(self, text: str, volatile: tuple[str, ...]) -> list[str]:
        text = text.replace(self.bootstrap, "<bootstrap>").replace(self.log_dir, "<log.dir>")
        text = _WALL_CLOCK.sub("<now>", text)
        # kafka-features: Kafka's finalized features epoch is its metadata log's offset (no-op records
        # every 500 ms move it); kafkalog's counts the changes
        text = re.sub(r"\bEpoch: \d+", "Epoch: <epoch>", text)
        # kafka-log-dirs: a partition's bytes depend on how the producer batched its records (timing)
        text = re.sub(r'"size":[1-9]\d*', '"size":"<positive>"', text)
        lines = [x.rstrip() for x in text.splitlines()]
        if volatile:                                 # a table (tab-separated): a header row names the columns
            for i, line in enumerate(lines):
                cells = [c.strip() for c in line.split("\t")]
                if not set(volatile) & set(cells):
                    continue
                idx = {j for j, c in enumerate(cells) if c in volatile}
                for k in range(i + 1, len(lines)):
                    row = [c.strip() for c in lines[k].split("\t")]
                    if 1 < len(row) <= len(cells):         # trailing empty cells are stripped
                        lines[k] = "\t".join("<v>" if j in idx else c for j, c in enumerate(row))
                lines[i] = "\t".join(cells)
        return lines


def _tokens(transcript: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Cluster, topic and member ids (22 base64url characters) as tokens in order of appearance."""
    seen: dict[str, str] = {}

    def sub(m: re.Match[str]) -> str:
        return seen.setdefault(m.group(0), f"<id-{len(seen) + 1}>")

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _ID.sub(sub, v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v
    return [(label, walk(v)) for label, v in transcript]


def _both(pair: Pair, tools: ToolSession, tmp_path: Path, flow: Callable[[Flow], Any], name: str) -> tuple[Flow, Flow]:
    kafka, ours = pair
    flows = [Flow(tools, kafka.bootstrap, str(kafka.log_dir), tmp_path / "kafka"),
             Flow(tools, ours.bootstrap, ours.data_dir, tmp_path / "kafkalog")]
    for f in flows:
        f.workdir.mkdir()
        flow(f)
    RAN.add(name)
    a, b = (_tokens(f.transcript) for f in flows)
    diffs = d.differences(a, b)
    bad = list(d.uncovered(diffs, d.allowed_differences(), USED))
    report = "\n".join(f"{lab} | {path} | kafka={x!r} | kafkalog={y!r}" for lab, path, x, y in bad[:60])
    assert not bad, f"Kafka's tools saw Kafka 4.4 and kafkalog differ:\n{report}"
    return flows[0], flows[1]


def _ok(r: dict[str, Any]) -> dict[str, Any]:
    assert r["exit"] == 0, r
    return r


# --- topics and configs -----------------------------------------------------------------------

def _topics_and_configs(f: Flow) -> None:
    t = "tools-t"
    f.run("kafka-topics", "--create", "--topic", t, "--partitions", "2", "--replication-factor", "1",
          "--config", "retention.ms=86400000")
    f.run("kafka-topics", "--create", "--topic", t, "--partitions", "2")
    f.run("kafka-topics", "--create", "--topic", "tools-bad name", "--partitions", "1")
    f.run("kafka-topics", "--create", "--topic", t + "-x", "--partitions", "1", "--config", "no.such.config=1")
    f.run("kafka-topics", "--list", "--exclude-internal")
    _settle(f, t, 2)
    f.run("kafka-topics", "--describe", "--topic", t)
    f.run("kafka-topics", "--alter", "--topic", t, "--partitions", "3")
    f.run("kafka-topics", "--alter", "--topic", t, "--partitions", "2")
    f.run("kafka-topics", "--alter", "--topic", "tools-nosuch", "--partitions", "2")
    _settle(f, t, 3)
    f.run("kafka-topics", "--describe", "--topic", t)
    f.run("kafka-topics", "--describe", "--topic", t, "--under-replicated-partitions")
    f.run("kafka-topics", "--describe", "--topic", t, "--unavailable-partitions")
    f.run("kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", t)
    f.run("kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", t,
          "--add-config", "retention.ms=5000,cleanup.policy=[compact,delete],max.message.bytes=2000000")
    f.run("kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", t,
          "--delete-config", "max.message.bytes")
    for bad in ("retention.ms=soon", "no.such.key=1"):
        f.run("kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", t, "--add-config", bad)
    f.run("kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", "tools-nosuch",
          "--add-config", "retention.ms=1")
    _await(f, lambda: "retention.ms=5000" in f.tools.run(
        "kafka-configs", "--bootstrap-server", f.bootstrap, "--describe", "--entity-type", "topics",
        "--entity-name", t)["stdout"])
    f.run("kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", t)
    f.run("kafka-configs", "--describe", "--entity-type", "brokers", "--entity-name", "1")
    f.run("kafka-configs", "--describe", "--entity-type", "brokers", "--entity-default")
    f.run("kafka-configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
          "--add-config", "log.cleaner.threads=2")
    f.run("kafka-configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
          "--add-config", "log.retention.hours=1")
    f.run("kafka-topics", "--delete", "--topic", t)
    _await(f, lambda: t not in f.tools.run("kafka-topics", "--bootstrap-server", f.bootstrap, "--list")["stdout"])
    f.run("kafka-topics", "--list", "--exclude-internal")
    f.run("kafka-topics", "--delete", "--topic", t)


def _await(f: Flow, done: Callable[[], bool], timeout: float = 30) -> None:
    """Kafka's broker learns a change from its controller a moment after the answer: wait for it
    (kafkalog's is immediate)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the change was not seen"
        time.sleep(0.2)


def _settle(f: Flow, topic: str, partitions: int) -> None:
    _await(f, lambda: f.tools.run("kafka-topics", "--bootstrap-server", f.bootstrap, "--describe", "--topic",
                                  topic)["stdout"].count("Leader: 1") == partitions)


def test_topics_and_configs(kafka_pair: Pair, tools: ToolSession, tmp_path: Path) -> None:
    kafka, ours = _both(kafka_pair, tools, tmp_path, _topics_and_configs, "topics and configs")
    out = dict(ours.transcript)
    assert out["tool kafka-topics --create --topic tools-t --partitions 2 --replication-factor 1 "
               "--config retention.ms=86400000"]["stdout"] == ["Created topic tools-t."]
    # the line a row of docs/kafka-compatibility.md lets differ (Kafka's cluster-wide min.insync.replicas)
    first = out["tool kafka-topics --describe --topic tools-t"]["stdout"][0]
    assert re.fullmatch(r"Topic: tools-t\tTopicId: [\w-]{22}\tPartitionCount: 3\tReplicationFactor: 1\t"
                        r"Configs: retention.ms=86400000", first)


# --- groups, offsets, records ---------------------------------------------------------------

def _groups_and_offsets(f: Flow) -> None:
    t, g = "tools-g", "tools-group"
    _ok(f.run("kafka-topics", "--create", "--topic", t, "--partitions", "3"))
    _settle(f, t, 3)
    records = "".join(f"key-{i}\tvalue-{i}\n" for i in range(30))
    f.run("kafka-console-producer", "--topic", t, "--reader-property", "parse.key=true",
          "--reader-property", "key.separator=\t", "--producer-property", "linger.ms=0", stdin=records)
    f.run("kafka-console-consumer", "--topic", t, "--group", g, "--from-beginning", "--max-messages", "30",
          "--formatter-property", "print.key=true", "--formatter-property", "print.partition=true",
          "--formatter-property", "print.offset=true", sort=True)
    f.run("kafka-console-consumer", "--topic", t, "--partition", "1", "--offset", "2", "--max-messages", "3",
          "--isolation-level", "read_committed")
    f.run("kafka-consumer-groups", "--list")
    f.run("kafka-consumer-groups", "--list", "--state", "Empty")
    f.run("kafka-consumer-groups", "--describe", "--group", g, sort=True)
    f.run("kafka-consumer-groups", "--describe", "--group", g, "--state")
    f.run("kafka-consumer-groups", "--describe", "--group", g, "--members")
    f.run("kafka-consumer-groups", "--describe", "--group", "tools-nosuch")
    f.run("kafka-get-offsets", "--topic", t, sort=True)
    f.run("kafka-get-offsets", "--topic", t, "--time", "earliest", sort=True)
    # --time max-timestamp: which of two records of one millisecond is answered depends on the
    # clock; ListOffsets MAX_TIMESTAMP is compared in tests/server/test_differential.py
    f.run("kafka-get-offsets", "--topic", t, "--time", "0", sort=True)
    f.run("kafka-get-offsets", "--topic-partitions", f"{t}:0,{t}:2")
    f.run("kafka-get-offsets", "--topic", "tools-nosuch")
    for reset in (["--to-earliest"], ["--to-latest"], ["--shift-by", "-2"], ["--shift-by", "100"],
                  ["--to-offset", "1"], ["--to-datetime", "2020-01-01T00:00:00.000"],
                  ["--to-datetime", "2999-01-01T00:00:00.000"], ["--by-duration", "PT1H"]):
        f.run("kafka-consumer-groups", "--reset-offsets", "--group", g, "--topic", t, *reset, "--dry-run", sort=True)
        f.run("kafka-consumer-groups", "--reset-offsets", "--group", g, "--topic", t, *reset, "--execute", sort=True)
    f.run("kafka-consumer-groups", "--reset-offsets", "--group", g, "--topic", f"{t}:1", "--to-earliest",
          "--execute", sort=True)
    f.run("kafka-consumer-groups", "--describe", "--group", g, "--offsets", sort=True)
    offsets = f.workdir / "delete-records.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": 0, "offset": 3}, {"topic": t, "partition": 1, "offset": -1},
        {"topic": t, "partition": 2, "offset": 1000}]}))
    f.run("kafka-delete-records", "--offset-json-file", str(offsets), sort=True,
          label="tool kafka-delete-records --offset-json-file <file>")
    f.run("kafka-get-offsets", "--topic", t, "--time", "-2", sort=True)
    f.run("kafka-consumer-groups", "--reset-offsets", "--group", g, "--all-topics", "--to-earliest", "--execute",
          sort=True)
    f.run("kafka-consumer-groups", "--delete-offsets", "--group", g, "--topic", f"{t}:0")
    f.run("kafka-consumer-groups", "--delete-offsets", "--group", g, "--topic", "tools-nosuch")
    f.run("kafka-consumer-groups", "--describe", "--group", g, "--offsets", sort=True)
    f.run("kafka-consumer-groups", "--delete", "--group", g)
    f.run("kafka-consumer-groups", "--delete", "--group", g)
    f.run("kafka-consumer-groups", "--list")
    f.run("kafka-log-dirs", "--describe", "--topic-list", t)
    f.run("kafka-features", "describe")


def test_groups_offsets_records(kafka_pair: Pair, tools: ToolSession, tmp_path: Path) -> None:
    kafka, ours = _both(kafka_pair, tools, tmp_path, _groups_and_offsets, "groups and offsets")
    out = dict(ours.transcript)
    consumed = out["tool kafka-console-consumer --topic tools-g --group tools-group --from-beginning "
                   "--max-messages 30 --formatter-property print.key=true --formatter-property "
                   "print.partition=true --formatter-property print.offset=true"]["stdout"]
    assert len([x for x in consumed if "value-" in x]) == 30
    logdirs = out["tool kafka-log-dirs --describe --topic-list tools-g"]["stdout"]
    assert json.loads(logdirs[-1])["brokers"][0]["logDirs"][0]["logDir"] == "<log.dir>"
    assert out["tool kafka-get-offsets --topic tools-g --time -2"]["stdout"] == [
        "tools-g:0:3", "tools-g:1:" + next(x for x in out["tool kafka-get-offsets --topic tools-g"]["stdout"]
                                          if x.startswith("tools-g:1:")).split(":")[2], "tools-g:2:0"]


# --- streams groups (issue 40) ---------------------------------------------------------------

def _streams_groups(f: Flow) -> None:
    """A streams group (KIP-1071) of one member, raw heartbeats, listed, described (members,
    state, offsets), its offsets reset once it is empty, deleted."""
    from tests.server.test_streams_group_protocol import commit, find_coordinator, heartbeat, topology
    t, g, m = "tools-s", "tools-streams", "tools-streams-member"
    _ok(f.run("kafka-topics", "--create", "--topic", t, "--partitions", "2"))
    _settle(f, t, 2)
    f.run("kafka-console-producer", "--topic", t, "--reader-property", "parse.key=true",        # keyed: the
          "--reader-property", "key.separator=\t", "--producer-property", "linger.ms=0",    # same partitions
          stdin="".join(f"key-{i}\tvalue-{i}\n" for i in range(10)))
    port = int(f.bootstrap.rsplit(":", 1)[1])
    find_coordinator(port, g)
    epoch, deadline = 0, time.monotonic() + 30
    while True:          # (no tasks while the initial rebalance delay runs)
        r = heartbeat(port, g, m, epoch, topology(t, f"{g}-store-changelog") if epoch == 0 else None,
                      tasks=[], user_endpoint={"host": "localhost", "port": 9})
        epoch = r["member_epoch"]
        if r["active"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r["active"], r
    assert {e for *_rest, e in commit(port, g, m, epoch, t, [0, 1])} == {0}
    f.run("kafka-streams-groups", "--list")
    f.run("kafka-streams-groups", "--list", "--state")
    f.run("kafka-streams-groups", "--describe", "--group", g)
    f.run("kafka-streams-groups", "--describe", "--group", g, "--members")
    f.run("kafka-streams-groups", "--describe", "--group", g, "--members", "--verbose")
    f.run("kafka-streams-groups", "--describe", "--group", g, "--state")
    f.run("kafka-streams-groups", "--describe", "--group", g, "--state", "--verbose")
    f.run("kafka-streams-groups", "--describe", "--group", g, "--offsets")
    f.run("kafka-streams-groups", "--describe", "--group", "tools-nosuch")
    f.run("kafka-streams-groups", "--reset-offsets", "--group", g, "--input-topic", t, "--to-earliest", "--dry-run")
    heartbeat(port, g, m, -1)
    f.run("kafka-streams-groups", "--describe", "--group", g, "--state")
    f.run("kafka-streams-groups", "--reset-offsets", "--group", g, "--input-topic", t, "--to-earliest", "--dry-run")
    f.run("kafka-streams-groups", "--reset-offsets", "--group", g, "--input-topic", t, "--to-offset", "1",
          "--execute")
    f.run("kafka-streams-groups", "--describe", "--group", g, "--offsets")
    f.run("kafka-streams-groups", "--delete", "--group", g)
    f.run("kafka-streams-groups", "--delete", "--group", g)
    f.run("kafka-streams-groups", "--list")


def test_streams_groups(kafka_pair: Pair, tools: ToolSession, tmp_path: Path) -> None:
    _kafka, ours = _both(kafka_pair, tools, tmp_path, _streams_groups, "streams groups")
    listed = [v["stdout"] for label, v in ours.transcript if label == "tool kafka-streams-groups --list"]
    assert listed == [["tools-streams"], []]             # before and after --delete


# --- transactions -----------------------------------------------------------------------------

def _transactions(f: Flow) -> None:
    from confluent_kafka import Producer
    t, tid = "tools-tx", "tools-tid"
    _ok(f.run("kafka-topics", "--create", "--topic", t, "--partitions", "1"))
    _settle(f, t, 1)
    p = Producer({"bootstrap.servers": f.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 600000})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(3):
        p.produce(t, b"open-%d" % i, partition=0)
    assert p.flush(60) == 0
    times = ("CurrentTransactionStartTimeMs", "TransactionDurationMs", "LastTimestamp")
    f.run("kafka-transactions", "list", volatile=("ProducerId",))
    f.run("kafka-transactions", "describe", "--transactional-id", tid, volatile=("ProducerId", *times))
    f.run("kafka-transactions", "describe", "--transactional-id", "tools-nosuch")
    f.run("kafka-transactions", "describe-producers", "--topic", t, "--partition", "0",
          volatile=("ProducerId", *times))
    # describe-producers of an unknown topic: the admin retries until its timeout (60 s), with Kafka too
    f.run("kafka-transactions", "find-hanging", "--broker-id", "1")
    f.run("kafka-transactions", "find-hanging", "--topic", t, "--max-transaction-timeout", "0")
    f.run("kafka-console-consumer", "--topic", t, "--from-beginning", "--timeout-ms", "3000",
          "--isolation-level", "read_committed")
    f.run("kafka-transactions", "abort", "--topic", t, "--partition", "0", "--start-offset", "0")
    f.run("kafka-transactions", "describe-producers", "--topic", t, "--partition", "0",
          volatile=("ProducerId", *times))
    f.run("kafka-get-offsets", "--topic", t)
    f.run("kafka-console-consumer", "--topic", t, "--from-beginning", "--timeout-ms", "3000",
          "--isolation-level", "read_committed")
    f.run("kafka-console-consumer", "--topic", t, "--from-beginning", "--max-messages", "3",
          "--isolation-level", "read_uncommitted")
    f.run("kafka-transactions", "list", "--state", "Ongoing", volatile=("ProducerId",))
    f.run("kafka-transactions", "list", "--state", "CompleteCommit")
    # the producer's transaction ends where the tool left it (the coordinator still has it open)
    p.abort_transaction(60)
    del p                                            # librdkafka's threads end with it
    _await(f, lambda: "CompleteAbort" in f.tools.run("kafka-transactions", "--bootstrap-server", f.bootstrap,
                                                     "describe", "--transactional-id", tid)["stdout"])
    f.run("kafka-transactions", "describe", "--transactional-id", tid, volatile=("ProducerId", *times))


def test_transactions(kafka_pair: Pair, tools: ToolSession, tmp_path: Path) -> None:
    """kafka-transactions: list, describe, describe-producers, find-hanging, and abort of an open
    transaction's partition (WriteTxnMarkers): read_committed consumers then see nothing of it."""
    kafka, ours = _both(kafka_pair, tools, tmp_path, _transactions, "transactions")
    out = dict(ours.transcript)
    assert out["tool kafka-transactions list"]["stdout"][1].split()[0] == "tools-tid"
    producers = out["tool kafka-transactions describe-producers --topic tools-tx --partition 0"]["stdout"]
    assert producers[1].split()[-1] == "None"             # after the abort, no open transaction
    assert out["tool kafka-get-offsets --topic tools-tx"]["stdout"] == ["tools-tx:0:4"]


# --- the clients: console, verifiable, perf-test --------------------------------------------------

def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]


def _clients(f: Flow) -> None:
    t, n = "tools-v", 500
    # the records' CreateTime (2023) is past the default 7-day retention: kept by retention.ms=-1,
    # else the first retention check after the producer deletes them all (with Kafka as here) and
    # the consumer, reset to the earliest offset (the end), waits for 500 records that never come
    _ok(f.run("kafka-topics", "--create", "--topic", t, "--partitions", "2", "--config", "retention.ms=-1"))
    _settle(f, t, 2)
    r = _ok(f.tools.run("kafka-verifiable-producer", "--bootstrap-server", f.bootstrap, "--topic", t,
                        "--max-messages", str(n), "--acks", "-1", "--message-create-time", "1700000000000",
                        "--repeating-keys", "10", timeout=180))   # keyed: the partitions are murmur2's
    acked = {(e["partition"], e["offset"]) for e in _events(r["stdout"]) if e["name"] == "producer_send_success"}
    data = next(e for e in _events(r["stdout"]) if e["name"] == "tool_data")
    r = _ok(f.tools.run("kafka-verifiable-consumer", "--bootstrap-server", f.bootstrap, "--topic", t,
                        "--group-id", "tools-vg", "--max-messages", str(n), "--reset-policy", "earliest",
                        timeout=180))       # it waits for its 500 records forever: killed, it fails here
    consumed: set[tuple[int, int]] = set()
    committed: dict[int, int] = {}
    for e in _events(r["stdout"]):
        if e["name"] == "records_consumed":
            for p in e["partitions"]:
                consumed.update((p["partition"], o) for o in range(p["minOffset"], p["maxOffset"] + 1))
        elif e["name"] == "offsets_committed" and e.get("success"):
            for p in e["offsets"]:
                committed[p["partition"]] = max(committed.get(p["partition"], 0), p["offset"])
    f.transcript.append(("verifiable producer and consumer", {
        "acked": len(acked), "sent": data["sent"], "every acked record consumed": acked <= consumed,
        "consumed": len(consumed), "committed": committed}))
    f.run("kafka-consumer-groups", "--describe", "--group", "tools-vg", "--offsets", sort=True)
    r = _ok(f.tools.run("kafka-producer-perf-test", "--bootstrap-server", f.bootstrap, "--topic", "tools-p",
                        "--num-records", "5000", "--record-size", "100", "--throughput", "-1",
                        "--producer-props", "acks=all", "linger.ms=5"))
    last = r["stdout"].strip().splitlines()[-1]
    r2 = _ok(f.tools.run("kafka-consumer-perf-test", "--bootstrap-server", f.bootstrap, "--topic", "tools-p",
                         "--messages", "5000", "--timeout", "60000"))
    header, row = r2["stdout"].strip().splitlines()[-2:]
    columns = dict(zip([c.strip() for c in header.split(",")], [c.strip() for c in row.split(",")], strict=True))
    f.transcript.append(("perf-test", {"producer": re.sub(r"[\d.]+ (records/sec|ms|MB/sec)", r"<n> \1", last),
                                       "consumer header": header,
                                       "consumer messages": columns.get("data.consumed.in.nMsg")}))
    f.run("kafka-get-offsets", "--topic", "tools-p")
    f.run("kafka-console-consumer", "--topic", "tools-p", "--partition", "0", "--offset", "4998",
          "--max-messages", "2", "--formatter-property", "print.offset=true",
          "--formatter", "org.apache.kafka.tools.consumer.DefaultMessageFormatter",
          "--formatter-property", "print.value=false")


def test_console_verifiable_and_perf_clients(kafka_pair: Pair, tools: ToolSession, tmp_path: Path) -> None:
    """Kafka's system-test clients: every record the verifiable producer had acknowledged is consumed
    by the verifiable consumer and committed; the perf-test clients produce and consume 5,000."""
    kafka, ours = _both(kafka_pair, tools, tmp_path, _clients, "clients")
    out = dict(ours.transcript)
    v = out["verifiable producer and consumer"]
    assert v["acked"] == v["sent"] == 500 and v["every acked record consumed"], v
    assert sum(v["committed"].values()) == 500, v
    assert out["perf-test"]["consumer messages"] == "5000"


def test_every_listed_tool_difference_still_occurs() -> None:
    """Runs last (file order): a ``tool ...`` row of the table no run shows any more is stale."""
    rows = [a for a in d.allowed_differences() if a.case.startswith("tool ")]
    if {"topics and configs", "groups and offsets", "transactions", "clients"} - RAN:
        pytest.skip("only when every flow ran in this process")
    stale = [a for a in rows if a not in USED]
    assert not stale, "tool rows of docs/kafka-compatibility.md no run shows: " + "; ".join(
        f"{a.case} / {a.field}" for a in stale)
