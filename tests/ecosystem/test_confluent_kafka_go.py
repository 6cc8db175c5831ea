"""confluent-kafka-go's own ACL and SCRAM integration tests, unmodified, on both brokers (issue 38).

confluent-kafka-go v2.11.1 (librdkafka bundled) from the Go module proxy
(:mod:`tests.ecosystem.confluent_kafka_go`), its ``TestIntegration`` suite's methods ``TestAdminACLs``
(CreateAcls twice, a binding with a malformed principal refused, DescribeAcls of every binding compared
whole, DeleteAcls by filters, nothing left), ``TestAdminClient_UserScramCredentials`` (an unknown user
described RESOURCE_NOT_FOUND, upserted, described with its iterations, deleted),
``TestAdminClient_DescribeConsumerGroupsAuthorizedOperations``, ``TestAdminClient_DescribeCluster`` and
``TestAdminClient_DescribeTopics`` (the authorized operations of a group, the cluster and a topic for the
SASL/PLAIN user, before and after ACLs change them).

Each broker is configured as the module's KRaft test broker (``testresources/kraft/server.properties``):
PLAINTEXT and SASL_PLAINTEXT listeners, PLAIN with the users of ``kafka_jaas.conf``, StandardAuthorizer,
super user admin, ``allow.everyone.if.no.acl.found=true``, four partitions per topic. Every test must pass
on both: nothing is excused.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests import kafka44
from tests.ecosystem import confluent_kafka_go as ckg
from tests.ecosystem import kafka_go
from tests.server.broker_process import BrokerProcess

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture(scope="module")
def suite() -> Path:
    return ckg.suite_dir()


def _forget_scram_user(sasl: str, failed: list[str]) -> None:
    """Before a retry of ``TestAdminClient_UserScramCredentials``: its user ("non-existent") deleted
    and seen gone. A run that failed after its upsert (Kafka 4.4 described the user before applying
    the upsert) leaves the user, and the next run's first check (the user is unknown) would fail."""
    if "TestIntegration/TestAdminClient_UserScramCredentials" not in failed:
        return
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion
    admin = AdminClient({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                         "sasl.password": ckg.USERS["admin"]})
    user = "non-existent"
    for fut in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)]).values():
        try:
            fut.result(30)
        except Exception:           # (already gone: RESOURCE_NOT_FOUND)
            pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            admin.describe_user_scram_credentials([user])[user].result(30)
        except KafkaException as e:
            if e.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
                return              # gone
            raise
        time.sleep(0.2)
    raise AssertionError(f"the SCRAM user {user!r} is still described 30 s after its deletion")


def _run(suite: Path, plain: str, sasl: str, where: str, attempts: int = 1) -> None:
    start = time.monotonic()
    status, output, retried = kafka_go.with_retries(lambda only: ckg.run_tests(suite, plain, sasl, only),
                                                    [f"TestIntegration/{t}" for t in ckg.TESTS], attempts,
                                                    lambda failed: _forget_scram_user(sasl, failed))
    counts, bad = kafka_go.summary(status, retried)
    print(f"confluent-kafka-go {ckg.VERSION} on {where}: {counts} in {time.monotonic() - start:.0f} s")
    assert not bad, f"confluent-kafka-go's tests on {where}:\n" + "\n".join(bad) + "\n" + output[-6000:]


@pytest.mark.slow
def test_confluent_kafka_go_security_tests_on_kafkalog(suite: Path, tmp_path: Path) -> None:
    creds = tmp_path / "users.properties"
    creds.write_text("".join(f"user.{u}={p}\n" for u, p in ckg.USERS.items()))
    broker = BrokerProcess(str(tmp_path / "data"), configs=[
        "node.id=1", "group.initial.rebalance.delay.ms=0",
        *(f"{k}={v}" for k, v in ckg.BROKER_KEYS.items()),
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", f"sasl.credentials.file={creds}"])
    with broker.running():
        _run(suite, f"127.0.0.1:{broker.ports['PLAINTEXT']}", f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}",
             "kafkalog serve")
        assert broker.alive(), broker.stderr()[-3000:]


@pytest.mark.slow
@pytest.mark.kafka
def test_confluent_kafka_go_security_tests_on_kafka44(suite: Path, tmp_path: Path) -> None:
    """The baseline: Kafka 4.4 configured as the module's test broker (its controller over SASL/PLAIN as
    admin, as there). A failing test runs again, up to twice: Kafka's broker applies CreateAcls a
    moment after the answer, and the authorized-operations tests describe at once (one in a few runs
    saw the old operations there; kafkalog applies them before the answer and gets no retry); so does
    the SCRAM test (a user described before its upsert applied), whose user is deleted before it runs
    again."""
    kafka44.require()
    k = kafka44.KafkaBroker(tmp_path / "kafka44")
    sasl_port = kafka44.free_port()
    users = " ".join(f'user_{u}="{p}"' for u, p in ckg.USERS.items())
    jaas = f'{PLAIN_MODULE} required username="admin" password="admin" {users};'
    k.properties.update({
        **ckg.BROKER_KEYS,
        "listeners": f"PLAINTEXT://127.0.0.1:{k.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                     f"CONTROLLER://127.0.0.1:{k.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{k.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "listener.name.controller.plain.sasl.jaas.config": jaas,
    })
    k._write_config()
    with k:
        k.format()
        k.start()
        _run(suite, k.bootstrap, f"127.0.0.1:{sasl_port}", "Kafka 4.4", attempts=3)
