"""The operator commands through click's CliRunner and as a real subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner

import kafkalog
from kafkalog.cli.main import main


def _lines(out: str):
    return [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 2, {"segment.bytes": 2000, "index.interval.bytes": 100})
        with dl.producer(batch_size=300) as p:
            for i in range(200):
                p.send("t", b"value-%04d" % i + b"." * 40, key=b"k%d" % (i % 7), timestamp_ms=1000 + i)
    return d


def test_produce_consume_describe(tmp_path):
    d = str(tmp_path / "d")
    r = CliRunner()
    inp = "\n".join(json.dumps(x) for x in [
        {"key": "a", "value": "hello", "headers": {"h": "1"}, "timestamp": 5},
        {"key": None, "value": "world", "partition": 1},
        {"key": "b", "value": None}]) + "\n"
    res = r.invoke(main, ["produce", d, "topic", "--partitions", "2", "--config", "retention.ms=1000"],
                   input=inp)
    assert res.exit_code == 0, res.output
    summary = _lines(res.output)[-1]
    assert summary["records"] == 3
    res = r.invoke(main, ["consume", d, "topic"])
    assert res.exit_code == 0, res.output
    recs = _lines(res.output)
    assert sorted(((x["key"], x["value"]) for x in recs), key=str) == sorted(
        [("a", "hello"), (None, "world"), ("b", None)], key=str)
    a = next(x for x in recs if x["key"] == "a")
    assert a["timestamp"] == 5 and a["headers"] == [["h", "1"]]
    res = r.invoke(main, ["consume", d, "topic", "--partition", "1", "--max-records", "1"])
    assert len(_lines(res.output)) == 1
    res = r.invoke(main, ["describe", d, "--format", "json"])
    rows = _lines(res.output)
    assert sum(x["logEndOffset"] for x in rows) == 3 and {x["partition"] for x in rows} == {0, 1}
    res = r.invoke(main, ["describe", d, "--format", "text"])
    assert "LOG-END-OFFSET" in res.output and "topic" in res.output
    with kafkalog.open(d, background=False) as dl:
        assert dl.topic_config("topic")["retention.ms"] == 1000


def test_produce_base64_and_bad_input(tmp_path):
    d = str(tmp_path / "d")
    r = CliRunner()
    res = r.invoke(main, ["produce", d, "b", "--base64"], input='{"key":"AAE=","value":"/w=="}\n')
    assert res.exit_code == 0, res.output
    res = r.invoke(main, ["consume", d, "b", "--base64"])
    rec = _lines(res.output)[0]
    assert rec["key"] == "AAE=" and rec["value"] == "/w=="
    res = r.invoke(main, ["produce", d, "b"], input='{"value":"ok"}\nnot json\n')
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    err = [x for x in _lines(res.output) if x.get("type") == "error"][0]
    assert err["error"] == "InvalidRecordError" and "line 2" in err["message"]
    res = r.invoke(main, ["consume", d, "missing-topic"])
    assert res.exit_code == 2 and _lines(res.output)[0]["error"] == "InvalidTopicError"


def test_verify_clean_then_flipped_byte(data_dir):
    r = CliRunner()
    res = r.invoke(main, ["verify", str(data_dir)])
    assert res.exit_code == 0, res.output
    assert _lines(res.output)[-1]["ok"] is True
    seg = data_dir / "t-0" / "00000000000000000000.log"
    before = seg.read_bytes()
    data = bytearray(before)
    data[200] ^= 0xFF
    seg.write_bytes(bytes(data))
    res = r.invoke(main, ["verify", str(data_dir / "t-0")])
    assert res.exit_code == 1
    crc = [x for x in _lines(res.output) if x.get("check") == "crc"]
    assert crc and crc[0]["file"] == str(seg) and crc[0]["position"] <= 200
    assert seg.read_bytes() == bytes(data), "verify must be read-only"


def test_verify_truncation_and_zero_filled_index(data_dir):
    r = CliRunner()
    seg = data_dir / "t-1" / "00000000000000000000.log"
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(size - 5)
    res = r.invoke(main, ["verify", str(seg)])
    assert res.exit_code == 1
    assert any(x.get("check") == "partial-tail" for x in _lines(res.output))
    with open(seg, "r+b") as f:
        f.truncate(size)             # the tail is now zero-filled
    idx = data_dir / "t-0" / "00000000000000000000.index"
    n_entries = idx.stat().st_size // 8
    assert n_entries >= 1
    with open(idx, "ab") as f:
        f.write(b"\x00" * 80)
    res = r.invoke(main, ["verify", str(idx)])
    assert res.exit_code == 1
    found = _lines(res.output)
    assert any(x.get("check") == "zero-filled-tail" and x["file"] == str(idx) for x in found)
    tidx = data_dir / "t-0" / "00000000000000000000.timeindex"
    with open(tidx, "ab") as f:
        f.write(b"\x00" * 120)
    res = r.invoke(main, ["dump", str(tidx), "--format", "json"])
    summ = [x for x in _lines(res.output) if x.get("type") == "summary"][0]
    assert summ["zeroFilledTailAt"] is not None


def test_verify_missing_path_is_typed_error(tmp_path):
    res = CliRunner().invoke(main, ["verify", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert _lines(res.output)[0]["type"] == "error"


def test_recover_reports_truncation(data_dir):
    seg = data_dir / "t-0" / "00000000000000000000.log"
    good = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x03\xe8\x00\x00\x00\x50partial")
    res = CliRunner().invoke(main, ["recover", str(data_dir)])
    assert res.exit_code == 3, res.output          # complete batches of later segments dropped
    lines = _lines(res.output)
    tr = [x for x in lines if x["type"] == "truncation"]
    assert tr and tr[0]["file"] == str(seg) and tr[0]["position"] == good
    assert lines[-1]["type"] == "summary" and lines[-1]["truncatedBytes"] >= 19
    assert lines[-1]["droppedOffsets"] > 0 and "DROPPED offsets" in res.stderr
    assert seg.stat().st_size == good
    kept = seg.parent / f"{seg.name}.{good}.truncated"      # the cut tail, kept aside
    assert kept.read_bytes().endswith(b"partial")
    res = CliRunner().invoke(main, ["recover", str(data_dir / "t-1")])
    assert res.exit_code == 0 and _lines(res.output)[-1]["clean"] is True


def test_dump_index_timeindex_and_checkpoints(data_dir):
    r = CliRunner()
    idx = data_dir / "t-0" / "00000000000000000000.index"
    res = r.invoke(main, ["dump", str(idx)])
    assert res.exit_code == 0, res.output
    assert "offset: " in res.output and "position: " in res.output
    assert "Mismatches" not in res.output
    res = r.invoke(main, ["dump", str(idx), "--index-sanity-check"])
    assert "passed sanity check." in res.output
    res = r.invoke(main, ["dump", str(idx), "--verify-index-only"])
    assert "position:" not in res.output
    # corrupt an entry: point it at the wrong offset
    data = bytearray(idx.read_bytes())
    data[0:4] = (int.from_bytes(data[0:4], "big") + 1).to_bytes(4, "big")
    idx.write_bytes(bytes(data))
    res = r.invoke(main, ["dump", str(idx)])
    assert "Mismatches in :" in res.output and "Index offset:" in res.output
    tidx = data_dir / "t-0" / "00000000000000000000.timeindex"
    res = r.invoke(main, ["dump", str(tidx), "--format", "json"])
    entries = [x for x in _lines(res.output) if x["type"] == "timeIndexEntry"]
    assert entries and all(x["timestamp"] >= 1000 for x in entries)
    rp = data_dir / "recovery-point-offset-checkpoint"
    res = r.invoke(main, ["dump", str(rp), "--format", "json"])
    ck = _lines(res.output)
    assert {(x["topic"], x["partition"]) for x in ck} == {("t", 0), ("t", 1)}
    res = r.invoke(main, ["dump", str(data_dir / "meta.properties")])
    assert "cluster.id:" in res.output


def test_installed_command_subprocess(data_dir):
    exe = shutil.which("kafkalog")
    assert exe, "the console script must be installed"
    p = subprocess.run([exe, "describe", str(data_dir), "--format", "json"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert sum(r["logEndOffset"] for r in rows) == 200
    p = subprocess.run([exe, "verify", str(data_dir)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "\x1b[" not in p.stdout + p.stderr   # no progress bar when piped
    p = subprocess.run([exe, "consume", str(data_dir), "t", "--max-records", "3"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 3
    p = subprocess.run([exe, "verify", str(data_dir / "nope")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_verify_finds_a_base_offset_off_by_one(tmp_path):
    """A v2 batch whose baseOffset gained 1 leaves a gap (legal after compaction) and overlaps
    the next batch (never legal): verify reports the overlap."""
    from kafkalog.log._encode import encode_v2_batch
    from kafkalog.log.log import Log
    log = Log.open(str(tmp_path / "t-0"), {})
    for i in range(3):
        log.append(encode_v2_batch([(b"k", b"v%d" % i)] * 3, default_timestamp=1000 + i))
    second = log.segments[0].log.size // 3        # the batches are the same size
    log.close()
    path = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[second + 7] ^= 1                          # baseOffset 3 -> 2: overlaps batch 0..2
    path.write_bytes(bytes(data))
    res = CliRunner().invoke(main, ["verify", "--no-progress", str(tmp_path / "t-0")])
    assert res.exit_code == 1
    findings = [json.loads(line) for line in res.output.splitlines() if '"finding"' in line]
    assert [(f["check"], f["position"]) for f in findings] == [("offsets", second)]


# --- the smaller ones of issue 24 (item 9), each through a real subprocess ----------------------

def _run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("kafkalog")
    cmd = [exe] if exe else ["python3", "-m", "kafkalog.cli.main"]
    return subprocess.run([*cmd, *args], input=input, capture_output=True, text=True, timeout=300)


def test_verify_caps_the_findings_of_a_file(tmp_path):
    """A random 2 MB .index has half a million bad entries: verify printed a line for each."""
    import os
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        for _ in range(10):
            dl.produce("t", b"x", partition=0)
    (d / "t-0" / "00000000000000000000.index").write_bytes(os.urandom(2 << 20))
    res = _run("verify", str(d))
    assert res.returncode == 1
    lines = _lines(res.stdout)
    assert len(lines) < 150, len(lines)
    findings = [x for x in lines if x["type"] == "finding"]
    (more,) = [x for x in lines if x["type"] == "moreFindings"]
    assert len(findings) == 100 and more["file"].endswith(".index") and more["count"] > 250_000
    assert lines[-1]["errors"] == len(findings) + more["errors"]          # every one counted
    res = _run("verify", str(d), "--format", "text")
    assert f"... and {more['count']:,} more findings in" in res.stdout
    res = _run("verify", str(d), "--max-findings", "5")
    assert len([x for x in _lines(res.stdout) if x["type"] == "finding"]) == 5


def _lines_run(fn):
    """The Python lines ``fn`` runs in kafkalog.cli.segment_check (generator steps included): an
    operation count, not a time."""
    import sys
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code.co_filename.endswith("segment_check.py"):
            if event == "line":
                count += 1
            return tracer
        return None
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def test_verify_looks_up_the_batch_of_each_index_entry(tmp_path):
    """An index whose entries point at batches with offsets the log does not have: each entry
    costs a look-up of the scanned batches, not a walk over all of them (a damaged index of a big
    segment was quadratic: hours of `kafkalog verify`). Every entry is still counted."""
    import struct

    from kafkalog.cli.segment_check import check_offset_index, check_time_index, scan_log
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        for _ in range(1000):
            dl.produce("t", b"x", partition=0)
    seg = d / "t-0" / "00000000000000000000"
    scan = scan_log(f"{seg}.log")
    assert len(scan.batches) == 1000
    positions = [b.position for b in scan.batches]
    entries = 2000
    # each entry at a batch's position, with an offset past every batch's
    (seg.parent / (seg.name + ".index")).write_bytes(
        b"".join(struct.pack(">ii", 10_000 + k, positions[k % 1000]) for k in range(entries)))
    (seg.parent / (seg.name + ".timeindex")).write_bytes(
        b"".join(struct.pack(">qi", 1 + k, 10_000 + k) for k in range(entries)))
    got = {}
    lines = _lines_run(lambda: got.update(index=check_offset_index(f"{seg}.index", scan),
                                          time=check_time_index(f"{seg}.timeindex", scan)))
    assert len(got["index"].mismatches) == entries
    # each entry's offset, and the one position that goes back (the 1,001st entry's)
    assert len(got["index"].findings) + got["index"].findings.more_count == entries + 1
    assert got["time"].not_found == [(10_000 + k, -1) for k in range(entries)]
    assert len(got["time"].findings) + got["time"].findings.more_count == entries
    assert lines < 60 * 2 * entries, lines      # a walk over the batches per entry: 2,000,000 more


def test_describe_sorts_partitions_as_numbers(tmp_path):
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 12)
    res = _run("describe", str(d), "--format", "json")
    assert [x["partition"] for x in _lines(res.stdout)] == list(range(12))
    res = _run("describe", str(d), "--format", "text")
    assert [ln.split()[1] for ln in res.stdout.splitlines()[1:]] == [str(p) for p in range(12)]


def test_dump_prints_keys_and_values_as_consume_does(tmp_path):
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce("t", b'{"state": "paid"}', key=b"order-1", partition=0, headers=[("h", b"v")])
        dl.produce("t", b"\xff\xfe", key=b"\xff\x01", partition=0)
    seg = str(d / "t-0" / "00000000000000000000.log")
    dumped = [x for x in _lines(_run("dump", seg, "--deep", "--format", "json").stdout)
              if x["type"] == "record"]
    consumed = _lines(_run("consume", str(d), "t").stdout)
    for dr, cr in zip(dumped, consumed, strict=True):
        for field in ("key", "value", "keyEncoding", "valueEncoding"):
            assert dr.get(field) == cr.get(field), field
    assert dumped[0]["key"] == "order-1" and dumped[0]["headers"][0]["value"] == "v"
    assert dumped[1]["key"] == "/wE=" and dumped[1]["keyEncoding"] == "base64"
    hexed = [x for x in _lines(_run("dump", seg, "--deep", "--format", "json", "--encoding", "hex").stdout)
             if x["type"] == "record"]
    assert hexed[0]["key"] == b"order-1".hex() and "keyEncoding" not in hexed[0]


def test_creating_a_topic_twice_is_kafkas_topic_exists_error(tmp_path):
    from kafkalog.errors import InvalidTopicError, TopicExistsError
    with kafkalog.open(tmp_path / "data", background=False) as dl:
        dl.create_topic("t", 1)
        with pytest.raises(TopicExistsError) as e:
            dl.create_topic("t", 1)
        assert isinstance(e.value, InvalidTopicError)          # what callers caught before
        dl.create_topic("t", 1, exist_ok=True)
