"""Port of Kafka's TransactionIndexTest."""

import os

import pytest

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.log.index.txn_index import AbortedTxn, TransactionIndex
from tests.descriptors import descriptors_under, needs_proc_fd


@pytest.fixture
def idx(tmp_path):
    i = TransactionIndex(0, tmp_path / "00000000000000000000.txnindex")
    yield i
    i.close()


def test_file_created_on_first_append(tmp_path, idx):
    assert not os.path.exists(idx.path)
    assert idx.all_entries() == []
    idx.append(AbortedTxn(0, 0, 10, 11))
    assert os.path.getsize(idx.path) == 34


def test_position_set_correctly_when_opened(tmp_path, idx):
    txns = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25),
            AbortedTxn(3, 32, 50, 40)]
    for t in txns:
        idx.append(t)
    idx.close()
    reopened = TransactionIndex(0, idx.path)
    a = AbortedTxn(4, 52, 60, 55)
    reopened.append(a)
    assert reopened.all_entries() == txns + [a]
    with pytest.raises(InvalidOffsetError):
        reopened.append(AbortedTxn(5, 52, 60, 61))
    reopened.close()


def test_sanity_check(tmp_path):
    i = TransactionIndex(0, tmp_path / "x.txnindex")
    i.append(AbortedTxn(0, 0, 10, 11))
    i.append(AbortedTxn(1, 5, 15, 13))
    i.close()
    j = TransactionIndex(12, i.path)
    with pytest.raises(CorruptIndexError) as e:
        j.sanity_check()
    assert e.value.position == 0 and e.value.file == i.path
    j.close()


def test_last_offset_must_increase(idx):
    idx.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError):
        idx.append(AbortedTxn(0, 0, 10, 11))
    with pytest.raises(InvalidOffsetError):
        idx.append(AbortedTxn(0, 0, 15, 11))


def test_collect_aborted_txns(idx):
    txns = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25),
            AbortedTxn(3, 32, 50, 40)]
    for t in txns:
        idx.append(t)
    r = idx.collect_aborted_txns(0, 32)
    assert r.aborted_transactions == txns[:3] and r.is_complete is True
    r = idx.collect_aborted_txns(0, 33)
    assert r.aborted_transactions == txns and r.is_complete is True
    r = idx.collect_aborted_txns(0, 41)
    assert r.aborted_transactions == txns and r.is_complete is False
    r = idx.collect_aborted_txns(16, 30)
    assert r.aborted_transactions == txns[2:3] and r.is_complete is True


def test_truncate_and_reset(idx):
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25)]
    for t in txns:
        idx.append(t)
    idx.truncate_to(51)
    assert idx.all_entries() == txns
    idx.truncate_to(35)
    assert idx.all_entries() == txns[:2]
    idx.append(AbortedTxn(5, 20, 36, 37))  # allowed after truncation
    idx.reset()
    assert idx.all_entries() == [] and os.path.getsize(idx.path) == 0
    idx.append(AbortedTxn(0, 0, 1, 2))


def test_serde_partial_entry_and_version(tmp_path):
    p = tmp_path / "s.txnindex"
    t = AbortedTxn(1 << 40, 7, 9, 10)
    assert len(t.to_bytes()) == 34 and t.to_bytes()[:2] == b"\0\0"
    p.write_bytes(t.to_bytes() + b"\x00" * 20)  # trailing partial entry ignored
    i = TransactionIndex(0, p)
    assert i.all_entries() == [t]
    i.close()
    p.write_bytes(b"\x01" + t.to_bytes()[1:])
    with pytest.raises(CorruptIndexError):
        TransactionIndex(0, p)
    p.write_bytes(b"\x00\x05" + t.to_bytes()[2:])  # only the first byte is the version
    i = TransactionIndex(0, p)
    assert i.all_entries() == [t]
    i.close()


def test_rename_flush_delete(tmp_path, idx):
    idx.rename_to(str(idx.path) + ".deleted")  # missing file: only the path changes
    assert idx.path.endswith(".deleted") and not os.path.exists(idx.path)
    idx.append(AbortedTxn(0, 0, 1, 2))
    idx.flush()
    idx.change_file_suffixes(".deleted", "")
    assert os.path.exists(idx.path) and idx.path.endswith(".txnindex")
    assert idx.all_entries() == [AbortedTxn(0, 0, 1, 2)]
    assert idx.delete_if_exists() is True
    assert not os.path.exists(idx.path)


@needs_proc_fd
def test_an_unreadable_index_leaves_no_descriptor_open(tmp_path):
    """Opening a .txnindex whose second entry has an unknown version is a typed error naming the
    file and the entry's position, and leaves no descriptor open (the mutation fuzzer leaked one
    per such input until the long fuzz run had thousands open)."""
    path = tmp_path / "00000000000000000000.txnindex"
    bad = bytearray(AbortedTxn(7, 0, 10, 0).to_bytes())
    bad[0] = 5
    path.write_bytes(AbortedTxn(1, 0, 5, 0).to_bytes() + bytes(bad))

    for _ in range(3):
        with pytest.raises(CorruptIndexError) as e:
            TransactionIndex(0, path)
        assert e.value.file == str(path) and e.value.position == 34
    assert descriptors_under(tmp_path) == {}


def test_making_an_index_costs_one_open_and_no_stat(tmp_path, monkeypatch):
    """A segment's transaction index is made at each segment's first read_committed read: an absent
    file (the common case) costs one failed open and is not made; a present one one open and one
    fstat, no stat before them."""
    from tests.os_calls import count_os_calls
    path = tmp_path / "00000000000000000000.txnindex"
    calls = count_os_calls(monkeypatch, ("stat", "open", "fstat"))
    absent = TransactionIndex(0, path)
    assert dict(calls) == {"stat": 0, "open": 1, "fstat": 0}
    assert not path.exists()
    absent.append(AbortedTxn(0, 0, 10, 11))
    absent.close()
    calls.clear()
    present = TransactionIndex(0, path)
    assert (calls["stat"], calls["open"], calls["fstat"]) == (0, 1, 1)
    assert present.all_entries() == [AbortedTxn(0, 0, 10, 11)]
    with pytest.raises(InvalidOffsetError):         # its last offset was read when it was made
        present.append(AbortedTxn(1, 5, 10, 12))
    present.close()
