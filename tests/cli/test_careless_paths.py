"""The command line on the careless path, as an operator meets it: a real ``kafkalog`` process, real
stdin and pipes. Each test here failed on the command line before issue 13."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest

import kafkalog

EXE = shutil.which("kafkalog")


def cli(*args: str, input: Optional[str] = None, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [EXE, *args] if EXE else [sys.executable, "-m", "kafkalog.cli.main", *args]
    return subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)


def json_lines(out: str) -> List[dict]:
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def tree(path: Path) -> List[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1, {"segment.bytes": 4000, "index.interval.bytes": 100})
        for i in range(100):
            dl.produce("t", b"v%03d" % i + b"." * 50, key=b"k%d" % (i % 5), partition=0)
    return d


def test_a_typo_in_a_field_name_is_refused_and_writes_no_tombstone(data_dir: Path) -> None:
    res = cli("produce", str(data_dir), "t", input='{"key":"k","value":"v1"}\n{"key":"k","vlaue":"v2"}\n')
    assert res.returncode == 2
    lines = json_lines(res.stdout)
    err = [x for x in lines if x["type"] == "error"]
    assert len(err) == 1 and err[0]["line"] == 2 and err[0]["file"] == "<stdin>"
    assert "vlaue" in err[0]["message"] and res.stderr == ""           # printed once
    assert [x for x in lines if x["type"] == "summary"][0]["records"] == 1
    with kafkalog.open(data_dir, read_only=True) as dl:
        values = [r.value for r in dl.consume("t") if r.key == b"k"]
    assert values[-1] == b"v1" and None not in values


def test_a_json_typo_on_line_3_says_where_and_what_was_written(tmp_path: Path) -> None:
    """The lines before a bad one are appended (streaming input); the summary says the input was
    not all written (complete: false) and the error gives the line and its byte position."""
    d = tmp_path / "d"
    text = '{"value":"a"}\n{"value":"b"}\n{"value": "c",,}\n{"value":"d"}\n'
    res = cli("produce", str(d), "t", input=text)
    assert res.returncode == 2
    summary, error = json_lines(res.stdout)
    assert summary["records"] == 2 and summary["complete"] is False and summary["interrupted"] is False
    third = text.index('{"value": "c"')
    assert error["line"] == 3 and error["file"] == "<stdin>"
    assert error["position"] == third + text[third:].index(",,") + 1      # the second comma
    with kafkalog.open(d, read_only=True) as dl:
        assert [r.value for r in dl.consume("t")] == [b"a", b"b"]


def test_produce_creates_nothing_until_valid_input(tmp_path: Path) -> None:
    d = tmp_path / "new"
    res = cli("produce", str(d), "orders", "--format", "text", input="not json\n")
    assert res.returncode == 2 and not d.exists()
    assert res.stdout == "" and res.stderr.count("Error:") == 1 and "<stdin>" in res.stderr
    assert "line 1" in res.stderr and "<stdin> at byte 0" in res.stderr
    d.mkdir()
    res = cli("produce", str(d), "orders", input='{"value":"ok"}\n{"value": 5}\n')
    assert res.returncode == 2
    with kafkalog.open(d, read_only=True) as dl:
        assert [r.value for r in dl.consume("orders")] == [b"ok"]
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli("produce", str(empty), "orders", input="")
    assert res.returncode == 0 and tree(empty) == []


def test_text_input_with_a_key_separator_and_value_files(tmp_path: Path) -> None:
    d = tmp_path / "d"
    vf = tmp_path / "payload.bin"
    vf.write_bytes(b"\x00\x01binary")
    res = cli("produce", str(d), "t", "--input", "text", "-K", ":", input="a:1\nb:two:parts\n")
    assert res.returncode == 0, res.stderr
    res = cli("produce", str(d), "t", "--input", "text", "-K", "=", "--value-files", input=f"c={vf}\n")
    assert res.returncode == 0, res.stderr
    res = cli("produce", str(d), "t", "--input", "text", "-K", ":", input="no separator here\n")
    assert res.returncode == 2 and "line 1" in json_lines(res.stdout)[-1]["message"]
    with kafkalog.open(d, read_only=True) as dl:
        got = [(r.key, r.value) for r in dl.consume("t")]
    assert got == [(b"a", b"1"), (b"b", b"two:parts"), (b"c", b"\x00\x01binary")]


@pytest.mark.parametrize("command", ["compact", "recover", "describe", "consume", "offsets"])
def test_a_path_that_does_not_exist_is_refused_and_not_created(tmp_path: Path, command: str) -> None:
    typo = tmp_path / "dtaa"
    args = [command, str(typo)] + (["t"] if command == "consume" else [])
    res = cli(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert not typo.exists()
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("command", ["compact", "recover", "verify", "describe"])
def test_an_ordinary_directory_is_refused_and_left_untouched(tmp_path: Path, command: str) -> None:
    plain = tmp_path / "photos"
    plain.mkdir()
    (plain / "cat.jpg").write_bytes(b"\xff\xd8")
    res = cli(command, str(plain))
    assert res.returncode == 2, res.stdout + res.stderr
    assert tree(plain) == ["cat.jpg"]                     # no meta.properties, .lock or checkpoints
    assert "not a Kafka data directory" in res.stdout + res.stderr or \
        "neither a Kafka data directory" in res.stdout + res.stderr


def test_a_partition_directory_given_as_the_data_directory(data_dir: Path) -> None:
    res = cli("describe", str(data_dir / "t-0"), "--format", "text")
    assert res.returncode == 2 and "partition directory" in res.stderr and str(data_dir) in res.stderr
    res = cli("verify", str(data_dir / "t-0"))             # verify takes a partition directory
    assert res.returncode == 0 and json_lines(res.stdout)[-1]["ok"] is True


def test_errors_are_printed_once_in_each_format(tmp_path: Path) -> None:
    res = cli("describe", str(tmp_path / "missing"), "--format", "text")
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1
    res = cli("describe", str(tmp_path / "missing"), "--format", "json")
    assert res.returncode == 2 and res.stderr == ""
    (line,) = json_lines(res.stdout)
    assert line["type"] == "error" and line["file"] == str(tmp_path / "missing")


def test_dump_text_mode_says_why_it_failed(data_dir: Path) -> None:
    seg = sorted((data_dir / "t-0").glob("*.index"))[0]
    raw = bytearray(seg.read_bytes())
    assert len(raw) >= 16
    raw[8:12] = (0).to_bytes(4, "big")                    # the second entry's relative offset goes back
    raw[0:4] = (50).to_bytes(4, "big")
    seg.write_bytes(bytes(raw))
    res = cli("dump", "--verify-index-only", str(seg))
    assert res.returncode == 1
    assert "Error:" in res.stderr and "at byte" in res.stderr


def test_a_random_index_file_prints_no_garbage_entries(tmp_path: Path) -> None:
    junk = tmp_path / "00000000000000000000.index"
    junk.write_bytes(os.urandom(8 * 64))
    res = cli("dump", str(junk))
    assert res.returncode == 1
    entries = [x for x in res.stdout.splitlines() if x.startswith("offset:")]
    assert len(entries) < 64 and "Error:" in res.stderr


def test_dump_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    with kafkalog.open(tmp_path / "big", background=False) as dl:
        dl.create_topic("big", 1)
        with dl.producer() as p:
            for i in range(20000):                   # far more text than a pipe buffer holds
                p.send("big", b"v%d" % i, key=b"k%d" % i)
    seg = sorted((tmp_path / "big" / "big-0").glob("*.log"))[0]
    cmd = [EXE] if EXE else [sys.executable, "-m", "kafkalog.cli.main"]
    p1 = subprocess.Popen([*cmd, "dump", "--deep-iteration", str(seg)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    assert p1.stdout is not None
    first = p1.stdout.readline()
    p1.stdout.close()                                      # as `| head -1` does
    _out, err = p1.communicate(timeout=60)
    assert first.startswith(b"Dumping")
    assert err == b"" and p1.returncode == 141


def test_dump_takes_directories_and_kafkas_files_option(data_dir: Path) -> None:
    res = cli("dump", str(data_dir / "t-0"), "--format", "json")
    assert res.returncode == 0, res.stderr
    files = {x["file"] for x in json_lines(res.stdout) if x["type"] == "file"}
    assert len(files) == len(list((data_dir / "t-0").glob("*.log")))
    logs = sorted(str(p) for p in (data_dir / "t-0").glob("*.log"))
    res = cli("dump", "--files", ",".join(logs[:2]))
    assert res.returncode == 0 and res.stdout.count("Dumping ") == 2


def test_compact_that_cleans_nothing_says_why(data_dir: Path) -> None:
    with kafkalog.open(data_dir, background=False) as dl:
        dl.create_topic("c", 1, {"cleanup.policy": "compact"})
        dl.produce("c", b"x", key=b"a")
    res = cli("compact", str(data_dir), "c")
    assert res.returncode == 0, res.stderr
    assert "active segment" in res.stdout


def test_offsets_like_kafka_get_offsets(data_dir: Path) -> None:
    with kafkalog.open(data_dir, background=False) as dl:
        dl.create_topic("ts", 2)
        for i in range(10):
            dl.produce("ts", b"x", partition=i % 2, timestamp=1000 + i)
    res = cli("offsets", str(data_dir), "--topic", "ts")
    assert res.returncode == 0 and res.stdout.splitlines() == ["ts:0:5", "ts:1:5"]
    res = cli("offsets", str(data_dir), "--topic", "ts", "--time", "earliest", "--partitions", "1")
    assert res.stdout.splitlines() == ["ts:1:0"]
    res = cli("offsets", str(data_dir), "--topic", "ts", "--time", "1005")
    assert res.stdout.splitlines() == ["ts:0:3", "ts:1:2"]
    res = cli("offsets", str(data_dir), "--topic", "ts", "--time", "max-timestamp", "--format", "json")
    assert [(x["partition"], x["offset"]) for x in json_lines(res.stdout)] == [(0, 4), (1, 4)]
    res = cli("offsets", str(data_dir), "--topic", "nope")
    assert res.returncode == 2


def _wait_for_values(d: Path, topic: str, n: int) -> List[bytes]:
    seen: List[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (d / f"{topic}-0").exists():
            with kafkalog.open(d, read_only=True) as dl:
                seen = [r.value for r in dl.consume(topic)]
            if len(seen) >= n:
                break
        time.sleep(0.05)
    return seen


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_produce_streams_and_ctrl_c_flushes_with_a_summary(tmp_path: Path, sig: int) -> None:
    d = tmp_path / "d"
    cmd = [EXE] if EXE else [sys.executable, "-m", "kafkalog.cli.main"]
    p = subprocess.Popen([*cmd, "produce", str(d), "s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdin is not None
    for i in range(3):
        p.stdin.write(json.dumps({"value": f"r{i}"}) + "\n")
    p.stdin.flush()
    assert _wait_for_values(d, "s", 3) == [b"r0", b"r1", b"r2"]    # visible while input is open
    p.stdin.write(json.dumps({"value": "r3"}) + "\n")
    p.stdin.flush()
    assert _wait_for_values(d, "s", 4)[3:] == [b"r3"]               # read before the signal
    # the signal arrives while the input is still open (never racing its end): the process must
    # end on the signal alone
    p.send_signal(sig)
    try:
        p.wait(timeout=60)
    finally:
        out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, err                 # 130 for SIGINT, 143 for SIGTERM
    summary = json_lines(out)[-1]
    assert summary["records"] == 4 and summary["interrupted"] is True and summary["complete"] is False
    assert summary["partitions"]["0"]["lastOffset"] == 3 and "Aborted" not in err
    assert "Traceback" not in err
    assert (d / ".kafka_cleanshutdown").exists()           # shut down cleanly
    assert not (d / ".lock").exists() or _lock_is_free(d / ".lock")


def _lock_is_free(path: Path) -> bool:
    import fcntl
    with open(path, "rb") as f:
        try:                        # the record lock kafkalog (and Kafka) take, probed shared
            fcntl.lockf(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except OSError:
            return False


def test_every_option_has_help_and_the_summaries_are_whole() -> None:
    from kafkalog.cli.main import all_commands
    commands = {cmd.name: cmd for cmd in all_commands()}
    missing = []
    for name, cmd in commands.items():
        for param in cmd.params:
            if param.param_type_name == "option" and not getattr(param, "help", None) \
                    and param.name not in ("help",):
                missing.append(f"{name} --{param.name}")
    assert missing == []
    res = cli("--help")
    assert res.returncode == 0
    flat = " ".join(res.stdout.split())
    for name, cmd in commands.items():
        whole = cmd.get_short_help_str(limit=1000)         # the first sentence, never cut with "..."
        assert f"{name} {whole}" in flat and not whole.endswith("..."), name


def test_sigkill_of_a_streaming_produce_keeps_what_lingered(tmp_path: Path) -> None:
    d = tmp_path / "d"
    cmd = [EXE] if EXE else [sys.executable, "-m", "kafkalog.cli.main"]
    p = subprocess.Popen([*cmd, "produce", str(d), "s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdin is not None
    sent = 0
    for window in range(5):                       # five linger windows, each followed by a pause
        for _ in range(20):
            p.stdin.write(json.dumps({"key": f"k{sent}", "value": f"v{sent}"}) + "\n")
            sent += 1
        p.stdin.flush()
        if window == 0:                            # the process is up and the first window landed
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (d / "s-0").exists():
                time.sleep(0.05)
        time.sleep(0.5)
    p.kill()                                       # SIGKILL: no flush, no summary
    p.communicate(timeout=30)
    with kafkalog.open(d, read_only=True) as dl:
        got = [r.value for r in dl.consume("s")]
    assert got == [b"v%d" % i for i in range(sent)]


@pytest.mark.slow                # two runs of the main job (~60 s); README command 1 runs it once
@pytest.mark.spark
def test_the_pipeline_run_twice_reports_this_run_and_what_was_there(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"
    d = tmp_path / "pipe"
    runs = []
    for _ in range(2):
        res = subprocess.run([sys.executable, str(example), str(d), "--events", "3000", "--users", "200",
                              "--partitions", "2"], capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        runs.append(res.stdout)
    assert "written          3,000 events of 200 users this run" in runs[1]
    assert "before this run  0 records" in runs[0]
    assert "spark            local[*] (application local-" in runs[0]     # no master given: local[*]
    for phase in ("1/3 writing 3,000 events", "2/3 compacting", "3/3 reading"):   # progress
        assert phase in runs[0], runs[0]
    assert "the cleaner never touches a partition's active segment" in runs[0]     # why > keys
    prior = [line for line in runs[1].splitlines() if "before this run" in line][0]
    assert " 0 records" not in prior
