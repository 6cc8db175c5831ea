"""Layering: imports only point downwards (record -> log -> cleaner -> surfaces), and the cleaner
reaches the data directory from the layer above (``kafkalog.open`` hands it to the log manager)."""
import json
import os
import subprocess
import sys
import time

import kafkalog
from kafkalog.log.checkpoint import OffsetCheckpointFile
from kafkalog.log.naming import CLEANER_OFFSET_CHECKPOINT_FILE, TopicPartition

_PROBE = r"""
import importlib, json, pkgutil, sys
import kafkalog.{layer}
for m in pkgutil.iter_modules(kafkalog.{layer}.__path__):
    importlib.import_module("kafkalog.{layer}." + m.name)
print(json.dumps(sorted(n for n in sys.modules if n.startswith("kafkalog."))))
"""

_ABOVE = {
    "record": ("kafkalog.log", "kafkalog.cleaner", "kafkalog.coordinator", "kafkalog.client",
               "kafkalog.server", "kafkalog.spark", "kafkalog.cli"),
    "log": ("kafkalog.cleaner", "kafkalog.coordinator", "kafkalog.client", "kafkalog.server",
            "kafkalog.spark", "kafkalog.cli"),
    "cleaner": ("kafkalog.coordinator", "kafkalog.client", "kafkalog.server", "kafkalog.spark",
                "kafkalog.cli"),
}


def _loaded_after_importing(layer: str) -> list:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(layer=layer)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_log_manager_does_not_import_the_cleaner():
    code = ("import sys, kafkalog.log.manager; "
            "print(sorted(n for n in sys.modules if n.startswith('kafkalog.cleaner')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_layer_imports_only_downwards():
    for layer, above in _ABOVE.items():
        loaded = _loaded_after_importing(layer)
        assert f"kafkalog.{layer}" in loaded
        upward = [n for n in loaded if n.startswith(above)]
        assert upward == [], f"kafkalog.{layer} imports {upward}"


def _fill(dl, topic: str, n: int, keys: int) -> None:
    for i in range(n):
        dl.produce(topic, b"v%d" % i, key=b"k%d" % (i % keys), partition=0)


def test_open_with_the_cleaner_enabled_compacts(tmp_path):
    d = str(tmp_path / "data")
    cfg = {"log.cleaner.backoff.ms": 20, "log.cleaner.dedupe.buffer.size": 1 << 20,
           "log.initial.task.delay.ms": 0}
    with kafkalog.open(d, cfg) as dl:
        dl.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 700,
                                 "min.cleanable.dirty.ratio": 0.01})
        _fill(dl, "c", 200, 5)
        checkpoint = os.path.join(d, CLEANER_OFFSET_CHECKPOINT_FILE)
        deadline = time.monotonic() + 60
        cleaned_to = 0
        while time.monotonic() < deadline:
            if os.path.exists(checkpoint):
                cleaned_to = OffsetCheckpointFile(checkpoint, create=False).read().get(
                    TopicPartition("c", 0), 0)
                if cleaned_to > 0:
                    break
            time.sleep(0.02)
        assert cleaned_to > 0, "the background cleaner never cleaned the compacted topic"
        records = list(dl.consume("c", 0))
    latest = {}
    for r in records:
        latest[r.key] = r.value
    assert latest == {b"k%d" % k: b"v%d" % max(i for i in range(200) if i % 5 == k)
                      for k in range(5)}
    # the cleaned range holds at most one record per key
    below = [r.key for r in records if r.offset < cleaned_to]
    assert len(below) == len(set(below))
    assert len(records) < 200


def test_open_with_the_cleaner_disabled_starts_none(tmp_path):
    with kafkalog.open(str(tmp_path / "d"), {"log.cleaner.enable": False}) as dl:
        assert dl.manager.cleaner is None
    with kafkalog.open(str(tmp_path / "e"), {"log.cleaner.enable": True}) as dl:
        assert dl.manager.cleaner is not None


def test_typed_errors_are_reexported_from_kafkalog():
    import kafkalog.errors
    assert "KafkalogError" in kafkalog.errors.__all__
    for name in kafkalog.errors.__all__:
        assert getattr(kafkalog, name) is getattr(kafkalog.errors, name)
        assert issubclass(getattr(kafkalog, name), kafkalog.KafkalogError)
        assert name in kafkalog.__all__
    star: dict = {}
    exec("from kafkalog import *", star)
    assert star["LogDirError"] is kafkalog.errors.LogDirError
    assert star.get("open", open) is open          # the builtin is not shadowed


def test_public_client_classes_are_lazy_exports_of_kafkalog():
    """``import kafkalog`` stays light (the client is imported on first use), and every name of
    the client's API the README uses is reachable as ``kafkalog.<name>``."""
    code = (
        "import sys, kafkalog\n"
        "assert 'kafkalog.client' not in sys.modules, 'import kafkalog imported the client'\n"
        "import kafkalog.client as c\n"
        "for name in c.__all__:\n"
        "    assert getattr(kafkalog, name) is getattr(c, name), name\n"
        "    assert name in dir(kafkalog), name\n"
        "    assert (name in kafkalog.__all__) == (name != 'open'), name\n"
        "assert kafkalog.Consumer.__name__ == 'Consumer'\n"
        "star = {}\n"
        "exec('from kafkalog import *', star)\n"
        "assert star['Consumer'] is c.Consumer and star['TopicPartition'] is c.TopicPartition\n"
        "try:\n"
        "    kafkalog.NoSuchThing\n"
        "except AttributeError as e:\n"
        "    assert 'NoSuchThing' in str(e)\n"
        "else:\n"
        "    raise AssertionError('kafkalog.NoSuchThing did not raise')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
