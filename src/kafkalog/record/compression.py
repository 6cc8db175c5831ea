"""Compression codecs with Kafka's on-disk framing (spec §1.8).

``compress(codec, data, *, magic, level=None)`` and ``decompress(codec, data, *, magic, max_size)``
for the five codec ids of the attributes byte: none (0), gzip (1), snappy (2), lz4 (3), zstd (4).

* **gzip**: one RFC 1952 member with the JDK's header (``1f 8b 08 00 00000000 00 ff``); level
  ``compression.gzip.level`` 1..9 or -1 (= zlib's 6). Reading accepts concatenated members and
  ignores trailing bytes that do not start a member, like ``GZIPInputStream``.
* **snappy**: xerial snappy-java stream framing (16-byte header, int32 BE block lengths, 32 KiB
  blocks). Reading also accepts a payload without the header as one raw Snappy block and several
  concatenated xerial streams.
* **lz4**: Kafka's LZ4 frame subset (``Lz4BlockOutputStream``/``Lz4BlockInputStream``): FLG 0x60,
  BD 0x40, 64 KiB independent blocks, the magic-0 header-checksum quirk (KAFKA-3160). Level
  ``compression.lz4.level`` 1..17: 9 (the default) uses the fast compressor, other levels LZ4-HC.
* **zstd**: standard zstd frames, magic 2 only; level ``compression.zstd.level`` -131072..22
  (default 3). Reading accepts several frames.

Decompression is bounded: ``max_size`` caps the decompressed size, and no codec allocates much
more than ``max_size`` plus one chunk, whatever the payload claims. Every malformed payload raises
:class:`~kafkalog.errors.CompressionError` with the byte position (relative to the start of the
compressed payload) where the problem was found.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import Any, Dict, List, Optional, Union

import cramjam
import lz4.block
import zstandard

from kafkalog.errors import CompressionError, InvalidConfigError, UnsupportedCompressionTypeError

__all__ = [
    "compress", "decompress", "validate_level", "default_level",
    "NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD",
    "GZIP_DEFAULT_LEVEL", "GZIP_MIN_LEVEL", "GZIP_MAX_LEVEL",
    "LZ4_DEFAULT_LEVEL", "LZ4_MIN_LEVEL", "LZ4_MAX_LEVEL",
    "ZSTD_DEFAULT_LEVEL", "ZSTD_MIN_LEVEL", "ZSTD_MAX_LEVEL",
    "xxh32",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# KIP-390 levels (Kafka's GzipCompression / Lz4Compression / ZstdCompression).
GZIP_DEFAULT_LEVEL = -1          # Deflater.DEFAULT_COMPRESSION (= zlib level 6)
GZIP_MIN_LEVEL, GZIP_MAX_LEVEL = 1, 9
LZ4_DEFAULT_LEVEL = 9
LZ4_MIN_LEVEL, LZ4_MAX_LEVEL = 1, 17
ZSTD_DEFAULT_LEVEL = 3
ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL = -131072, 22

Buffer = Union[bytes, bytearray, memoryview]

_U32LE = struct.Struct("<I")
_I32BE = struct.Struct(">i")

# --------------------------------------------------------------------------------------------------
# codec ids and levels


def _codec_id(codec: int, magic: int) -> int:
    try:
        cid = int(codec)
    except (TypeError, ValueError):
        raise UnsupportedCompressionTypeError(f"Unknown compression type {codec!r}") from None
    if cid not in _NAMES:
        raise UnsupportedCompressionTypeError(f"Unknown compression type id {cid}")
    if cid == ZSTD and magic < 2:
        raise UnsupportedCompressionTypeError(
            f"Compression type zstd is not supported for magic {magic} (requires magic 2)")
    return cid


def default_level(codec: int) -> Optional[int]:
    """Kafka's default level for ``codec`` (None for codecs without levels)."""
    return {GZIP: GZIP_DEFAULT_LEVEL, LZ4: LZ4_DEFAULT_LEVEL, ZSTD: ZSTD_DEFAULT_LEVEL}.get(int(codec))


def validate_level(codec: int, level: Optional[int]) -> Optional[int]:
    """Return the effective level for ``codec`` (Kafka's default when ``level`` is None).

    Raises :class:`InvalidConfigError` for a level outside Kafka's range for the codec
    (gzip 1..9 or -1, lz4 1..17, zstd -131072..22). none/snappy have no level; any given level is
    ignored for them, as Kafka's per-codec level configs do not apply to them.
    """
    cid = int(codec)
    if cid in (NONE, SNAPPY):
        return None
    if level is None:
        return default_level(cid)
    if isinstance(level, bool) or not isinstance(level, int):
        try:
            level = int(level)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"Invalid compression level {level!r} for {_NAMES[cid]}") from None
    if cid == GZIP:
        if level == GZIP_DEFAULT_LEVEL or GZIP_MIN_LEVEL <= level <= GZIP_MAX_LEVEL:
            return level
        raise InvalidConfigError(
            f"Invalid value {level} for configuration compression.gzip.level: "
            f"Value must be between {GZIP_MIN_LEVEL} and {GZIP_MAX_LEVEL} or -1")
    if cid == LZ4:
        if LZ4_MIN_LEVEL <= level <= LZ4_MAX_LEVEL:
            return level
        raise InvalidConfigError(
            f"Invalid value {level} for configuration compression.lz4.level: "
            f"Value must be between {LZ4_MIN_LEVEL} and {LZ4_MAX_LEVEL}")
    if ZSTD_MIN_LEVEL <= level <= ZSTD_MAX_LEVEL:
        return level
    raise InvalidConfigError(
        f"Invalid value {level} for configuration compression.zstd.level: "
        f"Value must be between {ZSTD_MIN_LEVEL} and {ZSTD_MAX_LEVEL}")


# --------------------------------------------------------------------------------------------------
# public entry points


def compress(codec: int, data: Buffer, *, magic: int, level: Optional[int] = None) -> bytes:
    """Compress ``data`` with ``codec`` (a ``CompressionType`` or its int id) in Kafka's framing.

    ``magic`` selects the lz4 header-checksum quirk of magic 0 and forbids zstd below magic 2
    (:class:`UnsupportedCompressionTypeError`). ``level`` follows KIP-390; None means Kafka's
    default; an out-of-range level raises :class:`InvalidConfigError`.
    """
    cid = _codec_id(codec, magic)
    lvl = validate_level(cid, level)
    if cid == NONE:
        return bytes(data)
    if cid == GZIP:
        return _gzip_compress(data, lvl)  # type: ignore[arg-type]
    if cid == SNAPPY:
        return _snappy_compress(data)
    if cid == LZ4:
        return _lz4_compress(data, magic, lvl)  # type: ignore[arg-type]
    return _zstd_compress(data, lvl)  # type: ignore[arg-type]


def decompress(codec: int, data: Buffer, *, magic: int, max_size: int) -> bytes:
    """Decompress a Kafka-framed payload; the result is at most ``max_size`` bytes.

    Raises :class:`CompressionError` (position relative to the start of ``data``) for malformed
    input or when the output would exceed ``max_size`` (decompression bomb), and
    :class:`UnsupportedCompressionTypeError` for unknown codec ids and zstd below magic 2.
    """
    cid = _codec_id(codec, magic)
    if max_size < 0:
        max_size = 0
    if cid == NONE:
        if len(data) > max_size:
            raise _too_large("none", max_size, 0)
        return bytes(data)
    try:
        if cid == GZIP:
            return _gzip_decompress(data, max_size)
        if cid == SNAPPY:
            return _snappy_decompress(data, max_size)
        if cid == LZ4:
            return _lz4_decompress(data, magic, max_size)
        return _zstd_decompress(data, max_size)
    except CompressionError:
        raise
    except MemoryError:
        raise CompressionError(f"{_NAMES[cid]}: out of memory while decompressing", position=0) from None
    except Exception as e:  # any binding error (zlib.error, LZ4BlockError, ZstdError, ...)
        raise CompressionError(f"{_NAMES[cid]}: cannot decompress: {e}", position=0) from None


def _too_large(name: str, max_size: int, position: int) -> CompressionError:
    return CompressionError(
        f"{name}: decompressed size exceeds the limit of {max_size} bytes", position=position)


# --------------------------------------------------------------------------------------------------
# gzip

# JDK GZIPOutputStream header: magic, CM=8, FLG=0, MTIME=0, XFL=0, OS=0xFF (JDK >= 16).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_GZIP_CHUNK = 1 << 18


def _gzip_compress(data: Buffer, level: int) -> bytes:
    zlevel = 6 if level == GZIP_DEFAULT_LEVEL else level
    co = zlib.compressobj(zlevel, zlib.DEFLATED, -15)
    raw = co.compress(data) + co.flush()
    trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return b"".join((_GZIP_HEADER, raw, trailer))


def _gzip_member_header_ok(buf: memoryview) -> bool:
    return len(buf) >= 10 and buf[0] == 0x1F and buf[1] == 0x8B and buf[2] == 8


def _gzip_decompress(data: Buffer, max_size: int) -> bytes:
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    n = len(mv)
    if n < 10:
        raise CompressionError("gzip: premature end of stream (no complete header)", position=0)
    if not _gzip_member_header_ok(mv):
        raise CompressionError("gzip: not in GZIP format", position=0)
    out: list[bytes] = []
    total = 0
    pos = 0  # start of the current member
    while True:
        d = zlib.decompressobj(31)
        tail: Buffer = mv[pos:]
        while True:
            limit = min(max_size - total + 1, _GZIP_CHUNK)
            chunk = d.decompress(tail, limit)
            if chunk:
                total += len(chunk)
                if total > max_size:
                    raise _too_large("gzip", max_size, pos)
                out.append(chunk)
            if d.eof:
                break
            tail = d.unconsumed_tail
            if not tail and len(chunk) < limit:
                raise CompressionError("gzip: premature end of stream", position=n)
        rest = d.unused_data
        if not rest:
            break
        pos = n - len(rest)
        # GZIPInputStream: a following member is read only if its header is valid; otherwise the
        # trailing bytes are ignored.
        if not _gzip_member_header_ok(memoryview(rest)):
            break
    return out[0] if len(out) == 1 else b"".join(out)


# --------------------------------------------------------------------------------------------------
# snappy (xerial snappy-java framing)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
_XERIAL_HEADER_LEN = 16
_XERIAL_MAGIC_HEAD = _I32BE.unpack(_XERIAL_MAGIC[:4])[0]
_XERIAL_BLOCK = 32 * 1024

_snappy_compress_raw = cramjam.snappy.compress_raw
_snappy_decompress_raw = cramjam.snappy.decompress_raw


def _snappy_compress(data: Buffer) -> bytes:
    n = len(data)
    parts = [_XERIAL_HEADER]
    if n <= _XERIAL_BLOCK:
        if n:
            c = bytes(_snappy_compress_raw(data))
            parts.append(_I32BE.pack(len(c)))
            parts.append(c)
        return b"".join(parts)
    mv = memoryview(data)
    for start in range(0, n, _XERIAL_BLOCK):
        c = bytes(_snappy_compress_raw(mv[start:start + _XERIAL_BLOCK]))
        parts.append(_I32BE.pack(len(c)))
        parts.append(c)
    return b"".join(parts)


def _snappy_raw_length(buf: memoryview, pos: int, end: int) -> int:
    """The uncompressed length in a raw Snappy block's varint preamble (checked before allocation)."""
    result = 0
    shift = 0
    p = pos
    while True:
        if p >= end:
            raise CompressionError("snappy: truncated block length preamble", position=p)
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
        if shift > 28:
            raise CompressionError("snappy: malformed block length preamble", position=pos)


_snappy_raw_len = cramjam.snappy.decompress_raw_len


def _snappy_block(buf: memoryview, start: int, end: int, budget: int, max_size: int) -> Any:
    """One raw Snappy block as a bytes-like object (a ``cramjam.Buffer``; its declared size checked
    before allocation)."""
    block = buf[start:end]
    try:
        size = _snappy_raw_len(block)
    except Exception:
        size = _snappy_raw_length(buf, start, end)  # raises the precise error
    if size > budget:
        raise _too_large("snappy", max_size, start)
    try:
        return _snappy_decompress_raw(block)
    except Exception as e:
        raise CompressionError(f"snappy: corrupt block: {e}", position=start) from None


def _xerial_header_ok(buf: memoryview, pos: int) -> bool:
    """A valid xerial header at pos (magic, and a minimum compatible version we support)."""
    return len(buf) - pos >= _XERIAL_HEADER_LEN and buf[pos:pos + 8] == _XERIAL_MAGIC


def _snappy_decompress(data: Buffer, max_size: int) -> bytes:
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    n = len(mv)
    if n == 0:
        return b""  # snappy-java's SnappyInputStream: an empty stream reads as empty
    if not _xerial_header_ok(mv, 0):
        # snappy-java: no xerial magic -> the whole payload is one raw Snappy block.
        return bytes(_snappy_block(mv, 0, n, max_size, max_size))
    compat = _I32BE.unpack_from(mv, 12)[0]
    if compat > 1:
        raise CompressionError(f"snappy: incompatible xerial stream version {compat}", position=12)
    pos = _XERIAL_HEADER_LEN
    out: List[Any] = []
    total = 0
    while pos < n:
        if n - pos < 4:
            raise CompressionError("snappy: premature end of stream (block length)", position=pos)
        size = _I32BE.unpack_from(mv, pos)[0]
        if size == _XERIAL_MAGIC_HEAD:
            # A concatenated xerial stream: skip its header and continue.
            if n - pos < _XERIAL_HEADER_LEN:
                raise CompressionError("snappy: insufficient header size in a concatenated block",
                                       position=pos)
            if not _xerial_header_ok(mv, pos):
                break
            pos += _XERIAL_HEADER_LEN
            continue
        if size < 0:
            raise CompressionError(f"snappy: invalid block length {size}", position=pos)
        pos += 4
        if size > n - pos:
            raise CompressionError(
                f"snappy: premature end of stream (block of {size} bytes, {n - pos} remain)",
                position=pos - 4)
        block = _snappy_block(mv, pos, pos + size, max_size - total, max_size)
        total += len(block)
        out.append(block)
        pos += size
    if not out:
        return b""
    return bytes(out[0]) if len(out) == 1 else b"".join(out)


# --------------------------------------------------------------------------------------------------
# lz4 (Kafka's frame subset)

_LZ4_MAGIC = 0x184D2204
_LZ4_MAGIC_BYTES = _U32LE.pack(_LZ4_MAGIC)
_LZ4_FLG = 0x60   # version 01, block independence
_LZ4_BD = 0x40    # max block size 64 KiB
_LZ4_BLOCK = 64 * 1024
_LZ4_INCOMPRESSIBLE = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 (used for the lz4 frame descriptor checksum; inputs are a few bytes)."""
    n = len(data)
    p = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while p + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, p)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            p += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while p + 4 <= n:
        h = (h + _U32LE.unpack_from(data, p)[0] * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        p += 4
    while p < n:
        h = (h + data[p] * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _lz4_header(magic: int) -> bytes:
    desc = bytes((_LZ4_FLG, _LZ4_BD))
    if magic == 0:
        # KAFKA-3160: magic-0 writers hashed magic+FLG+BD instead of FLG+BD.
        hc = (xxh32(_LZ4_MAGIC_BYTES + desc) >> 8) & 0xFF
    else:
        hc = (xxh32(desc) >> 8) & 0xFF
    return _LZ4_MAGIC_BYTES + desc + bytes((hc,))


_LZ4_HEADERS = {0: _lz4_header(0), 1: _lz4_header(1), 2: _lz4_header(2)}


def _lz4_compress(data: Buffer, magic: int, level: int) -> bytes:
    header = _LZ4_HEADERS.get(magic) or _lz4_header(magic)
    if level == LZ4_DEFAULT_LEVEL:
        def comp(chunk: Buffer) -> bytes:
            return bytes(lz4.block.compress(chunk, store_size=False))
    else:
        def comp(chunk: Buffer) -> bytes:
            return bytes(lz4.block.compress(chunk, mode="high_compression", compression=level,
                                            store_size=False))
    parts = [header]
    n = len(data)
    mv = memoryview(data) if n > _LZ4_BLOCK else data
    for start in range(0, n, _LZ4_BLOCK):
        chunk = mv[start:start + _LZ4_BLOCK] if n > _LZ4_BLOCK else data
        clen = len(chunk)
        c = comp(chunk)
        if len(c) == 0 or len(c) >= clen:
            parts.append(_U32LE.pack(clen | _LZ4_INCOMPRESSIBLE))
            parts.append(bytes(chunk))
        else:
            parts.append(_U32LE.pack(len(c)))
            parts.append(c)
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(data: Buffer, magic: int, max_size: int) -> bytes:
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    n = len(mv)
    if n < 4:
        raise CompressionError("lz4: Stream ended prematurely", position=0)
    if _U32LE.unpack_from(mv, 0)[0] != _LZ4_MAGIC:
        raise CompressionError("lz4: Stream unsupported (invalid magic bytes)", position=0)
    if n < 7:
        raise CompressionError("lz4: Stream ended prematurely", position=n)
    flg, bd = mv[4], mv[5]
    if flg & 0x03:
        raise CompressionError("lz4: Reserved bits in FLG must be zero", position=4)
    if (flg >> 6) & 0x03 != 1:
        raise CompressionError(f"lz4: Version {(flg >> 6) & 0x03} is not supported", position=4)
    if not flg & 0x20:
        raise CompressionError("lz4: Dependent block stream is unsupported "
                               "(BLOCK_INDEPENDENCE must be set)", position=4)
    block_checksum = bool(flg & 0x10)
    content_size = bool(flg & 0x08)
    content_checksum = bool(flg & 0x04)
    if bd & 0x8F:
        raise CompressionError("lz4: Reserved bits in BD must be zero", position=5)
    bs_code = (bd >> 4) & 0x07
    if bs_code < 4:
        raise CompressionError(f"lz4: Block size code {bs_code} is not supported (4..7)", position=5)
    max_block = 1 << (2 * bs_code + 8)
    pos = 6
    if content_size:
        if n - pos < 8:
            raise CompressionError("lz4: Stream ended prematurely", position=pos)
        pos += 8
    if pos >= n:
        raise CompressionError("lz4: Stream ended prematurely", position=pos)
    if magic >= 1:
        hc = (xxh32(bytes(mv[4:pos])) >> 8) & 0xFF
        if hc != mv[pos]:
            raise CompressionError("lz4: Stream frame descriptor corrupted", position=pos)
    pos += 1
    out: list[bytes] = []
    total = 0
    decomp = lz4.block.decompress
    while True:
        if n - pos < 4:
            raise CompressionError("lz4: Stream ended prematurely", position=pos)
        word = _U32LE.unpack_from(mv, pos)[0]
        if word == 0:
            pos += 4
            if content_checksum:
                if n - pos < 4:
                    raise CompressionError("lz4: Stream ended prematurely", position=pos)
                pos += 4  # Kafka skips the content checksum without verifying it
            break
        size = word & 0x7FFFFFFF
        if size > max_block:
            raise CompressionError(f"lz4: Block size {size} exceeded max: {max_block}", position=pos)
        bstart = pos + 4
        if size > n - bstart:
            raise CompressionError("lz4: Stream ended prematurely", position=pos)
        if word & _LZ4_INCOMPRESSIBLE:
            block = bytes(mv[bstart:bstart + size])
        else:
            cap = min(max_block, max_size - total + 1)
            if cap <= 0:
                raise _too_large("lz4", max_size, pos)
            try:
                block = decomp(mv[bstart:bstart + size], uncompressed_size=cap)
            except Exception as e:
                if cap < max_block:
                    # Output did not fit in what the limit allows: check with a full block.
                    try:
                        decomp(mv[bstart:bstart + size], uncompressed_size=max_block)
                    except Exception:
                        raise CompressionError(f"lz4: corrupt block: {e}", position=pos) from None
                    raise _too_large("lz4", max_size, pos) from None
                raise CompressionError(f"lz4: corrupt block: {e}", position=pos) from None
        total += len(block)
        if total > max_size:
            raise _too_large("lz4", max_size, pos)
        out.append(block)
        pos = bstart + size
        if block_checksum:
            if n - pos < 4:
                raise CompressionError("lz4: Stream ended prematurely", position=pos)
            pos += 4  # Kafka skips block checksums without verifying them
    if not out:
        return b""
    return out[0] if len(out) == 1 else b"".join(out)


# --------------------------------------------------------------------------------------------------
# zstd

_ZSTD_CHUNK = 1 << 18
# zstandard's (de)compressor objects are not thread-safe: one set per thread
class _ZstdState(threading.local):
    def __init__(self) -> None:
        self.by_name: Dict[str, Dict[int, Any]] = {}


_zstd_tls = _ZstdState()


def _zstd_state(name: str) -> Dict[int, Any]:
    return _zstd_tls.by_name.setdefault(name, {})


def _zstd_compress(data: Buffer, level: int) -> bytes:
    comps = _zstd_state("compressors")
    c = comps.get(level)
    if c is None:
        c = zstandard.ZstdCompressor(level=level, write_checksum=False, write_content_size=True)
        comps[level] = c
    return c.compress(data)


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024


def _zstd_frames(mv: memoryview) -> list[tuple[int, int, int, bool]]:
    """Walk the frames of a zstd payload without decompressing.

    Returns ``(start, end, size_bound, exact)`` per data frame: ``size_bound`` is the frame's
    declared content size (``exact``) or an upper bound from its block headers. Truncated frames,
    unknown frame magics and reserved block types raise :class:`CompressionError`.
    """
    frames = []
    n = len(mv)
    pos = 0
    while pos < n:
        if n - pos < 4:
            raise CompressionError("zstd: premature end of stream (frame magic)", position=pos)
        magic = _U32LE.unpack_from(mv, pos)[0]
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if n - pos < 8:
                raise CompressionError("zstd: premature end of stream (skippable frame)", position=pos)
            end = pos + 8 + _U32LE.unpack_from(mv, pos + 4)[0]
            if end > n:
                raise CompressionError("zstd: premature end of stream (skippable frame)", position=pos)
            pos = end
            continue
        if magic != _ZSTD_MAGIC:
            raise CompressionError("zstd: Unknown frame descriptor", position=pos)
        try:
            head = bytes(mv[pos:pos + 18])
            hsize = zstandard.frame_header_size(head)
            params = zstandard.get_frame_parameters(head[:hsize])
        except zstandard.ZstdError as e:
            raise CompressionError(f"zstd: corrupt or truncated frame header: {e}", position=pos) from None
        if hsize > n - pos:
            raise CompressionError("zstd: premature end of stream (frame header)", position=pos)
        p = pos + hsize
        bound = 0
        while True:
            if n - p < 3:
                raise CompressionError("zstd: premature end of stream (block header)", position=p)
            bh = mv[p] | (mv[p + 1] << 8) | (mv[p + 2] << 16)
            btype = (bh >> 1) & 3
            bsize = bh >> 3
            if btype == 0:      # raw block
                p += 3 + bsize
                bound += bsize
            elif btype == 1:    # RLE block: one byte repeated bsize times
                p += 4
                bound += bsize
            elif btype == 2:    # compressed block
                p += 3 + bsize
                bound += _ZSTD_BLOCK_MAX
            else:
                raise CompressionError("zstd: reserved block type", position=p)
            if p > n:
                raise CompressionError("zstd: premature end of stream (block)", position=n)
            if bh & 1:
                break
        if params.has_checksum:
            p += 4
            if p > n:
                raise CompressionError("zstd: premature end of stream (checksum)", position=n)
        exact = params.content_size != zstandard.CONTENTSIZE_UNKNOWN
        frames.append((pos, p, params.content_size if exact else bound, exact))
        pos = p
    return frames


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    mv = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if len(mv) < 4:
        raise CompressionError("zstd: premature end of stream", position=0)
    out: list[bytes] = []
    total = 0
    dd = _zstd_state("decompressor")
    d = dd.get(0)
    if d is None:
        d = dd[0] = zstandard.ZstdDecompressor()
    for start, end, bound, exact in _zstd_frames(mv):
        budget = max_size - total
        frame = mv[start:end]
        try:
            if exact:
                if bound > budget:
                    raise _too_large("zstd", max_size, start)
                chunk = d.decompress(frame)
            elif bound <= budget:
                chunk = d.decompress(frame, max_output_size=max(bound, 1))
            else:
                chunk = _zstd_stream_frame(frame, budget, max_size, start)
        except zstandard.ZstdError as e:
            raise CompressionError(f"zstd: cannot decompress: {e}", position=start) from None
        total += len(chunk)
        if total > max_size:
            raise _too_large("zstd", max_size, start)
        out.append(chunk)
    if not out:
        return b""
    return out[0] if len(out) == 1 else b"".join(out)


def _zstd_stream_frame(frame: memoryview, budget: int, max_size: int, start: int) -> bytes:
    """Decompress one frame in bounded chunks (its block headers allow more than ``budget``).

    The streaming decoder keeps a window buffer of the frame's declared window size, so the
    window is capped at ``max_size`` rounded up to a power of two, at least 8 MiB (the window of
    zstd levels <= 19) and at most zstd's default limit of 128 MiB: a small frame cannot make us
    allocate much more than its output may be.
    """
    window = 1 << 23
    while window < max_size and window < (1 << 27):
        window <<= 1
    stream_dctxs = _zstd_state("stream_decompressors")
    dctx = stream_dctxs.get(window)
    if dctx is None:
        dctx = zstandard.ZstdDecompressor(max_window_size=window)
        stream_dctxs[window] = dctx
    reader = dctx.stream_reader(frame, read_size=max(len(frame), 1))
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = reader.read(min(_ZSTD_CHUNK, budget - total + 1))
        if not chunk:
            break
        total += len(chunk)
        if total > budget:
            raise _too_large("zstd", max_size, start)
        parts.append(chunk)
    return b"".join(parts)
