"""Who may do what, handed over both ways (issue 38): the ACLs, SCRAM users and client quotas of a data
directory.

1. ``kafkalog serve`` with StandardAuthorizer: ACLs, a SCRAM user and quotas created over the protocol;
   ``kafka-storage.sh format`` + ``kafkalog bootstrap-topics`` write them into the new cluster's bootstrap
   metadata as Kafka's records; Kafka 4.4 started on the directory answers DescribeAcls,
   DescribeUserScramCredentials and DescribeClientQuotas as kafkalog did, authenticates the SCRAM user,
   refuses and serves each principal as kafkalog did, and throttles the quota'd client.
2. The ``UserScramCredentialRecord`` written is byte for byte the one ``kafka-storage.sh format
   --add-scram`` writes for the same credential; a credential the snapshot holds already is refused.
3. Careless paths: a damaged store is a typed error naming its file (nothing written); stores that hold
   nothing add no record.
4. A directory Kafka 4.4 wrote (its metadata log beside the logs) is served by ``kafkalog serve`` with the
   ACLs, SCRAM users and quotas Kafka kept there.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import kafkalog
from kafkalog.log.cluster_metadata import BOOTSTRAP_SNAPSHOT, METADATA_PARTITION
from kafkalog.record.records import iter_batches
from kafkalog.server.quota.quota_store import QUOTAS_FILE, QuotaStore
from kafkalog.server.security.acl_store import ACLS_FILE, AclStore
from kafkalog.server.security.sasl_credentials import scram_credential
from kafkalog.server.security.scram_store import SCRAM_FILE, ScramStore
from tests import kafka44
from tests.server import differential as d
from tests.server.broker_process import BrokerProcess
from tests.server.test_authorizer import (
    ALLOW,
    AUTHORIZER,
    CLUSTER,
    DENY,
    DESCRIBE,
    GROUP,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    SaslConn,
    _sorted_acls,
    acl,
    acl_filter,
    kafka_sasl_broker,
)
from tests.server.test_client_quotas import _sorted as _sorted_quotas
from tests.server.test_client_quotas import ent, op
from tests.server.test_quota_throttling import _produce_frame
from tests.server.test_scram_admin import SCRAM_MODULE, upsertion
from tests.server.test_scram_admin import _sorted as _sorted_scram

pytestmark = pytest.mark.kafka

#: the PLAIN users of both brokers (carol is a SCRAM user created over the protocol)
PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
CAROL = "carol-scram"
SALT = b"0123456789abcdef"
#: alice writes orders; carol reads the "ord" topics in any group but is denied orders-secret; bob: nothing
ACLS = [
    acl(TOPIC, "orders", "User:alice", WRITE),
    acl(TOPIC, "ord", "User:carol", READ, pattern=PREFIXED),
    acl(GROUP, "*", "User:carol", READ),
    acl(TOPIC, "orders-secret", "User:carol", READ, permission=DENY),
    acl(CLUSTER, "kafka-cluster", "User:*", DESCRIBE, permission=ALLOW, host="127.0.0.1"),
]
#: client id slow-app: 10 kB/s produced; every user's consumers 1 MiB/s; carol's requests 200 %
QUOTAS = [(ent(**{"client-id": "slow-app"}), [op("producer_byte_rate", 10000)]),
          (ent(user=None), [op("consumer_byte_rate", 1048576)]),
          (ent(user="carol", **{"client-id": None}), [op("request_percentage", 200)])]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", *args], capture_output=True, text=True,
                          timeout=300, check=False)


def _kafkalog_configs(creds: Path) -> list[str]:
    return ["listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256", f"sasl.credentials.file={creds}",
            f"authorizer.class.name={AUTHORIZER}", "super.users=User:admin", "group.initial.rebalance.delay.ms=0"]


def _kafka(workdir: Path, props: dict[str, str]) -> kafka44.KafkaBroker:
    scram = {f"listener.name.{lst}.scram-sha-256.sasl.jaas.config": f"{SCRAM_MODULE} required;"
             for lst in ("sasl_plaintext", "controller")}
    return kafka_sasl_broker(workdir, {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", **scram,
                                       "group.initial.rebalance.delay.ms": "0", **props}, PLAIN_USERS)


def _meta(data: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (data / "meta.properties").read_text().splitlines()
                if "=" in line and not line.startswith("#"))


def _describe_all(admin: SaslConn) -> dict[str, Any]:
    """DescribeAcls, DescribeUserScramCredentials and DescribeClientQuotas of everything, in one order."""
    return {"acls": _sorted_acls(d.plain(admin.request(29, 3, acl_filter()))),
            "scram": _sorted_scram(d.plain(admin.request(50, 0, {"users": None}))),
            "quotas": _sorted_quotas(d.plain(admin.request(48, 1, {"components": [], "strict": False})))}


def _await_security(admin: SaslConn, acls: int, users: int, entities: int) -> None:
    """Until the broker lists that many ACLs, SCRAM users and quota entities (Kafka's broker learns a
    change from its controller a moment after the answer)."""
    deadline = time.monotonic() + 30
    while True:
        got = (sum(len(x.acls) for x in admin.request(29, 3, acl_filter()).resources),
               len(admin.request(50, 0, {"users": None}).results),
               len(admin.request(48, 1, {"components": [], "strict": False}).entries or ()))
        if got == (acls, users, entities) or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def _produce(c: SaslConn, topic: str, value: bytes) -> list[int]:
    """Produce's error codes (retried while the partition's leader is loading on a broker just started)."""
    deadline = time.monotonic() + 30
    while True:
        r = c.request(0, 7, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": _records(value)}]}]})
        codes = [int(p.error_code) for t in r.responses for p in t.partition_responses]
        if not set(codes) & {3, 5, 6} or time.monotonic() > deadline:
            return codes
        time.sleep(0.2)


def _fetch(c: SaslConn, topic: str) -> list[int]:
    resp = c.send_frame(d.raw.fetch_frame(4, 1, [(topic, [(0, 0, 65536)])]))
    assert resp is not None
    r = d.raw.fetch_response(resp, 4)
    return [int(p.error_code) for t in r.responses for p in t.partitions]


def _records(value: bytes) -> bytes:
    from kafkalog.record.builder import build_batch
    return build_batch([(b"k", value, int(time.time() * 1000), [])])


def _who_may(sasl_port: int) -> list[tuple[str, Any]]:
    """Each principal's answers: alice produces to orders and may not fetch it, bob (no ACL) may do
    neither, carol (SCRAM-SHA-256, a password only the stored credential knows) consumes orders and is
    refused orders-secret, a wrong password is refused, slow-app's 110 kB produce is throttled."""
    from confluent_kafka import Consumer, KafkaError, KafkaException

    out: list[tuple[str, Any]] = []
    for user in ("alice", "bob"):
        c = SaslConn("", sasl_port, user)
        out.append((f"{user} produce orders", _produce(c, "orders", b"by-" + user.encode())))
        out.append((f"{user} fetch orders", _fetch(c, "orders")))
        c.close()
    conf = {"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "log_level": 0}
    for topic in ("orders", "orders-secret"):
        c = Consumer({**conf, "sasl.password": CAROL, "group.id": f"carol-{topic}"})
        c.subscribe([topic])
        got: Any = None
        deadline = time.monotonic() + 60
        while got is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                got = m.value() if m.error() is None else KafkaError(m.error().code()).name()
        c.close()
        out.append((f"carol consume {topic}", got))
    c = Consumer({**conf, "sasl.password": "wrong", "group.id": "carol-wrong"})
    try:
        c.list_topics(timeout=10)
        out.append(("carol with a wrong password", "served"))
    except KafkaException as e:
        out.append(("carol with a wrong password", e.args[0].name()))
    c.close()
    admin = SaslConn("", sasl_port, "admin")
    frame = _produce_frame(1, "orders", b"x" * 110_000)
    body = frame[4:].replace(b"\x00\x03raw", b"\x00\x08slow-app", 1)      # the request's client id
    resp = d.raw.response_of(admin.send_frame(len(body).to_bytes(4, "big") + body), 0, 9)
    out.append(("slow-app's 110 kB produce throttled", resp.throttle_time.total_seconds() > 0))
    admin.close()
    return out


def _create(admin: SaslConn) -> None:
    """The ACLs, carol's SCRAM-SHA-256 credential and the quotas, over the protocol (as kafka-acls.sh and
    kafka-configs.sh send them)."""
    r = admin.request(30, 3, {"creations": ACLS})
    assert [int(x.error_code) for x in r.results] == [0] * len(ACLS), r
    r = admin.request(51, 0, {"deletions": [], "upsertions": [upsertion("carol", CAROL, 1, 8192, SALT)]})
    assert [int(x.error_code) for x in r.results] == [0], r
    r = admin.request(49, 1, {"entries": [{"entity": e, "ops": o} for e, o in QUOTAS], "validate_only": False})
    assert [int(x.error_code) for x in r.entries] == [0] * len(QUOTAS), r


def _produce_orders(admin: SaslConn) -> None:
    for t in ("orders", "orders-secret"):
        admin.create_topic(t)
        assert _produce(admin, t, b"by-admin") == [0]


@pytest.mark.slow
def test_kafka_adopts_the_acls_scram_users_and_quotas_kafkalog_stored(tmp_path: Path) -> None:
    kafka44.require()
    pytest.importorskip("confluent_kafka")
    data = tmp_path / "data"
    creds = tmp_path / "users.properties"
    creds.write_text("".join(f"user.{u}={p}\n" for u, p in PLAIN_USERS.items()))
    ours = BrokerProcess(str(data), _kafkalog_configs(creds)).start()
    try:
        admin = SaslConn("kafkalog", ours.ports["SASL_PLAINTEXT"], "admin")
        _produce_orders(admin)
        _create(admin)
        served = _describe_all(admin)
        admin.close()
        answers = _who_may(ours.ports["SASL_PLAINTEXT"])
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
    assert len(served["acls"]["resources"]) == 5 and len(served["scram"]["results"]) == 1, served
    refused = dict(answers).pop("carol with a wrong password")
    assert refused != "served" and dict(answers) == {
        "alice produce orders": [0], "alice fetch orders": [29], "bob produce orders": [29],
        "bob fetch orders": [29], "carol consume orders": b"by-admin",
        "carol consume orders-secret": "TOPIC_AUTHORIZATION_FAILED", "carol with a wrong password": refused,
        "slow-app's 110 kB produce throttled": True}, answers
    meta = _meta(data)
    kafka = _kafka(tmp_path / "kafka", {"log.dirs": str(data), "node.id": meta["node.id"],
                                        "metadata.log.dir": str(tmp_path / "metadata")})
    kafka.format(meta["cluster.id"], "--ignore-formatted")
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(tmp_path / "metadata"))
    assert res.returncode == 0, res.stderr
    *topics, summary = [json.loads(x) for x in res.stdout.splitlines()]
    assert [t["topic"] for t in topics] == ["__consumer_offsets", "orders", "orders-secret"]
    assert (summary["topics"], summary["acls"], summary["scramCredentials"], summary["clientQuotas"]) == (3, 5, 1, 3)
    assert summary["records"] == sum(1 + t["partitions"] + len(t["configs"]) for t in topics) + 5 + 1 + 3, summary
    try:
        kafka.start()
        admin = SaslConn("kafka", kafka.sasl_port, "admin")
        _await_security(admin, len(ACLS), 1, len(QUOTAS))
        adopted = _describe_all(admin)
        admin.close()
        assert adopted == served
        assert _who_may(kafka.sasl_port) == answers
        kafka.stop()
    finally:
        if kafka.alive():
            kafka.kill()


# --- the SCRAM record is Kafka's; careless paths ----------------------------------------------------

def _formatted(tmp_path: Path, data: Path, name: str, *extra: str) -> Path:
    """A metadata log directory ``kafka-storage.sh format`` wrote for ``data``'s cluster.id and node.id."""
    meta = _meta(data)
    k = kafka44.KafkaBroker(tmp_path / name, {"log.dirs": str(data), "node.id": meta["node.id"],
                                               "metadata.log.dir": str(tmp_path / name / "metadata")})
    k.format(meta["cluster.id"], "--ignore-formatted", *extra)
    return tmp_path / name / "metadata"


def _snapshot(meta_dir: Path) -> Path:
    return meta_dir / METADATA_PARTITION / BOOTSTRAP_SNAPSHOT


def _records_of(meta_dir: Path, kind: int) -> list[bytes]:
    """The values of the snapshot's metadata records of type ``kind``."""
    out = []
    for batch in iter_batches(_snapshot(meta_dir).read_bytes()):
        if not batch.is_control:
            out += [bytes(r.value) for r in batch if r.value is not None and bytes(r.value)[1] == kind]
    return out


def _directory(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    with kafkalog.open(data) as dl:
        dl.create_topic("t", 1)
        dl.produce_many("t", [b"v"])
    return data


def test_the_scram_record_is_the_one_kafka_storage_format_writes(tmp_path: Path) -> None:
    """The ``UserScramCredentialRecord`` bootstrap-topics writes for carol's stored credential equals, byte
    for byte, the one ``kafka-storage.sh format --add-scram`` writes for the same salt, salted password and
    iterations; a snapshot that holds carol's SCRAM-SHA-256 credential already is refused, unchanged."""
    kafka44.require()
    data = _directory(tmp_path)
    ScramStore(str(data)).save({"SCRAM-SHA-256": {"carol": scram_credential("SCRAM-SHA-256", CAROL, 8192, SALT)}})
    salted = base64.b64encode(hashlib.pbkdf2_hmac("sha256", CAROL.encode(), SALT, 8192)).decode()
    add = f'SCRAM-SHA-256=[name=carol,iterations=8192,salt="{base64.b64encode(SALT).decode()}",' \
          f'saltedpassword="{salted}"]'
    theirs = _formatted(tmp_path, data, "theirs", "--add-scram", add)
    kafkas = _records_of(theirs, 11)
    assert len(kafkas) == 1
    ours = _formatted(tmp_path, data, "ours")
    assert _records_of(ours, 11) == []
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(ours))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["scramCredentials"] == 1
    assert _records_of(ours, 11) == kafkas
    before = _snapshot(theirs).read_bytes()
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(theirs))
    assert res.returncode == 2 and "already holds the SCRAM-SHA-256 credential of 'carol'" in res.stdout + res.stderr
    assert _snapshot(theirs).read_bytes() == before


@pytest.mark.parametrize("damage", ["{not json", '{"version": 1}', '{"version": 1, "%s": [{"x": 1}]}'])
def test_a_damaged_store_is_refused_naming_its_file(tmp_path: Path, damage: str) -> None:
    """A damaged ACL, SCRAM or quota store: exit 2, one typed error naming the file, no traceback, the
    snapshot and the data directory unchanged. Stores that hold nothing add no record: the snapshot is
    byte for byte the one a directory without them gives (nor does a directory without a feature file)."""
    kafka44.require()
    data = _directory(tmp_path)
    pristine = _formatted(tmp_path, data, "pristine")
    snapshot = _snapshot(pristine).read_bytes()
    for name, key in ((ACLS_FILE, "acls"), (SCRAM_FILE, "credentials"), (QUOTAS_FILE, "quotas")):
        (data / name).write_text(damage.replace("%s", key))
        listing = sorted(p.name for p in data.rglob("*"))
        res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(pristine))
        lines = (res.stdout + res.stderr).splitlines()
        assert res.returncode == 2 and len(lines) == 1, lines                   # printed once
        error = json.loads(lines[0])
        assert (error["error"], error["file"]) == ("InvalidConfigError", str(data / name)), error
        assert _snapshot(pristine).read_bytes() == snapshot
        assert sorted(p.name for p in data.rglob("*")) == listing
        (data / name).unlink()
    if damage != "{not json":
        return
    without = tmp_path / "without"
    shutil.copytree(pristine, without)
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(without))
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.splitlines()[-1])
    assert (summary["acls"], summary["scramCredentials"], summary["clientQuotas"], summary["featureLevels"],
            summary["records"]) == (0, 0, 0, 0, 2)
    AclStore(str(data)).save([])
    ScramStore(str(data)).save({})
    QuotaStore(str(data)).save({})
    empty = tmp_path / "empty"
    shutil.copytree(pristine, empty)
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(empty))
    assert res.returncode == 0, res.stderr
    assert _snapshot(empty).read_bytes() == _snapshot(without).read_bytes()


# --- the other way: Kafka's metadata log to kafkalog serve -------------------------------------------

@pytest.mark.slow
def test_kafkalog_serves_the_acls_scram_users_and_quotas_of_a_kafka_directory(tmp_path: Path) -> None:
    """Kafka 4.4 keeps ACLs, SCRAM users and quotas (created, some removed again) in the metadata log of its
    data directory; ``kafkalog serve`` on that directory answers the three Describe APIs as Kafka did,
    authenticates the SCRAM user and authorizes and throttles each principal as Kafka did."""
    kafka44.require()
    pytest.importorskip("confluent_kafka")
    kafka = _kafka(tmp_path / "kafka", {})
    kafka.format()
    try:
        kafka.start()
        admin = SaslConn("kafka", kafka.sasl_port, "admin")
        _produce_orders(admin)
        _create(admin)
        # and taken back again: a RemoveAccessControlEntryRecord, a RemoveUserScramCredentialRecord, a
        # ClientQuotaRecord that removes
        gone = acl(TOPIC, "orders", "User:bob", READ)
        assert int(admin.request(30, 3, {"creations": [gone]}).results[0].error_code) == 0
        assert int(admin.request(51, 0, {"deletions": [], "upsertions": [upsertion("dave", "d", 1, 4096)]})
                   .results[0].error_code) == 0
        _await_security(admin, len(ACLS) + 1, 2, len(QUOTAS))
        assert int(admin.request(31, 3, {"filters": [acl_filter(TOPIC, "orders", 3, "User:bob")]})
                   .filter_results[0].error_code) == 0
        assert int(admin.request(51, 0, {"deletions": [{"name": "dave", "mechanism": 1}], "upsertions": []})
                   .results[0].error_code) == 0
        r = admin.request(49, 1, {"entries": [{"entity": QUOTAS[2][0], "ops": [op("request_percentage", remove=True)]},
                                              {"entity": QUOTAS[0][0], "ops": [op("consumer_byte_rate", 20000)]}],
                                  "validate_only": False})
        assert [int(x.error_code) for x in r.entries] == [0, 0], r
        _await_security(admin, len(ACLS), 1, len(QUOTAS) - 1)
        theirs = _describe_all(admin)
        admin.close()
        answers = _who_may(kafka.sasl_port)
        kafka.stop()
    finally:
        if kafka.alive():
            kafka.kill()
    assert len(theirs["acls"]["resources"]) == 5 and len(theirs["quotas"]["entries"]) == 2, theirs
    assert dict(answers)["carol consume orders"] == b"by-admin", answers
    creds = tmp_path / "users.properties"
    creds.write_text("".join(f"user.{u}={p}\n" for u, p in PLAIN_USERS.items()))
    ours = BrokerProcess(str(kafka.log_dir), _kafkalog_configs(creds)).start()
    try:
        admin = SaslConn("kafkalog", ours.ports["SASL_PLAINTEXT"], "admin")
        assert _describe_all(admin) == theirs
        admin.close()
        assert _who_may(ours.ports["SASL_PLAINTEXT"]) == answers
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
    for name in (ACLS_FILE, SCRAM_FILE, QUOTAS_FILE):       # read, not copied
        assert not (kafka.log_dir / name).exists()
