"""SCRAM credential administration (AlterUserScramCredentials, DescribeUserScramCredentials) against
Kafka 4.4: the same raw requests to both brokers (StandardAuthorizer, super user admin over SASL/PLAIN,
SCRAM-SHA-256/512 enabled) get equal answers, error paths and hostile input included; a user created over
the protocol then authenticates with a real client on both, and a deleted one cannot; the credentials
survive a restart (and a crash) of ``kafkalog serve``; Kafka's ``kafka-configs.sh`` adds and describes
them."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server import differential as d
from tests.server.broker_process import BrokerProcess
from tests.server.test_authorizer import AUTHORIZER, PASSWORDS, SaslConn, _pair, _ports, _run

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
HASHES = {1: "sha256", 2: "sha512"}


@pytest.fixture(scope="module")
def scram_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, BrokerProcess]]:
    """Kafka 4.4 and kafkalog with StandardAuthorizer, super user admin (PLAIN) and SCRAM enabled."""
    yield from _pair(tmp_path_factory.mktemp("scram"), {"sasl.enabled.mechanisms": MECHANISMS}, {
        f"listener.name.{lst}.{m}.sasl.jaas.config": f"{SCRAM_MODULE} required;"
        for lst in ("sasl_plaintext", "controller") for m in ("scram-sha-256", "scram-sha-512")})


def upsertion(name: str, password: str, mechanism: int = 1, iterations: int = 8192,
              salt: bytes = b"a-salt-of-16-byt") -> dict[str, Any]:
    """What a client sends: the salt, the iterations and ``Hi(password, salt, i)``."""
    salted = hashlib.pbkdf2_hmac(HASHES.get(mechanism, "sha256"), password.encode(), salt, max(iterations, 1))
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": salted}


def deletion(name: str, mechanism: int = 1) -> dict[str, Any]:
    return {"name": name, "mechanism": mechanism}


def _sorted(p: Any) -> Any:
    """Kafka lists users and mechanisms in hash order."""
    if isinstance(p, dict) and isinstance(p.get("results"), list):
        results = [dict(r, credential_infos=sorted(r["credential_infos"], key=lambda c: c["mechanism"]))
                   if "credential_infos" in r else r for r in p["results"]]
        p = dict(p, results=sorted(results, key=lambda r: (r["user"], r["error_code"])))
    if isinstance(p, dict) and isinstance(p.get("error_message"), str):
        p["error_message"] = re.sub(r"Request .*? (is not authorized|needs ALTER permission)\.",
                                    r"Request <request> \1.", p["error_message"])
    for r in p.get("results", []) if isinstance(p, dict) else []:
        if isinstance(r.get("error_message"), str):
            r["error_message"] = re.sub(r"Request .*? (is not authorized|needs ALTER permission)\.",
                                        r"Request <request> \1.", r["error_message"])
    return p


def describe(c: d.Conn, label: str, users: list[str] | None) -> Any:
    return c.call(label, 50, 0, {"users": None if users is None else [{"name": u} for u in users]},
                  transform=_sorted)


def alter(c: d.Conn, label: str, deletions: list[dict[str, Any]], upsertions: list[dict[str, Any]]) -> Any:
    return c.call(label, 51, 0, {"deletions": deletions, "upsertions": upsertions}, transform=_sorted)


def await_users(c: d.Conn, users: set[str]) -> None:
    """Until Describe lists exactly ``users``."""
    c.await_answer(50, 0, {"users": None}, lambda r: {x.user for x in r.results}, users)


def _session(conn_of: Any) -> None:
    admin = conn_of("admin")
    alter(admin, "clean up", [deletion(u, m) for u in ("alice", "bob") for m in (1, 2)], [])
    await_users(admin, set())
    describe(admin, "describe all: none", None)
    describe(admin, "describe [] (all): none", [])
    describe(admin, "describe a user with none", ["nobody"])
    alter(admin, "upsert alice SHA-256 and bob SHA-512",
          [], [upsertion("alice", "alice-scram"), upsertion("bob", "bob-scram", 2, 4096)])
    await_users(admin, {"alice", "bob"})
    alter(admin, "upsert alice SHA-512", [], [upsertion("alice", "alice-scram", 2, 16384)])
    deadline = time.monotonic() + 30
    while len(admin.request(50, 0, {"users": [{"name": "alice"}]}).results[0].credential_infos) < 2 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    describe(admin, "describe all", None)
    describe(admin, "describe alice, bob, nobody, alice again", ["alice", "bob", "nobody", "alice"])
    describe(admin, "describe the empty user", [""])
    alter(admin, "error paths", [deletion("nobody"), deletion("alice", 0), deletion("bob", 1), deletion("", 1)], [
        upsertion("", "x"), upsertion("m0", "x", 0), upsertion("m3", "x", 3), upsertion("m-1", "x", -1),
        upsertion("i0", "x", 1, 0), upsertion("i-low", "x", 1, 4095), upsertion("i-high", "x", 2, 16385),
        upsertion("i-neg", "x", 2, -5), upsertion("twice", "x"), upsertion("twice", "y", 2),
        upsertion("thrice", "x"), upsertion("thrice", "x"), upsertion("thrice", "x")])
    alter(admin, "deleted and upserted in one request", [deletion("bob", 2)], [upsertion("bob", "b", 2)])
    alter(admin, "deleted twice", [deletion("alice", 1), deletion("alice", 2)], [])
    alter(admin, "nothing", [], [])
    alter(admin, "empty salt and password", [], [{"name": "e", "mechanism": 1, "iterations": 4096, "salt": b"",
                                                   "salted_password": b""}])
    # hostile: a huge list of users and of changes, every one refused, the connection kept
    many = [f"u{i}" for i in range(5000)]
    describe(admin, "describe 5000 unknown users", many)
    alter(admin, "delete 5000 unknown credentials", [deletion(u) for u in many], [])
    alter(admin, "5000 upsertions with zero iterations", [], [upsertion(u, "x", 1, 0) for u in many[:5000:10]]
          + [{"name": u, "mechanism": 1, "iterations": 0, "salt": b"", "salted_password": b""} for u in many])
    # who may: alice (PLAIN, no ACL) and ANONYMOUS are refused both APIs
    for who in ("alice", None):
        c = conn_of(who)
        describe(c, f"{who}: describe", ["alice"])
        with c.answered_within(5):      # Kafka 4.4 never answers it (docs/kafka-compatibility.md)
            describe(c, f"authz unauthorized {who}: DescribeUserScramCredentials of every user", None)
        alter(c, f"{who}: alter", [deletion("alice", 2), deletion("zed")], [upsertion("alice", "x"),
                                                                            upsertion("alice", "y")])
    alter(admin, "delete alice SHA-512 and bob", [deletion("alice", 2), deletion("bob", 2)], [])
    await_users(admin, {"alice"})
    describe(admin, "describe all after the deletions", None)
    alter(admin, "delete alice's last", [deletion("alice", 1)], [])
    await_users(admin, set())
    describe(admin, "describe alice, gone", ["alice"])


def test_alter_and_describe_user_scram_credentials(scram_pair: Any) -> None:
    """The same Alter/DescribeUserScramCredentials requests, raw, to Kafka 4.4 and kafkalog: equal answers
    for the successes, every error path Kafka has (DUPLICATE_RESOURCE, UNSUPPORTED_SASL_MECHANISM,
    UNACCEPTABLE_CREDENTIAL, RESOURCE_NOT_FOUND, CLUSTER_AUTHORIZATION_FAILED) and 5000-entry requests."""
    out = dict(_run(scram_pair, _session))
    assert out["describe all"]["results"] == [
        {"user": "alice", "error_code": 0, "error_message": "",
         "credential_infos": [{"mechanism": 1, "iterations": 8192}, {"mechanism": 2, "iterations": 16384}]},
        {"user": "bob", "error_code": 0, "error_message": "",
         "credential_infos": [{"mechanism": 2, "iterations": 4096}]}], out["describe all"]
    codes = {r["user"]: r["error_code"] for r in out["error paths"]["results"]}
    assert codes == {"nobody": 91, "alice": 33, "bob": 91, "": 93, "m0": 33, "m3": 33, "m-1": 33, "i0": 93,
                     "i-low": 93, "i-high": 93, "i-neg": 93, "twice": 92, "thrice": 92}, codes
    assert {r["error_code"] for r in out["delete 5000 unknown credentials"]["results"]} == {91}
    assert [r["error_code"] for r in out["deleted twice"]["results"]] == [92]
    assert [r["error_code"] for r in out["empty salt and password"]["results"]] == [-1]
    assert out["alice: alter"]["results"][0]["error_code"] == 31


def _confluent(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def _authenticates(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    """Whether librdkafka (confluent-kafka) can authenticate and fetch metadata as ``user``: no, as
    soon as it reports the authentication failed (not after the metadata request's timeout)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    errors: list[Any] = []
    admin = AdminClient({**_confluent(bootstrap, user, password, mechanism), "socket.timeout.ms": 5000,
                         "error_cb": errors.append})
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except KafkaException:
            admin.poll(0)
            if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
                return False
    return False


def test_a_user_created_over_the_protocol_authenticates(scram_pair: Any) -> None:
    """confluent-kafka's admin (the super user) creates SCRAM users; a client then authenticates as them
    with SCRAM-SHA-256 and -512, not with a wrong password; once deleted, the user cannot: on both."""
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )
    runs = []
    got: dict[str, Any] = {}
    for _name, _port, sasl_port in _ports(scram_pair):
        bootstrap = f"127.0.0.1:{sasl_port}"
        admin = AdminClient({**_confluent(bootstrap, "admin", PASSWORDS["admin"], "PLAIN")})
        ups = [UserScramCredentialUpsertion("carl", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                            b"carl-secret"),
               UserScramCredentialUpsertion("dora", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 10000),
                                            b"dora-secret")]
        altered = admin.alter_user_scram_credentials(ups)
        out: list[Any] = [("alter", sorted((u, f.result()) for u, f in altered.items()))]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                got = {u: f.result() for u, f in admin.describe_user_scram_credentials(["carl", "dora"]).items()}
                break
            except Exception:                 # Kafka's broker has not learnt them yet
                time.sleep(0.1)
        out.append(("describe", sorted((u, [(i.mechanism.name, i.iterations) for i in desc.scram_credential_infos])
                                       for u, desc in got.items())))
        out.append(("carl", _authenticates(bootstrap, "carl", "carl-secret")))
        out.append(("dora", _authenticates(bootstrap, "dora", "dora-secret", "SCRAM-SHA-512")))
        out.append(("dora wrong", _authenticates(bootstrap, "dora", "carl-secret", "SCRAM-SHA-512")))
        out.append(("dora 256", _authenticates(bootstrap, "dora", "dora-secret")))
        dels = [UserScramCredentialDeletion("carl", ScramMechanism.SCRAM_SHA_256),
                UserScramCredentialDeletion("dora", ScramMechanism.SCRAM_SHA_512)]
        out.append(("delete", sorted((u, f.result()) for u, f in admin.alter_user_scram_credentials(dels).items())))
        deadline = time.monotonic() + 30
        while _authenticates(bootstrap, "carl", "carl-secret") and time.monotonic() < deadline:
            time.sleep(0.2)
        out.append(("carl deleted", _authenticates(bootstrap, "carl", "carl-secret")))
        runs.append(out)
    assert runs[0] == runs[1], f"Kafka 4.4: {runs[0]}\nkafkalog: {runs[1]}"
    assert dict(runs[1])["carl"] and dict(runs[1])["dora"], runs[1]
    assert not dict(runs[1])["dora wrong"] and not dict(runs[1])["carl deleted"], runs[1]


def test_credentials_survive_a_restart(tmp_path: Any) -> None:
    """A credential altered over the protocol is in the data directory (written atomically, fsynced): a
    restarted ``kafkalog serve`` (SIGTERM; then SIGKILL) lets the user in; one deleted before stays out."""
    pytest.importorskip("confluent_kafka")
    creds = tmp_path / "users.properties"
    creds.write_text("user.admin=admin-secret\n")
    configs = ["listeners=SASL_PLAINTEXT://127.0.0.1:0", f"sasl.enabled.mechanisms={MECHANISMS}",
               f"sasl.credentials.file={creds}", f"authorizer.class.name={AUTHORIZER}", "super.users=User:admin"]
    data = str(tmp_path / "data")
    b = BrokerProcess(data, configs).start()
    try:
        admin = SaslConn("kafkalog", b.ports["SASL_PLAINTEXT"], "admin")
        r = admin.request(51, 0, {"deletions": [], "upsertions": [upsertion("erin", "erin-secret"),
                                                                   upsertion("finn", "finn-secret", 2)]})
        assert [int(x.error_code) for x in r.results] == [0, 0]
        r = admin.request(51, 0, {"deletions": [deletion("finn", 2)], "upsertions": []})
        assert [int(x.error_code) for x in r.results] == [0]
        admin.close()
        assert b.stop() == 0, b.stderr()
        assert os.path.exists(os.path.join(data, "kafkalog-scram-credentials.json"))
        assert b"erin-secret" not in open(os.path.join(data, "kafkalog-scram-credentials.json"), "rb").read()
        for stop in ("kill", "term"):
            b = BrokerProcess(data, configs).start()
            bootstrap = f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"
            assert _authenticates(bootstrap, "erin", "erin-secret")
            assert not _authenticates(bootstrap, "erin", "wrong")
            assert not _authenticates(bootstrap, "finn", "finn-secret", "SCRAM-SHA-512")
            if stop == "kill":
                b.kill()
            else:
                assert b.stop() == 0, b.stderr()
    finally:
        if b.alive():
            b.kill()


CONFIGS_COMMAND = "org.apache.kafka.tools.ConfigCommand"


def configs_tool_runs(pair: tuple[Any, BrokerProcess], runs: list[str], tmp_path: Any) -> list[list[Any]]:
    """Each ``kafka-configs.sh`` command line of ``runs`` (as the super user admin) on Kafka 4.4, then on
    kafkalog: (the line, exit status, output lines sorted (the tool prints entities in hash order), the
    first error line) per run; the two transcripts compared, a difference failing."""
    from tests.ecosystem import ToolSession
    from tests.server.test_authorizer import _command_config
    config = _command_config(tmp_path / "admin.properties", "admin")
    transcripts = []
    with ToolSession(tmp_path / "tools") as tools:
        for _name, _port, sasl_port in _ports(pair):
            bootstrap = f"127.0.0.1:{sasl_port}"
            out = []
            for run in runs:
                args = run.split()
                r = tools.run(CONFIGS_COMMAND, "--bootstrap-server", bootstrap, "--command-config", config, *args)
                if args[0] == "--alter":
                    time.sleep(1)             # Kafka's broker learns the change from its controller
                err = [x.replace(bootstrap, "<bootstrap>") for x in r["stderr"].splitlines()
                       if x.strip() and not x.startswith("\tat ")][:1]
                out.append([run, r["exit"], sorted(r["stdout"].replace(bootstrap, "<bootstrap>").splitlines()), err])
            transcripts.append(out)
    diffs = [(a, b) for a, b in zip(*transcripts, strict=True) if a != b]
    assert not diffs, "kafka-configs printed differently on Kafka 4.4 and kafkalog:\n" + "\n".join(
        f"{a}\n  kafkalog: {b}" for a, b in diffs)
    return transcripts


@pytest.mark.slow
def test_kafka_configs_tool(scram_pair: Any, tmp_path: Any) -> None:
    """``kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[...]' --entity-type users`` (and a refused
    iteration count, ``--delete-config``, ``--describe``) on kafkalog as on Kafka 4.4: the same exit status
    and output."""
    transcripts = configs_tool_runs(scram_pair, [
        "--alter --add-config SCRAM-SHA-256=[iterations=8192,password=gus-secret] --entity-type users "
        "--entity-name gus",
        "--alter --add-config SCRAM-SHA-512=[iterations=100,password=gus-secret] --entity-type users "
        "--entity-name gus",
        "--describe --entity-type users --entity-name gus",
        "--alter --delete-config SCRAM-SHA-256 --entity-type users --entity-name gus"], tmp_path)
    assert transcripts[1][0][1] == 0, transcripts[1]


@contextlib.contextmanager
def doc_example(tmp_path: Any, lang: str, count: int, mechanisms: str = "PLAIN") -> Iterator[tuple[BrokerProcess, str]]:
    """``kafkalog serve`` started from the properties of docs/server.md's Security section (with
    ``mechanisms`` enabled), the ``count`` ``kafka-configs.sh`` lines of its ``lang`` code blocks run against
    it (each must succeed); the broker and the last command's output, the broker stopped after."""
    from tests.ecosystem import ToolSession
    from tests.kafka44 import Kafka44Unavailable, require
    from tests.server.test_authorizer import _doc_section
    try:
        require()
    except Kafka44Unavailable as e:
        pytest.skip(str(e))
    section = _doc_section()
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, flags=re.DOTALL)
    # the section's first example (PLAIN): its broker and tools properties; the OAUTHBEARER example follows
    server_props, tool_props = [b for lang_, b in blocks if lang_ == "properties"][:2]
    commands = [line.split() for lang_, b in blocks if lang_ == lang for line in b.splitlines() if line.strip()]
    assert [c[0] for c in commands] == ["kafka-configs.sh"] * count, commands
    assert "sasl.enabled.mechanisms=PLAIN\n" in server_props
    (tmp_path / "users.properties").write_text("user.admin=admin-secret\n")
    (tmp_path / "server.properties").write_text(
        server_props.replace("sasl.credentials.file=users.properties",
                             f"sasl.credentials.file={tmp_path}/users.properties")
        .replace("sasl.enabled.mechanisms=PLAIN\n", f"sasl.enabled.mechanisms={mechanisms}\n"))
    (tmp_path / "admin.properties").write_text(tool_props)
    b = BrokerProcess(str(tmp_path / "data"), ["listeners=SASL_PLAINTEXT://127.0.0.1:0"],
                      extra_args=["--config-file", str(tmp_path / "server.properties")]).start()
    try:
        bootstrap = f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"
        with ToolSession(tmp_path / "tools") as tools:
            for c in commands:
                args = [a.replace("127.0.0.1:9092", bootstrap)
                        .replace("admin.properties", str(tmp_path / "admin.properties")) for a in c[1:]]
                r = tools.run(CONFIGS_COMMAND, *args)
                assert r["exit"] == 0, r
        yield b, r["stdout"]
    finally:
        assert b.stop() == 0, b.stderr()


def test_docs_scram_worked_example(tmp_path: Any) -> None:
    """The SCRAM worked example of docs/server.md's Security section, as written, against ``kafkalog
    serve`` started from the section's properties: the ``kafka-configs.sh`` line succeeds, carol then
    authenticates (with her password only), DescribeUserScramCredentials lists her, and once deleted she
    cannot authenticate."""
    pytest.importorskip("confluent_kafka")
    with doc_example(tmp_path, "shell", 1, "PLAIN,SCRAM-SHA-256") as (b, _out):
        bootstrap = f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"
        assert _authenticates(bootstrap, "carol", "carol-secret")
        assert not _authenticates(bootstrap, "carol", "wrong")
        admin = SaslConn("kafkalog", b.ports["SASL_PLAINTEXT"], "admin")
        r = admin.request(50, 0, {"users": [{"name": "carol"}]})
        assert [(i.mechanism, i.iterations) for i in r.results[0].credential_infos] == [(1, 8192)]
        r = admin.request(51, 0, {"deletions": [deletion("carol")], "upsertions": []})
        assert int(r.results[0].error_code) == 0
        admin.close()
        assert not _authenticates(bootstrap, "carol", "carol-secret")
