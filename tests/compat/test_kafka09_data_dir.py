"""A data directory written by a genuine Apache Kafka 0.9.0.1 broker (``kafka09/``, how it was made in
``kafka09/make_data_dirs.py``): v0 messages, compressed wrappers of every codec of the time, indexes
as Kafka before 0.11 wrote them (an append keyed by its first offset: a compressed wrapper's first
inner offset, below the wrapper's own offset), once after a clean shutdown and once after SIGKILL.

Kafka 4.4 loads such indexes; its DumpLogSegments ``--verify-index-only`` lists the entries as
mismatches and exits 0. ``kafkalog verify`` and ``kafkalog dump --verify-index-only`` accept them too
(they exited 1: 96 "errors" on the clean directory, 147 after the kill), and still refuse an entry
that names an offset outside the wrapper at its position.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalog
from tests import kafka44

DATA = Path(__file__).resolve().parent / "kafka09"
TOPICS = [f"legacy-{c}" for c in ("gzip", "snappy", "lz4", "none")]


def _copy(tmp_path: Path, which: str) -> Path:
    out = tmp_path / which
    shutil.copytree(DATA / which, out)
    return out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def _verify(path: Path) -> tuple[int, list[dict], dict]:
    res = _cli("verify", "--no-progress", str(path))
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert res.stderr == "", res.stderr
    return (res.returncode, [x for x in lines if x["type"] == "finding"],
            [x for x in lines if x["type"] == "summary"][0])


def _mismatches(stderr: str) -> dict[str, set[tuple[int, int]]]:
    """DumpLogSegments' ``Mismatches in :FILE`` reports: partition/file -> {(index offset, log offset)}."""
    out: dict[str, set[tuple[int, int]]] = {}
    current = None
    for line in stderr.splitlines():
        if line.startswith("Mismatches in :"):
            p = Path(line[len("Mismatches in :"):])
            current = out.setdefault(f"{p.parent.name}/{p.name}", set())
        elif (m := re.fullmatch(r"  Index offset: (\d+), log offset: (\d+)", line)) and current is not None:
            current.add((int(m[1]), int(m[2])))
    return out


def _values(i: int) -> tuple[bytes | None, bytes]:
    return (b"k%d" % (i % 5)) if i % 3 else None, b"value-%04d-" % i + b"x" * (i % 13)


def test_verify_accepts_the_indexes_kafka_09_wrote(tmp_path: Path) -> None:
    data = _copy(tmp_path, "clean")
    rc, findings, summary = _verify(data)
    assert rc == 0 and findings == [] and summary["ok"], findings[:5]
    assert summary["segments"] == 17 and summary["errors"] == summary["warnings"] == 0
    # the directory does hold pre-0.11 entries: DumpLogSegments' mismatch report lists them, and
    # each names an offset inside the compressed wrapper at the entry's position
    indexes = sorted(str(p) for p in data.glob("legacy-*-0/*.index"))
    res = _cli("dump", "--verify-index-only", *indexes)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "".join(f"Dumping {p}\n" for p in indexes)
    found = _mismatches(res.stderr)
    assert sum(len(v) for v in found.values()) == 96 and len(found) == 11, res.stderr
    assert all(i < log for pairs in found.values() for i, log in pairs)


def test_verify_of_the_directory_kafka_09_left_when_killed(tmp_path: Path) -> None:
    data = _copy(tmp_path, "killed")
    rc, findings, summary = _verify(data)
    assert rc == 0 and summary["errors"] == 0, [f for f in findings if f["level"] == "error"][:5]
    # the active segments' preallocated indexes, and nothing else
    assert {(f["level"], f["check"]) for f in findings} == {("warning", "zero-filled-tail")}
    assert summary["warnings"] == 4

    # a crash during an append: the active segment's last wrapper cut short
    active = sorted((data / "legacy-gzip-0").glob("*.log"))[-1]
    size = active.stat().st_size
    with open(active, "r+b") as f:
        f.truncate(size - 9)
    rc, findings, summary = _verify(data)
    assert rc == 0 and summary["errors"] == 0, findings
    new = {(f["check"], Path(f["file"]).name) for f in findings if f["check"] != "zero-filled-tail"}
    # the cut wrapper, and the index entry of it (recovery truncates both)
    assert new == {("partial-tail", active.name), ("index-past-tail", active.stem + ".index")}
    assert all(f["level"] == "warning" for f in findings)


def test_an_entry_outside_its_wrapper_is_still_an_error(tmp_path: Path) -> None:
    data = _copy(tmp_path, "clean")
    index = data / "legacy-gzip-0" / ("0" * 20 + ".index")
    raw = bytearray(index.read_bytes())
    entries = [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw), 8)]
    # the second entry keyed one below its wrapper's first inner offset (the last offset of the
    # wrapper before it): a position that does not hold that offset
    res = _cli("dump", "--verify-index-only", str(index))
    pairs = sorted(_mismatches(res.stderr)[f"legacy-gzip-0/{index.name}"])
    first_inner = entries[1][0]
    assert (first_inner, dict(pairs)[first_inner]) in pairs and first_inner - 1 > entries[0][0]
    struct.pack_into(">i", raw, 8, first_inner - 1)
    index.write_bytes(bytes(raw))
    rc, findings, _ = _verify(data)
    assert rc == 1
    assert [(f["check"], f["position"]) for f in findings if f["level"] == "error"] == [("index-entry", 8)]
    assert _cli("dump", "--verify-index-only", str(index)).returncode == 1


@pytest.mark.parametrize("which", ["clean", "killed"])
def test_kafka_09_records_read_through_its_indexes(tmp_path: Path, which: str) -> None:
    data = _copy(tmp_path, which)
    n = 200 if which == "clean" else 300
    with kafkalog.open(data, read_only=True) as dl:
        for topic in TOPICS:
            got = [(r.offset, r.key, r.value, r.timestamp_type) for r in dl.consume(topic)]
            assert got == [(i, *_values(i), "NoTimestampType") for i in range(n)], topic
            # a read from an offset finds its wrapper through the pre-0.11 index entries
            for o in range(0, n, 7):
                (r,) = dl.consume(topic, offset=o, max_records=1)
                assert (r.offset, r.value) == (o, _values(o)[1])


@pytest.mark.kafka
def test_kafka44_dump_log_segments_lists_the_same_pre_011_entries(tmp_path: Path) -> None:
    """Kafka 4.4's own word on the same files: the same mismatch pairs, exit 0 (its stderr lists
    files in hash order and each file's pairs last first, as kafkalog does per file)."""
    kafka44.require()
    data = _copy(tmp_path, "clean")
    indexes = sorted(str(p) for p in data.glob("legacy-*-0/*.index"))
    theirs = kafka44.run_tool("org.apache.kafka.tools.DumpLogSegments", "--files", ",".join(indexes),
                              "--verify-index-only")
    ours = _cli("dump", "--verify-index-only", "--files", ",".join(indexes))
    assert ours.returncode == 0 and ours.stdout == theirs.stdout
    assert _mismatches(ours.stderr) == _mismatches(theirs.stderr) != {}
    for block in ours.stderr.split("Mismatches in :")[1:]:
        name = block.splitlines()[0]
        assert block in theirs.stderr, name
