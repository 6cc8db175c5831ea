"""Start-up time and idle memory of the ``kafkalog`` command and of ``kafkalog serve`` (issue 24, item 7).

Measured per peer, ``--runs`` times each (runs of the peers interleaved, so load from other jobs
hits them alike), JSON lines on stdout: one line per run and measure, then one ``summary`` line
per peer with the medians, and one ``ratio`` line (kafkalog's median over each peer's) with the
goals and whether they are met:

* ``version_s``: wall time of ``<command> --version``, spawn to exit;
* ``serve_ready_s``: wall time from spawning the broker on an empty data directory to the first
  answer to a Kafka ApiVersions request on its port (what a client waits for);
* ``version_cpu_s``, ``serve_ready_cpu_s``: the CPU time (user + system) those took. A start-up
  is one thread doing CPU work, so on an idle machine its wall time is about its CPU time; on the
  shared development machine (load averages of 8-16 on 2 cores) wall times are several times
  that, and the CPU times are the figures comparable from run to run;
* ``serve_idle_rss_mib``: the broker's resident memory (``VmRSS``) ``--idle-seconds`` after that
  answer, nothing connected;
* ``open_rss_mib`` (kafkalog only): resident memory of a Python process that did
  ``kafkalog.open(DIR)`` on an empty directory (the embedded log, background threads started).

Python's bytecode cache: a user's installation writes ``__pycache__`` on the first run and loads it
after; with ``PYTHONDONTWRITEBYTECODE`` set (as on the development machine) every start compiles
every module of kafkalog again. The children run with the cache (the variable removed, one
unmeasured warm-up run first) unless ``--no-bytecode-cache``; the ``config`` line says which.

Goals (issue 24): ``kafkalog --version`` at most 0.1 s, ``serve`` ready in at most 0.3 s, an idle
``serve`` at most 60 MiB.

Peers. A peer is a :class:`Peer`: its name, its ``--version`` command, and how to start its broker
on a data directory and port (``broker``), optional each. ``python`` is the floor of any Python
command (the interpreter starting and exiting: ``python3 -c pass``). Adding Kafka 4.4 (issue 25)
is one more ``Peer`` in :func:`peers` with its ``kafka-server-start`` command line (and a
formatted data directory); the measures, the ratios and the output need no change.

    python benchmarks/startup_bench.py                  # 7 runs of every measure, medians
    python benchmarks/startup_bench.py --runs 3 --measure version_s,serve_ready_s
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

MEASURES = ("version_s", "serve_ready_s", "serve_idle_rss_mib", "open_rss_mib")
GOALS = {"version_s": 0.1, "serve_ready_s": 0.3, "serve_idle_rss_mib": 60.0}

#: an ApiVersions v0 request, header v1 (api key 18, version 0, correlation id 7, client id "bench")
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 5) + b"bench"


@dataclass
class Peer:
    """One system measured. ``version`` is the argv of its ``--version``; ``broker(data_dir,
    port)`` returns the argv that serves ``data_dir`` on 127.0.0.1:``port`` (None: not measured)."""

    name: str
    version: Optional[List[str]] = None
    broker: Optional[Callable[[str, int], List[str]]] = None
    #: measures only this peer has (e.g. kafkalog's embedded open)
    extra: Dict[str, Callable[[], float]] = field(default_factory=dict)


def kafkalog_command() -> List[str]:
    """The ``kafkalog`` console script installed beside this interpreter (what a user runs; a
    pyenv shim in front of it adds its own start-up, which is not kafkalog's), else ``-m``."""
    script = Path(sys.executable).with_name("kafkalog")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "kafkalog.cli.main"]


def peers() -> List[Peer]:
    kl = kafkalog_command()
    return [
        Peer("kafkalog", version=[*kl, "--version"],
             broker=lambda d, port: [*kl, "serve", d, "--port", str(port)],
             extra={"open_rss_mib": open_rss_mib}),
        Peer("python", version=[sys.executable, "-c", "pass"]),
    ]


# --- measures ---------------------------------------------------------------------------------------

#: the children's environment (:func:`main` sets the bytecode cache policy)
ENV: Dict[str, str] = dict(os.environ)


def wall(argv: Sequence[str]) -> float:
    return timed(argv)[0]


def timed(argv: Sequence[str]) -> Tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of running ``argv`` to its exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _pid, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}")
    return took, usage.ru_utime + usage.ru_stime


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a running process has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api_versions_answered(port: int, deadline: float) -> bool:
    """One ApiVersions round trip on ``port`` (False while nothing listens yet)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=max(0.05, deadline - time.perf_counter())) as s:
            s.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
            head = b""
            while len(head) < 8:
                chunk = s.recv(8 - len(head))
                if not chunk:
                    return False
                head += chunk
            return struct.unpack(">ii", head)[1] == 7
    except OSError:
        return False


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise SystemExit(f"no VmRSS for process {pid}")


def serve_once(peer: Peer, idle_seconds: float) -> Dict[str, float]:
    """Spawn the peer's broker on a new empty data directory, time its first ApiVersions answer,
    then read its RSS after ``idle_seconds``; SIGTERM and wait."""
    assert peer.broker is not None
    d = tempfile.mkdtemp(prefix=f"startup-bench-{peer.name}-")
    try:
        port = free_port()
        t0 = time.perf_counter()
        proc = subprocess.Popen(peer.broker(os.path.join(d, "data"), port), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=ENV)
        try:
            deadline = t0 + 120
            while not api_versions_answered(port, deadline):
                if proc.poll() is not None:
                    raise SystemExit(f"{peer.name}'s broker exited {proc.returncode} before answering")
                if time.perf_counter() > deadline:
                    raise SystemExit(f"{peer.name}'s broker did not answer within 120 s")
                time.sleep(0.002)
            ready = time.perf_counter() - t0
            ready_cpu = cpu_seconds(proc.pid)
            time.sleep(idle_seconds)
            rss = rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        return {"serve_ready_s": ready, "serve_ready_cpu_s": ready_cpu, "serve_idle_rss_mib": rss}
    finally:
        shutil.rmtree(d, ignore_errors=True)


_OPEN_SCRIPT = """
import sys, time, kafkalog
with kafkalog.open(sys.argv[1]) as log_dir:
    time.sleep(float(sys.argv[2]))
    with open("/proc/self/status") as f:
        print([l.split()[1] for l in f if l.startswith("VmRSS:")][0], flush=True)
"""


def open_rss_mib(idle_seconds: float = 1.0) -> float:
    d = tempfile.mkdtemp(prefix="startup-bench-open-")
    try:
        out = subprocess.run([sys.executable, "-c", _OPEN_SCRIPT, os.path.join(d, "data"), str(idle_seconds)],
                             capture_output=True, text=True, timeout=120, check=True, env=ENV).stdout
        return int(out.split()[-1]) / 1024.0
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --- the run ----------------------------------------------------------------------------------------

def emit(obj: dict) -> None:
    print(json.dumps(obj, separators=(",", ":")), flush=True)


def warm_up(selected: Sequence[Peer]) -> None:
    """One unmeasured start of each command (the bytecode cache is written then)."""
    for peer in selected:
        if peer.version:
            wall(peer.version)
        if peer.broker:
            serve_once(peer, 0.0)


def run(selected: Sequence[Peer], measures: Sequence[str], runs: int, idle_seconds: float) -> None:
    figures: Dict[str, Dict[str, List[float]]] = {p.name: {} for p in selected}
    warm_up(selected)
    for i in range(runs):
        for peer in selected:
            got: Dict[str, float] = {}
            if "version_s" in measures and peer.version:
                got["version_s"], got["version_cpu_s"] = timed(peer.version)
            if {"serve_ready_s", "serve_idle_rss_mib"} & set(measures) and peer.broker:
                got.update({k: v for k, v in serve_once(peer, idle_seconds).items()
                            if k in measures or k == "serve_ready_cpu_s"})
            for name, fn in peer.extra.items():
                if name in measures:
                    got[name] = fn()
            for k, v in got.items():
                figures[peer.name].setdefault(k, []).append(v)
                emit({"type": "run", "run": i + 1, "peer": peer.name, "measure": k, "value": round(v, 4)})
    medians = {p: {k: statistics.median(v) for k, v in m.items()} for p, m in figures.items()}
    for p, m in medians.items():
        emit({"type": "summary", "peer": p, "runs": runs, **{k: round(v, 4) for k, v in m.items()}})
    mine = medians.get("kafkalog", {})
    ratio: dict = {"type": "ratio", "runs": runs}
    for p, m in medians.items():
        if p != "kafkalog":
            for k, v in m.items():
                if k in mine and v > 0:
                    ratio[f"{k}_vs_{p}"] = round(mine[k] / v, 3)
    ratio["goals"] = {k: g for k, g in GOALS.items() if k in mine}
    ratio["met"] = {k: mine[k] <= g for k, g in GOALS.items() if k in mine}
    emit(ratio)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--measure", default=",".join(MEASURES), help=f"comma-separated, of: {', '.join(MEASURES)}")
    ap.add_argument("--peers", default=None, help="comma-separated peer names (default: all)")
    ap.add_argument("--idle-seconds", type=float, default=2.0,
                    help="how long the broker idles before its RSS is read")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE (every start compiles kafkalog's modules)")
    args = ap.parse_args(argv)
    if not args.no_bytecode_cache:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    emit({"type": "config", "runs": args.runs, "bytecodeCache": not args.no_bytecode_cache,
          "kafkalog": kafkalog_command(), "python": sys.version.split()[0],
          "loadAverage": os.getloadavg()[0]})
    measures = [m.strip() for m in args.measure.split(",") if m.strip()]
    unknown = sorted(set(measures) - set(MEASURES))
    if unknown:
        ap.error(f"unknown measure(s): {', '.join(unknown)}")
    selected = peers()
    if args.peers:
        names = {n.strip() for n in args.peers.split(",")}
        selected = [p for p in selected if p.name in names]
    run(selected, measures, args.runs, args.idle_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
