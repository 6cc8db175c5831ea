"""Random request frames for every API version the broker serves, for the bounds and fuzz
tests: well-formed ones (every length and count true, small arrays, nulls where the field is
nullable, known tagged fields) written by walking the version's bounds program, and the hostile
mutations of them (bit flips, truncations, lying sizes, huge counts, random bodies)."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator

from kafkalog.server.handlers.kafka_apis import VERSIONS
from kafkalog.server.requests import bounds_program as bp
from kafkalog.server.requests.message_schemas import request_schema as load_request_schema

#: every (API key, version) the broker serves (those ApiVersions advertises, and the telemetry
#: APIs it answers without advertising them, as Kafka does)
SERVED: list[tuple[int, int]] = [(k, v) for k, (lo, hi) in sorted(VERSIONS.items())
                                     for v in range(lo, hi + 1)]


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Writer:
    def __init__(self, rng: random.Random, code: bytes, *, zeros: bool) -> None:
        self.rng = rng
        self.prog = memoryview(code).cast("i")
        self.zeros = zeros          # fixed-size fields all zero (values kio always accepts)

    def segment(self, seg: int, out: bytearray) -> None:
        for i in range(self.prog[seg]):
            self.op(seg + 1 + 4 * i, out)

    def length(self, n: int, flags: int, legacy: str, out: bytearray) -> None:
        if flags & bp.COMPACT:
            out += uvarint(n + 1)
        else:
            out += struct.pack(legacy, n)

    def op(self, op: int, out: bytearray) -> None:
        rng = self.rng
        code, a, _b, c = self.prog[op:op + 4]
        if code == bp.FIXED:
            out += bytes(a) if self.zeros else rng.randbytes(a)
        elif code in (bp.STRING, bp.BYTES):
            legacy = ">h" if code == bp.STRING else ">i"
            if a & bp.NULLABLE and rng.random() < 0.2:
                self.length(-1, a, legacy, out)
                return
            value = "".join(rng.choice("abcdefgh-_.0123456789") for _ in range(rng.randrange(12)))
            raw = value.encode() if code == bp.STRING else rng.randbytes(rng.randrange(40))
            self.length(len(raw), a, legacy, out)
            out += raw
        elif code == bp.STRUCT:
            self.segment(a, out)
        elif code == bp.NULLABLE_STRUCT:
            if rng.random() < 0.3:
                out += b"\xff"
            else:
                out += b"\x01"
                self.segment(a, out)
        elif code == bp.ARRAY:
            if a & bp.NULLABLE and rng.random() < 0.2:
                self.length(-1, a, ">i", out)
                return
            n = rng.randrange(4)
            self.length(n, a, ">i", out)
            for _ in range(n):
                self.op(c + 1, out)
        elif code == bp.TAGS:
            known = [(self.prog[a + 1 + 2 * i], self.prog[a + 2 + 2 * i])
                     for i in range(self.prog[a])]
            chosen = sorted(t for t in known if rng.random() < 0.5)
            out += uvarint(len(chosen))
            for tag, seg in chosen:
                value = bytearray()
                self.op(seg + 1, value)
                out += uvarint(tag) + uvarint(len(value)) + value
        else:
            raise AssertionError(code)


def request_body(rng: random.Random, key: int, version: int, *, zeros: bool = True) -> bytes:
    """A well-formed request body (no header) of that version."""
    program = bp.bounds_program(key, version)
    w = _Writer(rng, program.code, zeros=zeros)
    out = bytearray()
    w.segment(w.prog[1], out)
    return bytes(out)


def request_header(key: int, version: int, correlation_id: int, client_id: bytes = b"fuzz") -> bytes:
    """Request header v1, or v2 (empty tagged fields) for a flexible version."""
    head = struct.pack(">hhih", key, version, correlation_id, len(client_id)) + client_id
    return head + (b"\x00" if load_request_schema(key, version).__flexible__ else b"")


def request_frame(rng: random.Random, key: int, version: int, correlation_id: int = 1, *,
                  zeros: bool = True) -> bytes:
    """A whole well-formed frame (size field included)."""
    data = request_header(key, version, correlation_id) + request_body(rng, key, version, zeros=zeros)
    return struct.pack(">i", len(data)) + data


# --- hostile frames -----------------------------------------------------------------------------

HUGE = [2**31 - 1, 2**31, 2**32 - 1, 1_000_001, 10_001, 0x7FFF + 1, 2**35 - 1, 200_000_000]


def count_positions(body: bytes, key: int, version: int) -> list[tuple[int, int]]:
    """(position in the frame without its size field, width: 0 for an unsigned varint, else 2 or
    4) of every length and count field of a well-formed frame, header included."""
    prog = memoryview(bp.bounds_program(key, version).code).cast("i")
    found: list[tuple[int, int]] = []
    pos = _walk_record(prog, prog[0], body, 0, found)
    _walk_record(prog, prog[1], body, pos, found)
    return found


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = data[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        shift += 7
        if not b & 0x80:
            return value, pos


def _walk_record(prog: memoryview, seg: int, data: bytes, pos: int,
                 found: list[tuple[int, int]]) -> int:
    for i in range(prog[seg]):
        pos = _op_record(prog, seg + 1 + 4 * i, data, pos, found)
    return pos


def _op_record(prog: memoryview, op: int, data: bytes, pos: int, found: list[tuple[int, int]]) -> int:
    code, a, _b, c = prog[op:op + 4]
    if code == bp.FIXED:
        return pos + a
    if code in (bp.STRING, bp.BYTES, bp.ARRAY):
        if a & bp.COMPACT:
            found.append((pos, 0))
            n, pos = _read_uvarint(data, pos)
            n -= 1
        else:
            width = 2 if code == bp.STRING else 4
            found.append((pos, width))
            n = int.from_bytes(data[pos:pos + width], "big", signed=True)
            pos += width
        if n < 0:
            return pos
        if code != bp.ARRAY:
            return pos + n
        for _ in range(n):
            pos = _op_record(prog, c + 1, data, pos, found)
        return pos
    if code == bp.STRUCT:
        return _walk_record(prog, a, data, pos, found)
    if code == bp.NULLABLE_STRUCT:
        if data[pos] == 0xFF:
            return pos + 1
        return _walk_record(prog, a, data, pos + 1, found)
    if code == bp.TAGS:
        found.append((pos, 0))
        n, pos = _read_uvarint(data, pos)
        for _ in range(n):
            _tag, pos = _read_uvarint(data, pos)
            size, pos = _read_uvarint(data, pos)
            pos += size
        return pos
    raise AssertionError(code)


def huge_values(width: int) -> list[int]:
    """The huge values a length or count field of ``width`` bytes (0: an unsigned varint) can
    say: an int16 says at most 0x7fff; an int32 of all ones is -1, a legal null."""
    if width == 0:
        return HUGE
    if width == 2:
        return [0x7FFF]
    return [v for v in HUGE if v < 2**32 - 1]


def replace_count(body: bytes, pos: int, width: int, value: int) -> bytes:
    """``body`` with the length or count field at ``pos`` saying ``value`` (the rest shifted as a
    varint's width changes)."""
    if width == 0:
        return body[:pos] + uvarint(value) + body[_read_uvarint(body, pos)[1]:]
    return body[:pos] + value.to_bytes(width, "big") + body[pos + width:]


def with_huge_count(rng: random.Random, frame: bytes, key: int, version: int) -> bytes:
    """``frame`` with one of its length or count fields made huge."""
    body = frame[4:]
    pos, width = rng.choice(count_positions(body, key, version))
    mutated = replace_count(body, pos, width, rng.choice(huge_values(width)))
    return struct.pack(">i", len(mutated)) + mutated


def mutations(rng: random.Random, key: int, version: int, n: int) -> Iterator[bytes]:
    """``n`` hostile frames of one API version: each starts from a well-formed frame."""
    for i in range(n):
        frame = bytearray(request_frame(rng, key, version, correlation_id=i,
                                        zeros=rng.random() < 0.7))
        kind = rng.randrange(8)
        if kind == 0:                                   # bit flips after the header's key/version
            for _ in range(rng.randint(1, 6)):
                j = rng.randrange(8, len(frame)) if len(frame) > 8 else 4
                frame[j] ^= 1 << rng.randrange(8)
            yield bytes(frame)
        elif kind == 1:                                 # truncated, size consistent
            cut = rng.randrange(8, len(frame) + 1) if len(frame) > 8 else len(frame)
            body = frame[4:cut]
            yield struct.pack(">i", len(body)) + bytes(body)
        elif kind == 2:                                 # size says more or less than sent
            delta = rng.choice([-3, -1, 1, 7, 1000, 1 << 20])
            yield struct.pack(">i", max(0, len(frame) - 4 + delta)) + bytes(frame[4:])
        elif kind in (3, 4):                            # a huge length or count
            yield with_huge_count(rng, bytes(frame), key, version)
        elif kind == 5:                                 # random body under a valid header
            head = request_header(key, version, i)
            body = head + rng.randbytes(rng.randrange(0, 200))
            yield struct.pack(">i", len(body)) + body
        elif kind == 6:                                 # random bytes over the body's tail
            j = rng.randrange(8, len(frame)) if len(frame) > 8 else len(frame)
            frame[j:] = rng.randbytes(len(frame) - j)
            yield bytes(frame)
        else:                                           # trailing garbage (Kafka ignores it)
            body = bytes(frame[4:]) + rng.randbytes(rng.randrange(1, 64))
            yield struct.pack(">i", len(body)) + body
