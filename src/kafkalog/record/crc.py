"""Checksums: CRC-32C (v2 batches, hardware via the ``crc32c`` package) and CRC-32 (legacy, zlib)."""
from __future__ import annotations

import mmap
import zlib
from typing import Union

import crc32c as _crc32c

#: what the checksums read: any bytes-like object (a mapped segment file included)
Buffer = Union[bytes, bytearray, memoryview, mmap.mmap]

__all__ = ["crc32c", "crc32"]


def crc32c(data: Buffer, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value``; unsigned 32-bit."""
    return int(_crc32c.crc32c(data, value))


def crc32(data: Buffer, value: int = 0) -> int:
    """CRC-32 (IEEE, zlib) of ``data``, continuing from ``value``; unsigned 32-bit."""
    return zlib.crc32(data, value) & 0xFFFFFFFF
