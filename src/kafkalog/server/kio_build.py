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


def _convert(kafka_type: str, hint: Any, value: Any) -> Any:
    if value is None:
        return None
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
    for name, kafka_type, hint in _field_info(cls):
        if name in values:
            kwargs[name] = _convert(kafka_type, hint, values[name])
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    return any(n == name for n, _k, _h in _field_info(cls))
