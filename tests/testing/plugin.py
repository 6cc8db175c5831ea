"""How the suite's own pytest subprocesses get kafkalog's plugin: by its entry point once kafkalog
is installed with it, else (an editable install of an older checkout) by ``-p``; and where they keep
their temporary directories (:func:`basetemp_args`)."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

PLUGIN = "kafkalog.testing.pytest_plugin"


def installed() -> bool:
    return any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))


def plugin_args() -> list[str]:
    return [] if installed() else ["-p", PLUGIN]


def basetemp_args(tmp_path: Path) -> list[str]:
    """``--basetemp`` inside the test's own ``tmp_path``: a pytest run with the default base
    (``/tmp/pytest-of-<user>``) deletes the numbered directories of earlier runs beyond the last
    three, and one of this suite's runs holds gigabytes (a test here took 46-71 s instead of 8, in
    system time, deleting one)."""
    return ["--basetemp", str(tmp_path / "basetemp")]
