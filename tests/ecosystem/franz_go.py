"""franz-go's own integration suite (``pkg/kgo``, unmodified) against a broker (issue 34).

The module's source comes from the Go module proxy into Go's module cache (``go mod download``), never
from this repository. Go's cache is read-only, so :func:`suite_dir` copies the source and compiles the
suite there (``go test -c``, ``GOFLAGS=-mod=mod``), once per franz-go and Go version: the copy and its
binary stay under ``$KAFKALOG_GO_CACHE`` (else ``~/.cache/kafkalog-go``); a second run builds nothing.

:func:`run_suite` runs the suite in one process, as ``go test`` does (its tests call ``t.Parallel``),
through ``go tool test2json``, and watches the events: a top-level test that runs longer than the
per-test timeout is killed with the process and is a ``timeout``; the tests the kill interrupted run
again in a new process, all within an overall deadline, so a hang fails one test and cannot hang CI.
Every test and subtest gets one status: pass, fail, skip or timeout.

Without ``go``, the test skips saying why; where ``KAFKALOG_REQUIRE_CLIENTS=1`` (``.ci/run``) it fails.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.server.node_client import build_once, unavailable

MODULE = "github.com/twmb/franz-go"
VERSION = "v1.22.3"
PACKAGE = "./pkg/kgo"
KNOWN = Path(__file__).resolve().parent / "franz_go_known.txt"


def cache_dir() -> Path:
    return Path(os.environ.get("KAFKALOG_GO_CACHE") or Path.home() / ".cache" / "kafkalog-go")


def _go(*args: str, cwd: str | None = None, timeout: float = 900,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


def require_go() -> str:
    """``go version``'s version (``go1.26.8``), or the test skips (fails on CI) saying why."""
    if shutil.which("go") is None:
        unavailable("`go` is not on PATH (franz-go's suite is Go)")
    r = _go("env", "GOVERSION", timeout=60)
    if r.returncode != 0:
        unavailable(f"`go env GOVERSION` failed: {r.stderr[-400:]}")
    return r.stdout.strip()


def module_source(module: str = MODULE, version: str = VERSION) -> str:
    """The directory of a module's source (franz-go's by default) in Go's module cache, downloaded from
    the proxy if missing."""
    with tempfile.TemporaryDirectory() as empty:        # outside any go.mod: module@version mode
        r = _go("mod", "download", "-json", f"{module}@{version}", cwd=empty)
    try:
        info = json.loads(r.stdout)
    except json.JSONDecodeError:
        info = {}
    if r.returncode != 0 or not info.get("Dir") or info.get("Error"):
        unavailable(f"go mod download {module}@{version} failed: {info.get('Error') or r.stderr[-800:]}")
    return str(info["Dir"])


def writable_copy(src: str, dst: str) -> None:
    """A copy of a module's source from Go's module cache, whose files are read-only, that ``go test``
    may write in."""
    shutil.copytree(src, dst)
    for d, _, files in os.walk(dst):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)


def suite_dir() -> Path:
    """A writable copy of franz-go's source with the compiled ``pkg/kgo`` suite in it (``kgo.test``;
    its tests run from the package's directory: one reads ``config.go``), once per franz-go and Go
    version."""
    gover = require_go()
    root = cache_dir() / f"franz-go-{VERSION}-{gover}"
    if (root / "kgo.test").exists() and (root / "src" / PACKAGE).is_dir():
        return root
    src = module_source()
    root.parent.mkdir(parents=True, exist_ok=True)

    def compile_suite(tmp: str) -> subprocess.CompletedProcess[str]:
        writable_copy(src, os.path.join(tmp, "src"))
        return _go("test", "-c", "-o", os.path.join(tmp, "kgo.test"), PACKAGE, cwd=os.path.join(tmp, "src"),
                   timeout=1200, env={"GOFLAGS": "-mod=mod"})

    build_once(str(root), compile_suite, f"go test -c of {MODULE}@{VERSION}/{PACKAGE}")
    return root


def list_tests(root: Path) -> list[str]:
    """The top-level tests of the suite (``-test.list``), fuzz targets (their seed corpus) included,
    not its examples or benchmarks."""
    r = subprocess.run([str(root / "kgo.test"), "-test.list", "^(Test|Fuzz)"], capture_output=True, text=True,
                       timeout=60, check=True)
    return [line.strip() for line in r.stdout.splitlines() if line.startswith(("Test", "Fuzz"))]


@dataclass
class Outcome:
    """What one run of the suite gave: every test's and subtest's status (pass, fail, skip, timeout),
    each top-level test's output, the processes it took."""
    status: dict[str, str] = field(default_factory=dict)
    output: dict[str, list[str]] = field(default_factory=dict)
    rounds: int = 0

    def counts(self) -> dict[str, int]:
        """Top-level tests by status."""
        out: dict[str, int] = {}
        for name, st in self.status.items():
            if "/" not in name:
                out[st] = out.get(st, 0) + 1
        return out


def _runs(top: str, state: dict[str, str]) -> bool:
    """Whether the top-level test ``top`` holds one of the suite's parallel slots: a subtest of it runs,
    or it runs itself with no subtest paused (a parent whose parallel subtests wait for a slot has
    returned and waits too; test2json says nothing of that, but its paused subtests do)."""
    mine = {t: s for t, s in state.items() if t.startswith(top + "/")}
    if "running" in mine.values():
        return True
    return state.get(top) == "running" and "paused" not in mine.values()


def _round(root: Path, names: list[str], env: dict[str, str], per_test_s: float, deadline: float,
           outcome: Outcome) -> list[str]:
    """One process running ``names`` (in parallel as the suite's ``t.Parallel`` says); a top-level
    test that has run (:func:`_runs`: not waiting for a slot) longer than ``per_test_s`` is killed with
    the process and is a ``timeout``. Returns
    the tests to run again: those the kill interrupted, or never started."""
    pattern = "^(" + "|".join(names) + ")$"
    cmd = ["go", "tool", "test2json", "-t", str(root / "kgo.test"), "-test.v=test2json",
           "-test.run", pattern, "-test.count=1", f"-test.timeout={int(max(deadline - time.monotonic(), 1))}s"]
    proc = subprocess.Popen(cmd, cwd=str(root / "src" / PACKAGE), env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    events: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            events.put(line)
        events.put(None)

    threading.Thread(target=read, daemon=True).start()
    status: dict[str, str] = {}
    state: dict[str, str] = {}                           # test -> running or paused, until it ends
    ran: dict[str, float] = {}                           # top-level test -> seconds it has run
    hung: set[str] = set()
    last = time.monotonic()
    while True:
        try:
            line = events.get(timeout=1)
        except queue.Empty:
            line = ""
        if line is None:
            break
        if line:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                ev = {"Action": "output", "Output": line}
            test, action = ev.get("Test") or "", ev.get("Action")
            top = test.split("/")[0]
            if action == "output":
                outcome.output.setdefault(top or "(binary)", []).append(ev.get("Output", ""))
            elif test and action == "run":
                status[test] = "running"
                state[test] = "running"
            elif test and action in ("pause", "cont"):
                state[test] = "paused" if action == "pause" else "running"
            elif test and action in ("pass", "fail", "skip"):
                status[test] = action
                state.pop(test, None)
        now = time.monotonic()
        if now - last < 0.5:                              # output comes in thousands of lines
            continue
        for top in {t.split("/")[0] for t in state}:
            if _runs(top, state):
                ran[top] = ran.get(top, 0.0) + (now - last)
        last = now
        hung |= {t for t, secs in ran.items() if secs > per_test_s and t in state}
        if hung or now > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    now = time.monotonic()
    for t in hung:
        outcome.output.setdefault(t, []).append(f"\n(killed: it had run {ran[t]:.0f} s, past the per-test "
                                                f"timeout of {per_test_s:.0f} s)\n")
    again = []
    for name in names:
        mine = {t: s for t, s in status.items() if t == name or t.startswith(name + "/")}
        if name in hung or (now > deadline and mine.get(name) == "running"):
            outcome.status.update({t: "timeout" if s == "running" else s for t, s in mine.items()})
        elif mine.get(name) in ("pass", "fail", "skip"):
            outcome.status.update(mine)
        else:
            again.append(name)
            outcome.output.pop(name, None)
    return again


def run_suite(root: Path, seeds: str, *, records: int, per_test_s: float, overall_s: float,
              tests: list[str] | None = None, env: dict[str, str] | None = None) -> Outcome:
    """Every top-level test (or ``tests``) against ``seeds``, in one process as ``go test`` runs them,
    with the suite's variables ``env`` (``KGO_TEST_SCRAM_SEEDS``...) on top;
    when a test outlives ``per_test_s`` it is killed with the process, and the tests it interrupted
    run again in the next. A test not ended by the overall deadline is a ``timeout``."""
    env = {"KGO_SEEDS": seeds, "KGO_TEST_RF": "1", "KGO_TEST_RECORDS": str(records), **(env or {})}
    left = tests if tests is not None else list_tests(root)
    deadline = time.monotonic() + overall_s
    outcome = Outcome()
    while left and time.monotonic() < deadline - 5:
        outcome.rounds += 1
        again = _round(root, left, env, per_test_s, deadline, outcome)
        if len(again) == len(left):                      # nothing ended: the binary itself failed
            binary = "".join(outcome.output.get("(binary)", []))[-2000:]
            for name in left:
                outcome.status[name] = "fail"
                outcome.output.setdefault(name, []).append(f"the suite's process ended no test:\n{binary}")
            return outcome
        left = again
    for name in left:
        outcome.status[name] = "timeout"
        outcome.output.setdefault(name, []).append(f"not ended by the overall deadline of {overall_s:.0f} s\n")
    return outcome


@dataclass(frozen=True)
class Known:
    """One line of ``franz_go_known.txt``: ``fail NAME reason`` or ``skip NAME reason``."""
    kind: str
    name: str
    reason: str


def read_known(path: Path = KNOWN) -> dict[str, Known]:
    known: dict[str, Known] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or parts[0] not in ("fail", "skip"):
            raise ValueError(f"{path}:{number}: expected 'fail|skip TEST reason', got {raw!r}")
        known[parts[1]] = Known(parts[0], parts[1], parts[2])
    return known


def problems(outcome: Outcome, known: dict[str, Known]) -> list[str]:
    """What differs from the known list: a failure or skip not listed, a listed one that now passes
    (a stale line), a listed test that did not run."""
    st = outcome.status
    bad: list[str] = []
    failed = [t for t, s in st.items() if s in ("fail", "timeout")]

    def excused(name: str) -> bool:
        k = known.get(name)
        if k is not None:
            return k.kind == "fail"
        # the failing tests under it with no failing test between (a subtest's own name may hold a '/')
        under = [t for t in failed if t.startswith(name + "/")]
        nearest = [t for t in under if not any(t.startswith(u + "/") for u in under)]
        return bool(nearest) and all(excused(t) for t in nearest)

    for name, s in sorted(st.items()):
        if s in ("fail", "timeout") and not excused(name):
            bad.append(f"{name}: {s} (not in {KNOWN.name})")
        elif s == "skip" and (name not in known or known[name].kind != "skip"):
            bad.append(f"{name}: skipped (not in {KNOWN.name} as a skip)")
    for name, k in sorted(known.items()):
        s = st.get(name)
        hung_parent = any(st.get(name.rsplit("/", i)[0]) == "timeout" for i in range(1, name.count("/") + 1))
        if s is None and k.kind == "fail" and hung_parent:
            continue                                   # its parent hung before it started
        if s is None:
            bad.append(f"{name}: listed in {KNOWN.name} ({k.kind}) but did not run")
        elif s == "pass":
            bad.append(f"{name}: passes now: remove its line from {KNOWN.name} ({k.reason})")
        elif k.kind == "skip" and s != "skip":
            bad.append(f"{name}: listed as a skip but {s}")
        elif k.kind == "fail" and s == "skip":
            bad.append(f"{name}: listed as failing but skipped")
    return bad


def failure_report(outcome: Outcome, bad: list[str], chars: int = 3000) -> str:
    """The problems, then the end of each failing top-level test's output."""
    tops = sorted({line.split(":")[0].split("/")[0] for line in bad})
    parts = ["\n".join(bad)]
    for t in tops:
        out = "".join(outcome.output.get(t, []))
        parts.append(f"----- {t} ({outcome.status.get(t)}) -----\n{out[-chars:]}")
    return "\n".join(parts)
