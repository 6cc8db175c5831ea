"""``ConsumerRecord``: the consumer's record class (compiled and pure-Python twin) behaves as the
kafka-python-shaped named tuple it replaced: attributes, tuple-like indexing, unpacking, comparison,
``_asdict``/``_replace``/``_make``, repr, pickling, lazily created headers, derived sizes."""

from __future__ import annotations

import gc
import pickle
from typing import Any, NamedTuple

import pytest

from kafkalog.client import kernel
from kafkalog.client.consumer import ConsumerRecord as SelectedRecord
from kafkalog.record import kernel as record_kernel
from tests.client.kernels import kernels
from tests.record.test_kernel_parity import SAMPLE, TS


class _Shape(NamedTuple):      # the named tuple the consumer used to return
    topic: str
    partition: int
    leader_epoch: int | None
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]


VALUES = ("t", 3, 7, 100, TS, 0, b"k", b"value", [("h", b"x"), ("\u00e9", None)])


def test_the_consumer_returns_the_selected_kernels_class():
    assert SelectedRecord is kernel.ConsumerRecord is kernel.implementation_module.ConsumerRecord


@kernels
def test_tuple_behaviour(K):
    r = K.ConsumerRecord(*VALUES)
    nt = _Shape(*VALUES)
    assert len(r) == 9 and list(r) == list(nt) and tuple(r) == tuple(nt)
    assert r == nt and nt == r and r == tuple(nt)
    assert (r != nt) is False
    assert [r[i] for i in range(-9, 9)] == [nt[i] for i in range(-9, 9)]
    assert r[2:5] == nt[2:5] and r[::-1] == nt[::-1]
    with pytest.raises(IndexError):
        r[9]
    with pytest.raises(TypeError):
        r["topic"]
    topic, partition, epoch, offset, ts, tst, key, value, headers = r
    assert (topic, partition, epoch, offset, ts, tst, key, value, headers) == tuple(nt)
    assert b"k" in r and b"nope" not in r
    assert K.ConsumerRecord._fields == _Shape._fields
    assert r._asdict() == nt._asdict()
    other = r._replace(offset=101)
    assert other > r and r < other and r <= r and r >= r and other != r
    assert r != "t" and (r == None) is False  # noqa: E711
    with pytest.raises(TypeError):
        hash(r)


@kernels
def test_attributes_are_read_only_and_derived_fields(K):
    r = K.ConsumerRecord(*VALUES)
    for name in _Shape._fields:
        assert getattr(r, name) == getattr(_Shape(*VALUES), name)
        with pytest.raises(AttributeError):
            setattr(r, name, None)
    assert r.checksum is None
    assert (r.serialized_key_size, r.serialized_value_size) == (1, 5)
    assert r.serialized_header_size == 1 + 1 + len("\u00e9".encode())
    n = K.ConsumerRecord("t", 0, None, 0, TS, 1, None, None)
    assert (n.serialized_key_size, n.serialized_value_size, n.serialized_header_size) == (-1, -1, -1)


@kernels
def test_replace_make_repr_pickle(K):
    r = K.ConsumerRecord(*VALUES)
    d = r._replace(key="k", value={"v": 1})
    assert type(d) is K.ConsumerRecord
    assert tuple(d) == ("t", 3, 7, 100, TS, 0, "k", {"v": 1}, VALUES[8]) and tuple(r) == VALUES
    with pytest.raises(ValueError):
        r._replace(nope=1)
    moved = r._replace(topic="u", partition=4, leader_epoch=None, timestamp_type=1)
    assert tuple(moved) == ("u", 4, None, 100, TS, 1, b"k", b"value", VALUES[8]) and tuple(r) == VALUES
    assert K.ConsumerRecord._make(VALUES) == r
    assert repr(r) == repr(_Shape(*VALUES)).replace("_Shape(", "ConsumerRecord(")
    assert eval(repr(r), {"ConsumerRecord": K.ConsumerRecord}) == r
    back = pickle.loads(pickle.dumps(r))
    assert type(back) is K.ConsumerRecord and back == r


@kernels
def test_headers_created_once_per_record(K):
    body = record_kernel.implementation_module.encode_records_v2(SAMPLE, TS)
    recs = K.decode_consumer_records(body, len(SAMPLE), 0, TS, -1, "t", 0, None, 0, 0, 2**63 - 1)
    bare = [r for r in recs if r.serialized_header_size == -1]
    assert bare
    h = bare[0].headers
    assert h == [] and type(h) is list and bare[0].headers is h       # the same list on each access
    h.append(("a", b"b"))
    assert bare[0].headers == [("a", b"b")] and bare[0].serialized_header_size == 2
    assert all(r.headers == [] for r in bare[1:])
    with_headers = [r for r in recs if r.serialized_header_size > 0]
    assert with_headers and all(r.headers for r in with_headers)


def test_compiled_records_untracked_until_they_hold_a_list():
    K = kernel.implementation_module
    if kernel.IMPLEMENTATION != "cython":
        pytest.skip("the compiled kernel is not in use")
    body = record_kernel.implementation_module.encode_records_v2(SAMPLE, TS)
    recs = K.decode_consumer_records(body, len(SAMPLE), 0, TS, -1, "t", 0, None, 0, 0, 2**63 - 1)
    bare = [r for r in recs if r.serialized_header_size == -1]
    assert bare and not any(gc.is_tracked(r) for r in bare)
    assert all(gc.is_tracked(r) for r in recs if r.serialized_header_size > 0)
    r = bare[0]
    r.headers.append(("self", r))          # a cycle through the headers list: collectable
    assert gc.is_tracked(r)
    del r, bare, recs
    r = K.ConsumerRecord("t", 0, None, 0, TS, 0, None, None)
    r.headers.append(("self", r))
    del r
    assert gc.collect() >= 2               # the record and its headers list
