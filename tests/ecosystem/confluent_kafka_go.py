"""confluent-kafka-go's own ACL and SCRAM integration tests (unmodified) against a broker (issue 38).

The module (with its bundled librdkafka, linked through cgo) comes from the Go module proxy into Go's
module cache; :func:`suite_dir` copies it (the cache is read-only) and compiles the ``kafka`` package's
tests once per version and Go version, under ``$KAFKALOG_GO_CACHE`` (else ``~/.cache/kafkalog-go``).

Its integration tests are one testify suite, ``TestIntegration``, which reads ``testconf.json`` from the
package's directory (the module's ``testconf-example.json`` says how: ``"Brokers": "$BROKERS"`` takes the
address from the environment); without the file the suite skips. :func:`run_tests` writes it (the SASL
user of the module's ``testresources``: PLAIN ``testuser``/``testpass``) and runs the methods of
:data:`TESTS` (``-testify.m``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.ecosystem import franz_go, kafka_go
from tests.server.node_client import build_once

MODULE = "github.com/confluentinc/confluent-kafka-go/v2"
VERSION = "v2.11.1"
#: the suite's methods about ACLs (created, described, deleted; the authorized operations of a group,
#: the cluster and topics as ACLs change them, over SASL/PLAIN) and SCRAM credentials
TESTS = ["TestAdminACLs", "TestAdminClient_UserScramCredentials",
         "TestAdminClient_DescribeConsumerGroupsAuthorizedOperations", "TestAdminClient_DescribeCluster",
         "TestAdminClient_DescribeTopics"]
#: the SASL users of the module's test broker (``testresources/kafka_jaas.conf``)
USERS = {"admin": "admin", "testuser": "testpass"}
#: the broker keys of the module's KRaft test broker (``testresources/kraft/server.properties``) but its
#: listeners and controller keys (the brokers here listen on 127.0.0.1)
BROKER_KEYS = {
    "broker.rack": "RACK1",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    "num.partitions": "4",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": "true",
    "group.coordinator.rebalance.protocols": "classic,consumer",
    "connections.max.reauth.ms": "10000",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "sasl.enabled.mechanisms": "PLAIN",
    "log.retention.bytes": "1000000000",
}
#: ``testconf-example.json`` with the brokers from the environment
TESTCONF = {"Brokers": "$BROKERS", "BrokersSasl": "$BROKERSSASL", "SaslUsername": "testuser",
            "SaslPassword": "testpass", "SaslMechanism": "PLAIN", "TopicName": "test", "GroupID": "testgroup",
            "Config": ["api.version.request=true"]}


def suite_dir() -> Path:
    """A writable copy of the module's source with ``kafka.test`` compiled in it."""
    gover = franz_go.require_go()
    root = franz_go.cache_dir() / f"confluent-kafka-go-{VERSION}-{gover}"
    if (root / "kafka.test").exists():
        return root
    src = franz_go.module_source(MODULE, VERSION)
    root.parent.mkdir(parents=True, exist_ok=True)

    def compile_tests(tmp: str) -> subprocess.CompletedProcess[str]:
        franz_go.writable_copy(src, f"{tmp}/src")
        return franz_go._go("test", "-c", "-o", f"{tmp}/kafka.test", "./kafka", cwd=f"{tmp}/src", timeout=1800,
                            env={"GOFLAGS": "-mod=mod", "CGO_ENABLED": "1"})

    build_once(str(root), compile_tests, f"go test -c of {MODULE}@{VERSION}/kafka")
    return root


def run_tests(root: Path, plain: str, sasl: str, only: list[str] | None = None, timeout_s: float = 300
              ) -> tuple[dict[str, str], str]:
    """:data:`TESTS` (``only``: those of them, as ``TestIntegration/NAME``) against the broker whose
    PLAINTEXT and SASL_PLAINTEXT listeners are ``plain`` and ``sasl``: each test's status
    (``TestIntegration/TestAdminACLs``...) and the output."""
    pkg = root / "src" / "kafka"
    (pkg / "testconf.json").write_text(json.dumps(TESTCONF, indent=2))
    names = [n.split("/", 1)[1] for n in only] if only is not None else TESTS
    args = ["-test.run", "^TestIntegration$", "-testify.m", "^(" + "|".join(names) + ")$"]
    return kafka_go.go_test(root / "kafka.test", pkg, args, [f"TestIntegration/{t}" for t in names],
                            {"BROKERS": plain, "BROKERSSASL": sasl}, timeout_s)
