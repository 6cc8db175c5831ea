"""Client quotas (AlterClientQuotas, DescribeClientQuotas) against Kafka 4.4: the same raw requests to both
brokers (StandardAuthorizer, super user admin over SASL/PLAIN) get equal answers: users, client ids, their
defaults and combinations, validate_only, strict and non-strict filters, every error path (unknown entity
types and keys, bad values, NaN, duplicates, bad filters), hostile sizes and who may; the quotas survive a
restart of ``kafkalog serve``; Kafka's ``kafka-configs.sh`` alters and describes them."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server import differential as d
from tests.server.broker_process import BrokerProcess
from tests.server.test_authorizer import _pair, _run

USER, CLIENT = "user", "client-id"


@pytest.fixture(scope="module")
def quota_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, BrokerProcess]]:
    """Kafka 4.4 and kafkalog with StandardAuthorizer and the super user admin (PLAIN)."""
    yield from _pair(tmp_path_factory.mktemp("quotas"), {})


def _plain_value(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return v


def _sorted(p: Any) -> Any:
    """Kafka lists entities, their types and values in hash order; NaN compared as a word; the request in a
    refusal's message as ``<request>``."""
    if not isinstance(p, dict):
        return p
    entries = p.get("entries")
    if isinstance(entries, list):
        out = []
        for e in entries:
            e = dict(e, entity=sorted(e["entity"], key=lambda x: x["entity_type"]))
            if "values" in e:
                e["values"] = sorted(({"key": v["key"], "value": _plain_value(v["value"])} for v in e["values"]),
                                     key=lambda v: v["key"])
            if isinstance(e.get("error_message"), str):
                e["error_message"] = re.sub(r"Request .*? needs", "Request <request> needs", e["error_message"])
            out.append(e)
        p["entries"] = sorted(out, key=lambda e: repr(e["entity"]))
    return p


def ent(**names: str | None) -> list[dict[str, Any]]:
    """An entity: ``ent(user="alice", client_id=None)`` (None: the default)."""
    return [{"entity_type": t.replace("_", "-"), "entity_name": n} for t, n in names.items()]


def op(key: str, value: float = 0.0, remove: bool = False) -> dict[str, Any]:
    return {"key": key, "value": value, "remove": remove}


def alter(c: d.Conn, label: str, entries: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]],
          validate_only: bool = False, version: int = 1) -> Any:
    return c.call(label, 49, version, {"entries": [{"entity": e, "ops": o} for e, o in entries],
                                       "validate_only": validate_only}, transform=_sorted)


def comp(etype: str, match_type: int, match: str | None = None) -> dict[str, Any]:
    return {"entity_type": etype, "match_type": match_type, "match": match}


def describe(c: d.Conn, label: str, components: list[dict[str, Any]], strict: bool = False,
             version: int = 1) -> Any:
    return c.call(label, 48, version, {"components": components, "strict": strict}, transform=_sorted)


def await_entities(c: d.Conn, n: int) -> None:
    """Until Describe lists ``n`` entities."""
    c.await_answer(48, 1, {"components": [], "strict": False}, lambda r: len(r.entries or ()), n)


def clean_up(admin: d.Conn) -> None:
    r = admin.request(48, 1, {"components": [], "strict": False})
    entries = [([{"entity_type": x.entity_type, "entity_name": x.entity_name} for x in e.entity],
                [op(v.key, remove=True) for v in e.values]) for e in r.entries or ()]
    if entries:
        admin.request(49, 1, {"entries": [{"entity": e, "ops": o} for e, o in entries], "validate_only": False})
    await_entities(admin, 0)


P, C, R, M = "producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"


def _session(conn_of: Any) -> None:
    admin = conn_of("admin")
    clean_up(admin)
    describe(admin, "describe all: none", [])
    alter(admin, "set quotas of users, client ids, defaults and combinations", [
        (ent(user="alice"), [op(P, 1024), op(C, 2048), op(R, 50.5), op(M, 10)]),
        (ent(user=None), [op(P, 512)]),
        (ent(user="alice", client_id="c1"), [op(P, 4096)]),
        (ent(user="alice", client_id=None), [op(C, 8192)]),
        (ent(user=None, client_id="c1"), [op(R, 200)]),
        (ent(user=None, client_id=None), [op(P, 100)]),
        (ent(client_id="c1"), [op(P, 300), op(C, 300)]),
        (ent(client_id=None), [op(M, 0.5)]),
        (ent(ip="127.0.0.1"), [op("connection_creation_rate", 10)]),
        (ent(ip=None), [op("connection_creation_rate", 100)]),
    ])
    await_entities(admin, 10)
    describe(admin, "describe all", [])
    describe(admin, "describe all (v0)", [], version=0)
    describe(admin, "strict, no component: none", [], strict=True)
    describe(admin, "user alice", [comp(USER, 0, "alice")])
    describe(admin, "user alice, strict", [comp(USER, 0, "alice")], strict=True)
    describe(admin, "default user", [comp(USER, 1)])
    describe(admin, "default user, strict", [comp(USER, 1)], strict=True)
    describe(admin, "any user", [comp(USER, 2)])
    describe(admin, "any user, strict", [comp(USER, 2)], strict=True)
    describe(admin, "any user and any client", [comp(USER, 2), comp(CLIENT, 2)])
    describe(admin, "alice and client c1, strict", [comp(USER, 0, "alice"), comp(CLIENT, 0, "c1")], strict=True)
    describe(admin, "client c1", [comp(CLIENT, 0, "c1")])
    describe(admin, "default client, strict", [comp(CLIENT, 1)], strict=True)
    describe(admin, "any ip", [comp("ip", 2)])
    describe(admin, "unknown user", [comp(USER, 0, "nobody")])
    alter(admin, "validate only: change alice, add bob", [
        (ent(user="alice"), [op(P, 1)]), (ent(user="bob"), [op(C, 1)])], validate_only=True)
    alter(admin, "remove keys: one set, one not set, an entity without quotas", [
        (ent(user="alice"), [op(M, remove=True), op(R, remove=True)]),
        (ent(user="zed"), [op(P, remove=True)]),
        (ent(client_id=None), [op(M, remove=True)])])
    await_entities(admin, 9)
    describe(admin, "describe all after validate_only and removals", [])
    alter(admin, "error paths", [
        ([], [op(P, 1)]),
        (ent(colour="blue"), [op(P, 1)]),
        (ent(user=""), [op(P, 1)]),
        (ent(client_id=""), [op(P, 1)]),
        (ent(user="u-ip", ip="127.0.0.1"), [op(P, 1)]),
        (ent(ip="not an ip!"), [op("connection_creation_rate", 1)]),
        (ent(user="u-key"), [op("unknown_key", 1)]),
        (ent(user="u-zero"), [op(P, 0)]),
        (ent(user="u-neg"), [op(C, -5)]),
        (ent(user="u-negpct"), [op(R, -0.5)]),
        (ent(user="u-nan"), [op(P, float("nan"))]),
        (ent(user="u-nanpct"), [op(R, float("nan"))]),
        (ent(user="u-inf"), [op(P, float("inf"))]),
        (ent(user="u-frac"), [op(C, 10.5)]),
        (ent(user="u-big"), [op(P, 1e19)]),
        (ent(user="u-scram"), [op("SCRAM-SHA-256", 1)]),
        (ent(client_id="c-scram"), [op("SCRAM-SHA-256", 1)]),
        (ent(user="u-ipkey"), [op("connection_creation_rate", 1)]),
        (ent(ip="127.0.0.2"), [op(P, 1)]),
        (ent(ip="127.0.0.3"), [op("connection_creation_rate", 2.5)]),
        (ent(ip="127.0.0.4"), [op("connection_creation_rate", 3e9)]),
        (ent(user="u-dupkey"), [op(P, 1), op(P, 2)]),
        (ent(user="u-dup", client_id="c"), [op(P, 1)]),
        (ent(client_id="c", user="u-dup"), [op(C, 1)]),
        (ent(user="u-ok"), [op(R, 0.001)]),
    ])
    await_entities(admin, 11)     # 9 and the two entities the error paths accept (on both brokers)
    describe(admin, "describe all after the error paths", [])
    describe(admin, "filter errors: empty type", [comp("", 0, "x")])
    describe(admin, "filter errors: a type twice", [comp(USER, 0, "a"), comp(USER, 2)])
    describe(admin, "filter errors: unknown type", [comp("colour", 0, "blue")])
    describe(admin, "filter errors: exact without a name", [comp(USER, 0)])
    describe(admin, "filter errors: default with a name", [comp(USER, 1, "x")])
    describe(admin, "filter errors: specified with a name", [comp(CLIENT, 2, "x")])
    describe(admin, "filter errors: unknown match type", [comp(USER, 7)])
    describe(admin, "filter errors: ip with user", [comp("ip", 2), comp(USER, 2)])
    # hostile sizes: a huge filter, a huge alteration, every one refused or answered, the connection kept
    describe(admin, "a 5000-component filter", [comp(f"t{i}", 2) for i in range(5000)])
    describe(admin, "a 5000-component filter of one type", [comp(USER, 0, f"u{i}") for i in range(5000)])
    alter(admin, "5000 refused entries", [(ent(user=f"h{i}"), [op("nope", 1)]) for i in range(5000)])
    describe(admin, "still answering", [comp(USER, 0, "alice")])
    # who may: alice (PLAIN, no ACL) and ANONYMOUS are refused both APIs
    for who in ("alice", None):
        c = conn_of(who)
        describe(c, f"{who}: describe", [])
        alter(c, f"{who}: alter", [(ent(user="alice"), [op(P, 1)]), (ent(client_id=None), [op(C, 1)]),
                                   (ent(user="alice"), [op(C, 1)])])
    clean_up(admin)
    describe(admin, "describe all at the end", [])


def test_alter_and_describe_client_quotas(quota_pair: Any) -> None:
    """The same Alter/DescribeClientQuotas requests, raw, to Kafka 4.4 and kafkalog: equal answers."""
    out = dict(_run(quota_pair, _session))
    every = out["describe all"]["entries"]
    assert len(every) == 10, every
    codes = {repr(e["entity"]): e["error_code"] for e in out["error paths"]["entries"]}
    assert set(codes.values()) >= {0, 42}, codes
    assert out["alice: describe"]["error_code"] == 31, out["alice: describe"]
    assert {e["error_code"] for e in out["alice: alter"]["entries"]} == {31}, out["alice: alter"]


def test_quotas_survive_a_restart(tmp_path: Any) -> None:
    """Quotas altered over the protocol are in the data directory (written atomically, fsynced): a restarted
    ``kafkalog serve`` (after SIGKILL, after SIGTERM) describes them; a damaged file is refused by name."""
    data = str(tmp_path / "data")
    b = BrokerProcess(data, []).start()
    try:
        c = d.Conn("kafkalog", b.port)
        r = c.request(49, 1, {"entries": [{"entity": ent(user="alice"), "ops": [op(P, 1000)]},
                                          {"entity": ent(user=None, client_id=None), "ops": [op(R, 25.5)]}],
                              "validate_only": False})
        assert [int(e.error_code) for e in r.entries] == [0, 0]
        c.close()
        for stop in ("kill", "term"):
            if stop == "kill":
                b.kill()
            else:
                assert b.stop() == 0, b.stderr()
            b = BrokerProcess(data, []).start()
            c = d.Conn("kafkalog", b.port)
            got = _sorted(d.plain(c.request(48, 1, {"components": [], "strict": False})))["entries"]
            c.close()
            assert got == [
                {"entity": [{"entity_type": "client-id", "entity_name": None},
                            {"entity_type": "user", "entity_name": None}], "values": [{"key": R, "value": 25.5}]},
                {"entity": [{"entity_type": "user", "entity_name": "alice"}], "values": [{"key": P, "value": 1000.0}]},
            ], got
    finally:
        if b.alive():
            assert b.stop() == 0, b.stderr()
    with open(f"{data}/kafkalog-client-quotas.json", "w") as f:
        f.write('{"version": 1, "quotas": [{"entity": {"user": 5}, "values": {}}]}')
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "serve", data, "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    err = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode != 0 and err["error"] == "InvalidConfigError", r
    assert err["file"].endswith("kafkalog-client-quotas.json") and "quota entry #0" in err["message"], err
    assert "Traceback" not in r.stderr, r.stderr


#: kafka-configs.sh runs: alter and describe quotas of users, clients, their defaults and combinations, a
#: SCRAM credential beside them, refused keys and values
TOOL_RUNS = [
    "--alter --add-config producer_byte_rate=1024,consumer_byte_rate=2048 --entity-type users --entity-name tina",
    "--alter --add-config request_percentage=50.5 --entity-type users --entity-default",
    "--alter --add-config producer_byte_rate=4096 --entity-type users --entity-name tina --entity-type clients "
    "--entity-name c1",
    "--alter --add-config consumer_byte_rate=300 --entity-type clients --entity-default",
    "--alter --add-config controller_mutation_rate=2 --entity-type clients --entity-name c2",
    "--alter --add-config SCRAM-SHA-256=[iterations=8192,password=x] --entity-type users --entity-name uma",
    "--describe --entity-type users",
    "--describe --entity-type users --entity-name tina",
    "--describe --entity-type users --entity-default",
    "--describe --entity-type clients",
    "--describe --entity-type clients --entity-name c2",
    "--describe --entity-type users --entity-name tina --entity-type clients --entity-name c1",
    "--describe --entity-type users --entity-name uma",
    "--alter --delete-config producer_byte_rate --entity-type users --entity-name tina",
    "--alter --add-config unknown_key=1 --entity-type users --entity-name tina",
    "--alter --add-config producer_byte_rate=-1 --entity-type users --entity-name tina",
    "--alter --add-config producer_byte_rate=1.5 --entity-type clients --entity-name c1",
    "--describe --entity-type users --entity-name tina",
    "--alter --delete-config consumer_byte_rate --entity-type users --entity-name tina",
    "--alter --delete-config request_percentage --entity-type users --entity-default",
    "--alter --delete-config producer_byte_rate --entity-type users --entity-name tina --entity-type clients "
    "--entity-name c1",
    "--alter --delete-config consumer_byte_rate --entity-type clients --entity-default",
    "--alter --delete-config controller_mutation_rate --entity-type clients --entity-name c2",
    "--alter --delete-config SCRAM-SHA-256 --entity-type users --entity-name uma",
    "--describe --entity-type users",
]


@pytest.mark.slow
def test_kafka_configs_tool(quota_pair: Any, tmp_path: Any) -> None:
    """``kafka-configs.sh --alter/--describe --entity-type users/clients (--entity-default)`` on kafkalog as on
    Kafka 4.4: the same exit status, output lines (sorted: the tool prints entities in hash order) and first
    error line; ``--describe --entity-type users`` lists quotas and SCRAM credentials together."""
    from tests.server.test_scram_admin import configs_tool_runs
    transcripts = configs_tool_runs(quota_pair, TOOL_RUNS, tmp_path)
    ours = {}
    for run, code, lines, _e in transcripts[1]:
        ours.setdefault(run, (code, lines))         # the first run of each command line
    assert ours["--describe --entity-type users --entity-name tina"][1], ours
    users = ours["--describe --entity-type users"][1]
    assert any("SCRAM-SHA-256" in x for x in users) and any("producer_byte_rate" in x for x in users), users


def test_docs_quota_worked_example(tmp_path: Any) -> None:
    """The client quota worked example of docs/server.md's Security section, as written, against ``kafkalog
    serve`` started from the section's properties: the ``kafka-configs.sh`` lines succeed, the describe
    prints the quota, and a 110 kB Produce of client id ``slow-app`` is answered with a throttle time."""
    from tests.server.test_authorizer import SaslConn
    from tests.server.test_quota_throttling import _produce_frame
    from tests.server.test_scram_admin import doc_example
    with doc_example(tmp_path, "bash", 3) as (b, out):
        assert "producer_byte_rate=10000.0" in out, out
        admin = SaslConn("kafkalog", b.ports["SASL_PLAINTEXT"], "admin")
        admin.create_topic("metrics")
        frame = _produce_frame(1, "metrics", b"x" * 110_000)
        body = frame[4:].replace(b"\x00\x03raw", b"\x00\x08slow-app", 1)      # the request's client id
        resp = d.raw.response_of(admin.send_frame(len(body).to_bytes(4, "big") + body), 0, 9)
        admin.close()
        assert resp.responses[0].partition_responses[0].error_code == 0, resp
        assert resp.throttle_time.total_seconds() > 0, resp


def _refusal(p: Any) -> Any:
    """The request object Kafka's refusal names, as ``<request>``."""
    if isinstance(p, dict):
        return {k: _refusal(v) for k, v in p.items()}
    if isinstance(p, list):
        return [_refusal(x) for x in p]
    if isinstance(p, str):
        return re.sub(r"^Request .* needs (\w+) permission\.$", r"Request <request> needs \1 permission.", p)
    return p


def _admin_apis_session(conn_of: Any) -> None:
    """ElectLeaders, Alter/ListPartitionReassignments and UpdateFeatures refused to a principal without the
    cluster permission (alice, ANONYMOUS), answered to the super user."""
    admin = conn_of("admin")
    admin.create_topic("authz-elect")
    for who in ("admin", "alice", None):
        c = conn_of(who)
        c.call(f"authz {who}: ElectLeaders", 43, 2, {"election_type": 0, "timeout": 30000, "topic_partitions": [
            {"topic": "authz-elect", "partitions": [0]}]}, transform=_refusal)
        c.call(f"authz {who}: ListPartitionReassignments", 46, 0, {"timeout": 30000, "topics": None},
               transform=_refusal)
        c.call(f"authz {who}: AlterPartitionReassignments", 45, 1, {
            "timeout": 30000, "allow_replication_factor_change": True,
            "topics": [{"name": "authz-elect", "partitions": [{"partition_index": 0, "replicas": [1]}]}]},
            transform=_refusal)
        c.call(f"authz {who}: UpdateFeatures", 57, 1, {"timeout": 30000, "validate_only": True, "feature_updates": [
            {"feature": "group.version", "max_version_level": 1, "upgrade_type": 1}]}, transform=_refusal)


def test_admin_apis_who_may(quota_pair: Any) -> None:
    """The replica and feature administration APIs with StandardAuthorizer: the same answers as Kafka 4.4."""
    out = dict(_run(quota_pair, _admin_apis_session))
    assert out["authz alice: ListPartitionReassignments"]["error_code"] == 31, out


def _mutation_session(conn_of: Any) -> None:
    """controller_mutation_rate 2 partitions/s for the raw client (a bucket of 22): a 30-partition topic is
    created (the bucket goes below 0), then CreateTopics v7 and DeleteTopics v6 are refused
    (THROTTLING_QUOTA_EXCEEDED) while CreateTopics v4 (before the strict versions) and CreatePartitions v3
    (not counted by Kafka 4.4) go through."""
    admin = conn_of("admin")
    clean_up(admin)
    admin.create_topic("mut-existing")
    alter(admin, "mutation quota set", [(ent(client_id="raw"), [op(M, 2)])])
    await_entities(admin, 1)
    topic = {"num_partitions": 30, "replication_factor": 1, "assignments": [], "configs": []}
    for v, name in ((7, "mut-big"), (7, "mut-refused"), (4, "mut-permissive")):
        admin.call(f"mutation: CreateTopics v{v} {name}", 19, v, {
            "topics": [dict(topic, name=name, num_partitions=30 if name == "mut-big" else 1)],
            "timeout": 30000, "validate_only": False}, transform=lambda p: {"topics": [
                {"name": t["name"], "error_code": t["error_code"], "error_message": t["error_message"]}
                for t in p["topics"]]})
    admin.call("mutation: CreatePartitions v3", 37, 3, {"topics": [
        {"name": "mut-existing", "count": 2, "assignments": None}], "timeout": 30000, "validate_only": False})
    admin.call("mutation: DeleteTopics v6", 20, 6, {"topics": [{"name": "mut-existing", "topic_id": None}],
                                                    "timeout": 30000}, transform=lambda p: {
        "responses": [{k: v for k, v in r.items() if k != "topic_id"} for r in p["responses"]]})
    alter(admin, "mutation quota removed", [(ent(client_id="raw"), [op(M, remove=True)])])
    await_entities(admin, 0)
    for name in ("mut-big", "mut-permissive", "mut-existing"):
        admin.request(20, 6, {"topics": [{"name": name, "topic_id": None}], "timeout": 30000})


def test_controller_mutation_rate(quota_pair: Any) -> None:
    """The same CreateTopics/CreatePartitions/DeleteTopics under a controller_mutation_rate on both brokers:
    equal answers, the strict versions refused once the bucket is spent."""
    out = dict(_run(quota_pair, _mutation_session))
    assert out["mutation: CreateTopics v7 mut-big"]["topics"]["mut-big"]["error_code"] == 0, out
    assert out["mutation: CreateTopics v7 mut-refused"]["topics"]["mut-refused"]["error_code"] == 89, out
    assert out["mutation: CreateTopics v4 mut-permissive"]["topics"]["mut-permissive"]["error_code"] == 0, out
    assert out["mutation: DeleteTopics v6"]["responses"]["mut-existing"]["error_code"] == 89, out
