"""``kafkalog recover`` as an operator needs it (issue 24, item 4): ``--dry-run`` says what would be
cut and where and changes nothing, the cut bytes are kept aside by default, and records dropped
are loud (a line on stderr) and exit 3. Real subprocesses on damaged directories; the read-only
plan is checked against what the loader then does, over many kinds of damage."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

import kafkalog
from kafkalog.log.log import Log
from kafkalog.log.recovery_plan import plan_partition
from tests.cli.terminal import at_a_terminal

EXE = shutil.which("kafkalog")
CMD = [EXE] if EXE else [sys.executable, "-m", "kafkalog.cli.main"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=300)


def lines(out: str) -> List[dict]:
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def snapshot(d: Path) -> Dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def segments(part: Path) -> List[Path]:
    return sorted(part.glob("*.log"))


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """orders-0: 3,000 records over many segments; 40 random bytes in the second segment."""
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("orders", 1, {"segment.bytes": 20000})
        for i in range(3000):
            dl.produce("orders", b"v%05d" % i + b"x" * 30, key=b"k%d" % i, partition=0)
    seg = segments(d / "orders-0")[1]
    raw = bytearray(seg.read_bytes())
    raw[5000:5040] = random.Random(24).randbytes(40)
    seg.write_bytes(bytes(raw))
    return d


def test_dry_run_says_what_would_be_cut_and_changes_nothing(damaged: Path) -> None:
    before = snapshot(damaged)
    res = cli("recover", str(damaged), "--dry-run")
    assert res.returncode == 3, res.stdout + res.stderr            # records would be dropped
    assert snapshot(damaged) == before                               # not a byte changed
    (plan,) = [x for x in lines(res.stdout) if x["type"] == "plan"]
    segs = segments(damaged / "orders-0")
    assert plan["logEndOffsetBefore"] == 3000 and 0 < plan["logEndOffset"] < 3000
    first = plan["cuts"][0]
    assert first["file"] == str(segs[1]) and first["kind"] == "corruption" and first["position"] <= 5000
    assert [c["file"] for c in plan["cuts"][1:]] == [str(s) for s in segs[2:]]
    assert all(c["kind"] == "deleted" for c in plan["cuts"][1:])
    assert "WOULD DROP offsets" in res.stderr and "orders-0" in res.stderr
    assert lines(res.stdout)[-1] == {"type": "summary", "dryRun": True, "partitions": 1,
                                     "cutBytes": plan["cutBytes"], "droppedOffsets": plan["droppedOffsets"]}


def test_recover_keeps_the_cut_bytes_and_says_records_were_dropped(damaged: Path) -> None:
    part = damaged / "orders-0"
    originals = {s.name: s.read_bytes() for s in segments(part)}
    plan = lines(cli("recover", str(damaged), "--dry-run").stdout)[0]
    res = cli("recover", str(damaged))
    assert res.returncode == 3, res.stdout + res.stderr
    out = lines(res.stdout)
    kept = [x for x in out if x["type"] == "keptAside"]
    assert [(k["file"], k["position"]) for k in kept] == [(c["file"], c["position"]) for c in plan["cuts"]]
    for k in kept:                                      # byte for byte what recovery removed
        name = os.path.basename(k["file"])
        assert Path(k["keptIn"]).parent == part
        assert Path(k["keptIn"]).name == f"{name}.{k['position']}.truncated"
        assert Path(k["keptIn"]).read_bytes() == originals[name][k["position"]:]
    (summary,) = [x for x in out if x["type"] == "partition"]
    assert summary["logEndOffset"] == plan["logEndOffset"]           # the plan was right
    assert summary["droppedOffsets"] == 3000 - plan["logEndOffset"]
    assert not [x for x in out if x["type"] == "unplanned"]
    assert "DROPPED offsets" in res.stderr and ".truncated" in res.stderr
    # the kept files change nothing for readers: the directory opens, the log ends where it was cut
    with kafkalog.open(damaged, read_only=True) as dl:
        assert sum(1 for _ in dl.consume("orders")) == plan["logEndOffset"]
    res = cli("verify", str(damaged))
    assert res.returncode == 0, res.stdout[-2000:]
    res = cli("recover", str(damaged))                                # nothing left to cut
    assert res.returncode == 0 and lines(res.stdout)[-1]["droppedOffsets"] == 0


def test_keep_dir_and_discard(damaged: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(damaged, copy)
    aside = tmp_path / "aside"
    res = cli("recover", str(damaged), "--keep-dir", str(aside))
    assert res.returncode == 3
    kept = sorted(p.name for p in aside.iterdir())
    assert kept and all(n.startswith("orders-0.") and n.endswith(".truncated") for n in kept)
    assert not list((damaged / "orders-0").glob("*.truncated"))
    kept_run = res
    res = cli("recover", str(copy), "--discard")
    assert res.returncode == 3 and "not kept (--discard)" in res.stderr
    assert not list(copy.rglob("*.truncated"))
    # --discard plans no cuts (nothing is kept): what it reports is the recovery's, as with a plan
    (a,) = [x for x in lines(kept_run.stdout) if x["type"] == "partition"]
    (b,) = [x for x in lines(res.stdout) if x["type"] == "partition"]
    same = ("logEndOffsetBefore", "logEndOffset", "droppedOffsets", "truncatedBytes", "deletedSegments")
    assert a["logEndOffsetBefore"] == 3000 and a["droppedOffsets"] > 0
    assert {k: a[k] for k in same} == {k: b[k] for k in same}
    assert kept_run.stderr.split("; the cut bytes")[0] == res.stderr.split("; the cut bytes")[0].replace(
        str(copy), str(damaged))                     # the same offsets, bytes, file, position and kind
    res = cli("recover", str(copy), "--discard", "--keep-dir", str(aside))
    assert res.returncode == 2 and "exclusive" in res.stderr


COUNT_CRCS = """
import atexit, sys
import kafkalog.record.header_walk as h
calls = [0]
real = h.crc32c
def counted(data, *a):
    calls[0] += 1
    return real(data, *a)
h.crc32c = counted
atexit.register(lambda: sys.stderr.write("CRCS %d\\n" % calls[0]))
from kafkalog.cli.main import main
sys.argv = ["kafkalog", *sys.argv[1:]]
main()
"""


def test_discard_checks_each_batch_once(tmp_path: Path) -> None:
    """Without bytes to keep aside, no plan walks the segments before the recovery: each batch's
    CRC is computed once (batches above 16 KiB go through the crc32c package, counted here),
    against twice when the cuts are planned first."""
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("big", 1, {"segment.bytes": 200_000})
        for i in range(30):
            dl.produce("big", b"%d" % i + b"x" * 20_000, partition=0)
    batches = 30

    def crcs(*args: str) -> int:
        res = subprocess.run([sys.executable, "-c", COUNT_CRCS, "recover", str(d), *args, "--format", "json"],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        (summary,) = [x for x in lines(res.stdout) if x["type"] == "partition"]
        assert summary["recoveredSegments"] >= 3 and summary["logEndOffset"] == batches
        return int(res.stderr.split("CRCS ")[1].split()[0])

    assert crcs("--discard") == batches
    assert crcs() == 2 * batches


def _at_a_terminal(args: List[str]) -> tuple[int, str]:
    """Run with stdout and stderr on one pseudo-terminal (a progress bar is drawn only there; a
    terminal that can draw one: rich draws nothing on ``TERM=dumb``): (exit, what it received)."""
    code, screen, _err = at_a_terminal(args, stderr_too=True, env=dict(os.environ, TERM="xterm-256color"))
    return code, screen


def test_a_data_directory_shows_its_planning_and_its_recovery_at_a_terminal(tmp_path: Path) -> None:
    """Both long phases of a data directory's recovery draw a progress bar on a terminal (the
    plan walks every segment's batches first): named, and never when the output is piped."""
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 4)
        for i in range(40):
            dl.produce("t", b"v%d" % i, partition=i % 4)
    code, screen = _at_a_terminal(["recover", str(d), "--format", "json"])
    assert code == 0, screen
    assert "planning" in screen and "recovering" in screen, screen
    assert '"type":"summary"' in screen.replace(" ", "")
    code, screen = _at_a_terminal(["recover", str(d), "--format", "json", "--no-progress"])
    assert code == 0 and "planning" not in screen and "recovering" not in screen, screen
    res = cli("recover", str(d), "--format", "json")
    assert res.returncode == 0 and "\x1b[" not in res.stdout + res.stderr
    assert "planning" not in res.stderr and lines(res.stdout)[-1]["type"] == "summary"


def test_a_torn_last_write_is_recovered_quietly(tmp_path: Path) -> None:
    """The normal result of a crash (a batch cut at the end of the active segment): reported and
    kept, no records dropped (the torn batch was never whole), exit 0."""
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        for i in range(50):
            dl.produce("t", b"v%d" % i, partition=0)
    seg = segments(d / "t-0")[-1]
    whole = seg.read_bytes()
    with open(seg, "ab") as f:
        f.write(whole[:40])                            # a batch header, its body never written
    res = cli("recover", str(d / "t-0"), "--dry-run")
    assert res.returncode == 0 and lines(res.stdout)[0]["droppedOffsets"] == 0
    res = cli("recover", str(d / "t-0"))
    assert res.returncode == 0, res.stderr
    assert "DROPPED" not in res.stderr
    assert (seg.parent / f"{seg.name}.{len(whole)}.truncated").read_bytes() == whole[:40]
    assert seg.read_bytes() == whole


def _damage(part: Path, rng: random.Random) -> str:
    segs = segments(part)
    seg = rng.choice(segs)
    raw = bytearray(seg.read_bytes())
    kind = rng.choice(["flip", "zero-tail", "cut", "garbage-tail", "offset"])
    if not raw:
        return "empty"
    pos = rng.randrange(len(raw))
    if kind == "flip":
        raw[pos] ^= 1 << rng.randrange(8)
    elif kind == "zero-tail":
        raw[pos:] = bytes(len(raw) - pos)
    elif kind == "cut":
        del raw[pos:]
    elif kind == "garbage-tail":
        raw += rng.randbytes(rng.randrange(1, 200))
    else:                                                  # a baseOffset (outside the CRC)
        p = 0 if rng.random() < 0.5 else min(pos, len(raw) - 8)
        raw[p:p + 8] = (int.from_bytes(raw[p:p + 8], "big") + rng.randrange(1, 50)).to_bytes(8, "big")
    seg.write_bytes(bytes(raw))
    return f"{kind} of {seg.name} at {pos}"


@pytest.mark.parametrize("seed", range(30))
def test_the_plan_is_what_recovery_does(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    d = tmp_path / "data"
    compacted = seed % 3 == 0
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1, {"segment.bytes": rng.choice([3000, 8000, 30000]),
                                 "cleanup.policy": "compact" if compacted else "delete"})
        with dl.producer(conf={"linger.ms": 0, "batch.size": rng.choice([200, 2000])}) as p:
            for i in range(rng.randrange(50, 600)):
                p.send("t", b"v%d" % i * rng.randrange(1, 4), key=b"k%d" % (i % 40), partition=0)
    part = d / "t-0"
    what = _damage(part, rng)
    plan = plan_partition(str(part), compacted=compacted)
    log = Log.open(str(part), {"cleanup.policy": "compact" if compacted else "delete"},
                   recovery_point=0, had_clean_shutdown=False)
    try:
        report = log.recovery_report
        assert report is not None
        truncated = [(t["file"], t["position"]) for t in report.truncations if t["bytes"]]
        deleted = [(s["file"], 0) for s in report.deleted_segments]
        planned = [(c.file, c.position) for c in plan.cuts if c.kind != "deleted"]
        assert sorted(truncated) == sorted(planned), what
        assert sorted(deleted) == sorted((c.file, 0) for c in plan.cuts if c.kind == "deleted"), what
        assert log.log_end_offset == plan.log_end_offset, what
    finally:
        log.close()


def test_from_the_recovery_point_the_plan_is_what_recovery_does(tmp_path: Path) -> None:
    """A directory a process left without closing it (no .kafka_cleanshutdown, the recovery
    point checkpointed behind the log end) with a torn write at the end of a partition: Kafka's
    crash recovery (--from-recovery-point) cuts what the dry run said, and no more."""
    d = tmp_path / "data"
    dl = kafkalog.open(d, background=False)
    dl.create_topic("t", 2, {"segment.bytes": 4000})
    for i in range(300):
        dl.produce("t", b"v%03d" % i, partition=i % 2)
    dl.manager.checkpoint_recovery_offsets()
    for i in range(300, 400):
        dl.produce("t", b"v%03d" % i, partition=i % 2)
    dl.flush()
    crashed = tmp_path / "crashed"
    shutil.copytree(d, crashed, ignore=shutil.ignore_patterns(".lock"))
    dl.close()
    seg = segments(crashed / "t-1")[-1]
    whole = seg.read_bytes()
    seg.write_bytes(whole + whole[:30])                    # a batch header, cut short
    dry = cli("recover", str(crashed), "--from-recovery-point", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    plans = {x["partition"]: x for x in lines(dry.stdout) if x["type"] == "plan"}
    assert plans["t-0"]["cuts"] == []
    assert [(c["file"], c["position"]) for c in plans["t-1"]["cuts"]] == [(str(seg), len(whole))]
    res = cli("recover", str(crashed), "--from-recovery-point")
    assert res.returncode == 0, res.stdout + res.stderr
    out = lines(res.stdout)
    truncs = [(x["file"], x["position"]) for x in out if x["type"] == "truncation"]
    assert truncs == [(str(seg), len(whole))] and not [x for x in out if x["type"] == "unplanned"]
    assert seg.read_bytes() == whole
