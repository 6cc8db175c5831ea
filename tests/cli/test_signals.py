"""SIGTERM is Ctrl-C, and a Ctrl-C at any moment ends a command quietly (issue 24, item 5); ports
are 0-65535 (item 6). Real ``kafkalog`` processes, real signals, real pipes."""

from __future__ import annotations

import json
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

import kafkalog

EXE = shutil.which("kafkalog")
CMD = [EXE] if EXE else [sys.executable, "-m", "kafkalog.cli.main"]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        for i in range(500):
            dl.produce("t", b"v%03d" % i, key=b"k%d" % i, partition=0)
    return d


def _read_line(p: subprocess.Popen, timeout: float = 60) -> str:
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    assert ready, "no output"
    return p.stdout.readline()


# --- Ctrl-C while a command starts --------------------------------------------------------------

STARTS = {
    "consume": ["consume", "{d}", "t", "--follow"],
    "produce": ["produce", "{d}", "t"],
    "serve": ["serve", "{d}", "--port", "0"],
    "groups": ["groups", "{d}", "--list"],
}


def _signals_caught(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16)
    return 0


def _wait_until_kafkalog_runs(p: subprocess.Popen, timeout: float = 30) -> None:
    """Until the process catches SIGTERM: ``kafkalog.cli.main`` handles it from its first lines on
    (the interpreter before that, its ``site`` module above all, is not kafkalog's to make
    quiet; how long it takes depends on the machine and on the bytecode cache)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        if _signals_caught(p.pid) & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.001)
    raise AssertionError("the command never handled SIGTERM (it handles SIGINT and SIGTERM alike "
                         "from its start)")


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.2, 0.3])
@pytest.mark.parametrize("command", sorted(STARTS))
def test_ctrl_c_in_the_first_moments_of_a_command_prints_no_traceback(data_dir: Path, command: str,
                                                                        delay: float) -> None:
    """Ctrl-C within the first 0.4 s of the command's own start-up (its imports, opening the
    directory, binding): no traceback, the exit status of a Ctrl-C."""
    args = [a.format(d=data_dir) for a in STARTS[command]]
    out_path, err_path = data_dir.parent / "out", data_dir.parent / "err"
    with open(out_path, "w") as out_f, open(err_path, "w") as err_f:      # (no pipe to fill)
        p = subprocess.Popen([*CMD, *args], stdin=subprocess.PIPE, stdout=out_f, stderr=err_f, text=True)
        try:
            _wait_until_kafkalog_runs(p)
            time.sleep(delay)
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)             # stdin stays open: the signal alone ends it
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            assert p.stdin is not None
            p.stdin.close()
    err = err_path.read_text()
    assert "Traceback" not in err and "Aborted" not in err, err
    # ended by the signal (130); a broker stopped cleanly (0); a command that was done (groups: 0,
    # or -2 when the signal came while the interpreter was exiting, its handlers reset to the
    # default: killed by SIGINT, which a shell reports as 130 too)
    allowed = {"serve": (130, 0), "groups": (130, 0, -signal.SIGINT)}.get(command, (130,))
    assert p.returncode in allowed, (p.returncode, err)
    with kafkalog.open(data_dir, read_only=True) as dl:       # nothing damaged
        assert sum(1 for _ in dl.consume("t")) == 500


# --- SIGTERM handled as Ctrl-C --------------------------------------------------------------------

def test_sigterm_ends_consume_follow_with_every_record_printed_and_committed(data_dir: Path) -> None:
    p = subprocess.Popen([*CMD, "consume", str(data_dir), "t", "--follow", "--group", "billing"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = _read_line(p)
    assert json.loads(first)["offset"] == 0
    time.sleep(1.0)                                     # at the end of the log, following
    p.send_signal(signal.SIGTERM)
    assert p.stdout is not None and p.stderr is not None
    out = p.stdout.read()                  # (through the same buffered reader as the first line)
    err = p.stderr.read()
    p.wait(timeout=60)
    lines: List[dict] = [json.loads(first)] + [json.loads(x) for x in out.splitlines() if x]
    assert [x["offset"] for x in lines] == list(range(500))      # every record reached the pipe
    assert p.returncode == 143, err                                # SIGTERM's exit status
    assert "Traceback" not in err
    with kafkalog.open(data_dir, read_only=True) as dl:
        assert dl.consumer(group_id="billing").committed(("t", 0)) == 500
    assert (data_dir / ".kafka_cleanshutdown").exists()          # closed cleanly


def test_sigterm_ends_a_waiting_produce_like_ctrl_c(tmp_path: Path) -> None:
    d = tmp_path / "d"
    p = subprocess.Popen([*CMD, "produce", str(d), "s", "--format", "text"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdin is not None
    p.stdin.write('{"value": "one"}\n')
    p.stdin.flush()
    deadline = time.monotonic() + 60
    while not (d / "s-0").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "1 record(s) appended to s (interrupted)" in err and "Traceback" not in err
    assert (d / ".kafka_cleanshutdown").exists()


# --- ports ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("port", ["92092", "65536", "-1", "http"])
def test_a_port_outside_0_65535_is_refused(tmp_path: Path, port: str) -> None:
    d = tmp_path / "data"
    res = subprocess.run([*CMD, "serve", str(d), "--port", port], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--port" in res.stderr and ("0<=x<=65535" in res.stderr or "not a valid integer" in res.stderr)
    assert "gaierror" not in res.stderr and "Traceback" not in res.stderr
    assert not d.exists() and res.stdout == ""


def test_port_0_picks_a_free_port(tmp_path: Path) -> None:
    p = subprocess.Popen([*CMD, "serve", str(tmp_path / "data"), "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = json.loads(_read_line(p))
        assert line["type"] == "listening" and 0 < line["port"] <= 65535
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
    assert p.returncode == 0                            # serve's stop on SIGTERM is its normal end
