"""A data directory is recognised as Kafka recognises one, and nothing else is taken for one
(issue 24, item 3): every command as a real subprocess on ``/etc``'s shape (a ``dbus-1``
directory looks like partition 1 of topic ``dbus``), on directories Kafka wrote (with
``meta.properties``, and older ones without), on typos and empty paths; a corrupt
``meta.properties`` is refused naming the file (item 9)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

import kafkalog
from kafkalog.errors import LogDirError

EXE = shutil.which("kafkalog")
CMD = [EXE] if EXE else [sys.executable, "-m", "kafkalog.cli.main"]


def cli(*args: str, input: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CMD, *args], input=input, capture_output=True, text=True, timeout=120)


def tree(path: Path) -> List[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def etc_like(tmp_path: Path) -> Path:
    """What /etc holds that fooled the commands: <name>-<n> directories of other programs."""
    etc = tmp_path / "etc"
    for sub in ("dbus-1/session.d", "dbus-1/system.d", "polkit-1/rules.d", "ssl/certs"):
        (etc / sub).mkdir(parents=True)
    (etc / "dbus-1" / "system.conf").write_text("<busconfig/>\n")
    (etc / "hostname").write_text("box\n")
    return etc


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 2)
        for i in range(20):
            dl.produce("t", b"v%d" % i, partition=i % 2)
    return d


COMMANDS = [
    ["describe", "{d}"], ["verify", "{d}"], ["recover", "{d}"], ["compact", "{d}"],
    ["consume", "{d}", "dbus"], ["offsets", "{d}"], ["groups", "{d}", "--list"],
    ["produce", "{d}", "dbus"], ["serve", "{d}", "--port", "0"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_directory_of_other_programs_is_refused_and_left_untouched(etc_like: Path,
                                                                     args: List[str]) -> None:
    before = tree(etc_like)
    res = cli(*[a.format(d=etc_like) for a in args], input='{"value": "x"}\n')
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert "not a Kafka data directory" in out and "no meta.properties" in out, out
    assert "dbus-1/" in out and "no Kafka files" in out, out          # names what it found
    assert "Traceback" not in out and out.count("not a Kafka data directory") == 1
    assert tree(etc_like) == before                   # no meta.properties, .lock, checkpoints


def test_the_python_api_refuses_it_too(etc_like: Path) -> None:
    before = tree(etc_like)
    with pytest.raises(LogDirError, match="dbus-1/"):
        kafkalog.open(etc_like)
    assert tree(etc_like) == before


def test_a_typo_in_produces_path_is_announced_and_an_existing_directory_is_not(
        data_dir: Path, tmp_path: Path) -> None:
    typo = tmp_path / "dtaa"
    res = cli("produce", str(typo), "t", input='{"value": "x"}\n')
    assert res.returncode == 0, res.stderr
    assert res.stderr == f"kafkalog produce: created the data directory {typo}\n"
    res = cli("produce", str(data_dir), "t", input='{"value": "y"}\n')
    assert res.returncode == 0 and res.stderr == ""
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli("describe", str(empty), "--format", "text")      # a reader finds nothing to read
    assert res.returncode == 2 and "it is empty" in res.stderr
    res = cli("produce", str(empty), "t", input='{"value": "z"}\n')
    assert res.returncode == 0 and "created the data directory" in res.stderr


def _partition_dir(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest)
    for name in ("partition.metadata", "leader-epoch-checkpoint"):
        (dest / name).unlink(missing_ok=True)


def test_an_older_kafka_directory_without_meta_properties_is_a_data_directory(
        data_dir: Path, tmp_path: Path) -> None:
    """Brokers before 0.9 wrote no meta.properties: partition directories of segments and the
    offset checkpoints (copied partition directories alike) are recognised, and opened."""
    old = tmp_path / "old"
    old.mkdir()
    for p in ("t-0", "t-1"):
        _partition_dir(data_dir / p, old / p)
    (old / "recovery-point-offset-checkpoint").write_text("0\n2\nt 0 10\nt 1 10\n")
    res = cli("describe", str(old), "--format", "json")
    assert res.returncode == 0, res.stderr
    assert sum(json.loads(x).get("logEndOffset", 0) for x in res.stdout.splitlines()) == 20
    res = cli("produce", str(old), "t", input='{"value": "more", "partition": 0}\n')
    assert res.returncode == 0 and res.stderr == ""           # an existing one: no notice
    assert (old / "meta.properties").exists()                  # as a Kafka 4 broker formats it


def test_partition_named_directories_without_kafka_files_are_named(data_dir: Path,
                                                                    tmp_path: Path) -> None:
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _partition_dir(data_dir / "t-0", mixed / "t-0")
    (mixed / "photos-2024").mkdir()
    (mixed / "photos-2024" / "cat.jpg").write_bytes(b"\xff\xd8")
    res = cli("describe", str(mixed), "--format", "text")
    assert res.returncode == 2 and "photos-2024/ holds no Kafka files" in res.stderr, res.stderr


def test_a_partition_directory_is_not_a_data_directory(data_dir: Path) -> None:
    res = cli("produce", str(data_dir / "t-0"), "t", input='{"value": "x"}\n')
    assert res.returncode == 2 and "partition directory" in res.stdout + res.stderr
    assert str(data_dir) in res.stdout + res.stderr


@pytest.mark.parametrize("content", [b"", b"\x00\xff garbage \x13\n=\n", b"cluster.id=abc\n",
                                     b"version=1\nnode.id=1\n"],
                         ids=["empty", "garbage", "no-broker-id", "v1-no-cluster-id"])
def test_a_corrupt_meta_properties_is_refused_naming_the_file(data_dir: Path, content: bytes) -> None:
    meta = data_dir / "meta.properties"
    meta.write_bytes(content)
    res = cli("serve", str(data_dir), "--port", "0")
    assert res.returncode == 2, res.stdout + res.stderr
    (err,) = [json.loads(x) for x in res.stdout.splitlines() if '"error"' in x]
    assert err["error"] == "CorruptCheckpointError" and err["file"] == str(meta), err
    assert "Traceback" not in res.stderr and "listening" not in res.stdout
    res = cli("produce", str(data_dir), "t", input='{"value": "x"}\n')
    assert res.returncode == 2 and str(meta) in res.stdout
    assert meta.read_bytes() == content                        # left as found


def test_a_meta_properties_written_by_kafka_is_accepted(data_dir: Path) -> None:
    """What Kafka 4 (KRaft, version 1) and a ZooKeeper-era broker (version 0) write."""
    meta = data_dir / "meta.properties"
    for text in ("#\n#Thu Jan 01 00:00:00 UTC 2026\nnode.id=1\ndirectory.id=5wo3FeR4Ru2FIXjvJ_4S3A\n"
                 "version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n",
                 "#\n#Thu Jan 01 00:00:00 UTC 2020\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\nversion=0\n"
                 "broker.id=0\n"):
        meta.write_text(text)
        res = cli("describe", str(data_dir))
        assert res.returncode == 0, res.stderr
        res = cli("produce", str(data_dir), "t", input='{"value": "x"}\n')
        assert res.returncode == 0, res.stdout + res.stderr
        assert meta.read_text() == text


def test_a_data_directory_kafka_4_4_wrote_is_recognised(kafka44_broker) -> None:
    """Kafka 4.4's own log directory (meta.properties version 1, __cluster_metadata-0, its
    checkpoints) is a data directory to every reading command, while the broker runs."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": kafka44_broker.bootstrap})
    for f in admin.create_topics([NewTopic("recognised", 2, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": kafka44_broker.bootstrap})
    for i in range(20):
        p.produce("recognised", value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    log_dir = kafka44_broker.log_dir
    assert (log_dir / "meta.properties").exists()
    res = cli("describe", str(log_dir), "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in res.stdout.splitlines() if x]
    assert [(r["partition"], r["logEndOffset"]) for r in rows if r["topic"] == "recognised"] == [(0, 10), (1, 10)]
    res = cli("verify", str(log_dir / "recognised-0"))
    assert res.returncode == 0, res.stdout[-2000:]
    res = cli("consume", str(log_dir), "recognised", "--partition", "1", "--format", "text")
    assert res.returncode == 0 and res.stdout.split() == ["v%d" % i for i in range(1, 20, 2)]


def test_a_read_only_open_refuses_it_too(etc_like: Path) -> None:
    with pytest.raises(LogDirError, match="dbus-1/"):
        kafkalog.open(etc_like, read_only=True)
