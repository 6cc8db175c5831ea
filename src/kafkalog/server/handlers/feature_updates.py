"""UpdateFeatures (Kafka's controller ``FeatureControlManager.updateFeatures``): the updates are checked
as Kafka 4.4 checks them, in the order Kafka's controller takes them (a Java ``HashMap`` of the feature
names: :func:`java_hash_order`); the first refusal fails the whole request with INVALID_UPDATE_VERSION
and Kafka's message, else the new levels are finalized (:meth:`FeatureLevels.change`: stored in the
data directory, then advertised and in force) unless the request only validates. v0's
``allow_downgrade`` is read as Kafka 4.4's controller reads it: not at all (each v0 update is an
UPGRADE). Needs ALTER on the cluster (checked against Kafka 4.4 by the ``replica_admin`` session of
tests/server/test_differential.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kafkalog.server.error_codes import CLUSTER_AUTHORIZATION_FAILED, INVALID_UPDATE_VERSION
from kafkalog.server.features import FEATURES, KRAFT_VERSION, METADATA_VERSION, metadata_changed
from kafkalog.server.handlers.replica_admin import denied
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import ALTER, CLUSTER

if TYPE_CHECKING:      # the state owner that dispatches to these handlers
    from kafkalog.server.broker import Broker

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
_FAILED = "The update failed for all features since the following feature had an error: "


def _java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as an unsigned 32-bit value."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def java_hash_order(names: Iterable[str]) -> list[str]:
    """``names`` (distinct, in insertion order) as a Java ``HashMap`` holding them iterates: by bucket
    (the spread hash modulo a table of 16 slots, doubled past 3/4 full), insertion order within one."""
    names = list(names)
    slots = 16
    while len(names) > slots * 3 // 4:
        slots *= 2
    spread = {n: (_java_hash(n) ^ (_java_hash(n) >> 16)) & (slots - 1) for n in names}
    return sorted(names, key=lambda n: spread[n])       # a stable sort keeps a bucket's order


def _refusal(broker: Broker, feature: str, level: int, upgrade: int, proposed: Mapping[str, int]) -> str | None:
    """Kafka's message refusing one update, None when it is accepted."""
    why = None
    if upgrade not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        why = "The controller does not support the given upgrade type."
    elif level < 0:
        why = "A feature version cannot be less than 0."
    elif (f := FEATURES.get(feature)) is None:
        why = f"Local controller {broker.node_id} does not support this feature."
    elif not f.min_supported <= level <= f.max_supported:
        why = f"Local controller {broker.node_id} only supports versions {f.min_supported}-{f.max_supported}"
    else:
        current = broker.features.level(feature)
        if level < current and upgrade == UPGRADE:
            why = ("Can't downgrade the version of this feature without setting the upgrade type to either "
                   "safe or unsafe downgrade.")
        elif level > current and upgrade != UPGRADE:
            why = "Can't downgrade to a newer version."
        elif feature == METADATA_VERSION:
            if level < current and metadata_changed(current, level):
                return (f"Unsupported metadata.version downgrade from {current} to {level}. " + (
                    "Unsafe metadata downgrade is not supported in this version." if upgrade == UNSAFE_DOWNGRADE
                    else "Refusing to perform the requested downgrade because it might delete metadata "
                         "information."))
        elif feature == KRAFT_VERSION:
            if level != current and upgrade != UPGRADE:
                why = "Can't downgrade the version of this feature."
        else:
            for dep, needed in f.dependencies.get(level, {}).items():
                if proposed.get(dep, 0) < needed:
                    why = f"{feature} could not be set to {level} because it depends on {dep} level {needed}"
                    break
    return None if why is None else f"Invalid update version {level} for feature {feature}. {why}"


def handle_update_features(broker: Broker, request: Request) -> Any:
    body = request.body
    v0 = request.api_version == 0
    validate_only = False if v0 else body.validate_only
    if not broker.authorize(ALTER, CLUSTER, "kafka-cluster"):
        return broker.response(request, {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                         "error_message": denied(request, "ALTER"), "results": []})
    levels: dict[str, int] = {}
    upgrades: dict[str, int] = {}
    for u in body.feature_updates:     # a feature named twice: its last update, at its first place
        levels[u.feature] = u.max_version_level
        upgrades[u.feature] = UPGRADE if v0 else u.upgrade_type
    proposed = {**broker.features.levels, **levels}
    for feature in java_hash_order(levels):
        why = _refusal(broker, feature, levels[feature], upgrades[feature], proposed)
        if why is not None:
            return broker.response(request, {"throttle_time": 0, "error_code": INVALID_UPDATE_VERSION,
                                              "results": [], "error_message": _FAILED + why})
    changed = {f: level for f, level in levels.items() if level != broker.features.level(f)}
    if changed and not validate_only:
        broker.change_features(changed)
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "error_message": None, "results": [
        {"feature": u.feature, "error_code": 0, "error_message": "NONE"} for u in body.feature_updates]})
