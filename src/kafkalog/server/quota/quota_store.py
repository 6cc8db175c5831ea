"""The client quotas of a data directory, durably: the JSON file :data:`QUOTAS_FILE` (Kafka keeps them
as ``ClientQuotaRecord`` records in its metadata log). An entity is a set of (entity type, name) pairs,
the name None for Kafka's ``<default>``; each entity has its quota keys and values. Each change
rewrites the file whole through a temporary file, fsync and rename
(:func:`~kafkalog.log.fsutil.atomic_write`) before AlterClientQuotas is answered: a crash leaves the
old or the new set, never a torn file. The file is written only once a quota is altered; until then a
directory Kafka 4 wrote serves the quotas of its metadata log
(:func:`~kafkalog.log.cluster_metadata.read_kafka_metadata`)."""

from __future__ import annotations

import json
import os

from kafkalog.errors import InvalidConfigError
from kafkalog.log import fsutil
from kafkalog.log.cluster_metadata import read_kafka_metadata

QUOTAS_FILE = "kafkalog-client-quotas.json"
#: a quota entity: its (entity type, name) pairs sorted by type; a None name is the type's default
Entity = tuple[tuple[str, str | None], ...]
#: entity -> quota key -> value
Quotas = dict[Entity, dict[str, float]]


def entity_of(pairs: dict[str, str | None]) -> Entity:
    return tuple(sorted(pairs.items()))


class QuotaStore:
    """``QUOTAS_FILE`` of one data directory."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, QUOTAS_FILE)

    def load(self) -> Quotas:
        """The stored quotas (without the file: those of the directory's Kafka metadata log, if any); a
        damaged file is refused, naming it."""
        data = fsutil.read_json(self.path, "client quotas")
        if data is None:
            return dict(read_kafka_metadata(self.data_dir).security.quotas)
        if not isinstance(data, dict) or not isinstance(data.get("quotas"), list):
            raise InvalidConfigError('the client quota file is not a JSON object with a "quotas" list',
                                     file=self.path)
        out: Quotas = {}
        for i, e in enumerate(data["quotas"]):
            try:
                entity = e["entity"]
                values = e["values"]
                if not isinstance(entity, dict) or not entity or not isinstance(values, dict) or any(
                        not isinstance(t, str) or not (n is None or isinstance(n, str)) for t, n in entity.items()) \
                        or any(not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float))
                               for k, v in values.items()):
                    raise ValueError("an entity or a value of the wrong type")
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidConfigError(f"quota entry #{i} of the file is malformed ({exc})", file=self.path) \
                    from None
            out[entity_of(entity)] = {k: float(v) for k, v in values.items()}
        return out

    def save(self, quotas: Quotas) -> None:
        """Replace the stored quotas with ``quotas`` (atomic and fsynced)."""
        doc = {"version": 1, "quotas": [{"entity": dict(entity), "values": dict(sorted(values.items()))}
                                        for entity, values in sorted(quotas.items(), key=lambda x: repr(x[0]))]}
        fsutil.atomic_write(self.path, json.dumps(doc, indent=1).encode("utf-8"))
