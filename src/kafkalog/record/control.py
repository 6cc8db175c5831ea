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
    if key is None or len(key) < CONTROL_KEY_SIZE:
        raise InvalidRecordError(f"Invalid value size found for end control record key. Must have "
                                 f"at least {CONTROL_KEY_SIZE} bytes, but found only "
                                 f"{0 if key is None else len(key)}", position=0)
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for control record: {version}. May "
                                 f"indicate data corruption", position=0)
    return version, ControlRecordType.from_type_id(type_id)


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
        if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
            raise InvalidRecordError(f"Invalid value size found for end transaction marker. Must "
                                     f"have at least {END_TXN_MARKER_VALUE_SIZE} bytes, but found "
                                     f"only {0 if value is None else len(value)}", position=0)
        version, epoch = _VALUE.unpack_from(value, 0)
        if version < 0:
            raise InvalidRecordError(f"Invalid version found for end transaction marker: {version}."
                                     f" May indicate data corruption", position=0)
        return EndTransactionMarker(ControlRecordType(control_type), epoch)

    @staticmethod
    def deserialize(record: Any) -> EndTransactionMarker:
        """The marker of a control record (anything with ``key`` and ``value``)."""
        control_type = control_record_type(record.key)
        if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidRecordError(f"Invalid control record type for end transaction marker: "
                                     f"{control_type.name}", position=0)
        return EndTransactionMarker.deserialize_value(control_type, record.value)
