"""The embedded producer, from the outside: Kafka's configuration keys, linger without any further
call, batch caps checked in the segment files, RecordTooLargeError, futures and callbacks,
idempotent retries, producer ids across restarts, and a writer killed with SIGKILL that loses no
record whose future had resolved."""

from __future__ import annotations

import glob
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import kafkalog
from kafkalog.client import Producer, RecordMetadata
from kafkalog.errors import InvalidConfigError, InvalidTopicError, RecordTooLargeError

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def _batch_sizes(partition_dir: str) -> list:
    """The size of every batch in the partition's segment files (read from the files' headers)."""
    sizes = []
    for path in sorted(glob.glob(os.path.join(partition_dir, "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            length = struct.unpack_from(">i", data, pos + 8)[0]
            sizes.append(length + 12)
            pos += length + 12
        assert pos == len(data), path
    return sizes


def _wait_for(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def test_config_keys_dotted_and_underscored(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        p = dl.producer({"linger.ms": 7, "batch.size": 1000}, compression_type="gzip", client_id="x")
        assert p.config["linger.ms"] == 7 and p.config["batch.size"] == 1000
        assert p.config["compression.type"] == "gzip" and p.config["enable.idempotence"] is True
        p.close()
        with pytest.raises(InvalidConfigError, match="lingr.ms"):
            dl.producer({"lingr.ms": 5})
        with pytest.raises(InvalidConfigError, match="compression.type"):
            dl.producer(compression_type="brotli")
        with pytest.raises(InvalidConfigError):
            dl.producer(compression_type="gzip", compression_level=42)
        with pytest.raises(InvalidConfigError, match="delivery.timeout.ms"):
            dl.producer({"delivery.timeout.ms": 1000, "request.timeout.ms": 30000})
        with pytest.raises(InvalidConfigError, match="linger.ms"):
            dl.producer(linger_ms=-1)
        with pytest.raises(InvalidConfigError, match="idempotence"):
            dl.producer(transactional_id="t", enable_idempotence=False)
        with pytest.raises(InvalidConfigError, match="acks"):
            dl.producer(acks=1)            # idempotence (the default) needs acks=all
        with dl.producer(enable_idempotence=False, acks=1) as p2:
            assert p2.producer_id == -1


def test_record_visible_after_linger_without_flush(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        p = dl.producer(linger_ms=20)
        fut = p.send("t", b"hello")
        assert not fut.is_done()
        # no further call on the producer: its linger thread appends the batch
        assert _wait_for(lambda: dl.end_offsets("t") == {0: 1})
        assert [r.value for r in dl.consume("t")] == [b"hello"]
        md = fut.get(timeout=10)
        assert (md.topic, md.partition, md.offset) == ("t", 0, 0)
        # and again, after the thread went idle
        time.sleep(0.3)
        f2 = p.send("t", b"again")
        assert f2.get(timeout=10).offset == 1
        p.close()


def test_flush_waits_for_everything_and_close_flushes(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 3)
        p = dl.producer(linger_ms=60000)
        futs = [p.send("t", b"v%d" % i, key=b"k%d" % i) for i in range(500)]
        p.flush()
        assert all(f.succeeded() for f in futs)
        assert sum(dl.end_offsets("t").values()) == 500
        futs = [p.send("t", b"w%d" % i) for i in range(10)]
        p.close()
        assert all(f.succeeded() for f in futs)
        assert sum(dl.end_offsets("t").values()) == 510
        with pytest.raises(kafkalog.client.producer.IllegalStateError):
            p.send("t", b"late")


def test_batches_capped_by_segment_bytes(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1, {"segment.bytes": 16384})
        with dl.producer(batch_size=1 << 20, linger_ms=60000) as p:
            futs = [p.send("t", b"%05d" % i + b"x" * 95) for i in range(3000)]
        assert [f.get().offset for f in futs] == list(range(3000))
        sizes = _batch_sizes(dl.manager.get_log("t", 0).dir)
        assert len(sizes) > 10 and max(sizes) <= 16384
        assert len(dl.manager.get_log("t", 0).segments) > 10
        assert [r.value[:5] for r in dl.consume("t")] == [b"%05d" % i for i in range(3000)]


def test_gzip_batches_capped_by_segment_bytes(tmp_path):
    values = [os.urandom(60).hex().encode() for _ in range(4000)]     # barely compressible
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1, {"segment.bytes": 65536})
        res = dl.produce_many("t", values, compression="gzip")
        assert res.count == 4000
        sizes = _batch_sizes(dl.manager.get_log("t", 0).dir)
        assert len(sizes) > 4 and max(sizes) <= 65536
        assert [r.value for r in dl.consume("t")] == values


def test_batches_capped_by_max_message_bytes(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 2, {"max.message.bytes": 3000})
        with dl.producer(batch_size=100000, linger_ms=60000) as p:
            for i in range(2000):
                p.send("t", b"y" * 50, key=b"%d" % i)
        for part in (0, 1):
            sizes = _batch_sizes(dl.manager.get_log("t", part).dir)
            assert sizes and max(sizes) <= 3000
        assert sum(dl.end_offsets("t").values()) == 2000


def test_record_too_large_through_the_future(tmp_path):
    errors = []
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1, {"max.message.bytes": 2000})
        with dl.producer() as p:
            ok = p.send("t", b"small")
            big = p.send("t", b"z" * 5000, on_delivery=lambda err, md: errors.append((err, md)))
            assert big.failed()
            with pytest.raises(RecordTooLargeError) as ei:
                big.get()
            assert "2000" in str(ei.value) and "max.message.bytes" in str(ei.value)
            assert "5" in str(ei.value)             # the record's size (5000 + overhead)
            after = p.send("t", b"after")
        assert ok.get().offset == 0 and after.get().offset == 1
        assert len(errors) == 1 and isinstance(errors[0][0], RecordTooLargeError) and errors[0][1] is None
        dl.create_topic("s", 1, {"segment.bytes": 1024})
        with dl.producer() as p, pytest.raises(RecordTooLargeError, match="segment.bytes"):
            p.send("s", b"q" * 1500).get()
        with dl.producer(max_request_size=1000) as p, pytest.raises(RecordTooLargeError, match="max.request.size"):
            p.send("t", b"q" * 1200).get()


def test_futures_and_callbacks(tmp_path):
    seen = {"cb": [], "eb": [], "done": [], "delivery": []}
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 4)
        with dl.producer(linger_ms=60000) as p:
            f = p.send("t", b"value", key=b"key", headers=[("h", b"1")], timestamp_ms=12345,
                       on_delivery=lambda err, md: seen["delivery"].append((err, md)))
            f.add_callback(seen["cb"].append).add_errback(seen["eb"].append)
            f.add_done_callback(seen["done"].append)
            assert not f.is_done() and seen["cb"] == []
            f2 = p.send("t", None, key=None, partition=2, timestamp_ms=1)
            p.flush()
            md = f.get()
            assert isinstance(md, RecordMetadata)
            assert (md.topic, md.timestamp, md.serialized_key_size, md.serialized_value_size) == \
                ("t", 12345, 3, 5)
            assert seen["cb"] == [md] and seen["eb"] == [] and seen["done"] == [f]
            assert seen["delivery"] == [(None, md)]
            late = []
            f.add_callback(late.append)                    # already done: runs at once
            assert late == [md]
            md2 = f2.get(timeout=1)
            assert md2.partition == 2 and md2.serialized_value_size == -1 and md2.serialized_key_size == -1
        rec = next(r for r in dl.consume("t", md.partition) if r.offset == md.offset)
        assert (rec.key, rec.value, rec.headers, rec.timestamp) == (b"key", b"value", [("h", b"1")], 12345)
        with dl.producer() as p, pytest.raises(InvalidTopicError):
            p.send("t", b"x", partition=9)


def test_sticky_and_keyed_partitioning(tmp_path):
    from kafka.partitioner.default import murmur2 as kp_murmur2
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 3)
        with dl.producer(batch_size=500) as p:
            keyed = [p.send("t", b"v", key=b"user-%d" % i) for i in range(60)]
            keyless = [p.send("t", b"x" * 50) for i in range(100)]
        assert [f.get().partition for f in keyed] == \
            [(kp_murmur2(b"user-%d" % i) & 0x7FFFFFFF) % 3 for i in range(60)]
        assert len({f.get().partition for f in keyless}) == 3        # the sticky partition moves on


def test_idempotent_retry_is_stored_once(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        with dl.producer() as p:
            assert p.producer_id >= 0 and p.producer_epoch == 0
            for i in range(10):
                p.send("t", b"r%d" % i)
        log = dl.manager.get_log("t", 0)
        batches = list(log.batches())
        assert [b.producer_id for b in batches] == [p.producer_id] * len(batches)
        last = batches[-1]
        with open(glob.glob(os.path.join(log.dir, "*.log"))[0], "rb") as f:
            raw = f.read()
        size = struct.unpack_from(">i", raw, len(raw) - last.size_in_bytes + 8)[0] + 12
        retry = bytearray(raw[len(raw) - size:])          # the producer's last batch, sent again
        info = log.append(retry)
        assert info.duplicate and info.first_offset == last.base_offset
        assert log.log_end_offset == 10
        assert [r.value for r in dl.consume("t")] == [b"r%d" % i for i in range(10)]


def test_producer_ids_never_reused_across_restarts(tmp_path):
    d = tmp_path / "d"
    with kafkalog.open(d, background=False) as dl:
        ids = {dl.producer().producer_id for _ in range(3)}
    with kafkalog.open(d, background=False) as dl:
        again = {dl.producer().producer_id for _ in range(3)}
    assert len(ids) == 3 and len(again) == 3 and not ids & again
    # a killed process: the ids it handed out are not handed out again either
    script = textwrap.dedent(f"""
        import os, kafkalog
        dl = kafkalog.open({str(d)!r}, background=False)
        print(dl.producer().producer_id, flush=True)
        os.kill(os.getpid(), 9)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": os.path.abspath(SRC)})
    killed = int(out.stdout.strip())
    with kafkalog.open(d, background=False) as dl:
        assert dl.producer().producer_id not in ids | again | {killed}


def test_sigkill_loses_no_resolved_record(tmp_path):
    """A writer killed with SIGKILL: every record whose future had resolved (the child printed its
    offset from the delivery callback) is in the log after a reopen."""
    d = tmp_path / "d"
    script = textwrap.dedent(f"""
        import sys, kafkalog
        dl = kafkalog.open({str(d)!r})
        dl.create_topic("t", 2, exist_ok=True)
        p = dl.producer(linger_ms=2, batch_size=2000)
        out = sys.stdout
        lock = __import__("threading").Lock()
        def report(err, md):
            if err is None:
                with lock:
                    out.write(f"{{md.partition}} {{md.offset}}\\n")
                    out.flush()
        i = 0
        while True:
            p.send("t", b"value-%d" % i, key=b"k%d" % (i % 13), on_delivery=report)
            i += 1
            if i % 50 == 0:
                __import__("time").sleep(0.001)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.path.abspath(SRC)})
    resolved = []
    try:
        for line in proc.stdout:
            resolved.append(tuple(int(x) for x in line.split()))
            if len(resolved) >= 3000:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(resolved) >= 3000
    with kafkalog.open(d, background=False) as dl:
        present = {(r.partition, r.offset) for r in dl.consume("t")}
    missing = [x for x in resolved if x not in present]
    assert missing == []


def test_concurrent_senders(tmp_path):
    """Several threads sending at once with the linger thread running: every record is stored once.
    The interpreter switches threads every microsecond here, so that a send path that is not atomic
    against another sender or the linger thread's seal (the pure-Python twin once was not: two
    records took one index, and a batch was written with fewer records than its count) fails."""
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _concurrent_senders(tmp_path)
    finally:
        sys.setswitchinterval(old_interval)


def _concurrent_senders(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 2)
        p = dl.producer(linger_ms=1, batch_size=700)
        futs: list = []
        lock = threading.Lock()

        def run(k: int) -> None:
            mine = [p.send("t", b"%d-%d" % (k, i)) for i in range(2000)]
            with lock:
                futs.extend(mine)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        p.close()
        offsets = {(f.get().partition, f.get().offset) for f in futs}
        assert len(offsets) == 8000
        assert sorted(r.value for r in dl.consume("t")) == sorted(b"%d-%d" % (k, i) for k in range(4)
                                                                 for i in range(2000))


def test_read_only_directory_refuses_a_producer(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
    with kafkalog.open(tmp_path / "d", read_only=True) as ro, pytest.raises(kafkalog.errors.LogDirError):
        ro.producer()
    assert Producer is kafkalog.client.producer.Producer


def test_closing_the_data_log_closes_its_producers(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        p = dl.producer(linger_ms=60000)
        fut = p.send("t", b"pending")
        assert not fut.is_done()
    assert fut.get(timeout=10).offset == 0
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        assert [r.value for r in dl.consume("t")] == [b"pending"]
