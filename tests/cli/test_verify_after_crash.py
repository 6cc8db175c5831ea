"""``kafkalog verify`` on the data directory a killed process leaves: the tails a crash leaves in a
partition's active segment (preallocated indexes, a cut last batch) are warnings while the next
open recovers (a data directory without ``.kafka_cleanshutdown``), errors after a clean shutdown, in
a partition directory outside a data directory and in any other segment."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import kafkalog

_WRITER = textwrap.dedent("""
    import sys, time, kafkalog
    dl = kafkalog.open(sys.argv[1], background=False)
    dl.create_topic("t", 1, {"segment.bytes": 4000, "index.interval.bytes": 100})
    with dl.producer(batch_size=500) as p:
        for i in range(300):
            p.send("t", b"value-%04d" % i + b"." * 30, partition=0, timestamp_ms=1000 + i)
    print("ready", flush=True)
    time.sleep(600)
""")


def _killed_writer(data: Path, script: str = _WRITER) -> None:
    """A process running ``script`` (by default: 300 records appended) killed with SIGKILL once it
    prints ``ready``, its logs still open."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(data)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def _verify(path: Path) -> tuple[int, list[dict], dict]:
    res = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "verify", "--no-progress",
                          str(path)], capture_output=True, text=True, timeout=120, check=False)
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert res.stderr == "", res.stderr
    return (res.returncode, [x for x in lines if x["type"] == "finding"],
            [x for x in lines if x["type"] == "summary"][0])


def test_verify_of_a_killed_writers_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _killed_writer(data)
    part = data / "t-0"
    logs = sorted(part.glob("*.log"))
    assert len(logs) >= 3 and not (data / ".kafka_cleanshutdown").exists()
    active = logs[-1]
    stem = str(active)[:-4]

    # as left: the active segment's preallocated indexes are zero-filled past their entries
    code, findings, summary = _verify(data)
    assert code == 0 and summary["ok"] and summary["errors"] == 0, findings
    assert {(f["file"], f["check"], f["level"]) for f in findings} == {
        (stem + ".index", "zero-filled-tail", "warning"),
        (stem + ".timeindex", "zero-filled-tail", "warning")}
    assert all("unclean shutdown" in f["message"] for f in findings)
    assert _verify(part)[0] == 0 and _verify(active)[0] == 0     # same verdict from any path

    # an append the crash cut short at the end of the active segment: a warning too
    with open(active, "ab") as f:
        f.write(bytes.fromhex("000000000000012c 00000040") + b"\x02" * 20)
    code, findings, _ = _verify(data)
    assert code == 0
    assert {(f["check"], f["level"]) for f in findings if f["file"] == str(active)} == {
        ("partial-tail", "warning")}

    # the same tail after a clean shutdown (the next open trusts the files): errors
    (data / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":-1}')
    code, findings, summary = _verify(data)
    assert code == 1 and summary["errors"] == 3
    assert {f["level"] for f in findings} == {"error"}
    (data / ".kafka_cleanshutdown").unlink()

    # a partition directory outside a data directory: its shutdown is unknown, the tails errors
    loose = tmp_path / "loose" / "t-0"
    shutil.copytree(part, loose)
    code, findings, _ = _verify(loose)
    assert code == 1 and {f["level"] for f in findings} == {"error"} and len(findings) == 3

    # a cut tail in a segment before the active one is damage, crash or not
    first = logs[0]
    original = first.read_bytes()
    first.write_bytes(original[:-5])
    code, findings, _ = _verify(data)
    assert code == 1
    assert [(f["check"], f["level"]) for f in findings if f["file"] == str(first)] == [
        ("partial-tail", "error")]
    first.write_bytes(original)

    # the next open recovers (the cut batch truncated, the indexes trimmed at the clean close):
    # nothing left to warn about, every record there
    with kafkalog.open(data, background=False) as dl:
        assert dl.end_offsets("t") == {0: 300}
    code, findings, summary = _verify(data)
    assert code == 0 and findings == [] and summary["warnings"] == 0


_ONE_BATCH_WRITER = textwrap.dedent("""
    import sys, time, kafkalog
    dl = kafkalog.open(sys.argv[1], background=False)
    dl.create_topic("t", 1, {"index.interval.bytes": 100})
    with dl.producer(batch_size=1 << 20, linger_ms=60_000) as p:  # one batch, however slow the loop
        for i in range(500):
            p.send("t", b"value-%04d" % i, partition=0, timestamp_ms=1000 + i)
    print("ready", flush=True)
    time.sleep(600)
""")


def test_verify_of_a_killed_writer_whose_active_segment_has_no_index_entry(tmp_path: Path) -> None:
    """The first batch of a segment is never indexed (Kafka's rule), so a writer killed after one
    batch (or between a batch's .log write and its index entry) leaves indexes zero-filled from
    slot 0: that slot is preallocation, not an entry (base offset, position 0) that contradicts
    the batch's last offset (CI caught verify reading it as one after a broker kill). kafkalog's
    own new partition makes its index files empty, grown at their first entry: killed there, it
    leaves them empty, which verify accepts as they are; Kafka's are made at
    ``segment.index.bytes`` (sparse), so its broker killed there leaves the zero-filled files,
    made here as Kafka's ``setLength`` makes them."""
    data = tmp_path / "data"
    _killed_writer(data, _ONE_BATCH_WRITER)
    active = data / "t-0" / "00000000000000000000.log"
    stem = str(active)[:-4]
    assert Path(stem + ".index").stat().st_size == Path(stem + ".timeindex").stat().st_size == 0
    code, findings, summary = _verify(data)
    assert code == 0 and summary["errors"] == summary["warnings"] == 0 and summary["batches"] == 1, findings

    for suffix in (".index", ".timeindex"):         # as a Kafka broker killed there leaves them
        os.truncate(stem + suffix, 10 * 1024 * 1024 // 12 * 12 if suffix == ".timeindex" else 10 * 1024 * 1024)
    assert Path(stem + ".index").stat().st_size > 8 and not any(Path(stem + ".index").read_bytes())
    assert not any(Path(stem + ".timeindex").read_bytes())

    code, findings, summary = _verify(data)
    assert code == 0 and summary["errors"] == 0 and summary["batches"] == 1, findings
    assert {(f["file"], f["check"], f["level"], f["position"]) for f in findings} == {
        (stem + ".index", "zero-filled-tail", "warning", 0),
        (stem + ".timeindex", "zero-filled-tail", "warning", 0)}

    # after a clean shutdown the same files are damage, reported as zero-filled tails from slot 0
    (data / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":-1}')
    code, findings, _ = _verify(data)
    assert code == 1 and {(f["check"], f["level"], f["position"]) for f in findings} == {
        ("zero-filled-tail", "error", 0)}
    (data / ".kafka_cleanshutdown").unlink()

    with kafkalog.open(data, background=False) as dl:
        assert dl.end_offsets("t") == {0: 500}
    code, findings, summary = _verify(data)
    assert code == 0 and findings == [] and summary["warnings"] == 0


def test_dump_rates_a_crash_tail_as_verify_does(tmp_path: Path) -> None:
    """``dump`` exits 1 on damage (issue 36, item 3) but not on the tail a crash leaves at the end of
    the active segment of a log the next open recovers (verify's warning): it prints Kafka's
    ``Found N invalid bytes`` line and exits 0; after a clean shutdown the same tail is damage."""
    data = tmp_path / "data"
    _killed_writer(data)
    active = sorted((data / "t-0").glob("*.log"))[-1]
    with open(active, "ab") as f:
        f.write(bytes.fromhex("000000000000012c 00000040") + b"\x02" * 20)

    def dump() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "dump", str(active)],
                              capture_output=True, text=True, timeout=120, check=False)

    res = dump()
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.splitlines()[-1] == f"Found 32 invalid bytes at the end of {active.name}"
    (data / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":-1}')
    res = dump()
    assert res.returncode == 1 and "32 invalid bytes at the end" in res.stderr
