"""kafkalog.testing sits beside the other surfaces (layer 5): it runs the server and reads through
the client, and nothing imports it; it never reaches the command line (layer 6) or Spark."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = r"""
import importlib, json, pkgutil, sys
import kafkalog
for layer in {layers!r}:
    package = importlib.import_module("kafkalog." + layer)
    for m in pkgutil.walk_packages(package.__path__, "kafkalog." + layer + "."):
        importlib.import_module(m.name)
print(json.dumps(sorted(n for n in sys.modules if n.startswith("kafkalog."))))
"""


def _loaded(*layers: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(layers=list(layers))], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_nothing_imports_kafkalog_testing() -> None:
    loaded = _loaded("record", "log", "cleaner", "coordinator", "client", "aio", "server", "cli")
    assert [n for n in loaded if n.startswith("kafkalog.testing")] == []


def test_kafkalog_testing_imports_neither_the_cli_nor_spark() -> None:
    loaded = _loaded("testing")
    assert "kafkalog.testing.zygote" in loaded and "kafkalog.server.handlers.request_control" in loaded
    assert [n for n in loaded if n.split(".")[1] in ("cli", "spark")] == []
