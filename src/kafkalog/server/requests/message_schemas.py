"""kio's entity classes of every request and response version the broker serves, including the
versions kio's generated schemas stop before.

kio generates one dataclass per message version from Kafka's JSON message schemas
(``clients/src/main/resources/common/message/*.json``) and reads and writes any such dataclass by
introspecting its fields. For the versions kio does not ship, :func:`message_classes` builds the
same dataclasses at run time from Kafka 4.4's own JSON schemas, kept verbatim in ``message/``
beside this module, following kio's generator's rules: fields in the version's range, snake_case
names, ``ErrorCode`` fields typed ``error_code``, the ``...Ms`` durations typed ``timedelta_i32``
(their names without ``Ms``), the schema's defaults, nullable strings, arrays and structs as
``X | None``, tagged fields with their tag. kio's reader and writer, the request bounds
(:mod:`.bounds_program`) and :func:`.kio_build.build` then work on them as on kio's own classes
(``tests/server/test_message_schemas.py`` builds kio's own versions this way and compares).

:func:`request_schema` / :func:`response_schema` are kio's ``load_request_schema`` /
``load_response_schema`` with those versions added: the broker looks classes up only through them.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import re
import uuid
from importlib import resources
from typing import Any, ClassVar

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.types import BrokerId, GroupId, ProducerId, TopicName, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import f64, i8, i16, i32, i32Timedelta, i64, i64Timedelta, u16, u32, u64

from kafkalog.errors import SchemaCompileError

__all__ = ["EXTRA_SCHEMAS", "message_classes", "request_schema", "response_schema"]

#: API key -> Kafka's message name, for the APIs whose newer versions kio lacks (their JSON files
#: are ``message/<name>Request.json`` and ``message/<name>Response.json``)
EXTRA_SCHEMAS = {88: "StreamsGroupHeartbeat", 89: "StreamsGroupDescribe"}

#: kio's generator: these int32/int64 fields are durations (``timedelta_i32``/``_i64``), named without "Ms"
_TIMEDELTA_NAMES = frozenset({
    "timeoutMs", "TimeoutMs", "ThrottleTimeMs", "MaxWaitMs", "SessionLifetimeMs", "TransactionTimeoutMs",
    "MaxLifetimeMs", "SessionTimeoutMs", "RebalanceTimeoutMs", "ExpiryTimePeriodMs", "RenewPeriodMs",
    "RetentionTimeMs", "HeartbeatIntervalMs", "TaskOffsetIntervalMs"})
_ERROR_CODE_NAMES = frozenset({"ErrorCode", "PartitionErrorCode"})
_PRIMITIVES: dict[str, Any] = {
    "int8": i8, "int16": i16, "int32": i32, "int64": i64, "uint16": u16, "uint32": u32, "uint64": u64,
    "float64": f64, "bool": bool, "string": str, "bytes": bytes, "uuid": uuid.UUID,
    "error_code": ErrorCode, "timedelta_i32": i32Timedelta, "timedelta_i64": i64Timedelta}
#: kio's types of the schema's ``entityType``s
_ENTITY_TYPES: dict[str, Any] = {"topicName": TopicName, "groupId": GroupId, "transactionalId": TransactionalId,
                                 "brokerId": BrokerId, "producerId": ProducerId}
#: the primitives that are never null, whatever ``nullableVersions`` says (kio's rule)
_NEVER_NULL = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float64"})
_COMMENT = re.compile(r"^\s*//")
_SNAKE_1 = re.compile(r"(.)([A-Z][a-z]+)")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def _snake(name: str) -> str:
    return _SNAKE_2.sub(r"\1_\2", _SNAKE_1.sub(r"\1_\2", name)).lower()


def _in(spec: str | None, version: int) -> bool:
    """Whether ``version`` is in a Kafka version range (``"0+"``, ``"1-3"``, ``"2"``, ``"none"``)."""
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


@functools.cache
def _schema(file_name: str) -> dict[str, Any]:
    """A Kafka JSON message schema (its ``//`` comment lines dropped, as Kafka's generator does)."""
    text = resources.files("kafkalog.server.requests").joinpath("message", file_name).read_text("utf-8")
    return json.loads("".join(line for line in text.splitlines(keepends=True) if not _COMMENT.match(line)))


class _Builder:
    """One message version's classes (each struct once, named as in the schema)."""

    def __init__(self, schema: dict[str, Any], version: int) -> None:
        self.schema = schema
        self.version = version
        self.flexible = _in(schema.get("flexibleVersions"), version)
        kind = schema["type"]
        self.header: Any = (RequestHeaderV2 if self.flexible else RequestHeaderV1) if kind == "request" else \
            (ResponseHeaderV1 if self.flexible else ResponseHeaderV0)
        self.common = {s["name"]: s for s in schema.get("commonStructs", ())}
        self.built: dict[str, type] = {}

    def struct(self, name: str, field_specs: list[dict[str, Any]], entity_type: Any) -> type:
        if name in self.built:
            return self.built[name]
        out: list[tuple[str, Any, Any]] = []
        for spec in field_specs:
            if _in(spec.get("versions", spec.get("taggedVersions")), self.version):
                out.append(self.field(spec))
        class_vars = {"__type__": entity_type, "__version__": i16(self.version), "__flexible__": self.flexible,
                      "__api_key__": i16(self.schema["apiKey"]), "__header_schema__": self.header}
        namespace = {**class_vars, "__annotations__": dict.fromkeys(class_vars, ClassVar)}
        cls = dataclasses.make_dataclass(name, out, namespace=namespace, frozen=True, slots=True, kw_only=True)
        cls.__module__ = f"{__name__}.{_snake(self.schema['name'])}.v{self.version}"
        self.built[name] = cls
        return cls

    def field(self, spec: dict[str, Any]) -> tuple[str, Any, Any]:
        name, kind = spec["name"], spec["type"]
        nullable = _in(spec.get("nullableVersions"), self.version)
        metadata: dict[str, Any] = {}
        tag = spec.get("tag") if _in(spec.get("taggedVersions"), self.version) else None
        if tag is not None:
            metadata["tag"] = int(tag)
        default = spec.get("default")
        element = kind[2:] if kind.startswith("[]") else kind
        if element in _PRIMITIVES:
            kafka_type = element
            if name in _ERROR_CODE_NAMES:
                kafka_type = "error_code"
            elif name in _TIMEDELTA_NAMES:
                kafka_type = {"int32": "timedelta_i32", "int64": "timedelta_i64"}[element]
                name = name[:-2]
            elif name.endswith("Ms"):
                raise SchemaCompileError(f"{self.schema['name']}.{name}: a duration kio's rules do not name")
            metadata["kafka_type"] = kafka_type
            hint: Any = _ENTITY_TYPES.get(spec.get("entityType", ""), _PRIMITIVES[kafka_type])
            if kind.startswith("[]"):
                hint = tuple[hint, ...]
                value: Any = None if nullable else ()
            else:
                nullable = nullable and element not in _NEVER_NULL
                value = self.default(kafka_type, default, nullable)
            if nullable:
                hint = hint | None
            if value is dataclasses.MISSING:
                return _snake(name), hint, dataclasses.field(metadata=metadata)
            return _snake(name), hint, dataclasses.field(metadata=metadata, default=value)
        # a struct or an array of structs: nested here or one of the schema's common structs
        fields_spec = spec.get("fields")
        if fields_spec is None:
            common = self.common.get(element)
            if common is None:
                raise SchemaCompileError(f"{self.schema['name']}.{name}: unknown type {kind!r}")
            fields_spec = common["fields"]
        cls = self.struct(element, fields_spec, EntityType.nested)
        hint = tuple[cls, ...] if kind.startswith("[]") else cls       # type: ignore[valid-type]
        if nullable:
            hint = hint | None
        if nullable and default == "null" and not kind.startswith("[]"):
            return _snake(name), hint, dataclasses.field(metadata=metadata, default=None)
        return _snake(name), hint, dataclasses.field(metadata=metadata)

    @staticmethod
    def default(kafka_type: str, default: Any, nullable: bool) -> Any:
        if default is None:
            return None if nullable else dataclasses.MISSING
        if default == "null":
            return None
        if kafka_type == "bool":
            return str(default).lower() == "true"
        if kafka_type in ("string", "bytes", "uuid"):
            return default
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            return _PRIMITIVES[kafka_type].parse(datetime.timedelta(milliseconds=int(default)))
        return _PRIMITIVES[kafka_type](int(default, 0) if isinstance(default, str) else default)


@functools.cache
def message_classes(file_name: str, version: int) -> type:
    """The kio entity class of one version of the message ``message/<file_name>`` (a request or
    a response), built from Kafka's JSON schema; :class:`SchemaCompileError` for a version the
    schema does not have."""
    schema = _schema(file_name)
    if not _in(schema["validVersions"], version):
        raise SchemaCompileError(f"{schema['name']} has no version {version} (valid: {schema['validVersions']})")
    kind = EntityType.request if schema["type"] == "request" else EntityType.response
    return _Builder(schema, version).struct(schema["name"], schema["fields"], kind)


def _lookup(load: Any, kind: str, api_key: int, version: int) -> Any:
    try:
        return load(api_key, version)
    except KioIndexError:
        name = EXTRA_SCHEMAS.get(api_key)
        if name is None:
            raise
        return message_classes(f"{name}{kind}.json", version)


@functools.cache
def request_schema(api_key: int, version: int) -> Any:
    """kio's request class of ``(api_key, version)``, or the one built from Kafka 4.4's schema."""
    return _lookup(load_request_schema, "Request", api_key, version)


@functools.cache
def response_schema(api_key: int, version: int) -> Any:
    """kio's response class of ``(api_key, version)``, or the one built from Kafka 4.4's schema."""
    return _lookup(load_response_schema, "Response", api_key, version)
