"""segmentio/kafka-go's own ACL, client-quota, SCRAM and SASL tests, unmodified, on both brokers (issue 38).

kafka-go v0.4.51 from the Go module proxy (:mod:`tests.ecosystem.kafka_go`): every test of its
``createacls_test.go``, ``describeacls_test.go``, ``deleteacls_test.go``, ``alterclientquotas_test.go``,
``alteruserscramcredentials_test.go``, ``describeuserscramcredentials_test.go`` (CreateAcls, DescribeAcls
and DeleteAcls answers compared field by field, AlterClientQuotas then DescribeClientQuotas, SCRAM
credentials upserted, described, deleted and described again as RESOURCE_NOT_FOUND), its SASL tests
(``sasl/sasl_test.go``: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 logins, good and bad passwords, a
mechanism used three times; ``TestUnsupportedSASLMechanism``; the writer's SASL/PLAIN produce) and the
SaslHandshake/SaslAuthenticate codec tests beside them.

Each broker is configured as kafka-go's CI configures its Kafka 4.x (``docker-compose-400.yml``): a
PLAINTEXT listener on 9092 and a SASL_PLAINTEXT one on 9093 (the addresses the tests dial), PLAIN and
both SCRAMs, StandardAuthorizer with the three users as super users and
``allow.everyone.if.no.acl.found=true``, the users adminscram256, adminscram512 and adminplain with
every mechanism (Kafka 4.4: ``kafka-storage format --add-scram`` and the PLAIN JAAS users, as the image
does; kafkalog: its credentials file). Every test must pass on both: nothing is excused.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests import kafka44
from tests.ecosystem import kafka_go
from tests.ecosystem.test_franz_go import QUICKSTART
from tests.server.broker_process import BrokerProcess

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
LISTENERS = f"PLAIN://127.0.0.1:{kafka_go.PLAIN_PORT},SASL://127.0.0.1:{kafka_go.SASL_PORT}"


@pytest.fixture(scope="module")
def suite() -> Path:
    return kafka_go.suite_dir()


def _run_all(suite: Path, where: str, attempts: int = 1) -> None:
    start = time.monotonic()
    report = []
    for pkg in kafka_go.FILES:
        status, output, retried = kafka_go.with_retries(lambda only, pkg=pkg: kafka_go.run_tests(suite, pkg, only),
                                                        kafka_go.selected(suite, pkg), attempts)
        counts, bad = kafka_go.summary(status, retried)
        print(f"kafka-go {kafka_go.VERSION} package {pkg!r} on {where}: {counts}")
        if bad:
            report.append(f"package {pkg!r}:\n" + "\n".join(bad) + "\n" + output[-4000:])
    print(f"kafka-go's tests on {where}: {time.monotonic() - start:.0f} s")
    assert not report, f"kafka-go's tests on {where}:\n" + "\n".join(report)


@pytest.mark.slow
def test_kafka_go_security_tests_on_kafkalog(suite: Path, tmp_path: Path) -> None:
    kafka_go.require_ports()
    creds = tmp_path / "users.properties"
    creds.write_text("".join(f"user.{u}={p}\n" for u, p in kafka_go.USERS.items()))
    broker = BrokerProcess(str(tmp_path / "data"), port=kafka_go.PLAIN_PORT, configs=[
        *(f"{k}={v}" for k, v in QUICKSTART.items()),
        *(f"{k}={v}" for k, v in kafka_go.BROKER_KEYS.items()),
        f"listeners={LISTENERS}", f"advertised.listeners={LISTENERS}",
        "listener.security.protocol.map=PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        f"sasl.credentials.file={creds}"])
    with broker.running():
        _run_all(suite, "kafkalog serve")
        assert broker.alive(), broker.stderr()[-3000:]


@pytest.mark.slow
@pytest.mark.kafka
def test_kafka_go_security_tests_on_kafka44(suite: Path, tmp_path: Path) -> None:
    """The baseline: Kafka 4.4 configured as kafka-go's CI configures its broker. A failing test runs
    again, up to twice: Kafka's broker applies an ACL or SCRAM change a moment after the answer and
    these tests describe at once (kafkalog applies it before the answer and gets no retry)."""
    kafka44.require()
    kafka_go.require_ports()
    k = kafka44.KafkaBroker(tmp_path / "kafka44", QUICKSTART)
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in kafka_go.USERS.items())
    k.port = kafka_go.PLAIN_PORT
    k.properties.update({
        **kafka_go.BROKER_KEYS,
        "listeners": f"{LISTENERS},CONTROLLER://127.0.0.1:{k.controller_port}",
        "advertised.listeners": LISTENERS,
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {plain_users};",
        "listener.name.sasl.scram-sha-256.sasl.jaas.config": f"{SCRAM_MODULE} required;",
        "listener.name.sasl.scram-sha-512.sasl.jaas.config": f"{SCRAM_MODULE} required;",
    })
    k._write_config()
    scram = [arg for u, p in kafka_go.USERS.items() for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512")
             for arg in ("--add-scram", f"{mech}=[name={u},password={p}]")]
    with k:
        k.format(None, *scram)
        k.start()
        _run_all(suite, "Kafka 4.4", attempts=3)
