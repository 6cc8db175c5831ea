"""UpdateFeatures (Kafka's controller ``FeatureControlManager.updateFeature``): each update is checked as
Kafka checks it, in order; the first refusal fails the whole request with INVALID_UPDATE_VERSION and
Kafka's message. This node's feature levels are those of :mod:`.features` (the protocol behind each level
is what it serves), so an update is accepted only when it is validated (``validate_only``) or keeps the
finalized level; one that would change a level is refused (docs/kafka-compatibility.md). Needs ALTER on
the cluster (checked against Kafka 4.4 by the ``replica_admin`` session of tests/server/test_differential.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalog.server.error_codes import CLUSTER_AUTHORIZATION_FAILED, INVALID_UPDATE_VERSION
from kafkalog.server.features import FEATURES
from kafkalog.server.handlers.replica_admin import denied
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import ALTER, CLUSTER

if TYPE_CHECKING:      # the state owner that dispatches to these handlers
    from kafkalog.server.broker import Broker

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
#: metadata.version: the levels Kafka 4.4's controller supports, and the level this node answers as
METADATA_VERSION = "metadata.version"
METADATA_VERSIONS = (7, 33)
METADATA_LEVEL = 33


def _refusal(broker: Broker, feature: str, level: int, upgrade: int, validate_only: bool) -> str | None:
    """Kafka's reason for refusing one update, None when it is accepted."""
    if upgrade not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "The controller does not support the given upgrade type."
    if level < 0:
        return "A feature version cannot be less than 0."
    if feature == METADATA_VERSION:
        (lo, hi), current = METADATA_VERSIONS, METADATA_LEVEL
    elif feature in FEATURES:
        f = FEATURES[feature]
        (lo, hi), current = (f.min_supported, f.max_supported), f.finalized
    else:
        return f"Local controller {broker.node_id} does not support this feature."
    if not lo <= level <= hi:
        return f"Local controller {broker.node_id} only supports versions {lo}-{hi}"
    if level < current and upgrade == UPGRADE:
        return ("Can't downgrade the version of this feature without setting the upgrade type to either "
                "safe or unsafe downgrade.")
    if level != current and not validate_only:
        return f"kafkalog serves the fixed level {current} of this feature."
    return None


def handle_update_features(broker: Broker, request: Request) -> Any:
    body = request.body
    v0 = request.api_version == 0
    validate_only = False if v0 else body.validate_only
    if not broker.authorize(ALTER, CLUSTER, "kafka-cluster"):
        return broker.response(request, {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                         "error_message": denied(request, "ALTER"), "results": []})
    for u in body.feature_updates:
        upgrade = (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE) if v0 else u.upgrade_type
        why = _refusal(broker, u.feature, u.max_version_level, upgrade, validate_only)
        if why is not None:
            return broker.response(request, {
                "throttle_time": 0, "error_code": INVALID_UPDATE_VERSION, "results": [],
                "error_message": "The update failed for all features since the following feature had an error: "
                                 f"Invalid update version {u.max_version_level} for feature {u.feature}. {why}"})
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "error_message": None, "results": [
        {"feature": u.feature, "error_code": 0, "error_message": "NONE"} for u in body.feature_updates]})
