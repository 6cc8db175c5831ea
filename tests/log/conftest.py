"""Shared helpers for the log tests: real batches built by an independent encoder (aiokafka /
kafka-python's pure encoders), real files in tmp_path."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

BASE_TS = 1_700_000_000_000


def v2_batch(values, *, base_offset: int = 0, timestamps=None, keys=None, compression: int = 0,
             producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
             transactional: bool = False, leader_epoch: int = -1) -> bytearray:
    """One v2 batch holding ``values`` (bytes) at offsets base_offset.."""
    b = DefaultRecordBatchBuilder(2, compression, int(transactional), producer_id, producer_epoch,
                                  base_sequence, 1 << 30)
    for i, v in enumerate(values):
        ts = timestamps[i] if timestamps is not None else BASE_TS + i
        k = keys[i] if keys is not None else None
        b.append(i, ts, k, v, [])
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 12, leader_epoch)
    return out


def legacy_batch(values, *, magic: int = 1, offset: int = 0, compression: int = 0, timestamp=BASE_TS):
    """A legacy entry set: one message (uncompressed, single value) or a compressed wrapper."""
    b = LegacyRecordBatchBuilder(magic, compression, 1 << 30)
    for i, v in enumerate(values):
        b.append(i, timestamp + i if magic else None, None, v)
    out = bytearray(b.build())
    return out


def concat(*bs) -> bytearray:
    out = bytearray()
    for b in bs:
        out += b
    return out


@pytest.fixture
def seg_dir(tmp_path):
    d = tmp_path / "topic-0"
    d.mkdir()
    return d
