"""Run a ``kafkalog`` command as a real process on a pseudo-terminal (what decides text or JSON,
and whether a progress bar is drawn)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple


def at_a_terminal(args: List[str], *, cwd: Optional[Path] = None, stderr_too: bool = False,
                  env: Optional[Dict[str, str]] = None) -> Tuple[int, str, str]:
    """``kafkalog ARGS`` with stdin and stdout on a pseudo-terminal, and stderr too when
    ``stderr_too`` (else on a pipe): (exit, what the terminal received, stderr piped)."""
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "kafkalog.cli.main", *args], stdin=slave, stdout=slave,
                             stderr=slave if stderr_too else subprocess.PIPE, cwd=cwd, env=env)
        os.close(slave)
        err: List[bytes] = []
        reader = threading.Thread(target=lambda: err.append(p.stderr.read()) if p.stderr else None)
        reader.start()
        chunks = []
        deadline = time.monotonic() + 120
        while True:                     # read while it runs: a full terminal would stop it
            if not select.select([master], [], [], max(0.0, deadline - time.monotonic()))[0]:
                p.kill()
                raise subprocess.TimeoutExpired(args, 120)
            try:
                data = os.read(master, 65536)
            except OSError:             # EIO: the terminal's other side is closed
                break
            if not data:
                break
            chunks.append(data)
        code = p.wait(timeout=120)
        reader.join(timeout=120)
        return (code, b"".join(chunks).decode("utf-8", "replace"),
                b"".join(err).decode("utf-8", "replace"))
    finally:
        os.close(master)
