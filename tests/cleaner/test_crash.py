"""A real process killed with SIGKILL at each step of the swap protocol; reopening the log with the
loader must give the old or the new segments, never lose a key's latest value (spec §4.8, §4.11)."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from kafkalog.cleaner.swap import CRASH_ENV, CRASH_STEPS
from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log

from .helpers import NOW, append, data_records, latest_per_key, open_log

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from helpers import open_log, clean
    log = open_log({path!r}, **{{"segment.bytes": 700}})
    clean(log)
    print("completed")
""")


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_sigkill_at_each_swap_step(tmp_path, step):
    path = str(tmp_path / "t-0")
    log = open_log(path, **{"segment.bytes": 700})
    for i in range(150):
        append(log, [(b"k%d" % (i % 9), b"v%d" % i)])
    append(log, [(b"k0", None)])
    for i in range(10):
        append(log, [(b"tail%d" % i, b"t")])
    expected = latest_per_key(data_records(log))
    log.close()
    env = dict(os.environ, **{CRASH_ENV: step})
    p = subprocess.run([sys.executable, "-c", SCRIPT.format(here=HERE, path=path)], env=env,
                       capture_output=True, text=True, timeout=120)
    if step != "swap-partial":
        assert p.returncode == -signal.SIGKILL, p.stderr
    else:
        assert p.returncode in (0, -signal.SIGKILL), p.stderr
    reopened = Log.open(path, LogConfig({"cleanup.policy": "compact", "segment.bytes": 700}),
                        clock=lambda: NOW)
    try:
        names = os.listdir(path)
        assert not any(n.endswith((".cleaned", ".swap", ".deleted")) for n in names), names
        recs = data_records(reopened)
        assert latest_per_key(recs) == expected
        offs = [r.offset for r in recs]
        assert offs == sorted(offs) and len(set(offs)) == len(offs)
    finally:
        reopened.close()
