"""segmentio/kafka-go's own ACL, client-quota, SCRAM and SASL tests (unmodified) against a broker (issue 38).

The module's source comes from the Go module proxy into Go's module cache (``go mod download``, through
:mod:`tests.ecosystem.franz_go`), never from this repository. :func:`suite_dir` copies it (the cache is
read-only) and compiles the two packages that hold those tests (``go test -c``: the root package
``kafka`` and ``sasl``), once per kafka-go and Go version, under ``$KAFKALOG_GO_CACHE`` (else
``~/.cache/kafkalog-go``).

Which tests: every test of the files in :data:`FILES` (read from the module's source, so a test added
or renamed upstream is picked up), and the SASL tests of other files named in :data:`MORE`.
:func:`run_tests` runs one package's tests in one process through ``go tool test2json`` and gives every
test and subtest one status: pass, fail, skip or timeout (the process's own ``-test.timeout`` and a
wall-clock limit: a hang fails, it cannot hang CI).

kafka-go's tests find their broker at fixed addresses, as their CI's docker-compose publishes it:
``localhost:9092`` (PLAINTEXT) and ``localhost:9093`` (SASL_PLAINTEXT); :func:`require_ports` skips (fails
on CI) when another process holds them.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.ecosystem import franz_go
from tests.server.node_client import build_once, unavailable

MODULE = "github.com/segmentio/kafka-go"
VERSION = "v0.4.51"
#: package directory -> the test files whose tests all run
FILES = {
    ".": ["createacls_test.go", "describeacls_test.go", "deleteacls_test.go", "alterclientquotas_test.go",
          "alteruserscramcredentials_test.go", "describeuserscramcredentials_test.go",
          "saslhandshake_test.go", "saslauthenticate_test.go"],
    "sasl": ["sasl_test.go"],
}
#: package directory -> ``-test.run`` patterns of the SASL tests in its other files
MORE = {
    ".": ["TestUnsupportedSASLMechanism",                                      # conn_test.go
          "TestWriter/writing_a_message_with_SASL_Plain_authentication"],       # writer_test.go
}
#: the addresses kafka-go's tests dial (their CI's broker: ``PLAIN://:9092,SASL://:9093``)
PLAIN_PORT, SASL_PORT = 9092, 9093
#: the users of kafka-go's CI for Kafka 4.x (``docker_compose_versions/docker-compose-400.yml``:
#: ``KAFKA_CLIENT_USERS``/``KAFKA_CLIENT_PASSWORDS``, each with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512)
USERS = {"adminscram256": "admin-secret-256", "adminscram512": "admin-secret-512", "adminplain": "admin-secret"}
#: the broker keys of that compose file (Kafka's names; the KRaft controller's are Kafka 4.4's only)
BROKER_KEYS = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": ";".join(f"User:{u}" for u in USERS),
    "allow.everyone.if.no.acl.found": "true",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "message.max.bytes": "200000000",
}
#: the environment of kafka-go's CI (``.circleci/config.yml``), with the broker's version
ENV = {"KAFKA_VERSION": "4.4.0", "KAFKA_SKIP_NETTEST": "1"}


def suite_dir() -> Path:
    """A writable copy of kafka-go's source with ``kafka.test`` and ``sasl.test`` compiled in it."""
    gover = franz_go.require_go()
    root = franz_go.cache_dir() / f"kafka-go-{VERSION}-{gover}"
    if all((root / f"{_binary(p)}.test").exists() for p in FILES):
        return root
    src = franz_go.module_source(MODULE, VERSION)
    root.parent.mkdir(parents=True, exist_ok=True)

    def compile_tests(tmp: str) -> subprocess.CompletedProcess[str]:
        franz_go.writable_copy(src, f"{tmp}/src")
        r = subprocess.CompletedProcess([], 0, "", "")
        for pkg in FILES:
            r = franz_go._go("test", "-c", "-o", f"{tmp}/{_binary(pkg)}.test", f"./{pkg}", cwd=f"{tmp}/src",
                             timeout=1200, env={"GOFLAGS": "-mod=mod"})
            if r.returncode != 0:
                break
        return r

    build_once(str(root), compile_tests, f"go test -c of {MODULE}@{VERSION}")
    return root


def _binary(pkg: str) -> str:
    return "kafka" if pkg == "." else pkg


def selected(root: Path, pkg: str) -> list[str]:
    """The ``-test.run`` patterns of one package: the tests its :data:`FILES` declare, then :data:`MORE`."""
    names = []
    for name in FILES[pkg]:
        text = (root / "src" / pkg / name).read_text()
        names += re.findall(r"^func (Test\w+)\(t \*testing\.T\)", text, re.MULTILINE)
    return names + MORE.get(pkg, [])


def require_ports() -> None:
    """kafka-go's tests dial 9092 and 9093: no other process may listen there on 127.0.0.1 (connections
    of a run just ended, in TIME_WAIT, do not count: the brokers bind with SO_REUSEADDR too)."""
    for port in (PLAIN_PORT, SASL_PORT):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError as e:
                unavailable(f"kafka-go's tests need 127.0.0.1:{port}, which is taken ({e})")


def run_tests(root: Path, pkg: str, only: list[str] | None = None, timeout_s: float = 180
              ) -> tuple[dict[str, str], str]:
    """The package's selected tests (:func:`selected`; ``only``: those of them), in one process as
    ``go test`` runs them."""
    patterns = only if only is not None else selected(root, pkg)
    tops = sorted({p.split("/")[0] for p in patterns})
    subs = sorted({p.split("/", 1)[1] for p in patterns if "/" in p})
    run = "^(" + "|".join(tops) + ")$" + ("/^(" + "|".join(subs) + ")$" if subs else "")
    return go_test(root / f"{_binary(pkg)}.test", root / "src" / pkg, ["-test.run", run], patterns, ENV, timeout_s)


def go_test(binary: Path, cwd: Path, args: list[str], expect: list[str], env: dict[str, str],
            timeout_s: float = 180) -> tuple[dict[str, str], str]:
    """A compiled Go test binary run with ``args`` (``-test.run``...) and the variables ``env`` through
    ``go tool test2json``: the status of each test and subtest (pass, fail, skip; timeout for one the
    process's ``-test.timeout`` or the wall-clock ``timeout_s`` ended), and the output. A test of
    ``expect`` that did not run at all is a fail."""
    cmd = ["go", "tool", "test2json", "-t", str(binary), "-test.v=test2json", *args, "-test.count=1",
           f"-test.timeout={int(timeout_s) - 30}s"]
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, **env}, check=False)
        lines = r.stdout.splitlines()
    except subprocess.TimeoutExpired as e:                 # its output so far (bytes, even with text=True)
        lines = (e.stdout or b"").decode(errors="replace").splitlines()
    status: dict[str, str] = {}
    output: list[str] = []
    for line in lines:
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            output.append(line + "\n")
            continue
        test, action = ev.get("Test"), ev.get("Action")
        if action == "output":
            output.append(ev.get("Output", ""))
        elif test and action == "run":
            status[test] = "timeout"
        elif test and action in ("pass", "fail", "skip"):
            status[test] = action
    for p in expect:
        if not any(t == p or t.startswith(p + "/") for t in status):
            status[p] = "fail"
            output.append(f"{p}: did not run\n")
    return status, "".join(output)


#: a run of some tests (all when None): each test's status and the output
Run = Callable[[list[str] | None], tuple[dict[str, str], str]]


def with_retries(run: Run, names: list[str], attempts: int,
                 before_retry: Callable[[list[str]], None] | None = None
                 ) -> tuple[dict[str, str], str, list[str]]:
    """``run`` of every test, then of those of ``names`` that failed, each again up to ``attempts - 1``
    times (Kafka 4.4's baseline only: its broker applies an ACL or SCRAM change a moment after the
    answer, and these tests describe at once). ``before_retry(failed)`` puts back what a failed run
    left behind (a test that stopped half-way leaves its user or ACLs, and its next run would fail at
    its first check). Returns the statuses (a retry's win), the output and the tests retried."""
    status, output = run(None)
    retried: list[str] = []
    for _ in range(attempts - 1):
        failed = [n for n in names if status.get(n) != "pass"]
        if not failed:
            break
        retried += failed
        if before_retry is not None:
            before_retry(failed)
        again, more = run(failed)
        status.update(again)
        output += more
    return status, output, retried


def summary(status: dict[str, str], retried: list[str]) -> tuple[str, list[str]]:
    """The statuses counted (and the tests retried), and the tests that did not pass."""
    counts: dict[str, int] = {}
    for st in status.values():
        counts[st] = counts.get(st, 0) + 1
    text = f"{counts}" + (f", retried {retried}" if retried else "")
    return text, sorted(f"{t}: {s}" for t, s in status.items() if s != "pass")
