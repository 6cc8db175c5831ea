"""The KRaft control records of ``__cluster_metadata`` (and of its snapshots) as kafka-dump-log.sh
prints them: ``LeaderChange: {...}``, ``SnapshotHeader {...}``, ``SnapshotFooter {...}``,
``KRaftVersion {...}``, ``KRaftVoters {...}``, each value read with kio's schema and written as
Kafka's generated JSON converters write it (the schema's field names in camelCase, in their order;
UUIDs as Kafka's base64url text).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import uuid
from typing import Any, Optional, Tuple

from kafkalog.record.constants import ControlRecordType

__all__ = ["kraft_control"]

#: control type -> the label kafka-dump-log.sh prints before the JSON
_LABELS: dict[ControlRecordType, str] = {
    ControlRecordType.LEADER_CHANGE: "LeaderChange:",
    ControlRecordType.SNAPSHOT_HEADER: "SnapshotHeader",
    ControlRecordType.SNAPSHOT_FOOTER: "SnapshotFooter",
    ControlRecordType.KRAFT_VERSION: "KRaftVersion",
    ControlRecordType.KRAFT_VOTERS: "KRaftVoters",
}
#: kio reads Kafka's zero UUID as None; Kafka prints it
_ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


@functools.cache
def _readers() -> dict[ControlRecordType, Any]:
    """The value reader of each KRaft control type: kio's schemas, imported on the first KRaft
    control record (kio costs a dump that has none, and ``--help``, tens of milliseconds)."""
    from kafkalog._kio import import_kio
    import_kio()
    from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
    from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
    from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
    from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
    from kio.schema.voters_record.v0.data import VotersRecord
    from kio.serial import entity_reader
    schemas = {ControlRecordType.LEADER_CHANGE: LeaderChangeMessage,
               ControlRecordType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
               ControlRecordType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
               ControlRecordType.KRAFT_VERSION: KRaftVersionRecord,
               ControlRecordType.KRAFT_VOTERS: VotersRecord}
    return {t: entity_reader(cls) for t, cls in schemas.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _json(v: Any) -> Any:
    """A kio entity as Kafka's JSON converters write it."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        values = {f: getattr(v, f.name) for f in dataclasses.fields(v)}     # every field (kio's have slots)
        return {_camel(f.name): _ZERO_UUID if x is None and f.metadata.get("kafka_type") == "uuid" else _json(x)
                for f, x in values.items()}
    if isinstance(v, tuple):
        return [_json(x) for x in v]
    if isinstance(v, uuid.UUID):
        return base64.urlsafe_b64encode(v.bytes).decode("ascii").rstrip("=")
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    return v


def kraft_control(ctype: ControlRecordType, value: Optional[bytes]) -> Optional[Tuple[str, Any]]:
    """``(label, JSON object)`` of a KRaft control record, or None when ``ctype`` is not one of them
    or its value does not decode (the caller then prints the control type)."""
    if ctype not in _LABELS or value is None:
        return None
    reader = _readers()[ctype]
    try:
        entity, _size = reader(bytes(value), 0)
    except Exception:   # kio raises its own and struct errors on a short or foreign value
        return None
    return _LABELS[ctype], _json(entity)
