"""Control records (spec §1.7): the control key ``int16 version, int16 type`` and the
end-transaction marker value ``int16 version, int32 coordinatorEpoch``."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from kafkalog.errors import InvalidRecordError
from kafkalog.record.batch import InvalidArgumentError
from kafkalog.record.constants import ControlRecordType

__all__ = ["ControlRecordType", "EndTransactionMarker", "parse_control_key", "control_key",
           "control_record_type", "CONTROL_KEY_SIZE", "END_TXN_MARKER_VALUE_SIZE",
           "CURRENT_CONTROL_KEY_VERSION", "CURRENT_END_TXN_MARKER_VERSION"]

CURRENT_CONTROL_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0
CONTROL_KEY_SIZE = 4
END_TXN_MARKER_VALUE_SIZE = 6

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def parse_control_key(key: Optional[bytes]) -> Tuple[int, ControlRecordType]:
    """``(version, type)`` of a control record key. Keys shorter than 4 bytes and negative versions
    raise :class:`InvalidRecordError`; versions above 0 are read as version 0; unknown type ids give
    ``ControlRecordType.UNKNOWN``."""
    version, type_id = _versioned(_KEY, key, "end control record key", "control record")
    return version, ControlRecordType.from_type_id(type_id)


def _versioned(layout: struct.Struct, data: Optional[bytes], what: str, named: str) -> Tuple[int, int]:
    """``(version, field)`` at the start of ``data``: too short, or a negative version, is Kafka's
    :class:`InvalidRecordError`."""
    if data is None or len(data) < layout.size:
        raise InvalidRecordError(f"Invalid value size found for {what}. Must have at least {layout.size} "
                                 f"bytes, but found only {0 if data is None else len(data)}", position=0)
    version, field = layout.unpack_from(data, 0)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for {named}: {version}. May indicate data "
                                 f"corruption", position=0)
    return version, field


def control_record_type(key: Optional[bytes]) -> ControlRecordType:
    """The :class:`ControlRecordType` of a control record key (see :func:`parse_control_key`)."""
    return parse_control_key(key)[1]


def control_key(control_type: ControlRecordType, version: int = CURRENT_CONTROL_KEY_VERSION) -> bytes:
    """The 4-byte key of a control record of ``control_type``."""
    control_type = ControlRecordType(control_type)
    if control_type == ControlRecordType.UNKNOWN:
        raise InvalidArgumentError("Cannot serialize UNKNOWN control record type")
    return _KEY.pack(version, control_type.value)


@dataclass(frozen=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker (Kafka's ``EndTransactionMarker``)."""

    control_type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidArgumentError(f"Invalid control record type for end transaction marker: "
                             f"{self.control_type}")

    def key(self) -> bytes:
        return control_key(self.control_type)

    def value(self) -> bytes:
        return _VALUE.pack(CURRENT_END_TXN_MARKER_VERSION, self.coordinator_epoch)

    @staticmethod
    def deserialize_value(control_type: ControlRecordType, value: Optional[bytes]) -> EndTransactionMarker:
        """Parse a marker value (at least 6 bytes; negative versions rejected; newer versions
        read as version 0)."""
        _version, epoch = _versioned(_VALUE, value, "end transaction marker", "end transaction marker")
        return EndTransactionMarker(ControlRecordType(control_type), epoch)

    @staticmethod
    def deserialize(record: Any) -> EndTransactionMarker:
        """The marker of a control record (anything with ``key`` and ``value``)."""
        control_type = control_record_type(record.key)
        if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidRecordError(f"Invalid control record type for end transaction marker: "
                                     f"{control_type.name}", position=0)
        return EndTransactionMarker.deserialize_value(control_type, record.value)
