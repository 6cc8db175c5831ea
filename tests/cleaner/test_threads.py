"""The cleaner as background threads of a LogManager, and the ``kafkalog compact`` command."""
import json
import time

from click.testing import CliRunner

from kafkalog.cleaner import LogCleaner
from kafkalog.cli.main import main
from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch

from .helpers import data_records, latest_per_key


def _fill(mgr, topic, partitions, n, keys):
    for p in range(partitions):
        log = mgr.get_log(topic, p)
        for i in range(n):
            log.append(build_batch([(b"k%d" % (i % keys), b"v%d" % i, 1000 + i)]))


def test_background_threads_clean_and_survive_a_corrupt_partition(tmp_path):
    d = str(tmp_path / "data")
    mgr = LogManager(d, {"log.cleaner.enable": False}, background=False)
    mgr.create_topic("t", 3, {"cleanup.policy": "compact", "segment.bytes": 600})
    _fill(mgr, "t", 3, 120, 5)
    expected = {p: latest_per_key(data_records(mgr.get_log("t", p))) for p in range(3)}
    bad = mgr.get_log("t", 1).segments[0].log_path
    mgr.close()
    with open(bad, "r+b") as f:          # flip a CRC-covered byte of partition 1
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0xFF]))
    mgr = LogManager(d, {"log.cleaner.enable": True, "log.cleaner.backoff.ms": 50,
                         "log.cleaner.dedupe.buffer.size": 1 << 20}, background=True,
                     cleaner_factory=LogCleaner)
    try:
        assert mgr.cleaner is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            cp = mgr.cleaner.manager.read_checkpoint(d)
            done = {tp.partition for tp in cp}
            if {0, 2} <= done and mgr.cleaner.manager.uncleanable:
                break
            time.sleep(0.05)
        assert {0, 2} <= {tp.partition for tp in mgr.cleaner.manager.read_checkpoint(d)}
        assert [tp.partition for tp in mgr.cleaner.manager.uncleanable] == [1]
        assert mgr.cleaner.alive_threads == 1
        for p in (0, 2):
            log = mgr.get_log("t", p)
            assert latest_per_key(data_records(log)) == expected[p]
            assert sum(s.size for s in log.segments[:-1]) < 600
    finally:
        mgr.close()


def test_cli_compact_json_summary(tmp_path):
    d = str(tmp_path / "data")
    mgr = LogManager(d, {"log.cleaner.enable": False}, background=False)
    mgr.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 500})
    mgr.create_topic("plain", 1, {"segment.bytes": 500})
    _fill(mgr, "c", 1, 100, 4)
    _fill(mgr, "plain", 1, 100, 4)
    mgr.get_log("c", 0).append(build_batch([(None, b"nokey", 1)]))
    _fill(mgr, "c", 1, 10, 4)
    mgr.close()
    r = CliRunner().invoke(main, ["compact", d, "--format", "json"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.output.strip().splitlines()]
    summary = lines[-1]
    assert summary["type"] == "summary" and summary["partitions"] == 1
    assert summary["bytesAfter"] < summary["bytesBefore"]
    assert summary["invalidMessages"] == 1 and summary["distinctKeys"] == 4
    r = CliRunner().invoke(main, ["compact", d, "plain"])
    assert r.exit_code == 2 and "--force" in r.output
    r = CliRunner().invoke(main, ["compact", d, "plain", "--force", "--format", "text"])
    assert r.exit_code == 0 and "Compacted 1 partition" in r.output
