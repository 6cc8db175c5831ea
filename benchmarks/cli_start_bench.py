"""Start-up of every ``kafkalog`` subcommand against a bare Python start (issue 35: "every
subcommand's start within 4x a bare Python start"; issue 36, item 1: no hypothesis import).

The peer is the floor of any Python command, ``python3 -c pass`` (the same interpreter, the same
``site``). Measured for each command: ``kafkalog --help``, ``kafkalog --version``, ``kafkalog X
--help`` for every subcommand X, and ``kafkalog dump`` of a one-batch segment (a no-op run). Runs
are interleaved (one round runs every command once), so load from other jobs hits them alike; each
command's median wall time (spawn to exit) and median CPU time (user + system of the child) are
printed with their ratios to bare Python's, one JSON line per command, then a ``summary`` line
with the worst ratio and whether the goal (4x) holds.

Python's bytecode cache: as a user's installation, the children run with it (PYTHONDONTWRITEBYTECODE
removed, one unmeasured warm-up round first).

    python benchmarks/cli_start_bench.py                # 11 rounds, medians
    python benchmarks/cli_start_bench.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

GOAL_RATIO = 4.0


def kafkalog_command() -> List[str]:
    """The installed console script run by this interpreter (what a user's ``kafkalog`` runs),
    else the module."""
    script = Path(sys.executable).parent / "kafkalog"
    if script.exists() and script.read_bytes()[:2] == b"#!" and b"kafkalog.cli.main" in script.read_bytes():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "kafkalog.cli.main"]


def small_segment(directory: Path) -> Path:
    """A data directory with one topic of one record; returns its segment file."""
    import kafkalog
    data = directory / "data"
    with kafkalog.open(data, background=False) as dl:
        dl.create_topic("t", 1)
        with dl.producer() as p:
            p.send("t", key=b"k", value=b"v")
    return data / "t-0" / "00000000000000000000.log"


def commands(segment: Path) -> Dict[str, List[str]]:
    from kafkalog.cli.main import COMMANDS
    k = kafkalog_command()
    out = {"python -c pass": [sys.executable, "-c", "pass"], "kafkalog --version": k + ["--version"],
           "kafkalog --help": k + ["--help"]}
    for name in sorted(COMMANDS):
        out[f"kafkalog {name} --help"] = k + [name, "--help"]
    out["kafkalog dump SEGMENT"] = k + ["dump", str(segment)]
    return out


def run_once(argv: Sequence[str], env: Dict[str, str], cwd: str) -> Tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.decode()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=11, help="rounds (every command once per round)")
    args = ap.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="cli-start-") as tmp:
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        cmds = commands(small_segment(Path(tmp)))
        for argv in cmds.values():                  # warm-up: bytecode caches written
            run_once(argv, env, str(cwd))
        wall: Dict[str, List[float]] = {n: [] for n in cmds}
        cpu: Dict[str, List[float]] = {n: [] for n in cmds}
        for _ in range(args.runs):
            for name, argv in cmds.items():
                w, c = run_once(argv, env, str(cwd))
                wall[name].append(w)
                cpu[name].append(c)
        left_behind = sorted(p.name for p in cwd.iterdir())
    base_wall = statistics.median(wall["python -c pass"])
    base_cpu = statistics.median(cpu["python -c pass"])
    worst = 0.0
    for name in cmds:
        mw, mc = statistics.median(wall[name]), statistics.median(cpu[name])
        ratio = mw / base_wall
        if name != "python -c pass":
            worst = max(worst, ratio)
        print(json.dumps({"type": "command", "command": name, "runs": args.runs,
                          "median_wall_s": round(mw, 4), "median_cpu_s": round(mc, 4),
                          "wall_ratio": round(ratio, 2), "cpu_ratio": round(mc / base_cpu, 2)}))
    print(json.dumps({"type": "summary", "goal_ratio": GOAL_RATIO, "worst_wall_ratio": round(worst, 2),
                      "met": worst <= GOAL_RATIO, "files_left_in_cwd": left_behind}))


if __name__ == "__main__":
    main()
