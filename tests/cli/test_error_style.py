"""One error style for every command (issue 36, item 5): text for people at a terminal (one
``Error: ...`` line on stderr, nothing on stdout), JSON lines when stdout is a pipe or ``--format
json`` asks (one ``{"type":"error",...}`` line on stdout, nothing on stderr), the same error names
(an operating-system error is a ``KafkalogIOError``, never a bare ``OSError``), exit code 2 for bad
input. Each command runs as a real process, once with its stdout on a pseudo-terminal, once on a
pipe. ``dump`` and ``offsets``, whose text is Kafka's own tools', print text (errors on stderr)
unless asked for JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalog
from tests.cli.terminal import at_a_terminal

ERROR_NAMES = {"LogDirError", "KafkalogIOError", "InvalidConfigError", "InvalidTopicError"}


def _cases(tmp: Path) -> dict[str, list[str]]:
    """A command line of each command that is bad input (each refused with exit 2)."""
    missing = str(tmp / "missing")
    afile = tmp / "afile"
    afile.write_text("not a data directory\n")
    return {
        "describe": ["describe", missing],
        "compact": ["compact", missing],
        "consume": ["consume", missing, "t", "--no-follow"],
        "produce": ["produce", str(afile), "t"],
        "verify": ["verify", missing],
        "recover": ["recover", missing],
        "groups": ["groups", missing, "--list"],
        "serve": ["serve", str(tmp / "new"), "--port", "0", "--config", "no.such.key=1"],
        "bootstrap-topics": ["bootstrap-topics", missing],
        "dump": ["dump", missing],
        "offsets": ["offsets", missing],
        "top": ["top", missing, "--iterations", "1"],
    }


KAFKA_TEXT = {"dump", "offsets"}       # text wherever stdout goes, as kafka-dump-log.sh / kafka-get-offsets.sh


def _at_a_terminal(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run with stdin and stdout on a pseudo-terminal, stderr on a pipe: (exit, stdout, stderr)."""
    return at_a_terminal(args, cwd=cwd)


def _piped(args: list[str], cwd: Path) -> tuple[int, str, str]:
    res = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", *args], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=120, cwd=cwd)
    return res.returncode, res.stdout, res.stderr


COMMANDS = ["describe", "compact", "consume", "produce", "verify", "recover", "groups", "serve",
            "bootstrap-topics", "dump", "offsets", "top"]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_error_at_a_terminal_is_one_text_line_on_stderr(tmp_path: Path, command: str) -> None:
    args = _cases(tmp_path)[command]
    code, out, err = _at_a_terminal(args, tmp_path)
    assert code == 2, (out, err)
    assert out.strip() == "", out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in err, err


@pytest.mark.parametrize("command", COMMANDS)
def test_an_error_piped_is_one_json_line_on_stdout(tmp_path: Path, command: str) -> None:
    args = _cases(tmp_path)[command]
    code, out, err = _piped(args, tmp_path)
    assert code == 2, (out, err)
    if command in KAFKA_TEXT:                       # Kafka's tools' text, unless asked for JSON
        assert out == "" and err.startswith("Error: ") and len(err.splitlines()) == 1, err
        code, out, err = _piped([*args, "--format", "json"], tmp_path)
        assert code == 2
    assert err == "", err
    (line,) = [json.loads(x) for x in out.splitlines()]
    assert line["type"] == "error" and line["error"] in ERROR_NAMES, line


def test_recover_names_an_os_error_as_every_command_does(tmp_path: Path) -> None:
    """recover said ``NotADirectoryError`` (a bare OSError) where the others say KafkalogIOError."""
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("t", 1)
        for _ in range(20):
            dl.produce("t", b"v" * 100, partition=0)
    seg = data / "t-0" / "00000000000000000000.log"
    raw = bytearray(seg.read_bytes())
    raw[500] ^= 0xFF                                # recovery cuts from here: bytes to keep aside
    seg.write_bytes(bytes(raw))
    (tmp_path / "afile").write_text("")
    args = ["recover", str(data), "--keep-dir", str(tmp_path / "afile" / "kept")]
    code, out, err = _piped(args, tmp_path)
    (line,) = [json.loads(x) for x in out.splitlines() if '"error"' in x]
    assert code == 2 and line["error"] == "KafkalogIOError" and line["file"], line
    code, out, err = _at_a_terminal(args, tmp_path)
    assert code == 2 and err.startswith("Error: ") and "afile" in err, err


def test_a_command_at_a_terminal_prints_text_and_piped_json(tmp_path: Path) -> None:
    """The same --format rule for every command: verify (whose default was JSON everywhere) prints
    text at a terminal; describe (whose default was text everywhere) prints JSON into a pipe."""
    data = tmp_path / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce("t", b"v", partition=0)
    code, out, _err = _at_a_terminal(["verify", "--no-progress", str(data)], tmp_path)
    assert code == 0 and "{" not in out and out.strip(), out
    code, out, _err = _piped(["verify", "--no-progress", str(data)], tmp_path)
    assert code == 0 and json.loads(out.splitlines()[-1])["type"] == "summary"
    code, out, _err = _at_a_terminal(["describe", str(data)], tmp_path)
    assert code == 0 and "LOG-END-OFFSET" in out
    code, out, _err = _piped(["describe", str(data)], tmp_path)
    assert code == 0 and json.loads(out)["topic"] == "t"
