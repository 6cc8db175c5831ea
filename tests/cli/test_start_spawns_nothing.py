"""A command starts no other process (issue 35, ``kafkalog recover`` as a whole process): the log
layer found libc's ``sync_file_range`` with ``ctypes.util.find_library("c")``, which runs
``ldconfig -p`` in a child process, at every import of ``kafkalog.log.fsutil``: every command that
touches a log (recover, dump, verify, serve...) paid for a fork and an exec before its work. The
command runs in a real process with an audit hook counting the process-creating events (Python's
own ``subprocess.Popen``, ``os.posix_spawn``, ``os.fork``, ``os.exec``, ``os.system``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kafkalog.log.log import Log
from kafkalog.record.builder import BatchBuilder

_SPAWNS_DURING = """
import json, sys
spawned = []
SPAWNS = ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.system", "os.spawn")
sys.addaudithook(lambda event, args: spawned.append(event) if event in SPAWNS else None)
sys.argv = ["kafkalog", *json.loads(sys.argv[1])]
from kafkalog.cli.main import main
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
sys.stderr.write(json.dumps({"spawned": spawned, "code": code}) + "\\n")
"""


def test_recover_starts_no_other_process(tmp_path: Path) -> None:
    part = tmp_path / "data" / "t-0"
    log = Log.open(part)
    b = BatchBuilder()
    b.append(b"k", b"v", 1_700_000_000_000)
    log.append(bytearray(b.build()))
    log.close()
    res = subprocess.run([sys.executable, "-c", _SPAWNS_DURING,
                          json.dumps(["recover", str(part), "--discard", "--format", "json"])],
                         capture_output=True, text=True, timeout=120)
    outcome = json.loads(res.stderr.strip().splitlines()[-1])
    assert outcome["code"] in (0, None), res.stdout + res.stderr
    assert [json.loads(x)["type"] for x in res.stdout.splitlines()] == ["partition", "summary"]
    assert outcome["spawned"] == [], "kafkalog recover started another process"
