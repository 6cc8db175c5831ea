"""The feature levels (KIP-584) as a one-node Kafka 4.4 cluster has them: the features Kafka 4.4 knows
(its ``Feature`` enum and ``metadata.version``), the range this node supports of each, and the levels
finalized in this data directory (:class:`FeatureLevels`), which UpdateFeatures changes
(:mod:`kafkalog.server.handlers.feature_updates`) and ApiVersions advertises.

A new data directory has a new Kafka 4.4 cluster's levels. What a level gates follows it:
``group.version`` 1 is the consumer group protocol (KIP-848: ConsumerGroupHeartbeat,
ConsumerGroupDescribe), ``share.version`` 1 share groups (KIP-932), ``streams.version`` 1 streams groups
(KIP-1071), ``transaction.version`` 2 transactions v2 (KIP-890: the bumped epoch at each end,
partitions added by Produce v12 and TxnOffsetCommit v5). A single node has no quorum to reconfigure
(``kraft.version``) and no replica to elect (``eligible.leader.replicas.version``): those levels are
kept and advertised as Kafka keeps them.

The levels are kept in the data directory's :data:`FEATURES_FILE` (Kafka keeps them as
``FeatureLevelRecord`` records of its metadata log), rewritten whole through a temporary file, fsync
and rename before UpdateFeatures is answered; the file is written only once a level changes. Until
then a directory Kafka 4 wrote has the levels of its metadata log
(:func:`~kafkalog.log.cluster_metadata.read_kafka_metadata`: its ``FeatureLevelRecord`` s, the last of
a feature winning), and ``kafkalog bootstrap-topics`` hands the file's levels to a new Kafka cluster."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from kafkalog.errors import InvalidConfigError
from kafkalog.log import fsutil
from kafkalog.log.cluster_metadata import read_kafka_metadata

FEATURES_FILE = "kafkalog-features.json"
METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"


class Feature(NamedTuple):
    name: str
    min_supported: int
    max_supported: int
    #: the level a new Kafka 4.4 cluster finalizes (``kafka-storage.sh format``)
    default: int
    #: level -> the features (name -> minimum level) it depends on (``FeatureVersion.dependencies``)
    dependencies: Mapping[int, Mapping[str, int]] = {}


#: name -> feature, in the order ApiVersions lists them
FEATURES: dict[str, Feature] = {f.name: f for f in [
    Feature("eligible.leader.replicas.version", 0, 1, 1, {1: {METADATA_VERSION: 23}}),
    Feature("group.version", 0, 1, 1),
    Feature(KRAFT_VERSION, 0, 1, 1),
    Feature(METADATA_VERSION, 7, 33, 33),           # 3.3-IV3 .. 4.4-IV2
    Feature("share.version", 0, 2, 2),
    Feature("streams.version", 0, 1, 1),
    Feature("transaction.version", 0, 2, 2),
]}

#: the metadata.version levels whose records changed the metadata (``MetadataVersion.didMetadataChange``):
#: a downgrade across one of them could lose metadata, and Kafka 4.4 refuses it
METADATA_CHANGED = frozenset({7, 8, 11, 13, 14, 15, 17, 23, 30, 32, 33})


def metadata_changed(a: int, b: int) -> bool:
    """Kafka's ``MetadataVersion.checkIfMetadataChanged``: a level between ``a`` and ``b`` (the lower
    one excluded) changed the metadata."""
    lo, hi = sorted((a, b))
    return any(v in METADATA_CHANGED for v in range(lo + 1, hi + 1))


class FeatureLevels:
    """The finalized levels of one data directory and their epoch (it grows with each change)."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, FEATURES_FILE)
        self.levels = {f.name: f.default for f in FEATURES.values()}
        self.epoch = 1
        data = fsutil.read_json(self.path, "feature levels")
        #: whether the levels come from :data:`FEATURES_FILE` (kafkalog changed one here)
        self.stored = data is not None
        if data is not None:
            self._adopt(data)
            return
        kafkas = read_kafka_metadata(data_dir).features
        if kafkas:      # a directory Kafka wrote: the levels of its metadata log, those it did not finalize 0
            self.levels = {name: kafkas.get(name, 0) for name in FEATURES}

    def _adopt(self, data: Any) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("epoch"), int) \
                or not isinstance(data.get("levels"), dict):
            raise InvalidConfigError('the feature file is not a JSON object with an "epoch" and "levels"',
                                     file=self.path)
        for name, level in data["levels"].items():
            f = FEATURES.get(name)
            if f is None or type(level) is not int or not (level == 0 or f.min_supported <= level <= f.max_supported):
                raise InvalidConfigError(f"feature {name!r} at level {level!r}: not a level this broker supports",
                                         file=self.path)
            self.levels[name] = level
        self.epoch = data["epoch"]

    def level(self, name: str) -> int:
        """The finalized level of a feature, 0 when it is not finalized."""
        return self.levels.get(name, 0)

    def change(self, levels: Mapping[str, int]) -> None:
        """Finalize ``levels``: stored first with the next epoch (a failed write changes nothing),
        then in force."""
        new = {**self.levels, **levels}
        doc = {"version": 1, "epoch": self.epoch + 1, "levels": new}
        fsutil.atomic_write(self.path, json.dumps(doc, indent=1).encode("utf-8"))
        self.levels, self.epoch = new, self.epoch + 1

    def api_versions_fields(self, api_version: int) -> dict[str, Any]:
        """The feature fields of an ApiVersions response of ``api_version`` (v3+; in v3 Kafka leaves out
        the supported features whose minimum is 0; a feature at level 0 is not finalized)."""
        if api_version < 3:
            return {}
        supported = [{"name": f.name, "min_version": f.min_supported, "max_version": f.max_supported}
                     for f in FEATURES.values() if api_version >= 4 or f.min_supported > 0]
        finalized = [{"name": name, "max_version_level": level, "min_version_level": level}
                     for name, level in self.levels.items() if level > 0]
        return {"supported_features": supported, "finalized_features_epoch": self.epoch,
                "finalized_features": finalized}
