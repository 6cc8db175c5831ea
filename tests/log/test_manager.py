"""LogManager on real data directories: topics, reopen, clean/unclean shutdown, checkpoints, lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from kafkalog.errors import InvalidConfigError, InvalidTopicError, LogDirError
from kafkalog.log.checkpoint import PartitionMetadataFile, uuid_to_kafka_string
from kafkalog.log.manager import LogManager, read_offset_checkpoint
from kafkalog.record.builder import build_batch


def _append(log, n, size=100):
    for i in range(n):
        log.append(build_batch([(b"k", b"v" * size, 1_700_000_000_000 + i)]))


def test_create_reopen_and_clean_shutdown(tmp_path):
    d = tmp_path / "data"
    with LogManager(d, background=False) as m:
        assert not m.had_clean_shutdown
        m.create_topic("orders", 3, {"segment.bytes": 1000, "retention.ms": 1234})
        _append(m.get_log("orders", 1), 20)
        assert m.topics() == ["orders"] and m.partitions_of("orders") == [0, 1, 2]
    assert (d / ".kafka_cleanshutdown").read_bytes() == b'{"version":0,"brokerEpoch":-1}'
    assert (d / "meta.properties").read_text().startswith("#\n#")
    with LogManager(d, background=False) as m:
        assert m.had_clean_shutdown
        assert not (d / ".kafka_cleanshutdown").exists()
        cfg = m.topic_config("orders")
        assert cfg.segment_bytes == 1000 and cfg.retention_ms == 1234
        log = m.get_log("orders", 1)
        assert log.log_end_offset == 20 and len(log.segments) > 1
        assert all(not r.recovered_segments for r in m.load_result.recovery_reports.values())


def test_checkpoint_files_exact_text(tmp_path):
    d = tmp_path / "data"
    with LogManager(d, background=False) as m:
        m.create_topic("a", 2, {"segment.bytes": 500})
        _append(m.get_log("a", 0), 10)
        log = m.get_log("a", 0)
        log.maybe_increment_log_start_offset(3)
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n2\na 0 10\na 1 0\n"
    assert (d / "replication-offset-checkpoint").read_text() == "0\n2\na 0 10\na 1 0\n"
    # only partitions whose log start offset is above their first segment's base offset
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\na 0 3\n"
    with LogManager(d, background=False) as m:
        assert m.get_log("a", 0).log_start_offset == 3


def test_unclean_shutdown_recovers_and_truncates(tmp_path):
    d = tmp_path / "data"
    m = LogManager(d, background=False)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    _append(log, 5)
    m.checkpoint_recovery_offsets()
    path = log.active_segment.log_path
    m.abandon()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00\x40garbage")
    with LogManager(d, background=False) as m2:
        assert not m2.had_clean_shutdown
        rep = m2.load_result.recovery_reports["t-0"]
        assert rep.truncations and rep.truncations[0]["file"] == path
        assert m2.get_log("t", 0).log_end_offset == 5


def test_lock_held_against_second_manager_and_process(tmp_path):
    d = tmp_path / "data"
    with LogManager(d, background=False):
        with pytest.raises(LogDirError, match="Failed to acquire lock"):
            LogManager(d, background=False)
        code = ("import sys\nfrom kafkalog.log.manager import LogManager\n"
                "from kafkalog.errors import LogDirError\n"
                "try:\n    LogManager(sys.argv[1], background=False)\nexcept LogDirError:\n"
                "    sys.exit(3)\nsys.exit(0)\n")
        r = subprocess.run([sys.executable, "-c", code, str(d)], timeout=120)
        assert r.returncode == 3
    # released after close
    LogManager(d, background=False).close()


def test_the_lock_is_kafkas_record_lock_alone(tmp_path):
    """``.lock`` carries one POSIX record lock, the kind Kafka's FileChannel.tryLock takes (so each
    keeps the other out: tests/kafka44/test_oracle_broker.py), and no flock: a record lock is gone
    when its process's descriptors close, before a killed owner can be reaped, while an flock's
    release was seen deferred past waitpid (a restart straight after a SIGKILL refused, about one
    early kill in 100)."""
    d = tmp_path / "data"
    with LogManager(d, background=False):
        inode = os.stat(d / ".lock").st_ino
        mine = [ln.split() for ln in open("/proc/locks").read().splitlines()
                if ln.split()[5].endswith(f":{inode}")]
        assert [(f[1], f[3], f[4]) for f in mine] == [("POSIX", "WRITE", str(os.getpid()))], mine
    assert not [ln for ln in open("/proc/locks").read().splitlines() if ln.split()[5].endswith(f":{inode}")]


def test_delete_topic_renames_then_removes(tmp_path):
    d = tmp_path / "data"
    with LogManager(d, {"log.segment.delete.delay.ms": 3_600_000}, background=True) as m:
        m.create_topic("gone", 2)
        m.create_topic("kept", 1)
        _append(m.get_log("gone", 0), 3)
        assert m.delete_topic("gone") == 2
        names = os.listdir(d)
        assert not any(n in ("gone-0", "gone-1") for n in names)
        assert len([n for n in names if n.startswith("gone-") and n.endswith("-delete")]) == 2
        assert read_offset_checkpoint(str(d / "recovery-point-offset-checkpoint")) == {("kept", 0): 0}
        assert m.topics() == ["kept"]
        with pytest.raises(InvalidTopicError):
            m.get_log("gone", 0)
    # pending removal runs on close
    assert not [n for n in os.listdir(d) if n.endswith("-delete")]


def test_leftover_delete_dirs_are_removed_and_strays_skipped(tmp_path):
    d = tmp_path / "data"
    LogManager(d, background=False).close()          # a data directory (meta.properties) ...
    (d / "x-0.0123456789abcdef0123456789abcdef-delete").mkdir()     # ... with a broker's leftovers
    (d / "x-0.0123456789abcdef0123456789abcdef-future").mkdir()
    (d / "not a partition").mkdir()
    with LogManager(d, background=False) as m:
        assert not (d / "x-0.0123456789abcdef0123456789abcdef-delete").exists()
        assert (d / "x-0.0123456789abcdef0123456789abcdef-future").exists()
        assert m.topics() == []
        assert len(m.load_result.skipped_dirs) == 2


def test_alter_config_and_invalid_inputs(tmp_path):
    with LogManager(tmp_path / "data", background=False) as m:
        m.create_topic("t", 1)
        with pytest.raises(InvalidTopicError):
            m.create_topic("t", 1)
        with pytest.raises(InvalidTopicError):
            m.create_topic("bad/name", 1)
        with pytest.raises(InvalidConfigError):
            m.create_topic("u", 1, {"segment.bytes": "abc"})
        with pytest.raises(InvalidConfigError):
            m.create_topic("v", 0)
        cfg = m.alter_topic_config("t", {"retention.ms": 5})
        assert cfg.retention_ms == 5 and m.get_log("t", 0).config.retention_ms == 5
    with LogManager(tmp_path / "data", background=False) as m:
        assert m.topic_config("t").retention_ms == 5


def test_corrupt_checkpoint_treated_as_empty(tmp_path):
    d = tmp_path / "data"
    with LogManager(d, background=False) as m:
        m.create_topic("t", 1)
        _append(m.get_log("t", 0), 3)
    (d / "recovery-point-offset-checkpoint").write_text("0\n5\nt 0 x\n")
    (d / ".kafka_cleanshutdown").unlink()
    with LogManager(d, background=False) as m:
        assert m.load_result.checkpoint_errors
        assert m.get_log("t", 0).log_end_offset == 3


def test_background_retention_and_checkpoint_tasks(tmp_path):
    import time
    d = tmp_path / "data"
    cfg = {"log.initial.task.delay.ms": 0, "log.retention.check.interval.ms": 20,
           "log.flush.offset.checkpoint.interval.ms": 20, "log.segment.delete.delay.ms": 0}
    with LogManager(d, cfg) as m:
        m.create_topic("t", 1, {"segment.bytes": 500, "retention.ms": 1000})
        log = m.get_log("t", 0)
        for i in range(10):
            log.append(build_batch([(None, b"z" * 100, 1000 + i)]))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and log.log_start_offset < 10:
            time.sleep(0.05)
        assert log.log_start_offset == 10
        while time.monotonic() < deadline and not (d / "recovery-point-offset-checkpoint").exists():
            time.sleep(0.05)
        assert (d / "recovery-point-offset-checkpoint").exists()


def test_create_topic_writes_partition_metadata_in_every_partition(tmp_path):
    """Kafka writes ``partition.metadata`` (the topic ID) into each partition directory when it
    creates the partition; new partitions get the topic's ID; the ID survives a reopen."""
    import re

    d = tmp_path / "data"
    with LogManager(d, background=False) as m:
        m.create_topic("orders", 3)
        m.create_topic("other", 1)
        texts = [(d / f"orders-{p}" / "partition.metadata").read_text() for p in range(3)]
        assert len(set(texts)) == 1
        assert re.fullmatch(r"version: 0\ntopic_id: [A-Za-z0-9_-]{22}", texts[0])
        tid = m.topic_id("orders")
        assert tid.int != 0 and texts[0].endswith(uuid_to_kafka_string(tid))
        assert m.topic_id("other") != tid
        m.add_partitions("orders", 5)
        assert (d / "orders-4" / "partition.metadata").read_text() == texts[0]
        with pytest.raises(InvalidTopicError):
            m.topic_id("missing")
    with LogManager(d, background=False) as m:
        assert m.topic_id("orders") == tid


def test_recover_in_the_process_holding_the_directory_is_refused_and_keeps_the_lock(tmp_path):
    """A record lock does not exclude its own process, and closing a descriptor of ``.lock`` would
    drop it: ``kafkalog recover`` run inside the process whose LogManager holds the directory is
    refused by the registry, and the lock is still held against another process afterwards."""
    from click.testing import CliRunner

    from kafkalog.cli.recover import recover
    d = tmp_path / "data"
    with LogManager(d, background=False) as m:
        m.create_topic("t", 1)
        for args in (["--dry-run", str(d)], [str(d)], [str(d / "t-0")]):
            r = CliRunner().invoke(recover, args)
            assert r.exit_code == 2 and "in use (its .lock is held)" in r.output, (args, r.output)
        code = ("import sys\nfrom kafkalog.log.manager import LogManager\n"
                "from kafkalog.errors import LogDirError\n"
                "try:\n    LogManager(sys.argv[1], background=False)\nexcept LogDirError:\n"
                "    sys.exit(3)\nsys.exit(0)\n")
        assert subprocess.run([sys.executable, "-c", code, str(d)], timeout=120).returncode == 3


def test_committed_topics_are_completed_at_load(tmp_path):
    """``commit_topics`` (CreateTopics): the topics exist once committed; their partitions are made
    afterwards. Abandoned (a crash) with partitions not made, the next open makes them with the
    committed topic id and removes the records; a deleted committed topic stays deleted."""
    d = tmp_path / "data"
    m = LogManager(d, background=False)
    m.commit_topics([("gone", 70, None)])
    m.delete_topic("gone")                                  # waits for it to be made
    # (the creator finishes the chunk it holds when abandoned: a chunk or two of 64 made)
    ids = [None] + m.commit_topics([("big", 1000, {"retention.ms": 1234}), ("big", 1, None)])
    assert isinstance(ids[2], Exception)                    # the name is taken
    assert m.has_topic("big") and m.partitions_of("big") == list(range(1000))
    m.abandon()                                             # before "big" is made whole
    assert len([n for n in os.listdir(d) if n.startswith("big-")]) < 1000
    shutil.rmtree(d / "big-999", ignore_errors=True)
    (d / "big-999").mkdir()                                  # a half-made partition
    with LogManager(d, background=False) as again:
        assert again.load_result.completed_topics == ["big"]
        assert again.topics() == ["big"] and again.partitions_of("big") == list(range(1000))
        assert again.topic_id("big") == ids[1]
        assert again.topic_config("big").retention_ms == 1234
        _append(again.get_log("big", 999), 1)
    assert not [n for n in os.listdir(d) if n.startswith("kafkalog-creating-")]
    (d / "kafkalog-creating-bad.json").write_text('{"version": 0, "topic": "bad", "partitions": "x"}')
    with pytest.raises(InvalidConfigError, match="kafkalog-creating-bad.json"):
        LogManager(d, background=False)


def test_files_a_crash_left_empty_in_a_committed_topic_are_written_again(tmp_path):
    """A chunk's ``partition.metadata`` and ``leader-epoch-checkpoint`` are written in place and
    fsynced with the chunk: a power cut before the fsyncs may leave them empty (ext4 without a
    journal: zeros too). The topic's record is still there, so the next load names the topic's
    ID again in each such file; an empty checkpoint is no epoch (a leader writes its own)."""
    d = tmp_path / "data"
    m = LogManager(d, background=False)
    (tid,) = m.commit_topics([("t", 2000, None)], leader_epoch=0)
    deadline = time.monotonic() + 60
    while m.partition_pending("t", 2) and time.monotonic() < deadline:
        time.sleep(0.001)
    m.abandon()
    made = sorted(int(n[2:]) for n in os.listdir(d) if n.startswith("t-"))
    assert 0 < len(made) < 2000 and (d / "kafkalog-creating-t.json").exists()
    assert (d / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    (d / "t-0" / "partition.metadata").write_bytes(b"")
    (d / "t-0" / "leader-epoch-checkpoint").write_bytes(b"")
    (d / "t-1" / "partition.metadata").write_bytes(bytes(43))
    with LogManager(d, background=False) as again:
        assert again.load_result.completed_topics == ["t"]
        assert again.topic_id("t") == tid and again.partitions_of("t") == list(range(2000))
        for p in (0, 1, 2):
            assert PartitionMetadataFile(d / f"t-{p}" / "partition.metadata").read().topic_id == tid
        assert again.get_log("t", 0).leader_epoch_cache.latest_epoch() is None
        _append(again.get_log("t", 0), 1)
    assert not (d / "kafkalog-creating-t.json").exists()


def test_a_full_disk_while_a_committed_topic_is_made_names_the_file_and_loses_nothing(tmp_path):
    """A chunk's directories and files made together (the log kernel's ``make_dirs``) on a
    file system that fills up: the partition whose file could not be written goes the old way,
    whose error names the file; the creation stops there (``wait_created`` raises it, nothing
    half-made is seen) and, room given back, the next load completes the topic with its ID."""
    from kafkalog.errors import KafkalogIOError
    from tests.tmpfs import fill_tmpfs, mounted_tmpfs
    with mounted_tmpfs(tmp_path / "mnt", "4m") as mnt:
        d = mnt / "data"
        m = LogManager(d, background=False)
        filler = fill_tmpfs(mnt)
        os.truncate(filler, os.path.getsize(filler) - 4096)          # a page: the topic's record
        (tid,) = m.commit_topics([("t", 300, None)], leader_epoch=0)
        assert not isinstance(tid, Exception), tid
        with pytest.raises(KafkalogIOError) as err:
            m.wait_created("t")
        assert str(d / "t-0" / "partition.metadata") in str(err.value), err.value
        assert "No space left" in str(err.value), err.value
        assert m.partitions_of("t") == list(range(300))              # committed: it exists
        assert not [p for p in range(300) if not m.partition_pending("t", p)]   # none seen half-made
        assert m._creator.to_make == 0      # (nothing more to come: no chunk's syncs count on it)
        m.abandon()
        os.unlink(filler)
        with LogManager(d, background=False) as again:
            assert again.load_result.completed_topics == ["t"]
            assert again.topic_id("t") == tid and again.partitions_of("t") == list(range(300))
            for p in range(300):
                assert PartitionMetadataFile(d / f"t-{p}" / "partition.metadata").read().topic_id == tid
            _append(again.get_log("t", 299), 1)


def test_clean_shutdown_finishes_committed_topics(tmp_path):
    d = tmp_path / "data"
    with LogManager(d, background=False) as m:
        (tid,) = m.commit_topics([("t", 300, None)])
    assert not [n for n in os.listdir(d) if n.startswith("kafkalog-creating-")]
    with LogManager(d, background=False) as m:
        assert m.partitions_of("t") == list(range(300)) and m.topic_id("t") == tid
        assert m.load_result.completed_topics == []


def test_the_last_retention_pass_keeps_only_what_did_something(tmp_path):
    """``cleanup_logs`` answers every partition it visited; ``last_retention`` keeps the results
    that deleted a segment (at 100,000 partitions every visited partition's result stayed alive,
    ~170,000 objects the broker's full collections walked)."""
    import time
    with LogManager(tmp_path / "data", {"log.segment.delete.delay.ms": 0}, background=False) as m:
        m.create_topic("old", 1, {"segment.bytes": 500, "retention.ms": 1000})
        m.create_topic("kept", 2, {"segment.bytes": 500})
        now = int(time.time() * 1000)
        for i in range(10):
            m.get_log("old", 0).append(build_batch([(None, b"z" * 100, 1000 + i)]))      # 1970
            m.get_log("kept", 0).append(build_batch([(None, b"z" * 100, now + i)]))
        results = m.cleanup_logs()
        assert set(results) == {"old-0", "kept-0"}
        assert results["old-0"].num_deleted > 0 and results["kept-0"].num_deleted == 0
        assert set(m.last_retention) == {"old-0"}
