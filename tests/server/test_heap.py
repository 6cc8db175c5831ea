"""``kafkalog serve``'s collector around the load of its partitions (issue 35, ``server/heap.py``):
off while the load runs (its full collections walked every partition loaded so far: 6.8 of 25.9 s
at 100,000 partitions), what the load made frozen as it ends, and the collector back as it was;
a failed load freezes nothing."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from kafkalog.server import heap


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()                   # (nothing else in this process freezes)
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_load_runs_without_the_collector_and_what_it_made_is_frozen() -> None:
    gc.enable()
    before = gc.get_freeze_count()
    with heap.loading():
        assert not gc.isenabled()
        made = [[i] for i in range(20_000)]          # long-lived objects, as a load's
    assert gc.isenabled()
    assert gc.get_freeze_count() - before >= len(made)


def test_a_failed_load_freezes_nothing_and_the_collector_stays_as_it_was() -> None:
    gc.disable()                    # an application that turned it off keeps it off
    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError), heap.loading():
        _garbage = [[i] for i in range(1_000)]
        raise RuntimeError("the load failed")
    assert gc.get_freeze_count() == before
    assert not gc.isenabled()
    gc.enable()
    with pytest.raises(RuntimeError), heap.loading():
        raise RuntimeError("the load failed")
    assert gc.isenabled()
