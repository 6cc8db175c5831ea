"""Varints (spec §1.1, ByteUtilsTest), CRCs (Crc32CTest), sequence arithmetic."""
from __future__ import annotations

import pytest

from kafkalog.errors import InvalidRecordError
from kafkalog.record import varint
from kafkalog.record.constants import decrement_sequence, increment_sequence
from kafkalog.record.crc import crc32, crc32c

VECTORS = [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"),
           (-65, "8101"), (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"), (-8193, "818001"),
           (1048575, "feff7f"), (-1048576, "ffff7f"), (1048576, "80808001"),
           (134217727, "feffff7f"), (134217728, "8080808001")]


@pytest.mark.parametrize("value,hexs", VECTORS)
def test_varint_vectors(value, hexs, any_kernel):
    for mod in (varint, any_kernel):
        assert mod.write_varint(value).hex() == hexs
        assert mod.read_varint(bytes.fromhex(hexs), 0) == (value, len(hexs) // 2)
        assert mod.write_varlong(value).hex() == hexs
        assert mod.read_varlong(bytes.fromhex(hexs), 0) == (value, len(hexs) // 2)
    assert varint.size_of_varint(value) == len(hexs) // 2
    assert varint.size_of_varlong(value) == len(hexs) // 2


def test_unsigned_varint_vectors():
    assert varint.write_unsigned_varint(0xFFFFFFFF).hex() == "ffffffff0f"
    assert varint.write_unsigned_varint(2**31 - 1).hex() == "ffffffff07"
    assert varint.write_unsigned_varint(2**31).hex() == "8080808008"
    assert varint.read_unsigned_varint(bytes.fromhex("ffffffff0f"), 0) == (0xFFFFFFFF, 5)


def test_overlong_and_truncated_rejected(any_kernel):
    for mod in (varint, any_kernel):
        assert mod.read_varint(bytes.fromhex("8000"), 0) == (0, 2)  # non-minimal accepted
        with pytest.raises(InvalidRecordError) as e:
            mod.read_varint(bytes.fromhex("00ffffffffff01"), 1)
        assert e.value.position == 1
        with pytest.raises(InvalidRecordError):
            mod.read_varlong(bytes.fromhex("ff" * 10 + "01"), 0)
        with pytest.raises(InvalidRecordError):
            mod.read_varint(b"\x80\x80", 0)
        with pytest.raises(InvalidRecordError):
            mod.read_varlong(b"", 0)


def test_write_out_of_range_rejected():
    with pytest.raises(InvalidRecordError):
        varint.write_varint(2**31)
    with pytest.raises(InvalidRecordError):
        varint.write_varlong(2**63)


def test_crc_check_values():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"\x00" * 4) == 0x48674BC7
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283
    assert crc32(b"123456789") == 0xCBF43926


def test_sequence_wrap():
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 2) == 0
    assert increment_sequence(5, 3) == 8
    assert decrement_sequence(0, 1) == 2**31 - 1
    assert decrement_sequence(10, 3) == 7


def test_kernel_selection_env():
    import os
    import subprocess
    import sys
    code = "import kafkalog.record.kernel as k; print(k.IMPLEMENTATION)"
    env = dict(os.environ, KAFKALOG_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60).stdout.strip()
    assert out == "python"
    env.pop("KAFKALOG_PURE_PYTHON")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60).stdout.strip()
    try:
        from kafkalog.record import _kernel
        want = "cython" if hasattr(_kernel, "decode_records_v2") else "python"
    except ImportError:
        want = "python"
    assert out == want
