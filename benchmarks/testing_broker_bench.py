"""How fast a test gets a Kafka broker (issue 29): ``kafkalog.testing``'s broker against the
alternatives on this machine, in one run.

Peers, each started fresh for every run as a test would start it, and measured from the start call
until the broker answers an ApiVersions request on its port (a raw v0 request, the same for all):

* ``thread``: ``kafkalog.testing.LocalBroker(mode="thread").start()`` in this process, after one
  unmeasured start (the imports, as "after import"); Kafka's defaults (the log cleaner runs);
* ``process``: ``LocalBroker(mode="process").start()``: a process forked by the fork server;
  ``process_first`` is the first one of this process, which starts the fork server too;
* ``serve``: ``python -m kafkalog.cli.main serve DIR --port 0`` as a subprocess (what a fixture
  without kafkalog.testing would run), after one unmeasured run that leaves the bytecode cache;
* ``kafka44``: Apache Kafka 4.4 (``tests/kafka44``'s ``KafkaBroker``: a single-node KRaft broker, the
  suite's oracle): ``kafka-storage format`` then ``kafka.Kafka``, the JVM with its quick compiler
  (as the suite starts it); ``format_ms`` and ``ready_ms`` (from the JVM's start) are split out,
  ``total_ms`` is what a fresh fixture pays.

Each run's stop is measured too (``stop_ms``: a clean stop for serve and Kafka; the fixture's own
teardown for thread and process, which removes the temporary directory).

``suite``: pytest (a subprocess) on a module of ``--suite`` tests, each taking its own
``kafka_broker`` (function scope) and asking it for ApiVersions, in thread and in process mode,
against the same module without the fixture (pytest's own cost); ``per_test_ms`` is the broker's
share per test.

Output: JSON lines (each run, then one ``summary`` line per peer with medians, then the ratios of
the medians, then the goals: thread <= 50 ms, process <= 300 ms, the suite of 100 in a few
seconds, taken as 5 s for the whole pytest run in each mode).

    python benchmarks/testing_broker_bench.py                 # 7 runs, 3 of Kafka, suite of 100
    python benchmarks/testing_broker_bench.py --runs 3 --kafka-runs 0 --suite 20
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)            # tests.kafka44 (Kafka 4.4 through Maven)

READY_TIMEOUT_S = 180.0
#: "a suite of 100 tests each with its own broker runs in a few seconds": the whole pytest run
SUITE_GOAL_S = 5.0
API_VERSIONS_V0 = struct.pack(">ihhih", 14, 18, 0, 7, 4) + b"bnch"


def emit(row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)


def answers(port: int) -> bool:
    """One ApiVersions v0 round trip (False: refused or closed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(API_VERSIONS_V0)
            head = b""
            while len(head) < 4:
                chunk = s.recv(4 - len(head))
                if not chunk:
                    return False
                head += chunk
            n = struct.unpack(">i", head)[0]
            body = b""
            while len(body) < n:
                chunk = s.recv(n - len(body))
                if not chunk:
                    return False
                body += chunk
            return struct.unpack_from(">ih", body) == (7, 0)
    except OSError:
        return False


def wait_answers(port: int, started: float, alive: Callable[[], bool]) -> float:
    """Poll ApiVersions every millisecond until answered; the time since ``started``."""
    while True:
        if answers(port):
            return time.perf_counter() - started
        if not alive():
            raise RuntimeError("the broker exited before it answered")
        if time.perf_counter() - started > READY_TIMEOUT_S:
            raise RuntimeError(f"no answer on port {port} in {READY_TIMEOUT_S} s")
        time.sleep(0.001)


def child_env() -> dict[str, str]:
    """The environment of the subprocesses: bytecode cache on (an installation has it; this
    machine's PYTHONDONTWRITEBYTECODE=1 would make each start compile kafkalog)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# --- peers ----------------------------------------------------------------------------------------

def run_local(mode: str) -> dict[str, float]:
    from kafkalog.testing import LocalBroker
    b = LocalBroker(mode)
    t0 = time.perf_counter()
    b.start()
    ready = wait_answers(b.port, t0, lambda: True)
    t1 = time.perf_counter()
    b.close()
    return {"ready_ms": ready * 1e3, "stop_ms": (time.perf_counter() - t1) * 1e3}


def run_serve(work: str) -> dict[str, float]:
    data = tempfile.mkdtemp(prefix="serve-", dir=work)
    cmd = [sys.executable, "-m", "kafkalog.cli.main", "serve", os.path.join(data, "d"), "--port", "0"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env())
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = json.loads(line)["port"]
        ready = wait_answers(port, t0, lambda: proc.poll() is None)
        t1 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        assert rc == 0, rc
        return {"ready_ms": ready * 1e3, "stop_ms": (time.perf_counter() - t1) * 1e3}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def run_kafka44(work: str) -> dict[str, float]:
    from tests import kafka44
    wd = tempfile.mkdtemp(prefix="kafka44-", dir=work)
    b = kafka44.KafkaBroker(wd)
    t0 = time.perf_counter()
    b.format()
    t1 = time.perf_counter()
    jvm = [f"-Dlog4j2.configurationFile={b.workdir / 'log4j2.yaml'}", "-Xms128m"]
    cmd = kafka44.java_command("kafka.Kafka", str(b.properties_path), heap=b.heap, jvm_args=jvm)
    with open(b.workdir / "stdout", "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    b.proc = proc
    try:
        ready = wait_answers(b.port, t1, lambda: proc.poll() is None)
        t2 = time.perf_counter()
        b.stop()
        return {"format_ms": (t1 - t0) * 1e3, "ready_ms": ready * 1e3, "total_ms": (t2 - t0) * 1e3,
                "stop_ms": (time.perf_counter() - t2) * 1e3}
    finally:
        b.kill()
        shutil.rmtree(wd, ignore_errors=True)


SUITE_TEST = '''
import socket, struct

REQUEST = {request!r}


def _answers(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(REQUEST)
        n = struct.unpack(">i", s.recv(4))[0]
        body = b""
        while len(body) < n:
            body += s.recv(n - len(body))
        return struct.unpack_from(">ih", body) == (7, 0)

'''


def run_suite(work: str, n: int, mode: str | None) -> float:
    """Seconds of ``pytest`` over ``n`` tests, each with its own broker (``mode``), or none."""
    d = tempfile.mkdtemp(prefix="suite-", dir=work)
    body = SUITE_TEST.format(request=API_VERSIONS_V0)
    for i in range(n):
        if mode is None:
            body += f"\ndef test_{i}():\n    assert True\n"
        else:
            body += f"\ndef test_{i}(kafka_broker):\n    assert _answers(kafka_broker.port)\n"
    with open(os.path.join(d, "test_suite.py"), "w", encoding="utf-8") as f:
        f.write(body)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py"]
    if not _plugin_installed():
        cmd += ["-p", "kafkalog.testing.pytest_plugin"]
    if mode is not None:
        cmd += [f"--kafka-broker-mode={mode}"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=d, env=child_env(), capture_output=True, text=True, timeout=1800)
    took = time.perf_counter() - t0
    shutil.rmtree(d, ignore_errors=True)
    if r.returncode != 0 or f"{n} passed" not in r.stdout:
        raise RuntimeError(f"the suite failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
    return took


def _plugin_installed() -> bool:
    from importlib.metadata import entry_points
    return any(ep.value == "kafkalog.testing.pytest_plugin" for ep in entry_points(group="pytest11"))


# --- the run ----------------------------------------------------------------------------------------

def median(rows: list[dict[str, float]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="starts of each kafkalog peer (medians)")
    ap.add_argument("--kafka-runs", type=int, default=3, help="starts of Kafka 4.4 (0: skip it)")
    ap.add_argument("--suite", type=int, default=100, help="tests in the suite (0: skip it)")
    ap.add_argument("--suite-runs", type=int, default=3)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="kafkalog-testing-bench-")
    load = os.getloadavg()[0]
    emit({"type": "machine", "cpus": os.cpu_count(), "load_1m": round(load, 2), "python": sys.version.split()[0]})
    results: dict[str, list[dict[str, float]]] = {}
    try:
        t0 = time.perf_counter()
        import kafkalog.testing.local_broker
        import kafkalog.testing.runtime  # noqa: F401
        emit({"type": "import", "what": "kafkalog.testing", "ms": round((time.perf_counter() - t0) * 1e3, 1)})
        run_local("thread")                                     # warm-up: first-use imports
        first = run_local("process")                            # starts the fork server
        emit({"type": "run", "peer": "process_first", "run": 0, **_round(first)})
        results["process_first"] = [first]
        run_serve(work)                                         # warm-up: the bytecode cache
        peers: list[tuple[str, Callable[[], dict[str, float]], int]] = [
            ("thread", lambda: run_local("thread"), args.runs),
            ("process", lambda: run_local("process"), args.runs),
            ("serve", lambda: run_serve(work), args.runs),
        ]
        if args.kafka_runs:
            peers.append(("kafka44", lambda: run_kafka44(work), args.kafka_runs))
        # interleaved: each round starts every peer once, so load from other jobs hits them alike
        for i in range(max(n for _p, _f, n in peers)):
            for name, fn, n in peers:
                if i >= n:
                    continue
                try:
                    row = fn()
                except Exception as e:          # Kafka 4.4 unavailable (no Java/Maven): said, skipped
                    emit({"type": "error", "peer": name, "error": f"{type(e).__name__}: {e}"[:500]})
                    continue
                results.setdefault(name, []).append(row)
                emit({"type": "run", "peer": name, "run": i + 1, **_round(row)})
        suite: dict[str, list[float]] = {}
        if args.suite:
            for i in range(args.suite_runs):
                for mode in (None, "thread", "process"):
                    took = run_suite(work, args.suite, mode)
                    emit({"type": "suite_run", "mode": mode or "no broker", "tests": args.suite, "run": i + 1,
                          "seconds": round(took, 2)})
                    suite.setdefault(mode or "none", []).append(took)
        summary: dict[str, dict[str, float | None]] = {}
        for name, rows in results.items():
            keys = sorted({k for r in rows for k in r})
            summary[name] = {k: median(rows, k) for k in keys}
            emit({"type": "summary", "peer": name, "runs": len(rows),
                  **{f"median_{k}": round(v, 1) for k, v in summary[name].items() if v is not None}})
        ready = {name: s.get("total_ms") or s.get("ready_ms") for name, s in summary.items()}
        for slow in ("kafka44", "serve"):
            for fast in ("thread", "process"):
                if ready.get(slow) and ready.get(fast):
                    emit({"type": "ratio", "what": f"ready {slow} / {fast}",
                          "value": round(ready[slow] / ready[fast], 1)})   # type: ignore[operator]
        if suite:
            base = statistics.median(suite["none"])
            for mode in ("thread", "process"):
                took = statistics.median(suite[mode])
                emit({"type": "summary", "peer": f"suite_{mode}", "tests": args.suite,
                      "median_seconds": round(took, 2), "pytest_alone_seconds": round(base, 2),
                      "per_test_ms": round((took - base) / args.suite * 1e3, 1)})
        goals = [("thread ready <= 50 ms", ready.get("thread"), 50.0),
                 ("process ready <= 300 ms", ready.get("process"), 300.0)]
        for what, value, limit in goals:
            if value is not None:
                emit({"type": "goal", "goal": what, "median_ms": round(value, 1), "met": value <= limit})
        if suite:       # "a few seconds": taken as at most 5 s for the whole pytest run
            for mode in ("thread", "process"):
                took = statistics.median(suite[mode])
                emit({"type": "goal", "goal": f"{args.suite} tests, a {mode} broker each, <= 5 s",
                      "median_seconds": round(took, 2), "met": took <= SUITE_GOAL_S})
        emit({"type": "machine", "load_1m_end": round(os.getloadavg()[0], 2)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _round(row: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in row.items()}


if __name__ == "__main__":
    sys.exit(main())
