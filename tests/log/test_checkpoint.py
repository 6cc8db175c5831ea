"""Checkpoint files (OffsetCheckpointFileWithFailureHandlerTest, LeaderEpochCheckpoint...,
PartitionMetadataFileTest, CleanShutdownFileHandlerTest)."""

import json
import os
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.errors import CorruptCheckpointError
from kafkalog.log.checkpoint import (
    CleanShutdownFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    _OffsetFormatter,
    parse_checkpoint,
    uuid_to_kafka_string,
)


def test_write_overwrite_reload(tmp_path):
    p = tmp_path / "recovery-point-offset-checkpoint"
    c = OffsetCheckpointFile(p)
    assert p.exists() and c.read() == {}
    c.write({("foo", 1): 5, ("bar", 2): 10})
    assert c.read() == {("foo", 1): 5, ("bar", 2): 10}
    c.write({("foo", 2): 15, ("bar", 3): 20})
    assert OffsetCheckpointFile(p).read() == {("foo", 2): 15, ("bar", 3): 20}
    assert p.read_text().splitlines()[:2] == ["0", "2"]
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_the_broker_writes_its_offsets_sorted_by_topic_then_partition(tmp_path):
    """``write_offset_checkpoint`` (the broker's three offset files) sorts a topic at a time, not
    in one call over every entry (one sort of 100,000 held the interpreter lock 215 ms, and the
    broker's event loop waited): the file is still in (topic, partition) order, partitions by
    number (10 after 9), whatever the order of the mapping."""
    import random

    from kafkalog.log.manager import read_offset_checkpoint, write_offset_checkpoint
    from kafkalog.log.naming import TopicPartition
    entries = [(TopicPartition(t, p), 1000 * p) for t in ("b", "a-b", "a", "c") for p in range(12)]
    random.Random(5).shuffle(entries)
    path = str(tmp_path / "replication-offset-checkpoint")
    write_offset_checkpoint(path, dict(entries))
    lines = open(path).read().splitlines()
    assert lines[:2] == ["0", str(len(entries))]
    expected = [f"{t} {p} {1000 * p}" for t in ("a", "a-b", "b", "c") for p in range(12)]
    assert lines[2:] == expected
    assert read_offset_checkpoint(path) == dict(entries)


@pytest.mark.parametrize("text,ok", [
    ("", {}), ("0\n", {}), ("0\n0\n", {}), ("0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),
    ("0\n1\nt\t0   5\n", {("t", 0): 5}),
])
def test_read_rules(tmp_path, text, ok):
    p = tmp_path / "cp"
    p.write_bytes(text.encode())
    assert OffsetCheckpointFile(p).read() == ok


@pytest.mark.parametrize("text,line", [
    ("1\n0\n", 1), ("x\n", 1), ("0\nz\n", 2), ("0\n1\nt 0\n", 3), ("0\n1\nt 0 5 6\n", 3),
    ("0\n1\nt a 5\n", 3), ("0\n2\nt 0 5\n", None), ("0\n1\n t 0 5\n", 3), ("0\n1\n\nt 0 5\n", 3),
    ("0\n1\nt 0 99999999999999999999\n", 3),
])
def test_malformed(tmp_path, text, line):
    p = tmp_path / "cp"
    p.write_bytes(text.encode())
    with pytest.raises(CorruptCheckpointError) as e:
        OffsetCheckpointFile(p).read()
    assert e.value.file == str(p)
    if line is not None:
        assert f"line {line}" in str(e.value)


def test_write_if_dir_exists(tmp_path):
    d = tmp_path / "gone"
    d.mkdir()
    c = OffsetCheckpointFile(d / "cp")
    os.unlink(d / "cp")
    d.rmdir()
    assert c.write_if_dir_exists({("t", 0): 1}) is False


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_only_raises_corrupt_checkpoint(data):
    try:
        out = parse_checkpoint(data, 0, _OffsetFormatter(), file="cp")
    except CorruptCheckpointError as e:
        assert e.file == "cp" and e.position is not None and 0 <= e.position <= len(data)
    else:
        assert isinstance(out, list)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b.c", "d_e-f"]), st.integers(0, 2**31 - 1),
                          st.integers(-2**63, 2**63 - 1)), max_size=10))
def test_roundtrip_and_mutations(tmp_path_factory, entries):
    p = tmp_path_factory.mktemp("cp") / "cp"
    c = OffsetCheckpointFile(p)
    m = {(t, part): o for t, part, o in entries}
    c.write(m)
    assert c.read() == m
    data = p.read_bytes()
    for cut in range(0, len(data), 3):
        p.write_bytes(data[:cut])
        try:
            c.read()
        except CorruptCheckpointError:
            pass


def test_leader_epoch_checkpoint(tmp_path):
    p = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochCheckpointFile(p)
    assert c.read() == []
    c.write([EpochEntry(0, 0), EpochEntry(3, 1520)])
    assert p.read_text() == "0\n2\n0 0\n3 1520\n"
    assert c.read() == [(0, 0), (3, 1520)]
    p.write_text("0\n1\n1 2 3\n")
    with pytest.raises(CorruptCheckpointError):
        c.read()


def test_partition_metadata(tmp_path):
    p = tmp_path / "partition.metadata"
    u = uuid.UUID("1a01045d-e3b7-4057-a57a-4515179cfece")
    f = PartitionMetadataFile(p)
    f.write(u)
    assert p.read_text() == f"version: 0\ntopic_id: {uuid_to_kafka_string(u)}"
    assert f.read().topic_id == u and f.read().version == 0
    for bad in ["", "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "version 0\n",
                "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "version: 0\ntopic_id: !!",
                "version: 0\n", "version: 0\ntopic: x"]:
        p.write_text(bad)
        with pytest.raises(CorruptCheckpointError):
            f.read()


def test_meta_properties(tmp_path):
    p = tmp_path / "meta.properties"
    MetaProperties(1, "clusterX", 3, "AAAAAAAAAAAAAAAAAAAAAQ").write(p)
    lines = p.read_text().splitlines()
    assert lines[0] == "#" and lines[1].startswith("#")
    m = MetaProperties.read(p)
    assert (m.version, m.cluster_id, m.node_id, m.directory_id) == (1, "clusterX", 3, "AAAAAAAAAAAAAAAAAAAAAQ")
    p.write_text("#c\nbroker.id=7\ncluster.id=abc\n")
    m = MetaProperties.read(p)
    assert (m.version, m.node_id, m.cluster_id) == (0, 7, "abc")
    p.write_text("version=1\nnode.id=1\n")
    with pytest.raises(CorruptCheckpointError):
        MetaProperties.read(p)
    p.write_text("version=2\n")
    with pytest.raises(CorruptCheckpointError):
        MetaProperties.read(p)
    p.write_text("cluster.id=abc\n")                 # version 0 without its broker.id
    with pytest.raises(CorruptCheckpointError, match="broker.id"):
        MetaProperties.read(p)


def test_clean_shutdown_file(tmp_path):
    f = CleanShutdownFile(tmp_path)
    assert not f.exists() and f.read() == -1
    f.write(42)
    assert f.exists() and json.loads((tmp_path / ".kafka_cleanshutdown").read_text()) == \
        {"version": 0, "brokerEpoch": 42}
    assert (tmp_path / ".kafka_cleanshutdown").read_text() == '{"version":0,"brokerEpoch":42}'
    assert f.read() == 42
    (tmp_path / ".kafka_cleanshutdown").write_text("")
    assert f.exists() and f.read() == -1
    assert f.delete() and not f.exists()


def test_offset_checkpoint_text_formats_again_only_the_topics_that_changed(tmp_path):
    """The log manager keeps its offset files' text between writes (issue 35): after a change only
    the changed topic's lines are formatted again, and the bytes are those of a whole write of the
    same entries (sorted by topic, then partition number); a discarded last partition drops its
    topic; a write clears ``dirty``."""
    from kafkalog.log.checkpoint import OffsetCheckpointText
    from kafkalog.log.manager import write_offset_checkpoint
    entries = {(t, p): p for t in ("b", "a", "c") for p in range(11, -1, -1)}
    text = OffsetCheckpointText()
    for (t, p), o in entries.items():
        text.set(t, p, o)
    f = OffsetCheckpointFile(tmp_path / "cp")

    def whole() -> bytes:
        write_offset_checkpoint(str(tmp_path / "whole"), entries)
        return (tmp_path / "whole").read_bytes()

    f.write_text(text)
    assert not text.dirty and text.topics_formatted == 3
    assert (tmp_path / "cp").read_bytes() == whole()
    text.set("a", 10, 10)                       # unchanged: nothing to write
    assert not text.dirty
    text.set("a", 10, 99)
    entries["a", 10] = 99
    text.set("d", 0, 5)                         # a new topic
    entries["d", 0] = 5
    for p in range(12):
        text.discard("c", p)                    # a topic gone
        del entries["c", p]
    assert text.dirty
    f.write_text(text)
    assert text.topics_formatted == 3 + 2       # "a" and "d"; "b" kept
    assert (tmp_path / "cp").read_bytes() == whole()
    assert OffsetCheckpointFile(tmp_path / "cp").read() == entries
    assert text.get("a", 10) == 99 and text.get("c", 0) is None


def test_offset_checkpoint_text_refuses_a_topic_name_with_whitespace(tmp_path):
    """A name a checkpoint line cannot hold: the error names the file, nothing is written, and the
    text stays dirty (the next write tries again)."""
    from kafkalog.errors import CorruptCheckpointError
    from kafkalog.log.checkpoint import OffsetCheckpointText
    text = OffsetCheckpointText()
    text.set("bad name", 0, 1)
    with pytest.raises(CorruptCheckpointError) as e:
        OffsetCheckpointFile(tmp_path / "cp", create=False).write_text(text)
    assert e.value.file == str(tmp_path / "cp")
    assert text.dirty and not (tmp_path / "cp").exists()


def test_an_offset_checkpoint_whose_write_failed_is_written_by_the_next_run(tmp_path):
    """A write of ``replication-offset-checkpoint`` that fails (here its ``.tmp`` is a directory)
    raises, and the next run of the task writes the file though no offset moved since. Before,
    the entries kept were already updated: the next run found nothing changed and wrote nothing,
    leaving the file stale until another offset moved."""
    from kafkalog.errors import KafkalogIOError
    from kafkalog.log.manager import LogManager, read_offset_checkpoint
    from kafkalog.log.naming import TopicPartition
    m = LogManager(tmp_path / "data", background=False)
    try:
        m.create_topic("t", 2)
        m.write_checkpoints()
        path = tmp_path / "data" / "replication-offset-checkpoint"
        assert read_offset_checkpoint(str(path)) == {TopicPartition("t", 0): 0, TopicPartition("t", 1): 0}
        m.get_log("t", 0).append_records([b"one"])
        blocker = tmp_path / "data" / "replication-offset-checkpoint.tmp"
        blocker.mkdir()
        with pytest.raises(KafkalogIOError):
            m.checkpoint_high_watermarks()
        blocker.rmdir()
        m.checkpoint_high_watermarks()
        assert read_offset_checkpoint(str(path)) == {TopicPartition("t", 0): 1, TopicPartition("t", 1): 0}
    finally:
        m.close()


def test_leader_epoch_fast_parse_agrees_with_the_line_by_line_parse():
    """A leader-epoch checkpoint as Kafka writes it is parsed in one match (a restart reads every
    partition's); on 20,000 seeded random files, half well formed (counts sometimes wrong, numbers
    at their types' bounds), half made of pieces (signs, tabs, carriage returns, long numbers), the
    one-step parse gives the entries, or leaves the file to the line-by-line parse, which then
    gives the same entries or the same error. Both paths are exercised."""
    import random

    from kafkalog.errors import KafkalogError
    from kafkalog.log import checkpoint as cp

    class LineByLine(cp._EpochFormatter):
        def parse_canonical(self, data, version):
            return None

    fast, slow = cp._EpochFormatter(), LineByLine()
    rnd = random.Random(20261201)
    pieces = [b"0", b"1", b"2", b"\n", b" ", b"-", b"+", b"9" * 9, b"9" * 10, b"9" * 18, b"9" * 19,
              b"\r", b"\t", b"00", b"3 5\n", b"0\n1\n", b"0\n2\n"]
    taken = 0

    def parsed(data, formatter):
        try:
            return "ok", cp.parse_checkpoint(data, 0, formatter, file="leader-epoch-checkpoint")
        except KafkalogError as e:
            return "error", str(e)

    for _ in range(20_000):
        if rnd.random() < 0.5:
            n = rnd.randrange(0, 4)
            lines = [f"{rnd.choice([0, 1, 7, 2**31 - 1, 123456789])} {rnd.choice([0, 5, 2**62, 10**17])}\n"
                     for _ in range(n)]
            data = f"0\n{n + rnd.choice([0, 0, 0, 1, -1])}\n{''.join(lines)}".encode()
        else:
            data = b"".join(rnd.choice(pieces) for _ in range(rnd.randrange(0, 10)))
        taken += fast.parse_canonical(data, 0) is not None
        assert parsed(data, fast) == parsed(data, slow), data
    assert 2_000 < taken < 18_000, taken
    assert fast.parse_canonical(b"0\n1\n3 5\n", 1) is None          # another version: line by line
