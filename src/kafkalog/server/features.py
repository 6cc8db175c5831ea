"""The feature levels ApiVersions advertises (KIP-584): what this broker supports and what is
finalized, as a Kafka 4.4 cluster answers them. A feature is listed only once the protocol behind it
works: ``group.version`` 1 is the consumer group protocol (KIP-848: ConsumerGroupHeartbeat,
ConsumerGroupDescribe), ``transaction.version`` 2 transactions v2 (KIP-890: EndTxn v5 with the
bumped epoch, partitions added by Produce v12 and TxnOffsetCommit v5). ``share.version`` joins
:data:`FEATURES` with share groups (KIP-932) when those are served."""

from __future__ import annotations

from typing import Any, NamedTuple


class Feature(NamedTuple):
    name: str
    min_supported: int
    max_supported: int
    #: the cluster-wide finalized level (a single node finalizes what it supports)
    finalized: int


#: name -> feature, in the order ApiVersions lists them
FEATURES: dict[str, Feature] = {f.name: f for f in [
    Feature("group.version", 0, 1, 1),
    Feature("share.version", 0, 2, 2),
    Feature("streams.version", 0, 1, 1),
    Feature("transaction.version", 0, 2, 2),
]}

#: the finalized features' epoch (Kafka's is the metadata log offset of their last change; a
#: single node that never changes them at run time answers a constant >= 0, "known")
FINALIZED_FEATURES_EPOCH = 1


def finalized_level(name: str) -> int:
    """The finalized level of a feature, 0 when not listed."""
    f = FEATURES.get(name)
    return 0 if f is None else f.finalized


def api_versions_fields(api_version: int) -> dict[str, Any]:
    """The feature fields of an ApiVersions response of ``api_version`` (v3+; in v0-v3 Kafka leaves
    out the supported features whose minimum is 0)."""
    if api_version < 3:
        return {}
    supported = [{"name": f.name, "min_version": f.min_supported, "max_version": f.max_supported}
                 for f in FEATURES.values() if api_version >= 4 or f.min_supported > 0]
    finalized = [{"name": f.name, "max_version_level": f.finalized, "min_version_level": f.finalized}
                 for f in FEATURES.values() if f.finalized > 0]
    return {"supported_features": supported, "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
            "finalized_features": finalized}
