"""The Node.js clients of the broker tests (``tests/server/node``: kafkajs), and the clients from
Debian's packages (kcat), which are test dependencies installed outside pip.

The node project's ``package.json`` and ``package-lock.json`` are committed; its ``node_modules``
never is: :func:`node_modules` runs ``npm ci`` once into a cache keyed by the lock file's digest
(``$KAFKALOG_NODE_CACHE``, else ``~/.cache/kafkalog-node``), so a second run downloads nothing.

Without ``node``/``npm`` (or kcat), a test skips saying why; where ``KAFKALOG_REQUIRE_CLIENTS=1``
(``.ci/run`` sets it) it fails instead, so CI cannot pass without the clients.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from typing import NoReturn

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.join(HERE, "node")
REQUIRE_ENV = "KAFKALOG_REQUIRE_CLIENTS"


def unavailable(why: str) -> NoReturn:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"a client the tests need is missing ({REQUIRE_ENV}=1): {why}")
    pytest.skip(why)


def cache_dir() -> str:
    return os.environ.get("KAFKALOG_NODE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                 "kafkalog-node")


def node_modules() -> str:
    """The ``node_modules`` of the test project (installed with ``npm ci`` on first use)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            unavailable(f"`{tool}` is not on PATH (Node.js runs the kafkajs tests)")
    with open(os.path.join(PROJECT, "package-lock.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    root = os.path.join(cache_dir(), digest)
    modules = os.path.join(root, "node_modules")
    if os.path.isdir(os.path.join(modules, "kafkajs")):
        return modules

    def npm_ci(tmp: str) -> subprocess.CompletedProcess[str]:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(PROJECT, name), tmp)
        return subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=tmp,
                              capture_output=True, text=True, timeout=900, check=False)

    build_once(root, npm_ci, f"npm ci of {PROJECT}")
    return modules


def build_once(root: str, build: Callable[[str], subprocess.CompletedProcess[str]], what: str) -> None:
    """``build`` into a new temporary sibling of ``root``, moved to ``root`` once it succeeded (a
    cache no half-built run leaves behind); its failure skips (fails on CI) naming ``what``."""
    tmp = f"{root}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    r = build(tmp)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        unavailable(f"{what} failed: {(r.stdout + r.stderr)[-800:]}")
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)


def run_node(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``node tests/server/node/SCRIPT ARGS`` with the project's modules."""
    env = {**os.environ, "NODE_PATH": node_modules()}
    return subprocess.run(["node", os.path.join(PROJECT, script), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
