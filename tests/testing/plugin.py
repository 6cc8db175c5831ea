"""How the suite's own pytest subprocesses get kafkalog's plugin: by its entry point once kafkalog
is installed with it, else (an editable install of an older checkout) by ``-p``."""

from __future__ import annotations

from importlib.metadata import entry_points

PLUGIN = "kafkalog.testing.pytest_plugin"


def installed() -> bool:
    return any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))


def plugin_args() -> list[str]:
    return [] if installed() else ["-p", PLUGIN]
