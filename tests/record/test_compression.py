"""Compression codecs: Kafka framing, levels, interop with kafka-python, malformed input, bombs."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import cramjam
import lz4.block
import pytest
import zstandard

from kafkalog.errors import CompressionError, InvalidConfigError, KafkalogError, UnsupportedCompressionTypeError
from kafkalog.record import compression as C
from kafkalog.record.compression import compress, decompress, xxh32

CODECS = [C.NONE, C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]
LEVELS = {C.NONE: [None], C.SNAPPY: [None], C.GZIP: [None, -1, 1, 6, 9],
          C.LZ4: [None, 1, 4, 9, 12, 17], C.ZSTD: [None, -5, 0, 1, 3, 19, 22]}
HEX = os.urandom(50).hex().encode() * 2000   # ~200 KB, several blocks of every codec
PAYLOADS = [b"", b"x", b"hello kafka" * 10, os.urandom(70_000), b"\0" * 200_000, HEX]


def _cases():
    for codec in CODECS:
        for magic in (0, 1, 2):
            if codec == C.ZSTD and magic < 2:
                continue
            for level in LEVELS[codec]:
                yield codec, magic, level


@pytest.mark.parametrize("codec,magic,level", list(_cases()))
def test_round_trip_every_codec_magic_level(codec, magic, level):
    for data in PAYLOADS:
        z = compress(codec, data, magic=magic, level=level)
        assert isinstance(z, bytes)
        assert decompress(codec, z, magic=magic, max_size=len(data)) == data
        # bytearray / memoryview inputs work too
        assert decompress(codec, memoryview(bytearray(z)), magic=magic, max_size=len(data)) == data


def test_accepts_int_enum_codec():
    try:
        from kafkalog.record.constants import CompressionType
    except ImportError:
        pytest.skip("constants.py not there yet")
    z = compress(CompressionType.ZSTD, HEX, magic=2)
    assert decompress(CompressionType.ZSTD, z, magic=2, max_size=len(HEX)) == HEX


def test_compressed_payloads_shrink_compressible_data():
    for codec in (C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD):
        assert len(compress(codec, b"\0" * 200_000, magic=2)) < 20_000


# --- lz4 framing -----------------------------------------------------------------------------------

def test_lz4_header_bytes_magic_1_2():
    for magic in (1, 2):
        assert compress(C.LZ4, b"abc", magic=magic)[:7] == bytes.fromhex("04224d18604082")


def test_lz4_header_bytes_magic_0_quirk():
    assert compress(C.LZ4, b"abc", magic=0)[:7] == bytes.fromhex("04224d1860401a")


def test_xxh32_known_values():
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F
    assert (xxh32(b"\x60\x40") >> 8) & 0xFF == 0x82


def test_lz4_magic0_ignores_hc_magic1_verifies():
    z = bytearray(compress(C.LZ4, HEX, magic=1))
    z[6] ^= 0xFF
    assert decompress(C.LZ4, bytes(z), magic=0, max_size=len(HEX)) == HEX
    with pytest.raises(CompressionError, match="descriptor corrupted") as e:
        decompress(C.LZ4, bytes(z), magic=2, max_size=len(HEX))
    assert e.value.position == 6
    # the magic-0 header fails verification at magic >= 1
    with pytest.raises(CompressionError):
        decompress(C.LZ4, compress(C.LZ4, b"abc", magic=0), magic=1, max_size=10)


def test_lz4_incompressible_block_stored_raw():
    data = os.urandom(1000)
    z = compress(C.LZ4, data, magic=2)
    (word,) = struct.unpack_from("<I", z, 7)
    assert word == 1000 | 0x80000000
    assert z[11:1011] == data
    assert z[-4:] == b"\0\0\0\0"


def test_lz4_blocks_are_64k():
    z = compress(C.LZ4, os.urandom(150_000), magic=2)
    sizes = []
    pos = 7
    while True:
        (w,) = struct.unpack_from("<I", z, pos)
        if w == 0:
            break
        sizes.append(w & 0x7FFFFFFF)
        pos += 4 + (w & 0x7FFFFFFF)
    assert sizes == [65536, 65536, 150_000 - 131072]


def _foreign_lz4_frame(data: bytes, *, flg: int, bd: int = 0x40, content_size: bool = False) -> bytes:
    desc = bytes((flg, bd)) + (struct.pack("<Q", len(data)) if content_size else b"")
    out = [b"\x04\x22\x4d\x18", desc, bytes(((xxh32(desc) >> 8) & 0xFF,))]
    for i in range(0, len(data), 65536):
        c = lz4.block.compress(data[i:i + 65536], store_size=False)
        out += [struct.pack("<I", len(c)), c]
        if flg & 0x10:
            out.append(struct.pack("<I", xxh32(c)))
    out.append(b"\0\0\0\0")
    if flg & 0x04:
        out.append(struct.pack("<I", xxh32(data)))
    return b"".join(out)


def test_lz4_foreign_flags_block_and_content_checksum_and_size():
    data = HEX[:150_000]
    for flg, _cs in ((0x70, False), (0x64, False), (0x74, True), (0x68, True), (0x7C, True)):
        z = _foreign_lz4_frame(data, flg=flg, content_size=bool(flg & 0x08))
        assert decompress(C.LZ4, z, magic=2, max_size=len(data)) == data
    # larger block size codes are accepted
    z = _foreign_lz4_frame(data, flg=0x60, bd=0x70)
    assert decompress(C.LZ4, z, magic=2, max_size=len(data)) == data


@pytest.mark.parametrize("flg,bd,what", [
    (0x40, 0x40, "Dependent block"),       # linked blocks
    (0xA0, 0x40, "Version"),               # version 2
    (0x61, 0x40, "Reserved bits in FLG"),
    (0x60, 0x41, "Reserved bits in BD"),
    (0x60, 0x30, "Block size code"),       # 16 KiB block size not allowed
])
def test_lz4_bad_descriptor_rejected(flg, bd, what):
    z = _foreign_lz4_frame(b"abc" * 100, flg=flg, bd=bd)
    with pytest.raises(CompressionError, match=what):
        decompress(C.LZ4, z, magic=2, max_size=1000)


def test_lz4_bad_magic_and_block_size():
    with pytest.raises(CompressionError, match="magic"):
        decompress(C.LZ4, b"\x05\x22\x4d\x18\x60\x40\x82\0\0\0\0", magic=2, max_size=10)
    z = bytearray(compress(C.LZ4, b"abc" * 100, magic=2))
    struct.pack_into("<I", z, 7, 65537)
    with pytest.raises(CompressionError, match="exceeded max") as e:
        decompress(C.LZ4, bytes(z), magic=2, max_size=10_000)
    assert e.value.position == 7


# --- gzip / snappy framing -------------------------------------------------------------------------

def test_gzip_jdk_header_and_trailer():
    z = compress(C.GZIP, HEX, magic=2)
    assert z[:10] == bytes.fromhex("1f8b08000000000000ff")
    crc, isize = struct.unpack("<II", z[-8:])
    assert crc == zlib.crc32(HEX) and isize == len(HEX)
    assert gzip.decompress(z) == HEX


def test_gzip_concatenated_members_and_trailing_garbage():
    a, b = compress(C.GZIP, b"first ", magic=2), gzip.compress(b"second")
    assert decompress(C.GZIP, a + b, magic=2, max_size=100) == b"first second"
    # bytes after a member that do not form a gzip header are ignored (GZIPInputStream)
    assert decompress(C.GZIP, a + b"junk", magic=2, max_size=100) == b"first "


def test_gzip_default_level_is_6():
    assert compress(C.GZIP, HEX, magic=2, level=-1) == compress(C.GZIP, HEX, magic=2, level=6)
    assert compress(C.GZIP, HEX, magic=2) == compress(C.GZIP, HEX, magic=2, level=6)


def test_snappy_xerial_framing():
    data = HEX[:100_000]
    z = compress(C.SNAPPY, data, magic=2)
    assert z[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
    pos, out = 16, []
    while pos < len(z):
        (n,) = struct.unpack_from(">i", z, pos)
        out.append(bytes(cramjam.snappy.decompress_raw(z[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert [len(o) for o in out] == [32768, 32768, 32768, 100_000 - 98304]
    assert b"".join(out) == data


def test_snappy_raw_and_concatenated_streams():
    raw = bytes(cramjam.snappy.compress_raw(HEX))
    assert decompress(C.SNAPPY, raw, magic=1, max_size=len(HEX)) == HEX
    a, b = compress(C.SNAPPY, b"one", magic=2), compress(C.SNAPPY, b"two", magic=2)
    assert decompress(C.SNAPPY, a + b, magic=2, max_size=10) == b"onetwo"


def test_snappy_empty_stream_reads_empty():
    assert decompress(C.SNAPPY, b"", magic=2, max_size=0) == b""
    assert decompress(C.SNAPPY, compress(C.SNAPPY, b"", magic=2), magic=2, max_size=0) == b""


def test_zstd_multiple_frames_and_no_content_size():
    a = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(b"alpha" * 1000)
    b = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(b"beta" * 1000)
    assert decompress(C.ZSTD, a + b, magic=2, max_size=10_000) == b"alpha" * 1000 + b"beta" * 1000


def test_zstd_refused_below_magic_2():
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(C.ZSTD, b"x", magic=1)
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(C.ZSTD, compress(C.ZSTD, b"x", magic=2), magic=0, max_size=10)


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec_ids(codec):
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec, b"x", magic=2)
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec, b"x", magic=2, max_size=10)


# --- levels ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("codec,level", [(C.GZIP, 0), (C.GZIP, 10), (C.GZIP, -2), (C.LZ4, 0),
                                         (C.LZ4, 18), (C.ZSTD, 23), (C.ZSTD, -131073),
                                         (C.GZIP, "high")])
def test_invalid_levels(codec, level):
    with pytest.raises(InvalidConfigError):
        compress(codec, b"data", magic=2, level=level)


def test_valid_level_extremes_and_defaults():
    assert C.validate_level(C.GZIP, None) == -1
    assert C.validate_level(C.LZ4, None) == 9
    assert C.validate_level(C.ZSTD, None) == 3
    assert C.validate_level(C.SNAPPY, 5) is None
    for lvl in (-131072, 22):
        z = compress(C.ZSTD, HEX[:5000], magic=2, level=lvl)
        assert decompress(C.ZSTD, z, magic=2, max_size=5000) == HEX[:5000]


def test_lz4_hc_levels_compress_better_than_fast():
    data = b"".join(b"key-%012d" % i + os.urandom(50).hex().encode() for i in range(2000))
    fast = compress(C.LZ4, data, magic=2, level=9)
    hc = compress(C.LZ4, data, magic=2, level=12)
    assert decompress(C.LZ4, hc, magic=2, max_size=len(data)) == data
    assert len(hc) < len(fast)


# --- interop with kafka-python ---------------------------------------------------------------------

kc = pytest.importorskip("kafka.codec")


def test_interop_gzip():
    for data in PAYLOADS:
        assert kc.gzip_decode(compress(C.GZIP, data, magic=2)) == data
        assert decompress(C.GZIP, kc.gzip_encode(data), magic=2, max_size=len(data)) == data


def test_interop_snappy_xerial():
    for data in PAYLOADS:
        if data:  # kafka-python cannot read a header-only xerial stream (snappy-java's empty output)
            assert kc.snappy_decode(compress(C.SNAPPY, data, magic=2)) == data
        z = kc.snappy_encode(data, xerial_compatible=True)
        assert decompress(C.SNAPPY, z, magic=2, max_size=len(data)) == data
        z = kc.snappy_encode(data, xerial_compatible=False)
        assert decompress(C.SNAPPY, z, magic=2, max_size=len(data)) == data


def test_interop_lz4():
    for data in PAYLOADS:
        for magic in (1, 2):
            assert kc.lz4_decode(compress(C.LZ4, data, magic=magic)) == data
            assert decompress(C.LZ4, kc.lz4_encode(data), magic=magic, max_size=len(data)) == data


def test_interop_lz4_old_kafka():
    for data in PAYLOADS:
        good = kc.lz4_encode(data)
        # what lz4_encode_old_kafka produces: no content size, HC over magic+FLG+BD
        if good[4] & 0x08:
            good = good[:4] + bytes((good[4] & ~0x08,)) + good[5:6] + b"?" + good[15:]
        old = good[:6] + bytes(((xxh32(good[:6]) >> 8) & 0xFF,)) + good[7:]
        assert decompress(C.LZ4, old, magic=0, max_size=len(data)) == data
    if kc.xxhash is None:
        pytest.skip("xxhash not installed: kafka-python's old-kafka lz4 functions need it")
    for data in PAYLOADS:
        assert kc.lz4_decode_old_kafka(compress(C.LZ4, data, magic=0)) == data
        z = kc.lz4_encode_old_kafka(data)
        assert decompress(C.LZ4, z, magic=0, max_size=len(data)) == data


def test_interop_zstd():
    for data in PAYLOADS:
        assert kc.zstd_decode(compress(C.ZSTD, data, magic=2)) == data
        assert decompress(C.ZSTD, kc.zstd_encode(data), magic=2, max_size=len(data)) == data


# --- malformed input and bombs ---------------------------------------------------------------------

@pytest.mark.parametrize("codec", [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD])
def test_truncated_payloads_raise_compression_error(codec):
    z = compress(codec, HEX, magic=2)
    for cut in sorted({0, 1, 3, 7, 10, 15, 17, 20, len(z) // 2, len(z) - 5, len(z) - 1}):
        if codec == C.SNAPPY and cut == 0:
            continue  # an empty snappy stream reads as empty (snappy-java)
        t = z[:cut]
        with pytest.raises(CompressionError) as e:
            out = decompress(codec, t, magic=2, max_size=len(HEX))
            # snappy raw fallback / gzip may decode a prefix only if it is well formed; never silently
            assert out == HEX
        assert e.value.position is not None


@pytest.mark.parametrize("codec", [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD])
def test_garbage_raises_compression_error(codec):
    for junk in (b"\xff" * 64, os.urandom(300), b"\x1f\x8b\x08\x00" + os.urandom(100),
                 b"\x04\x22\x4d\x18\x60\x40\x82" + os.urandom(100),
                 b"\x28\xb5\x2f\xfd" + os.urandom(100),
                 b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01" + os.urandom(100)):
        try:
            decompress(codec, junk, magic=2, max_size=1 << 20)
        except KafkalogError as e:
            assert isinstance(e, CompressionError)


def _lz4_bomb(blocks: int) -> bytes:
    c = lz4.block.compress(b"\0" * 65536, store_size=False)
    return (b"\x04\x22\x4d\x18\x60\x40\x82"
            + (struct.pack("<I", len(c)) + c) * blocks + b"\0\0\0\0")


def test_bombs_are_bounded():
    big = b"\0" * (32 << 20)   # 32 MiB of zeros, compressed to KBs
    limit = 1 << 20
    bombs = {
        C.GZIP: compress(C.GZIP, big, magic=2, level=9),
        C.SNAPPY: compress(C.SNAPPY, big, magic=2),
        C.LZ4: _lz4_bomb(512),
        C.ZSTD: zstandard.ZstdCompressor(level=3, write_content_size=False).compress(big),
    }
    del big
    for codec, z in bombs.items():
        assert len(z) < 2 << 20
        with pytest.raises(CompressionError, match="exceeds the limit"):
            decompress(codec, z, magic=2, max_size=limit)
    # zstd with a declared content size: refused before anything is allocated
    z = zstandard.ZstdCompressor(level=3).compress(b"\0" * (8 << 20))
    with pytest.raises(CompressionError, match="exceeds the limit"):
        decompress(C.ZSTD, z, magic=2, max_size=limit)
    # raw snappy claiming a huge length
    with pytest.raises(CompressionError, match="exceeds the limit"):
        decompress(C.SNAPPY, b"\xff\xff\xff\xff\x0f" + b"\0" * 10, magic=2, max_size=limit)


def test_exact_limit_is_allowed():
    for codec in CODECS:
        z = compress(codec, HEX, magic=2)
        assert decompress(codec, z, magic=2, max_size=len(HEX)) == HEX
        with pytest.raises(CompressionError):
            decompress(codec, z, magic=2, max_size=len(HEX) - 1)


# --- payloads written by Kafka's own Java codecs (oracle vectors) ----------------------------------

from tests.oracle import KAFKA_CLIENTS as VECTORS  # noqa: E402


def _compressed_payloads(buf: bytes):
    """(magic, codec, payload) of every compressed batch / wrapper in a log buffer."""
    pos = 0
    while pos + 17 <= len(buf):
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        magic = buf[pos + 16]
        end = pos + 12 + size
        if magic == 2:
            codec = struct.unpack_from(">h", buf, pos + 21)[0] & 7
            payload = buf[pos + 61:end]
        else:
            attr = buf[pos + 17]
            codec = attr & 7
            p = pos + 18 + (8 if magic == 1 else 0)
            klen = struct.unpack_from(">i", buf, p)[0]
            p += 4 + max(klen, 0)
            vlen = struct.unpack_from(">i", buf, p)[0]
            payload = buf[p + 4:p + 4 + vlen]
        if codec:
            yield magic, codec, payload
        pos = end


@pytest.mark.parametrize("name", ["v0-gzip", "v0-lz4", "v0-snappy", "v1-gzip", "v1-lz4",
                                  "v1-snappy", "v2-gzip", "v2-lz4", "v2-snappy", "v2-zstd"])
def test_kafka_written_payloads_decompress(name):
    import json
    path = os.path.join(VECTORS, name + ".hex")
    if not os.path.exists(path):
        pytest.skip("oracle vectors not available")
    buf = bytes.fromhex(open(path).read().replace("\n", "").strip())
    values = [bytes.fromhex(r["value"]) for r in map(json.loads, open(path[:-4] + ".oracle.jsonl"))
              if r.get("type") == "record" and r.get("value")]
    found = b""
    n = 0
    for magic, codec, payload in _compressed_payloads(buf):
        found += decompress(codec, payload, magic=magic, max_size=1 << 20)
        n += 1
    assert n >= 1
    for v in values:
        assert v in found


def test_zstd_streaming_path_and_window_limit():
    # unknown content size and more blocks than the limit allows: decoded in bounded chunks
    data = os.urandom(1000) * 3000
    z = zstandard.ZstdCompressor(level=19, write_content_size=False).compress(data)
    assert decompress(C.ZSTD, z, magic=2, max_size=len(data)) == data
    with pytest.raises(CompressionError, match="exceeds the limit"):
        decompress(C.ZSTD, z, magic=2, max_size=len(data) - 1)
    # a tiny frame that declares a 128 MiB window cannot make us allocate it
    params = zstandard.ZstdCompressionParameters(window_log=27, compression_level=3,
                                                 write_content_size=False)
    co = zstandard.ZstdCompressor(compression_params=params).compressobj()
    z = co.compress(b"\0" * 300_000) + co.flush()
    assert zstandard.get_frame_parameters(z).window_size == 1 << 27
    with pytest.raises(CompressionError):
        decompress(C.ZSTD, z, magic=2, max_size=1000)
    # within the limit it decodes (one shot, bounded by its block headers)
    assert decompress(C.ZSTD, z, magic=2, max_size=300_000) == b"\0" * 300_000
