"""A request's schema compiled into a bounds program: what the bounds kernel
(:mod:`kafkalog.server.requests.request_bounds`) walks over a frame before kio reads it.

The program is compiled once per (API key, version) from kio's own entity classes, field by field
as kio's native reader builds its schema (``kio/serial/_introspect.py``: the field's class, its
``kafka_type``, its tag, its optionality; ``RequestHeader.client_id`` is always a nullable int16
string; a tagged primitive is read as non-nullable; a nullable struct has an int8 marker, -1 for
null), so the walk steps over exactly the bytes kio will read. Only the bound checks are Kafka's:
its generated readers' (``MessageDataGenerator``, ``MessageUtil``, ``ByteBufferAccessor``).

Layout: a flat array of int32. Word 0 is the request header's segment, word 1 the body's. A
segment is ``[n, op * n]`` and an op is four words ``[code, a, b, c]``:

========================  ===========================================================
``FIXED size``            ``size`` bytes (consecutive fixed-size fields are one op)
``STRING flags name``     int16 or (compact) unsigned-varint length + 1, then the bytes
``BYTES flags name``      int32 or (compact) unsigned-varint length + 1, then the bytes
``STRUCT seg``            the struct's segment
``NULLABLE_STRUCT seg``   an int8 marker (-1: null), then the struct's segment
``ARRAY flags name seg``  int32 or (compact) unsigned-varint count + 1, then ``count``
                          times the element's one-op segment ``seg``
``TAGS table``            the tagged-field section: unsigned-varint count, then per field
                          its tag, its size, its value; ``table`` is ``[n, (tag, seg) * n]``
========================  ===========================================================

``flags``: :data:`COMPACT` (unsigned-varint lengths, the flexible versions) and :data:`NULLABLE`.
``name`` indexes :attr:`BoundsProgram.names`, the field names the errors quote.
"""

from __future__ import annotations

import array
import functools
from dataclasses import Field, dataclass, fields
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from kafkalog.errors import SchemaCompileError
from kafkalog.server.requests.message_schemas import request_schema

FIXED, STRING, BYTES, STRUCT, NULLABLE_STRUCT, ARRAY, TAGS = range(1, 8)
COMPACT, NULLABLE = 1, 2
OP_WORDS = 4

#: the wire size of each fixed-size Kafka type kio reads
FIXED_SIZES = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2,
               "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8,
               "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}


@dataclass(frozen=True, slots=True)
class BoundsProgram:
    """One request version's program (``code``: int32 words, native order) and the names of its
    fields, for the errors."""

    api_key: int
    api_version: int
    api_name: str
    code: bytes
    names: tuple[str, ...]


class _Compiler:
    def __init__(self) -> None:
        self.words: list[int] = [0, 0]
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self._segments: dict[tuple[type, bool], int] = {}

    def name(self, n: str) -> int:
        if n not in self._name_ids:
            self._name_ids[n] = len(self.names)
            self.names.append(n)
        return self._name_ids[n]

    def segment(self, ops: list[tuple[int, int, int, int]]) -> int:
        at = len(self.words)
        self.words.append(len(ops))
        for op in ops:
            self.words.extend(op)
        return at

    def entity(self, cls: type, *, header: bool = False) -> int:
        """The segment of the struct ``cls`` (compiled once, shared by every use)."""
        key = (cls, header)
        if key in self._segments:
            return self._segments[key]
        flexible = bool(cls.__flexible__)      # type: ignore[attr-defined]
        ops: list[tuple[int, int, int, int]] = []
        tagged: list[tuple[int, int]] = []
        for f in fields(cls):
            tag = get_field_tag(f)
            if tag is None:
                ops.append(self.field(cls, f, flexible, header=header, tagged=False))
            else:
                if not flexible:
                    raise SchemaCompileError(f"{cls.__qualname__}.{f.name}: a tagged field in a "
                                             f"version that is not flexible")
                tagged.append((int(tag), self.segment(
                    [self.field(cls, f, flexible, header=header, tagged=True)])))
        if flexible:
            table = len(self.words)
            self.words.append(len(tagged))
            for number, field_seg in sorted(tagged):
                self.words.extend((number, field_seg))
            ops.append((TAGS, table, 0, 0))
        seg = self.segment(_merge_fixed(ops))
        self._segments[key] = seg
        return seg

    def field(self, owner: type, f: Field[Any], flexible: bool, *, header: bool,
              tagged: bool) -> tuple[int, int, int, int]:
        compact = COMPACT if flexible else 0
        if header and f.name == "client_id":          # always a nullable int16 string (Kafka's rule)
            return (STRING, NULLABLE, self.name(f.name), 0)
        fc = classify_field(f)
        nullable = NULLABLE if is_optional(f) else 0
        if isinstance(fc, PrimitiveField):
            kafka_type = get_schema_field_type(f)
            return self.primitive(owner, f, kafka_type, compact | (0 if tagged else nullable))
        if isinstance(fc, PrimitiveTupleField):
            element = self.primitive(owner, f, get_schema_field_type(f), compact)
            return (ARRAY, compact | nullable, self.name(f.name), self.segment([element]))
        if isinstance(fc, EntityField):
            seg = self.entity(fc.type_)
            return (NULLABLE_STRUCT, seg, 0, 0) if nullable else (STRUCT, seg, 0, 0)
        if isinstance(fc, EntityTupleField):
            element = (STRUCT, self.entity(fc.type_), 0, 0)
            return (ARRAY, compact | nullable, self.name(f.name), self.segment([element]))
        raise SchemaCompileError(f"{owner.__qualname__}.{f.name}: unknown field class {fc!r}")

    def primitive(self, owner: type, f: Field[Any], kafka_type: str,
                  flags: int) -> tuple[int, int, int, int]:
        if kafka_type in FIXED_SIZES:
            return (FIXED, FIXED_SIZES[kafka_type], 0, 0)
        if kafka_type == "string":
            return (STRING, flags, self.name(f.name), 0)
        if kafka_type in ("bytes", "records"):
            return (BYTES, flags, self.name(f.name), 0)
        raise SchemaCompileError(f"{owner.__qualname__}.{f.name}: Kafka type {kafka_type!r} has "
                                 f"no bounds rule")


def _merge_fixed(ops: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    out: list[tuple[int, int, int, int]] = []
    for op in ops:
        if op[0] == FIXED and out and out[-1][0] == FIXED:
            out[-1] = (FIXED, out[-1][1] + op[1], 0, 0)
        else:
            out.append(op)
    return out


def compile_request(cls: type) -> tuple[bytes, tuple[str, ...]]:
    """The program (code, names) of the request class ``cls``, its request header included."""
    c = _Compiler()
    c.words[0] = c.entity(RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1,   # type: ignore[attr-defined]
                          header=True)
    c.words[1] = c.entity(cls)
    code = array.array("i", c.words)
    assert code.itemsize == 4
    return code.tobytes(), tuple(c.names)


def api_name(cls: type) -> str:
    """Kafka's name of the API of a kio request class (``IncrementalAlterConfigsRequest`` ->
    ``IncrementalAlterConfigs``)."""
    name = cls.__name__
    return name[:-len("Request")] if name.endswith("Request") else name


@functools.cache
def bounds_program(api_key: int, api_version: int) -> BoundsProgram:
    """The program of one request version, compiled on first use."""
    cls = request_schema(api_key, api_version)
    code, names = compile_request(cls)
    return BoundsProgram(api_key, api_version, api_name(cls), code, names)

