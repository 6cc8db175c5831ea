"""A Produce answer of thousands of partitions is encoded a slice at a time (issue 35): at 100,000
partitions its encoding took 30 ms in one step of the event loop. These count the slices and check
that what they make decodes (kio) as the whole answer, record errors and messages included;
``tests/server/test_many_partitions_fairness.py`` checks from a socket that other clients are
answered while such a Produce is under way."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kafkalog.server.handlers import slices
from kafkalog.server.handlers.produce import PartitionResult, _encode_response_steps, encode_produce_response
from kafkalog.server.handlers.slices import ENTRIES_PER_SLICE
from tests.server.raw import response_of

TOPICS = 5
PER_TOPIC = 1000


def _result(t: int, i: int) -> PartitionResult:
    if i % 97 == 0:                         # a batch refused: its record errors and message
        return PartitionResult(i, 87, message=f"bad {t}/{i}", record_errors=((0, "why"), (2, "other")))
    return PartitionResult(i, 0, base_offset=1000 * t + i, log_append_time=-1, log_start_offset=t)


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_a_produce_answer_is_encoded_a_slice_at_a_time_and_decodes_whole(
        version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slices, "SLICE_SECONDS", 3600.0)     # slices by count only
    keys: list[Any] = [uuid.uuid4() if version >= 13 else f"topic-{t}" for t in range(TOPICS)]
    results = [(keys[t], [_result(t, i) for i in range(PER_TOPIC)]) for t in range(TOPICS)]
    out: list[bytes] = []
    n_slices = sum(1 for _ in _encode_response_steps(11, version, results, out))
    assert n_slices == TOPICS * PER_TOPIC // ENTRIES_PER_SLICE
    [frame] = out
    assert frame == encode_produce_response(11, version, results)      # at once: the same bytes
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoded: Any = response_of(frame[4:], 0, version)
    assert [t.topic_id if version >= 13 else t.name for t in decoded.responses] == keys
    for t, topic in enumerate(decoded.responses):
        assert [p.index for p in topic.partition_responses] == list(range(PER_TOPIC))
        for p in topic.partition_responses:
            want = _result(t, p.index)
            assert (p.error_code, p.base_offset) == (want.error, want.base_offset)
            if version >= 5:
                assert p.log_start_offset == want.log_start_offset
            if version >= 8:
                assert p.error_message == want.message
                assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == \
                    list(want.record_errors)
