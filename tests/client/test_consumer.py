"""The embedded consumer from the outside: kafka-python's calls on real data directories."""

from __future__ import annotations

import os
import re

import pytest

import kafkalog
from kafkalog.client import TopicPartition
from kafkalog.client.consumer import (
    ConsumerOffsetOutOfRangeError,
    IllegalStateError,
    NoOffsetForPartitionError,
)
from kafkalog.errors import (
    CorruptRecordError,
    InvalidConfigError,
    OffsetOutOfRangeError,
)
from tests.test_client_readonly import _txn_log

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def _values(got, tp):
    return [r.value for r in got.get(tp, [])]


def _drain(c, max_polls=50):
    out = []
    for _ in range(max_polls):
        got = c.poll(timeout_ms=0)
        if not got:
            break
        for recs in got.values():
            out.extend(recs)
    return out


@pytest.fixture
def dl(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as d:
        yield d


def test_poll_seek_position_and_log_offsets(dl):
    dl.create_topic("t", 2)
    dl.produce_many("t", [b"a%d" % i for i in range(30)], partition=0)
    dl.produce_many("t", [(b"k", b"v", [("h", b"x")], 5000 + i) for i in range(5)], partition=1)
    c = dl.consumer(auto_offset_reset="earliest")
    c.assign([TP0, TP1])
    assert c.assignment() == {TP0, TP1}
    assert c.position(TP0) == 0
    got = c.poll(timeout_ms=0, max_records=7)
    assert sum(len(v) for v in got.values()) == 7
    rest = _drain(c)
    allrecs = [r for v in got.values() for r in v] + rest
    assert sorted(r.value for r in allrecs if r.partition == 0) == sorted(b"a%d" % i for i in range(30))
    assert [r.offset for r in allrecs if r.partition == 0] == list(range(30))
    r1 = [r for r in allrecs if r.partition == 1]
    assert [(r.key, r.value, r.headers, r.timestamp, r.timestamp_type) for r in r1] == \
        [(b"k", b"v", [("h", b"x")], 5000 + i, 0) for i in range(5)]
    assert r1[0].serialized_key_size == 1 and r1[0].serialized_value_size == 1
    assert r1[0].serialized_header_size == 2
    assert c.position(TP0) == 30 and c.position(TP1) == 5
    assert c.poll(timeout_ms=0) == {}
    c.seek(TP0, 25)
    assert [r.offset for r in c.poll(timeout_ms=0)[TP0]] == [25, 26, 27, 28, 29]
    c.seek_to_beginning(TP1)
    assert c.position(TP1) == 0
    c.seek_to_end()
    assert (c.position(TP0), c.position(TP1)) == (30, 5)
    assert c.beginning_offsets([TP0, TP1]) == {TP0: 0, TP1: 0}
    assert c.end_offsets([TP0, TP1]) == {TP0: 30, TP1: 5}
    times = c.offsets_for_times({TP1: 5002, TP0: 1 << 50})
    assert times[TP0] is None
    assert (times[TP1].offset, times[TP1].timestamp) == (2, 5002)
    with pytest.raises(IllegalStateError):
        c.seek(TopicPartition("t", 7), 0)
    with pytest.raises(IllegalStateError):
        c.subscribe(["t"])
    c.close()
    with pytest.raises(IllegalStateError):
        c.poll()


def test_max_records_keeps_the_rest_for_the_next_poll(dl):
    dl.create_topic("t", 1)
    dl.produce_many("t", [b"%d" % i for i in range(100)])
    c = dl.consumer("t", auto_offset_reset="earliest", max_poll_records=9)
    seen = []
    for _ in range(20):
        got = c.poll(timeout_ms=0)
        assert sum(len(v) for v in got.values()) <= 9
        seen += [r.offset for r in got.get(TP0, [])]
    assert seen == list(range(100))


def test_subscribe_by_pattern_picks_up_new_topics(dl):
    dl.create_topic("orders-eu", 1)
    dl.create_topic("payments", 1)
    dl.produce("orders-eu", b"eu", partition=0)
    dl.produce("payments", b"pay", partition=0)
    c = dl.consumer(auto_offset_reset="earliest")
    c.subscribe(pattern=r"orders-.*")
    assert [r.value for r in _drain(c)] == [b"eu"]
    assert c.assignment() == {TopicPartition("orders-eu", 0)}
    dl.create_topic("orders-us", 2)
    dl.produce("orders-us", b"us", partition=1)
    assert [r.value for r in _drain(c)] == [b"us"]
    assert c.subscription() == {"orders-eu", "orders-us"}
    c2 = dl.consumer(auto_offset_reset="earliest")
    c2.subscribe(pattern=re.compile("pay.*"))
    assert [r.value for r in _drain(c2)] == [b"pay"]
    with pytest.raises(IllegalStateError):
        c2.assign([TopicPartition("payments", 0)])


def test_pause_and_resume(dl):
    dl.create_topic("t", 2)
    dl.produce("t", b"p0", partition=0)
    dl.produce("t", b"p1", partition=1)
    c = dl.consumer("t", auto_offset_reset="earliest")
    c.pause(TP0)
    assert c.paused() == {TP0}
    got = c.poll(timeout_ms=0)
    assert set(got) == {TP1}
    assert c.poll(timeout_ms=0) == {}
    c.resume(TP0)
    assert _values(c.poll(timeout_ms=0), TP0) == [b"p0"]


def test_isolation_levels(dl):
    dl.create_topic("t", 1)
    _txn_log(dl.manager.get_log("t", 0))
    unc = dl.consumer("t", auto_offset_reset="earliest")
    assert [r.value for r in _drain(unc)] == [b"plain", b"aborted", b"committed", b"after", b"open",
                                              b"beyond-lso"]
    com = dl.consumer("t", auto_offset_reset="earliest", isolation_level="read_committed")
    assert [r.value for r in _drain(com)] == [b"plain", b"committed", b"after"]
    # the position moves past the aborted data and the markers, up to the last stable offset
    assert com.position(TP0) == 6
    assert com.end_offsets([TP0]) == {TP0: 6}
    assert unc.end_offsets([TP0]) == {TP0: 8}
    latest = dl.consumer("t", conf={"isolation.level": "read_committed"})
    assert latest.position(TP0) == 6
    with pytest.raises(InvalidConfigError):
        dl.consumer("t", isolation_level="dirty")
    # read-only directories give the same answers
    ro = kafkalog.open(dl.manager.data_dir, read_only=True)
    try:
        c = ro.consumer("t", auto_offset_reset="earliest", isolation_level="read_committed")
        assert [r.value for r in _drain(c)] == [b"plain", b"committed", b"after"]
        c.close()
    finally:
        ro.close()


def test_out_of_range_follows_auto_offset_reset(dl):
    dl.create_topic("t", 1, {"segment.bytes": 1024, "retention.bytes": 1})
    dl.produce_many("t", [b"x" * 100 for _ in range(40)], batch_size=200)
    dl.delete_old_segments()
    start = dl.beginning_offsets("t")[0]
    assert start > 0
    for reset, want in (("earliest", start), ("latest", 40)):
        c = dl.consumer(auto_offset_reset=reset)
        c.assign([TP0])
        c.seek(TP0, 0)                     # below the log start offset
        recs = _drain(c)
        assert (recs[0].offset if recs else c.position(TP0)) == want
        c.seek(TP0, 1000)                  # beyond the log end offset
        recs = _drain(c)
        assert (recs[0].offset if recs else c.position(TP0)) == want
    c = dl.consumer(auto_offset_reset="none")
    c.assign([TP0])
    with pytest.raises(NoOffsetForPartitionError) as e:
        c.poll(timeout_ms=0)
    assert e.value.partitions == [TP0]
    c.seek(TP0, 1000)
    with pytest.raises(OffsetOutOfRangeError) as e2:
        c.poll(timeout_ms=0)
    assert isinstance(e2.value, ConsumerOffsetOutOfRangeError)
    assert e2.value.offsets == {TP0: 1000}
    c.seek(TP0, start)
    assert _drain(c)[0].offset == start


def test_corrupt_batch_is_a_typed_error_naming_file_and_position(tmp_path):
    d = tmp_path / "d"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        for i in range(3):
            dl.produce("t", b"record-%d" % i, partition=0)
    seg = d / "t-0" / f"{0:020d}.log"
    data = bytearray(seg.read_bytes())
    second = 12 + int.from_bytes(data[8:12], "big")     # byte position of the second batch
    data[second + 70] ^= 0xFF                           # inside its records: the CRC no longer matches
    seg.write_bytes(bytes(data))
    for read_only in (False, True):
        with kafkalog.open(d, background=False, read_only=read_only) as dl:
            c = dl.consumer("t", auto_offset_reset="earliest")
            got = []
            with pytest.raises(CorruptRecordError) as e:
                for _ in range(5):
                    for recs in c.poll(timeout_ms=0).values():
                        got += recs
            assert os.path.samefile(e.value.file, seg)
            assert e.value.position == second
            assert [r.value for r in got] in ([], [b"record-0"])
            c.close()


def test_deserializers_iteration_and_config(dl):
    dl.create_topic("t", 1)
    dl.produce_many("t", [(b"k%d" % i, b"%d" % i) for i in range(3)])
    c = dl.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=50,
                    key_deserializer=lambda b: b.decode(), value_deserializer=int)
    assert [(r.key, r.value) for r in c] == [("k0", 0), ("k1", 1), ("k2", 2)]
    with pytest.raises(InvalidConfigError):
        dl.consumer("t", no_such_option=1)
    with pytest.raises(InvalidConfigError):
        dl.consumer("t", enable_auto_commit=True)        # no group.id
    with pytest.raises(InvalidConfigError):
        dl.consumer("t", auto_offset_reset="smallest")


def test_undecodable_records_are_a_typed_error_naming_file_and_position(tmp_path):
    """A batch whose CRC is right but whose records do not decode (a buggy writer)."""
    from kafkalog.errors import InvalidRecordError
    from kafkalog.record.builder import write_v2_header
    d = tmp_path / "d"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce("t", b"good", partition=0)
        pos = dl.manager.get_log("t", 0).active_segment.size
        bad = write_v2_header(b"\x7f\x01\x02", base_offset=0, attributes=0, last_offset_delta=0,
                              base_timestamp=1, max_timestamp=1, producer_id=-1, producer_epoch=-1,
                              base_sequence=-1, count=1, partition_leader_epoch=-1)
        dl.manager.get_log("t", 0).append(bytearray(bad))
        c = dl.consumer("t", auto_offset_reset="earliest", max_poll_records=1)
        assert [r.value for r in c.poll(timeout_ms=0)[TP0]] == [b"good"]
        with pytest.raises(InvalidRecordError) as e:
            c.poll(timeout_ms=0)
        assert os.path.samefile(e.value.file, d / "t-0" / f"{0:020d}.log")
        assert e.value.position is not None and e.value.position >= pos


def test_iteration_commits_and_seeks_what_was_yielded(dl):
    dl.create_topic("t", 1)
    dl.produce_many("t", [b"%d" % i for i in range(10)])
    c = dl.consumer("t", group_id="g", auto_offset_reset="earliest", consumer_timeout_ms=50)
    it = iter(c)
    assert [next(it).offset for _ in range(3)] == [0, 1, 2]
    c.seek(TP0, 8)
    assert [r.offset for r in it] == [8, 9]
    c.seek(TP0, 4)
    assert next(it).offset == 4
    c.close()                            # auto-commit: the next record not yielded yet
    assert dl.consumer("t", group_id="g").committed(TP0) == 5
