"""Kafka writes, kafkalog reads (issue 25): the directory a Kafka 4.4 broker leaves after the workload
of :mod:`tests.kafka44.workload` (every kind of file), once after a clean shutdown and once after
SIGKILL, read by every reader kafkalog has and compared with Kafka's own answers: ``kafkalog verify``
(clean; warnings only where Kafka's recovery acts), ``kafkalog dump`` against DumpLogSegments with the
same flags for every ``.log``/``.index``/``.timeindex``/``.txnindex``/``.snapshot`` and both
decoders, and ``kafkalog.open(read_only=True)``, ``kafkalog serve`` (over a copy) and the Spark
source against the records Kafka 4.4 served from the same directory, read_committed too.

The workload runs once per module (one JVM, about a minute); the comparisons share it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

import kafkalog
from tests import kafka44
from tests.kafka44 import workload
from tests.server.broker_process import BrokerProcess

pytestmark = pytest.mark.kafka

DUMP = "org.apache.kafka.tools.DumpLogSegments"
SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")

#: flag set -> (which files: (partition-directory prefix, suffixes), flags)
FLAG_SETS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "plain": ("", SUFFIXES, ()),
    "deep-data": ("", (".log",), ("--deep-iteration", "--print-data-log")),
    "offsets-decoder": ("__consumer_offsets-", (".log",), ("--offsets-decoder",)),
    "transaction-log-decoder": ("__transaction_state-", (".log",), ("--transaction-log-decoder",)),
    "verify-index-only": ("", (".index", ".timeindex"), ("--verify-index-only",)),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> workload.Workload:
    kafka44.require()
    return workload.build(tmp_path_factory.mktemp("kafka44-written"))


def _data_dir(w: workload.Workload, which: str) -> Path:
    return w.clean if which == "clean" else w.killed


def _served(w: workload.Workload, which: str) -> workload.Served:
    return w.served_clean if which == "clean" else w.served_killed


def _kafka_throws_on(f: Path) -> bool:
    """DumpLogSegments 4.4 throws NoSuchElementException on a preallocated (all-zero) .index of an
    empty segment (it reads slot 0 as an entry and takes the first batch of an empty log); listed in
    docs/kafka-compatibility.md, checked by test_dump_of_an_empty_segments_preallocated_index."""
    log = f.with_suffix(".log")
    return f.suffix == ".index" and log.exists() and log.stat().st_size == 0 and not any(f.read_bytes())


def _files(data: Path, prefix: str, suffixes: tuple[str, ...]) -> list[str]:
    out = []
    for part in sorted(p for p in data.iterdir() if p.is_dir() and p.name.startswith(prefix)):
        out += [str(f) for f in sorted(part.iterdir())
                if f.suffix in suffixes and not _kafka_throws_on(f)]
    return out


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def _per_file(stdout: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current = ""
    for line in stdout.splitlines(keepends=True):
        if line.startswith("Dumping "):
            current = line[len("Dumping "):].strip()
        out[current] = out.get(current, "") + line
    return out


@pytest.mark.parametrize("which", ["clean", "killed"])
def test_verify_kafkas_directory(written: workload.Workload, which: str) -> None:
    res = _cli("verify", "--no-progress", str(_data_dir(written, which)))
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    findings = [x for x in lines if x["type"] == "finding"]
    assert res.returncode == 0, [f for f in findings if f["level"] == "error"][:5]
    summary = lines[-1]
    assert summary["segments"] > 50 and summary["errors"] == 0
    # warnings only for the tails Kafka's recovery removes: the active segments after the kill, and
    # KRaft's metadata log, which Kafka recovers at every start
    assert {f["check"] for f in findings} <= {"zero-filled-tail", "partial-tail", "index-past-tail"}
    for f in findings:
        assert f["level"] == "warning"
        part = Path(f["file"]).parent
        assert which == "killed" or part.name == "__cluster_metadata-0", f
        assert Path(f["file"]).stem == sorted(part.glob("*.log"))[-1].stem, f


@pytest.mark.parametrize("flag_set", list(FLAG_SETS))
@pytest.mark.parametrize("which", ["clean", "killed"])
def test_dump_prints_what_dump_log_segments_prints(written: workload.Workload, which: str, flag_set: str) -> None:
    prefix, suffixes, flags = FLAG_SETS[flag_set]
    files = _files(_data_dir(written, which), prefix, suffixes)
    assert len(files) >= 2
    theirs = kafka44.run_tool(DUMP, "--files", ",".join(files), *flags)
    ours = _cli("dump", "--files", ",".join(files), *flags)
    assert ours.returncode == 0, ours.stderr[-2000:]
    t, o = _per_file(theirs.stdout), _per_file(ours.stdout)
    assert list(o) == list(t)
    for f in t:
        assert o[f] == t[f], f
    # Kafka prints its reports (mismatches, non-consecutive offsets) after every file, in hash
    # order; kafkalog after each file: the same lines
    assert sorted(ours.stderr.splitlines()) == sorted(theirs.stderr.splitlines())


def test_dump_of_an_empty_segments_preallocated_index(written: workload.Workload) -> None:
    """The one file DumpLogSegments 4.4 cannot dump (an intended difference): the preallocated
    .index of an empty active segment, which the kill leaves."""
    files = [f for f in _files(written.killed, "", (".log",)) if Path(f).stat().st_size == 0]
    index = next(Path(f).with_suffix(".index") for f in files
                 if Path(f).with_suffix(".index").stat().st_size and _kafka_throws_on(Path(f).with_suffix(".index")))
    theirs = kafka44.run_tool(DUMP, "--files", str(index), check=False)
    assert theirs.returncode != 0 and "NoSuchElementException" in theirs.stderr
    ours = _cli("dump", str(index))
    assert ours.returncode == 0 and ours.stdout == theirs.stdout == f"Dumping {index}\n"


def _rows_of_kafkalog(data: Path, isolation: str) -> dict[tuple[str, int], list[workload.Row]]:
    out: dict[tuple[str, int], list[workload.Row]] = {}
    with kafkalog.open(data, read_only=True) as dl:
        for topic in workload.TOPICS:
            for p in range(dl.partitions(topic)):
                out[(topic, p)] = [(r.offset, r.key, r.value, [tuple(h) for h in r.headers], r.timestamp_type,
                                    r.timestamp) for r in dl.consume(topic, p, isolation=isolation)]
    return out


def _assert_same(ours: dict, theirs: dict) -> None:
    assert sorted(ours) == sorted(theirs)
    for tp in theirs:
        assert len(ours[tp]) == len(theirs[tp]), tp
        for a, b in zip(ours[tp], theirs[tp]):
            assert a == b, tp


@pytest.mark.parametrize("which", ["clean", "killed"])
def test_read_only_open_returns_what_kafka_served(written: workload.Workload, which: str) -> None:
    served = _served(written, which)
    _assert_same(_rows_of_kafkalog(_data_dir(written, which), "read_uncommitted"), served.uncommitted)
    _assert_same(_rows_of_kafkalog(_data_dir(written, which), "read_committed"), served.committed)


@pytest.mark.parametrize("which", ["clean", "killed"])
def test_recovery_of_kafkas_directory_truncates_nothing(written: workload.Workload, which: str,
                                                        tmp_path: Path) -> None:
    """Every segment recovered (no recovery point: as Kafka after losing its checkpoint), with the
    topic configs of Kafka's metadata log: the compacted topic's offset gaps are not corruption (read
    as a deleting topic's, kafkalog cut it at its first gap and dropped the segments after)."""
    data = tmp_path / "data"
    shutil.copytree(_data_dir(written, which), data)
    (data / "recovery-point-offset-checkpoint").unlink()
    (data / ".kafka_cleanshutdown").unlink(missing_ok=True)
    res = _cli("recover", str(data))
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert res.returncode == 0, res.stderr
    assert [x for x in lines if x["type"] in ("truncation", "corruption", "deletedSegment")] == []
    assert lines[-1]["truncatedBytes"] == 0 and lines[-1]["deletedSegments"] == 0
    _assert_same(_rows_of_kafkalog(data, "read_uncommitted"), _served(written, which).uncommitted)


@pytest.fixture(scope="module", params=["clean", "killed"])
def serving(request: pytest.FixtureRequest, written: workload.Workload,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, BrokerProcess]]:
    which = request.param
    copy = tmp_path_factory.mktemp(f"served-{which}") / "data"
    shutil.copytree(_data_dir(written, which), copy)
    # Kafka's topic configs hold (compaction, retention): kafkalog's cleaner and retention would act as
    # Kafka's would at its next start; the comparison is with the records Kafka served before
    broker = BrokerProcess(str(copy), ["log.cleaner.enable=false",
                                       "log.retention.check.interval.ms=3600000"]).start()
    try:
        yield which, broker
    finally:
        broker.stop()


def test_serve_returns_what_kafka_served(written: workload.Workload,
                                         serving: tuple[str, BrokerProcess]) -> None:
    which, broker = serving
    served = _served(written, which)
    for isolation, theirs in (("read_uncommitted", served.uncommitted), ("read_committed", served.committed)):
        _assert_same(workload.read_all(broker.bootstrap, workload.TOPICS, isolation), theirs)
    # the groups resume where Kafka had them
    assert workload.group_offsets(broker.bootstrap, workload.GROUPS) == served.groups
    if which == "killed":
        # the transaction Kafka left open is fenced by a new producer with its id: kafkalog's
        # coordinator aborts it with markers no older than Kafka's (a coordinator epoch of 0 made
        # kafkalog's own producer state refuse them: serve failed)
        p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-b"})
        p.init_transactions(60)
        committed = workload.read_all(broker.bootstrap, ["txn"], "read_committed")
        uncommitted = workload.read_all(broker.bootstrap, ["txn"], "read_uncommitted")
        left_open = {b"value-%06d-" % i for i in range(1036, 1040)}   # workload._phase_b
        open_txn = [r for r in uncommitted[("txn", 0)] if r[2] is not None and r[2][:13] in left_open]
        assert len(open_txn) == 4, uncommitted[("txn", 0)][-8:]
        assert not {r[0] for r in open_txn} & {r[0] for r in committed[("txn", 0)]}
        assert committed[("txn", 0)][: len(served.committed[("txn", 0)])] == served.committed[("txn", 0)]


@pytest.mark.spark
@pytest.mark.parametrize("which", ["clean", "killed"])
def test_spark_source_returns_what_kafka_served(written: workload.Workload, spark, which: str) -> None:
    served = _served(written, which)
    for isolation, theirs in (("read_uncommitted", served.uncommitted), ("read_committed", served.committed)):
        df = (spark.read.format("kafkalog").option("subscribe", ",".join(workload.TOPICS))
              .option("includeHeaders", "true").option("kafka.isolation.level", isolation)
              .load(str(_data_dir(written, which))))
        ours: dict[tuple[str, int], list[workload.Row]] = {tp: [] for tp in theirs}
        for r in df.orderBy("topic", "partition", "offset").collect():
            ts = r.timestamp
            ms = None if ts is None else round(ts.timestamp() * 1000)
            headers = [(h.key, None if h.value is None else bytes(h.value)) for h in (r.headers or [])]
            ours[(r.topic, r.partition)].append(
                (r.offset, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
                 headers, "LogAppendTime" if r.timestampType == 1 else "CreateTime", ms))
        _assert_same(ours, theirs)
