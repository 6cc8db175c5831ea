"""SASL/OAUTHBEARER on ``kafkalog serve`` and on Apache Kafka 4.4, configured the same (issue 38): a
listener UNSEC with Kafka's default unsecured validator (``unsecuredValidatorRequiredScope="kafka"``) and
a listener JWT with ``OAuthBearerValidatorCallbackHandler`` checking signed JWTs against the JWKS of an
identity provider run here (:mod:`tests.server.oauth_idp`: ``/jwks`` and a client-credentials
``/token`` endpoint on 127.0.0.1), ``sasl.oauthbearer.expected.issuer`` / ``expected.audience`` set,
StandardAuthorizer with the test principals as super users (so a valid token of another principal
authenticates but may do nothing: the principal is the token's ``sub``).

* every failure and success of the raw SASL exchange (expired token, wrong audience, wrong issuer, bad
  signature, unknown key id, missing scope, an unsecured token on the JWT listener, a mismatched
  authorization id, a malformed first message), answer by answer, on both brokers;
* the Java client 4.4 (``OAuthBearerLoginCallbackHandler`` fetching its token from ``/token``),
  confluent-kafka with librdkafka's OIDC (``sasl.oauthbearer.method=oidc``) and with its default
  unsecured JWT, producing and consuming on both, and the errors each sees for refused tokens;
* kafkalog alone: a JWKS from a ``file://`` URL, a key added to the JWKS picked up after a token named
  its unknown key id (without a restart), the start refused for a URL outside
  ``org.apache.kafka.sasl.oauthbearer.allowed.urls`` and for a JWKS that cannot be read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests import kafka44
from tests.server import raw
from tests.server.broker_process import BrokerProcess
from tests.server.java_client import JavaUnavailable, classpath, run_driver
from tests.server.oauth_idp import AUDIENCE, ISSUER, IdP, client_first, unsecured_token

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
JWT_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
SUPER = ["admin", "alice", "svc-java", "svc-rdkafka"]
CLIENTS = {"svc-java": "java-secret", "svc-rdkafka": "rdkafka-secret", "svc-wrong-aud": "aud-secret"}


def _broker_keys(idp: IdP) -> dict[str, str]:
    """The OAUTHBEARER keys both brokers take, as Kafka's documentation writes them."""
    return {
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.unsec.oauthbearer.sasl.jaas.config":
            f'{LOGIN_MODULE} required unsecuredLoginStringClaim_sub="broker" unsecuredValidatorRequiredScope="kafka";',
        "listener.name.jwt.oauthbearer.sasl.jaas.config":
            f'{LOGIN_MODULE} required unsecuredLoginStringClaim_sub="broker";',
        "listener.name.jwt.oauthbearer.sasl.server.callback.handler.class": JWT_HANDLER,
        "sasl.oauthbearer.jwks.endpoint.url": f"{idp.url}/jwks",
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "authorizer.class.name": AUTHORIZER,
        "super.users": ";".join(f"User:{u}" for u in [*SUPER, "ANONYMOUS"]),
    }


@pytest.fixture(scope="module")
def idp() -> Iterator[IdP]:
    p = IdP(dict(CLIENTS)).start()
    p.claims_for["svc-wrong-aud"] = {"aud": "another-cluster"}
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def oauth_pair(tmp_path_factory: pytest.TempPathFactory, idp: IdP) -> Iterator[dict[str, dict[str, int]]]:
    """broker name -> listener name -> port, of Kafka 4.4 and kafkalog."""
    try:
        kafka44.require()
    except kafka44.Kafka44Unavailable as e:
        pytest.skip(str(e))
    root = tmp_path_factory.mktemp("oauth")
    keys = _broker_keys(idp)
    k = kafka44.KafkaBroker(root / "kafka")
    unsec, jwt_port = kafka44.free_port(), kafka44.free_port()
    k.properties.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{k.port},UNSEC://127.0.0.1:{unsec},JWT://127.0.0.1:{jwt_port},"
                     f"CONTROLLER://127.0.0.1:{k.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{k.port},UNSEC://127.0.0.1:{unsec},JWT://127.0.0.1:{jwt_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,UNSEC:SASL_PLAINTEXT,JWT:SASL_PLAINTEXT,"
                                          "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        **keys,
    })
    k.jvm_args = [f"-D{ALLOWED_URLS}={idp.url}/jwks"]
    k._write_config()
    k.format()
    k.start()
    ours = BrokerProcess(str(root / "kafkalog"), configs=[
        "listeners=PLAINTEXT://127.0.0.1:0,UNSEC://127.0.0.1:0,JWT://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,UNSEC:SASL_PLAINTEXT,JWT:SASL_PLAINTEXT",
        "group.initial.rebalance.delay.ms=0", f"{ALLOWED_URLS}={idp.url}/jwks",
        *(f"{key}={v}" for key, v in keys.items())])
    try:
        ours.start()
        yield {"kafka": {"PLAINTEXT": k.port, "UNSEC": unsec, "JWT": jwt_port}, "kafkalog": dict(ours.ports)}
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
        k.stop()


# --- the raw exchange, answer by answer --------------------------------------------------------------

def exchange(port: int, message: bytes) -> list[Any]:
    """SaslHandshake v1 OAUTHBEARER, SaslAuthenticate v2 with ``message``; after an error challenge the
    client's %x01; after success the cluster operations the principal may do (Metadata v10)."""
    out: list[Any] = []
    s = raw.connect(port, timeout=30)
    try:
        s.sendall(raw.request_frame(17, 1, 1, {"mechanism": "OAUTHBEARER"}))
        hs = raw.response_of(raw.recv_frame(s), 17, 1)
        out.append(("handshake", int(hs.error_code), list(hs.mechanisms)))
        s.sendall(raw.request_frame(36, 2, 2, {"auth_bytes": message}))
        frame = raw.recv_frame(s)
        if frame is None:
            return [*out, "closed"]
        au = raw.response_of(frame, 36, 2)
        # both answer the token's remaining lifetime (KIP-368 re-authentication): compared as "none" or "some"
        out.append(("authenticate", int(au.error_code), au.error_message, bytes(au.auth_bytes).decode(),
                    "session lifetime" if au.session_lifetime.total_seconds() > 0 else None))
        if int(au.error_code) == 0 and bytes(au.auth_bytes):
            s.sendall(raw.request_frame(36, 2, 3, {"auth_bytes": b"\x01"}))
            au = raw.response_of(raw.recv_frame(s), 36, 2)
            out.append(("%x01", int(au.error_code), au.error_message, bytes(au.auth_bytes).decode()))
            out.append("closed" if raw.recv_frame(s) is None else "open")
        elif int(au.error_code) == 0:
            s.sendall(raw.request_frame(3, 10, 4, {"topics": [], "allow_auto_topic_creation": False,
                                                   "include_cluster_authorized_operations": True,
                                                   "include_topic_authorized_operations": False}))
            frame = raw.recv_frame(s)
            out.append("closed" if frame is None else
                       ("cluster operations", int(raw.response_of(frame, 3, 10).cluster_authorized_operations)))
        else:
            out.append("closed" if raw.recv_frame(s) is None else "open")
    except (ConnectionError, OSError) as e:
        out.append(f"closed: {type(e).__name__}")
    finally:
        s.close()
    return out


def _cases(idp: IdP) -> list[tuple[str, str, bytes]]:
    return [
        ("UNSEC", "alice", client_first(unsecured_token("alice"))),
        ("UNSEC", "alice with her authorization id", client_first(unsecured_token("alice"), authzid="alice")),
        ("UNSEC", "mallory (not a super user)", client_first(unsecured_token("mallory"))),
        ("UNSEC", "missing scope", client_first(unsecured_token("alice", scope="other"))),
        ("UNSEC", "no scope claim", client_first(unsecured_token("alice", scope=None))),
        ("UNSEC", "expired", client_first(unsecured_token("alice", lifetime_s=3600, iat_offset_s=-7200))),
        ("UNSEC", "a signed token", client_first(idp.token("alice"))),
        ("UNSEC", "authorization id of another", client_first(unsecured_token("alice"), authzid="bob")),
        ("UNSEC", "not Bearer", b"n,,\x01auth=Basic YWxpY2U=\x01\x01"),
        ("UNSEC", "no GS2 header", b"auth=Bearer abc\x01\x01"),
        ("JWT", "svc-java", client_first(idp.token("svc-java"))),
        ("JWT", "mallory (not a super user)", client_first(idp.token("mallory"))),
        ("JWT", "expired", client_first(idp.token("svc-java", iat_offset_s=-7200))),
        ("JWT", "wrong audience", client_first(idp.token("svc-java", aud="another-cluster"))),
        ("JWT", "no audience", client_first(idp.token("svc-java", aud=None))),
        ("JWT", "wrong issuer", client_first(idp.token("svc-java", iss="https://evil.test"))),
        ("JWT", "bad signature", client_first(idp.token("svc-java", key=idp.other_key))),
        ("JWT", "unknown key id", client_first(idp.token("svc-java", kid="k-unknown"))),
        ("JWT", "an unsecured token", client_first(unsecured_token("svc-java"))),
        ("JWT", "not a JWT", client_first("abc.def.ghi")),
        ("JWT", "authorization id of another", client_first(idp.token("svc-java"), authzid="alice")),
    ]


def test_sasl_exchange_matches_kafka(oauth_pair: dict[str, dict[str, int]], idp: IdP) -> None:
    """Each token's exchange (the challenge with the error JSON, the answer to the client's %x01, the
    failure message, the principal's cluster operations after success) is Kafka 4.4's."""
    cases = _cases(idp)
    got = {name: [(lst, label, exchange(ports[lst], msg)) for lst, label, msg in cases]
           for name, ports in oauth_pair.items()}
    diffs = [f"{lst} {label}:\n  kafka    {k}\n  kafkalog {o}"
             for (lst, label, k), (_l, _b, o) in zip(got["kafka"], got["kafkalog"], strict=True)
             if k != o]
    assert not diffs, "\n".join(diffs)
    by_label = {(lst, label): out for lst, label, out in got["kafkalog"]}
    assert [k for _l, _b, k in got["kafka"] if k[1][-1] == "session lifetime"], "Kafka's lifetimes, compared"
    # what the comparison covers: successes (super user: every cluster operation) and the refusals
    assert by_label[("UNSEC", "alice")][-1] == ("cluster operations", by_label[("JWT", "svc-java")][-1][1])
    assert by_label[("UNSEC", "missing scope")][1][3] == '{"status":"insufficient_scope", "scope":"[kafka]"}'
    for label in ("expired", "wrong audience", "wrong issuer", "bad signature", "unknown key id"):
        assert by_label[("JWT", label)][2][:3] == ("%x01", 58, '{"status":"invalid_token"}'), label


def test_expired_token_session_is_closed(oauth_pair: dict[str, dict[str, int]], idp: IdP) -> None:
    """A token accepted within the 30 s clock skew but already expired: both brokers answer a session
    lifetime of 0 and close the connection at its next request (KIP-368: the session ended with the
    token; tests/server/test_reauthentication.py has the rest of re-authentication)."""
    token = client_first(idp.token("svc-java", iat_offset_s=-3610))
    kafka = exchange(oauth_pair["kafka"]["JWT"], token)
    ours = exchange(oauth_pair["kafkalog"]["JWT"], token)
    assert kafka[1:] == ours[1:] == [("authenticate", 0, "", "", None), "closed"], (kafka, ours)


# --- real clients ---------------------------------------------------------------------------------

def _confluent(ports: dict[str, int], listener: str, extra: dict[str, Any], topic: str) -> tuple[bool, list[str]]:
    """confluent-kafka produces 5 records to ``topic`` and reads them back: (all read, the
    authentication errors librdkafka reported, without addresses and times)."""
    from confluent_kafka import Consumer, Producer
    errors: list[str] = []

    def on_error(e: Any) -> None:
        if "AUTHENTICATION" in e.name() or "Authentication" in e.str():
            errors.append(re.sub(r" \(after \d+ms.*\)$", "", e.str().split(": ", 1)[-1]))
    base = {"bootstrap.servers": f"127.0.0.1:{ports[listener]}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "error_cb": on_error, "reconnect.backoff.ms": 500,
            "log_level": 0, **extra}
    p = Producer({**base, "message.timeout.ms": 10000})
    for i in range(5):
        p.produce(topic, f"v{i}".encode())
    deadline = time.monotonic() + 15
    left = len(p)
    while left and not errors and time.monotonic() < deadline:   # a refusal ends it at once
        left = p.flush(0.5)
    if left or errors:
        return False, sorted(set(errors))
    c = Consumer({**base, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got == [f"v{i}".encode() for i in range(5)], sorted(set(errors))


def _both(oauth_pair: dict[str, dict[str, int]], run: Any) -> dict[str, Any]:
    return {name: run(ports, f"oauth-{name}-{uuid.uuid4().hex[:6]}") for name, ports in oauth_pair.items()}


def test_confluent_unsecured_jwt(oauth_pair: dict[str, dict[str, int]]) -> None:
    """librdkafka's default unsecured JWT (``sasl.oauthbearer.config``: principal and scope) produces and
    consumes as alice on both; without the required scope both refuse it with the same error."""
    ok = _both(oauth_pair, lambda ports, t: _confluent(ports, "UNSEC", {
        "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=alice scope=kafka"}, t))
    assert ok["kafka"] == ok["kafkalog"] == (True, []), ok
    refused = _both(oauth_pair, lambda ports, t: _confluent(ports, "UNSEC", {
        "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=alice scope=other"}, t))
    assert refused["kafka"] == refused["kafkalog"], refused
    assert refused["kafkalog"] == (False, ['SASL authentication error: {"status":"insufficient_scope", '
                                           '"scope":"[kafka]"}']), refused


def _oidc(client: str, secret: str, idp: IdP) -> dict[str, Any]:
    return {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": client,
            "sasl.oauthbearer.client.secret": secret, "sasl.oauthbearer.scope": "kafka",
            "sasl.oauthbearer.token.endpoint.url": f"{idp.url}/token"}


def test_confluent_oidc(oauth_pair: dict[str, dict[str, int]], idp: IdP) -> None:
    """librdkafka's OIDC (client credentials from the token endpoint here) produces and consumes on the
    JWT listener of both; a token for another audience is refused by both alike."""
    ok = _both(oauth_pair, lambda ports, t: _confluent(ports, "JWT", _oidc("svc-rdkafka", "rdkafka-secret", idp), t))
    assert ok["kafka"] == ok["kafkalog"] == (True, []), ok
    # (an expired token librdkafka refuses itself, before any broker sees it)
    refused = _both(oauth_pair, lambda ports, t: _confluent(ports, "JWT", _oidc("svc-wrong-aud", "aud-secret", idp), t))
    assert refused["kafka"] == refused["kafkalog"], refused
    assert refused["kafkalog"] == (False, ['SASL authentication error: {"status":"invalid_token"}']), refused


def _java(ports: dict[str, int], client: str, idp: IdP, topic: str) -> tuple[int, str]:
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
             "sasl.login.callback.handler.class":
                 "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
             "sasl.oauthbearer.token.endpoint.url": f"{idp.url}/token",
             "sasl.jaas.config": f'{LOGIN_MODULE} required clientId="{client}" clientSecret="{CLIENTS[client]}" '
                                 f'scope="kafka";',
             "kafkalog.codecs": "none", "kafkalog.admin": "false", "request.timeout.ms": "15000",
             "default.api.timeout.ms": "20000", "max.block.ms": "20000"}
    r = run_driver("4.4.0", f"127.0.0.1:{ports['JWT']}", topic, 20, properties=props,
                   jvm_args=[f"-D{ALLOWED_URLS}={idp.url}/token"])
    found = re.findall(r"(SaslAuthenticationException: [^\n]*)", r.stdout + r.stderr)
    return r.returncode, found[0] if found else ""


def test_java_client_oauth(oauth_pair: dict[str, dict[str, int]], idp: IdP) -> None:
    """Kafka's Java client 4.4 with ``OAuthBearerLoginCallbackHandler`` (its token from the endpoint here,
    client credentials) creates a topic, produces and consumes on both brokers' JWT listener; with a token
    for another audience both refuse it and the client says the same."""
    try:
        classpath("4.4.0")
    except JavaUnavailable as e:
        pytest.skip(str(e))
    ok = _both(oauth_pair, lambda ports, t: _java(ports, "svc-java", idp, t))
    assert ok["kafka"] == ok["kafkalog"] == (0, ""), ok
    refused = _both(oauth_pair, lambda ports, t: _java(ports, "svc-wrong-aud", idp, t))
    assert refused["kafka"] == refused["kafkalog"], refused
    assert refused["kafkalog"][0] != 0 and "invalid_token" in refused["kafkalog"][1], refused


# --- kafkalog alone: the key set's life, the start refused ------------------------------------------------

def test_jwks_file_and_a_new_key(tmp_path: Any, idp: IdP) -> None:
    """A ``file://`` JWKS: a token signed with a key the file does not hold yet is refused; once the key
    is in the file, the refresh that token started (not a restart, not the hour of
    ``sasl.oauthbearer.jwks.endpoint.refresh.ms``) lets the next one in."""
    other = IdP({}, kid="k2")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(idp.jwks()))
    b = BrokerProcess(str(tmp_path / "data"), [
        "listeners=JWT://127.0.0.1:0", "listener.security.protocol.map=JWT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        f"listener.name.jwt.oauthbearer.sasl.server.callback.handler.class={JWT_HANDLER}",
        f"sasl.oauthbearer.jwks.endpoint.url=file://{jwks}", f"sasl.oauthbearer.expected.issuer={ISSUER}",
        "sasl.oauthbearer.allow.unverified.audience=true"]).start()
    try:
        port = b.ports["JWT"]
        assert exchange(port, client_first(idp.token("alice", aud=None)))[1][:2] == ("authenticate", 0)
        new = client_first(other.token("bob", aud="anything"))
        assert exchange(port, new)[2][:3] == ("%x01", 58, '{"status":"invalid_token"}')
        jwks.write_text(json.dumps({"keys": idp.jwks()["keys"] + other.jwks()["keys"]}))
        exchange(port, client_first(other.token("bob", kid="k2-again")))      # another unknown id: a refresh
        deadline = time.monotonic() + 30
        while exchange(port, new)[1][3] != "" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert exchange(port, new)[1] == ("authenticate", 0, "", "", "session lifetime")
        assert "refreshing the keys" in b.stderr()
    finally:
        assert b.stop() == 0, b.stderr()


@pytest.mark.parametrize("keys,message", [
    ({"org.apache.kafka.sasl.oauthbearer.allowed.urls": "http://127.0.0.1:1/other"},
     "cannot be accessed due to restrictions"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "http://127.0.0.1:1/jwks"}, "cannot read the JSON Web Key Set"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "ftp://127.0.0.1/jwks"}, "invalid protocol (ftp)"),
    ({"sasl.oauthbearer.expected.audience": ""}, "so that the token's audience claim can be verified"),
    ({"sasl.oauthbearer.token.endpoint.url": "http://127.0.0.1:1/token"}, "it never logs in"),
    ({"listener.name.jwt.oauthbearer.sasl.jaas.config": "Nope required;"}, "the OAUTHBEARER login module is"),
])
def test_start_refused(tmp_path: Any, idp: IdP, keys: dict[str, str], message: str) -> None:
    """A JWKS URL outside the allow-list, a JWKS that cannot be read, an unknown protocol, a missing
    expected audience, a client-side key, a JAAS entry of another module: the start is refused with
    one typed error (exit 2), before the data directory is created."""
    base = {"listeners": "JWT://127.0.0.1:0", "listener.security.protocol.map": "JWT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.jwt.oauthbearer.sasl.server.callback.handler.class": JWT_HANDLER,
            "sasl.oauthbearer.jwks.endpoint.url": f"{idp.url}/jwks", "sasl.oauthbearer.expected.issuer": ISSUER,
            "sasl.oauthbearer.expected.audience": AUDIENCE, **keys}
    args = [a for kv in base.items() if kv[1] for a in ("--config", "=".join(kv))]
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "serve", str(tmp_path / "data"), "--port", "0",
                        *args],
                       capture_output=True, text=True, timeout=60, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 2, (r.returncode, out[-2000:])          # the CLI's exit code for bad input
    assert json.loads(r.stdout)["error"] == "InvalidConfigError", out[-2000:]
    assert out.count(message) == 1, out[-2000:]
    assert not (tmp_path / "data").exists()


# --- docs/server.md's worked example ---------------------------------------------------------------------

def test_docs_oauthbearer_worked_example(tmp_path: Any, idp: IdP) -> None:
    """docs/server.md's OAUTHBEARER example as written (the identity provider's URLs and issuer replaced by
    the one here): the broker's properties with ``kafkalog serve --config-file``, the Java client's
    properties producing and consuming as svc-admin; a token of another client authenticates but may not
    describe the cluster; a token for another audience is refused."""
    from tests.server.test_authorizer import DOC
    text = open(DOC, encoding="utf-8").read()
    start = text.index("**Worked example: OAUTHBEARER")
    section = text[start:text.index("\n## ", start)]
    server_props, client_props = [b for lang, b in re.findall(r"```(\w+)\n(.*?)```", section, flags=re.DOTALL)
                                  if lang == "properties"]

    def local(props: str) -> str:
        return (props.replace("https://idp.example/jwks", f"{idp.url}/jwks")
                .replace("https://idp.example/token", f"{idp.url}/token").replace("https://idp.example", ISSUER))
    idp.clients["svc-admin"] = "admin-client-secret"
    (tmp_path / "server.properties").write_text(local(server_props))
    b = BrokerProcess(str(tmp_path / "data"), ["listeners=SASL_PLAINTEXT://127.0.0.1:0"],
                      extra_args=["--config-file", str(tmp_path / "server.properties")]).start()
    try:
        port = b.ports["SASL_PLAINTEXT"]
        assert exchange(port, client_first(idp.token("mallory")))[-1] == ("cluster operations", 0)
        assert exchange(port, client_first(idp.token("svc-admin", aud="other")))[2][:3] == \
            ("%x01", 58, '{"status":"invalid_token"}')
        try:
            classpath("4.4.0")
        except JavaUnavailable as e:
            pytest.skip(str(e))
        props = dict(line.split("=", 1) for line in local(client_props).splitlines() if line.strip())
        props.update({"kafkalog.codecs": "none", "kafkalog.admin": "false"})
        r = run_driver("4.4.0", f"127.0.0.1:{port}", f"doc-{uuid.uuid4().hex[:6]}", 20, properties=props,
                       jvm_args=[f"-D{ALLOWED_URLS}={idp.url}/token"])
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "authenticated svc-admin with SASL/OAUTHBEARER" in b.stderr(), b.stderr()[-2000:]
    finally:
        assert b.stop() == 0, b.stderr()
