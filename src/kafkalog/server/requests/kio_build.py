"""Build kio response entities from plain values.

kio generates one dataclass per message version, and the fields differ between versions. The
handlers describe a response once, as plain dicts and ints, and :func:`build` keeps the fields the
version has (Kafka's rule: a field outside a version's range is not sent), converting by the
field's Kafka type (``error_code`` -> :class:`ErrorCode`, ``timedelta_i32`` -> ``timedelta`` ...).
"""

from __future__ import annotations

import datetime
import typing
import uuid
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@cache
def _field_info(cls: type) -> tuple[tuple[str, str, Any], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        out.append((f.name, f.metadata.get("kafka_type", ""), hints[f.name]))
    return tuple(out)


def _nested_type(hint: Any) -> Any:
    """The entity class inside ``tuple[X, ...]`` / ``X | None`` / ``X``; None for scalars."""
    if is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        t = _nested_type(arg)
        if t is not None:
            return t
    return None


@cache
def _field_plan(cls: type) -> tuple[tuple[str, str, Any, Any], ...]:
    """:func:`_field_info` with each field's nested entity class worked out once (a Metadata
    response of 10,000 partitions builds 10,000 partition entities: the type walk per value was
    most of its cost)."""
    return tuple((name, kafka_type, hint, _nested_type(hint)) for name, kafka_type, hint in _field_info(cls))


def _convert(kafka_type: str, hint: Any, value: Any, nested: Any = False) -> Any:
    if value is None:
        return None
    if nested is False:
        nested = _nested_type(hint)
    if nested is not None:
        if isinstance(value, (list, tuple)):
            return tuple(v if is_dataclass(v) else build(nested, v) for v in value)
        return value if is_dataclass(value) else build(nested, value)
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=int(value))
    if kafka_type == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        if int(value) < 0:
            return None
        return _EPOCH + datetime.timedelta(milliseconds=int(value))
    if kafka_type == "uuid" and isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        return tuple(value)
    return value


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of the kio entity ``cls`` from ``values`` (keys the version lacks are dropped;
    missing keys take the schema default)."""
    kwargs: dict[str, Any] = {}
    for name, kafka_type, hint, nested in _field_plan(cls):
        if name in values:
            value = values[name]
            if nested is None and not kafka_type and (type(value) is int or type(value) is str):
                kwargs[name] = value                # a plain scalar: nothing to convert
            else:
                kwargs[name] = _convert(kafka_type, hint, value, nested)
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    return any(n == name for n, _k, _h in _field_info(cls))
