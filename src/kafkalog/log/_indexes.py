"""Deprecated compatibility accessors for code outside the log core that still calls them
(``kafkalog.cleaner.cleaner``, ``tests/reliability/crash.py``). The segment uses
:mod:`kafkalog.log.offset_index`, :mod:`kafkalog.log.time_index` and
:mod:`kafkalog.log.txn_index` directly; new code should call the index methods themselves."""

from __future__ import annotations

from typing import Tuple


def offset_is_full(idx) -> bool:
    return idx.is_full()


time_is_full = offset_is_full


def offset_lookup(idx, target: int) -> Tuple[int, int]:
    return tuple(idx.lookup(target))


def offset_entries(idx) -> int:
    return idx.entries


time_entries = offset_entries
