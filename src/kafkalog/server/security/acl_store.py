"""The ACLs of a data directory, durably: the JSON file :data:`ACLS_FILE` (Kafka keeps them as
``AccessControlEntryRecord`` records in its metadata log). Each change rewrites it whole through a
temporary file, fsync and rename (:func:`~kafkalog.log.fsutil.atomic_write`), before CreateAcls or
DeleteAcls is answered: a crash leaves the old or the new set, never a torn file. The file is
written only once an ACL is created; until then a directory Kafka 4 wrote serves the ACLs of its metadata
log (:func:`~kafkalog.log.cluster_metadata.read_kafka_metadata`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import astuple

from kafkalog.errors import InvalidConfigError
from kafkalog.log import fsutil
from kafkalog.log.cluster_metadata import read_kafka_metadata
from kafkalog.server.security.authorizer import AclBinding

ACLS_FILE = "kafkalog-acls.json"
_FIELDS = ("resource_type", "name", "pattern_type", "principal", "host", "operation", "permission")


class AclStore:
    """``ACLS_FILE`` of one data directory."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, ACLS_FILE)

    def load(self) -> list[AclBinding]:
        """The stored ACLs (without the file: those of the directory's Kafka metadata log, if any); a
        damaged file is refused, naming it."""
        data = fsutil.read_json(self.path, "ACLs")
        if data is None:
            return [AclBinding(*a) for a in read_kafka_metadata(self.data_dir).security.acls]
        if not isinstance(data, dict) or not isinstance(data.get("acls"), list):
            raise InvalidConfigError('the ACL file is not a JSON object with an "acls" list', file=self.path)
        out = []
        for i, entry in enumerate(data["acls"]):
            try:
                values = [entry[k] for k in _FIELDS]
                if not all(isinstance(v, int if k in ("resource_type", "pattern_type", "operation",
                                                      "permission") else str) for k, v in zip(_FIELDS, values)):
                    raise TypeError("a field of the wrong type")
                b = AclBinding(*values)
            except (KeyError, TypeError) as e:
                raise InvalidConfigError(f"ACL #{i} of the file is malformed ({e})", file=self.path) from None
            out.append(b)
        return out

    def save(self, acls: Iterable[AclBinding]) -> None:
        """Replace the stored ACLs with ``acls`` (atomic and fsynced)."""
        doc = {"version": 1, "acls": [dict(zip(_FIELDS, astuple(b))) for b in acls]}
        fsutil.atomic_write(self.path, json.dumps(doc, indent=1).encode("utf-8"))
