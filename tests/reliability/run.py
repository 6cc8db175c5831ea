"""The long reliability run.

    python -m tests.reliability.run --kills 2000 --corruptions 10000 --fuzz 1000000 \\
        --atheris 200000 --out reliability-run.json [--only crash,corruption,fuzz,atheris]

Runs the crash-restart cycles, the corruption trials, the seeded mutation fuzzer over every decoder
and a coverage-guided atheris run, then prints (and writes to ``--out``) the figures that
docs/reliability.md quotes. Exit status 1 on any lost acknowledged record, undetected corruption,
untyped error or hang.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--corruptions", type=int, default=1000)
    ap.add_argument("--fuzz", type=int, default=100000)
    ap.add_argument("--atheris", type=int, default=0, help="atheris runs (0: skip)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="crash,corruption,fuzz,atheris")
    ap.add_argument("--out", default=None)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args(argv)
    only = set(a.only.split(","))
    work = a.workdir or tempfile.mkdtemp(prefix="kafkalog-reliability-")
    os.makedirs(work, exist_ok=True)
    res = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": _machine(),
           "command": " ".join([os.path.basename(sys.executable), "-m", "tests.reliability.run"] +
                               (argv if argv is not None else sys.argv[1:])),
           "seed": a.seed}
    ok = True

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def dump() -> None:
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=2)

    if "crash" in only and a.kills:
        from tests.reliability.crash import CrashInvariantError, run_cycles
        t = time.time()
        data = os.path.join(work, "crash", "data")
        shutil.rmtree(os.path.dirname(data), ignore_errors=True)

        def prog(s):
            if s.cycles % 100 == 0:
                log(f"crash: {s.cycles} kills, {s.acked_total} acknowledged records")
        try:
            s = run_cycles(data, a.kills, seed=a.seed, progress=prog)
            err = None
        except CrashInvariantError as e:
            err = str(e)
            s = None
            ok = False
        res["crash"] = {"kills": a.kills if s else None, "acknowledged_records": s.acked_total if s else None,
                        "records_checked_after_kills": s.records_checked if s else None,
                        "recoveries_that_truncated": s.recoveries_truncating if s else None,
                        "cleanings": s.cleanings if s else None,
                        "lost_acknowledged_records": 0 if s else None,
                        "error": err, "seconds": round(time.time() - t)}
        log(f"crash: {res['crash']}")
        dump()
    if "corruption" in only and a.corruptions:
        from tests.reliability.corruption import run_corruptions
        t = time.time()
        root = os.path.join(work, "corruption")
        shutil.rmtree(root, ignore_errors=True)
        tally = run_corruptions(root, a.corruptions, seed=a.seed,
                                progress=lambda i, tl: log(f"corruption: {i}") if i % 1000 == 0 else None)
        res["corruption"] = {"injected": tally.injected, "touching_data": tally.touching_data,
                             "detected_by_recovery": tally.detected,
                             "detected_by_verify": tally.verify_detected,
                             "by_kind": tally.by_kind,
                             "undetected": len(tally.undetected), "wrong_prefix": len(tally.wrong_prefix),
                             "corrupt_records_to_readers": len(tally.reader_failures),
                             "untyped_errors": len(tally.untyped),
                             "legacy_offset_reader_unchecked": tally.legacy_offset_reader_unchecked,
                             "examples": tally.failures[:20],
                             "seconds": round(time.time() - t)}
        ok = ok and not tally.failures
        log(f"corruption: { {k: v for k, v in res['corruption'].items() if k != 'examples'} }")
        dump()
    if "fuzz" in only and a.fuzz:
        from tests.reliability.fuzz_targets import mutation_fuzz
        t = time.time()
        try:
            done = mutation_fuzz(a.fuzz, seed=a.seed,
                                 progress=lambda i, d: log(f"fuzz: {i}") if i % 100000 == 0 else None)
            res["fuzz"] = {"inputs": sum(done.values()), "by_target": done, "untyped_errors": 0,
                           "hangs": 0, "seconds": round(time.time() - t)}
        except AssertionError as e:
            res["fuzz"] = {"error": str(e), "seconds": round(time.time() - t)}
            ok = False
        log(f"fuzz: {res['fuzz']}")
        dump()
    if "atheris" in only and a.atheris:
        t = time.time()
        corpus = os.path.join(work, "atheris-corpus")
        os.makedirs(corpus, exist_ok=True)
        cmd = [sys.executable, "-m", "tests.reliability.atheris_fuzz", f"-runs={a.atheris}",
               "-timeout=10", "-rss_limit_mb=2048", f"-seed={a.seed}", "-print_final_stats=1",
               f"-artifact_prefix={work}/", corpus]
        p = subprocess.run(cmd, capture_output=True, text=True)
        m = re.search(r"stat::number_of_executed_units: (\d+)", p.stderr)
        cov = re.findall(r"cov: (\d+)", p.stderr)
        res["atheris"] = {"runs": int(m.group(1)) if m else None, "exit": p.returncode,
                          "coverage_edges": int(cov[-1]) if cov else None,
                          "tail": (p.stderr[-1500:] if p.returncode else ""),
                          "seconds": round(time.time() - t)}
        ok = ok and p.returncode == 0
        log(f"atheris: {res['atheris']}")
        dump()
    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    res["ok"] = ok
    dump()
    print(json.dumps(res, indent=2))
    return 0 if ok else 1


def _machine() -> str:
    cpu = ""
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        mem = f"{int(open('/proc/meminfo').readline().split()[1]) // 1024 // 1024} GB"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu}), {mem} RAM, "
            f"Python {platform.python_version()}")


if __name__ == "__main__":
    sys.exit(main())
