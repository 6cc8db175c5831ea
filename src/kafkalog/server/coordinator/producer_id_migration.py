"""The broker's producer ids come from :class:`kafkalog.coordinator.producer_ids.ProducerIdManager`,
the allocator the embedded client uses too. Before it, ``kafkalog serve`` reserved blocks in its own
file, ``kafkalog-producer-ids`` (``next.producer.id=<n>``). :func:`adopt_legacy_reservation` reads
that file once, moves its reservation into the manager's file (the larger of the two wins, atomic
replace + fsync), then removes it, so an id handed out by the old allocator is never handed out again.
"""

from __future__ import annotations

import os

from kafkalog.coordinator.producer_ids import (
    PRODUCER_IDS_FILE,
    CorruptProducerIdsError,
    ProducerIdManager,
)
from kafkalog.log import fsutil

LEGACY_PRODUCER_IDS_FILE = "kafkalog-producer-ids"
_PREFIX = "next.producer.id="


def _read_legacy(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise fsutil.io_error(e, path, "read producer ids") from e
    if not text.startswith(_PREFIX):
        raise CorruptProducerIdsError(f"expected {_PREFIX}<n>", file=path, position=0)
    try:
        value = int(text[len(_PREFIX):])
    except ValueError:
        raise CorruptProducerIdsError("next.producer.id is not an integer", file=path,
                                      position=len(_PREFIX)) from None
    if value < 0:
        raise CorruptProducerIdsError("next.producer.id is negative", file=path, position=len(_PREFIX))
    return value


def adopt_legacy_reservation(data_dir: str) -> ProducerIdManager:
    """The data directory's :class:`ProducerIdManager`, after folding in the old server file."""
    manager = ProducerIdManager(data_dir)
    legacy = os.path.join(data_dir, LEGACY_PRODUCER_IDS_FILE)
    value = _read_legacy(legacy)
    if value is None:
        return manager
    reserved = manager._read_reserved()  # its own reader of its format
    if value > reserved:
        fsutil.atomic_write(os.path.join(data_dir, PRODUCER_IDS_FILE), f"0\n{value}\n".encode("ascii"))
    os.unlink(legacy)
    fsutil.fsync_dir(data_dir)
    return manager
