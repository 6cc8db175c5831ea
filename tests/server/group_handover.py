"""The group persistence tests' handover of one data directory between Kafka 4.4 and ``kafkalog serve``:
a new Kafka broker prepares the directory (its metadata must know the topics), kafkalog serves it (and
is killed and restarted on it), Kafka takes it back; the ``__consumer_offsets`` segments both wrote
read as Kafka's DumpLogSegments reads them."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from tests import kafka44
from tests.server.broker_process import BrokerProcess


@contextmanager
def serving(kafka: kafka44.KafkaBroker) -> Iterator[kafka44.KafkaBroker]:
    """Kafka started on its directory (which kafkalog may have written) for the block, then stopped."""
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


@contextmanager
def new_kafka(tmp_path: Path, settings: Mapping[str, str]) -> Iterator[kafka44.KafkaBroker]:
    """A Kafka 4.4 broker formatted in ``tmp_path/kafka`` (skips without Kafka), serving for the block."""
    kafka44.require()
    kafka = kafka44.KafkaBroker(tmp_path / "kafka", settings)
    kafka.format()
    with serving(kafka):
        yield kafka


class Kafkalog:
    """``kafkalog serve`` on a data directory for a ``with`` block: at its end the broker must stop
    cleanly (exit 0, its stderr shown otherwise); it is killed when the block fails."""

    def __init__(self, data: Path, settings: Mapping[str, str]) -> None:
        self.data = str(data)
        self.configs = [f"{k}={v}" for k, v in settings.items()]
        self.broker = BrokerProcess(self.data, self.configs)

    @property
    def port(self) -> int:
        return self.broker.port

    def __enter__(self) -> Kafkalog:
        self.broker.start()
        return self

    def crash_and_restart(self) -> None:
        """SIGKILL (a crash: nothing flushed at shutdown), then a new broker on the same directory."""
        self.broker.stop(sig=signal.SIGKILL)
        self.broker = BrokerProcess(self.data, self.configs).start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                assert self.broker.stop() == 0, self.broker.stderr()
        finally:
            if self.broker.alive():
                self.broker.kill()


def groups_cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kafkalog groups DATA ARGS`` as a subprocess."""
    return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "groups", str(data), *args],
                          capture_output=True, text=True, timeout=120)


def offsets_segments(data: Path, group: str) -> list[Path]:
    """The segments of the ``__consumer_offsets`` partition that holds ``group``."""
    from kafkalog.coordinator.group_metadata import partition_for_group
    d = data / f"__consumer_offsets-{partition_for_group(group)}"
    return sorted(d.glob("*.log"))


def dump(segment: Path) -> tuple[str, str]:
    """``--offsets-decoder`` output of a segment: Kafka's DumpLogSegments', then ``kafkalog dump``'s."""
    theirs = kafka44.dump_log_segments([segment], "--offsets-decoder")
    ours = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "dump", str(segment), "--offsets-decoder"],
                          capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    return theirs, ours.stdout


def assert_offsets_read_as_kafka(data: Path, group: str, kafka_type: int, name: str) -> None:
    """``kafkalog dump --offsets-decoder`` prints the segments of ``group``'s ``__consumer_offsets``
    partition as DumpLogSegments does; Kafka's tool shows the group's records by their type number
    (``kafka_type``), and no ``name`` of them."""
    for segment in offsets_segments(data, group):
        theirs, mine = dump(segment)
        assert name not in theirs and f'"type":"{kafka_type}"' in theirs, theirs[:2000]
        assert mine == theirs
