"""The Python API: produce/consume round trips on real data directories."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kp_murmur2

import kafkalog
from kafkalog.errors import InvalidConfigError, InvalidTopicError


def test_produce_consume_round_trip(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("orders", partitions=3)
        md = dl.produce("orders", value=b"v1", key=b"k1", headers=[("h", b"x")], timestamp=1234)
        assert md.offset == 0 and md.timestamp == 1234
        recs = list(dl.consume("orders", md.partition))
        assert len(recs) == 1
        r = recs[0]
        assert (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
                r.headers) == ("orders", md.partition, 0, 1234, "CreateTime", b"k1", b"v1",
                               [("h", b"x")])
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        assert [r.value for r in dl.consume("orders")] == [b"v1"]


def test_keyed_partitioning_matches_kafka_python(tmp_path):
    keys = [b"key-%d" % i for i in range(300)] + [b"", b"\xff" * 7]
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", partitions=7)
        with dl.producer() as p:
            placed = [p.send("t", b"v", key=k).get(timeout=10).partition for k in keys]
        # kafka-python's DefaultPartitioner: (murmur2(key) & 0x7fffffff) % len(partitions)
        expected = [(kp_murmur2(k) & 0x7FFFFFFF) % 7 for k in keys]
        assert placed == expected
        for pnum in range(7):
            got = [r.key for r in dl.consume("t", pnum)]
            assert got == [k for k, e in zip(keys, expected) if e == pnum]


def test_producer_batches_and_sticky_partitioning(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", partitions=3)
        with dl.producer(batch_size=2000) as p:
            for i in range(300):
                p.send("t", b"%05d" % i + b"x" * 95)
        ends = dl.end_offsets("t")
        assert sum(ends.values()) == 300
        assert sum(1 for v in ends.values() if v > 0) >= 2, "sticky partition must move on"
        vals = sorted(r.value for r in dl.consume("t"))
        assert vals == sorted(b"%05d" % i + b"x" * 95 for i in range(300))
        batches = list(dl.manager.get_log("t", 0).batches())
        assert len(batches) >= 2 and all(b.count > 1 for b in batches)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_produce(tmp_path, codec):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        res = dl.produce_many("t", [b"value-%d" % i for i in range(500)], compression=codec)
        assert res.count == 500
        assert [r.value for r in dl.consume("t")] == [b"value-%d" % i for i in range(500)]
        b = next(dl.manager.get_log("t", 0).batches())
        assert b.compression.display_name == codec


def test_consume_start_positions_and_offsets(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce_many("t", [(None, b"v%d" % i, None, 1000 + i * 10) for i in range(20)])
        assert [r.offset for r in dl.consume("t", 0, offset=15)] == [15, 16, 17, 18, 19]
        assert [r.offset for r in dl.consume("t", 0, timestamp=1055)][0] == 6
        assert list(dl.consume("t", 0, from_beginning=False)) == []
        assert len(list(dl.consume("t", max_records=4))) == 4
        assert dl.end_offsets("t") == {0: 20} and dl.beginning_offsets("t") == {0: 0}
        assert dl.offsets_for_times("t", 1055) == {0: 6}
        assert dl.offsets_for_times("t", 99999) == {0: None}


def test_read_committed_skips_aborted(tmp_path):
    """Logs opened by the manager track producer state: aborted transactions are indexed
    (``.txnindex``) and skipped, and an open transaction caps the last stable offset; the same
    holds after a reopen (state from snapshots / recovery) and through a read-only open."""
    from tests.test_client_readonly import _txn_log
    want_committed = [b"plain", b"committed", b"after"]
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        log = dl.manager.get_log("t", 0)
        assert log.producer_state_manager is not None
        _txn_log(log)
        unc = [r.value for r in dl.consume("t", isolation="read_uncommitted")]
        assert unc == [b"plain", b"aborted", b"committed", b"after", b"open", b"beyond-lso"]
        assert [r.value for r in dl.consume("t", isolation="read_committed")] == want_committed
        assert [r.value for r in dl.consume("t", offset=2, isolation="read_committed")] == \
            [b"committed", b"after"]
        assert dl.end_offsets("t", "read_committed") == {0: 6}
        assert dl.end_offsets("t") == {0: 8}
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        assert [r.value for r in dl.consume("t", isolation="read_committed")] == want_committed
        assert dl.end_offsets("t", "read_committed") == {0: 6}
    with kafkalog.open(tmp_path / "d", read_only=True) as dl:
        assert [r.value for r in dl.consume("t", isolation="read_committed")] == want_committed


def test_errors_are_typed(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        with pytest.raises(InvalidTopicError):
            list(dl.consume("missing"))
        with pytest.raises(InvalidConfigError):
            dl.produce_many("t", [b"x"], compression="brotli")
        dl.create_topic("t", 2, exist_ok=True)
        with pytest.raises(InvalidTopicError):
            dl.produce("t", b"x", partition=5)
        with pytest.raises(InvalidConfigError):
            list(dl.consume("t", isolation="dirty"))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=200))), min_size=1, max_size=60),
       st.integers(min_value=1, max_value=4))
def test_round_trip_property(tmp_path_factory, records, partitions):
    d = tmp_path_factory.mktemp("c")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", partitions)
        res = dl.produce_many("t", records, batch_size=500)
        assert res.count == len(records)
        got = sorted((r.key or b"", r.value or b"", r.key is None, r.value is None)
                     for r in dl.consume("t"))
        want = sorted((k or b"", v or b"", k is None, v is None) for k, v in records)
        assert got == want


def test_keyed_produce_many_and_key_forms(tmp_path):
    keys = [b"user-%d" % i for i in range(500)]
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", partitions=5)
        res = dl.produce_many("t", [(k, b"v" + k) for k in keys], batch_size=700)
        assert res.count == 500 and res.batches > 5
        for pnum in range(5):
            got = [(r.key, r.value) for r in dl.consume("t", pnum)]
            assert got == [(k, b"v" + k) for k in keys
                           if (kp_murmur2(k) & 0x7FFFFFFF) % 5 == pnum]
        with dl.producer() as p:
            # str (UTF-8), bytearray and memoryview keys hash like the equal bytes
            assert p.send("t", b"x", key="user-7").partition == p.send("t", b"x", key=b"user-7").partition \
                == p.send("t", b"x", key=bytearray(b"user-7")).partition \
                == p.send("t", b"x", key=memoryview(b"user-7")).partition \
                == (kp_murmur2(b"user-7") & 0x7FFFFFFF) % 5
            assert p.send("t", b"x", key=b"user-7", partition=4).get(timeout=10).partition == 4
            with pytest.raises(InvalidTopicError):
                p.send("t", b"x", key=b"k", partition=5)
            with pytest.raises(InvalidTopicError):
                p.send_many("t", [b"x"], partition=-1)
        assert sum(dl.end_offsets("t").values()) == 505
