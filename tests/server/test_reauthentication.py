"""SASL re-authentication (KIP-368) on ``kafkalog serve`` and on Apache Kafka 4.4, configured the same
(issue 38): a SASL_PLAINTEXT listener with PLAIN, SCRAM-SHA-256 and OAUTHBEARER (Kafka's unsecured
validator), ``connections.max.reauth.ms=3000`` broker-wide and 5000 for SCRAM-SHA-256 on the listener
(``listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms``).

* raw exchanges, answer by answer on both: the session lifetime SaslAuthenticate answers for each
  mechanism (an OAUTHBEARER token that expires sooner than the configured lifetime gives its own
  remaining life); a re-authentication with the same principal, a second one within a second
  (ILLEGAL_SASL_STATE), with another principal, another mechanism or a wrong password; a request after
  the session's expiry (the connection closed) and a re-authentication after it (allowed);
* real clients that re-authenticate on their own: confluent-kafka (librdkafka >= 2.2, PLAIN) and the
  Java client (SCRAM-SHA-256) producing over several session lifetimes on both brokers, every record
  delivered, the re-authentications counted from librdkafka's log and the Java client's metric;
* docs/server.md's worked example, as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server import raw
from tests.server.broker_process import BrokerProcess
from tests.server.oauth_idp import client_first, unsecured_token
from tests.server.test_authorizer import PASSWORDS, SaslConn, _pair, _ports
from tests.server.test_scram_admin import SCRAM_MODULE, alter, await_users, upsertion

OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
MECHANISMS = "PLAIN,SCRAM-SHA-256,OAUTHBEARER"
SCRAM_PASSWORD = "alice-scram"
REAUTH_MS = 3000
SCRAM_REAUTH_MS = 5000


@pytest.fixture(scope="module")
def reauth_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, BrokerProcess]]:
    """Kafka 4.4 and kafkalog, each with PLAIN users, alice's SCRAM-SHA-256 credential (created over the
    protocol, admin's too) and unsecured OAUTHBEARER tokens, sessions of 3 s (5 s with SCRAM)."""
    oauth_jaas = f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="admin";'
    both = {"sasl.enabled.mechanisms": MECHANISMS, "connections.max.reauth.ms": str(REAUTH_MS),
            "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": str(SCRAM_REAUTH_MS),
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": oauth_jaas}
    kafka_only = {"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": f"{SCRAM_MODULE} required;",
                  "listener.name.controller.scram-sha-256.sasl.jaas.config": f"{SCRAM_MODULE} required;",
                  "listener.name.controller.oauthbearer.sasl.jaas.config": oauth_jaas}
    for pair in _pair(tmp_path_factory.mktemp("reauth"), both, kafka_only):
        for name, _port, sasl_port in _ports(pair):
            admin = SaslConn(name, sasl_port, "admin")
            alter(admin, "SCRAM credentials", [], [upsertion("alice", SCRAM_PASSWORD),
                                                  upsertion("admin", SCRAM_PASSWORD)])
            await_users(admin, {"alice", "admin"})
            admin.close()
        yield pair


# --- raw exchanges ---------------------------------------------------------------------------------

def _plain(user: str, password: str | None = None) -> bytes:
    return b"\0" + user.encode() + b"\0" + (password or PASSWORDS[user]).encode()


def _lifetime(ms: float) -> str:
    """A session lifetime as compared: exact for the configured ones, a range for a token's."""
    if ms in (0, REAUTH_MS, SCRAM_REAUTH_MS):
        return str(int(ms))
    return "0 < ms <= 2000" if 0 < ms <= 2000 else f"other: {ms}"


class Session:
    """One raw connection to the SASL listener: each step's answer, normalised, in :attr:`out`."""

    def __init__(self, port: int) -> None:
        self.sock = raw.connect(port, timeout=30)
        self.corr = 0
        self.out: list[Any] = []

    def _call(self, key: int, version: int, body: dict[str, Any]) -> Any:
        self.corr += 1
        try:
            self.sock.sendall(raw.request_frame(key, version, self.corr, body))
            frame = raw.recv_frame(self.sock)
        except OSError:
            frame = None
        return None if frame is None else raw.response_of(frame, key, version)

    def handshake(self, mechanism: str) -> bool:
        hs = self._call(17, 1, {"mechanism": mechanism})
        self.out.append(("handshake", mechanism, "closed" if hs is None else int(hs.error_code)))
        return hs is not None

    def authenticate(self, token: bytes, label: str = "") -> Any:
        au = self._call(36, 2, {"auth_bytes": token})
        if au is None:
            self.out.append(("authenticate", label, "closed"))
            return None
        self.out.append(("authenticate", label, int(au.error_code), au.error_message,
                         _lifetime(au.session_lifetime.total_seconds() * 1000)))
        return au

    def scram(self, password: str = SCRAM_PASSWORD, user: str = "alice") -> None:
        """A SCRAM-SHA-256 exchange: client-first, then the proof."""
        import base64
        import hashlib
        import hmac
        nonce = uuid.uuid4().hex
        first_bare = f"n={user},r={nonce}"
        au = self.authenticate(f"n,,{first_bare}".encode(), "scram client-first")
        if au is None or int(au.error_code):
            return
        server_first = bytes(au.auth_bytes).decode()
        attrs = dict(x.split("=", 1) for x in server_first.split(","))
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        without_proof = f"c=biws,r={attrs['r']}"
        message = f"{first_bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(hashlib.sha256(client_key).digest(), message, "sha256")
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
        self.authenticate(f"{without_proof},p={proof}".encode(), "scram client-final")

    def login(self, mechanism: str, token: bytes | None = None, label: str = "") -> None:
        if self.handshake(mechanism):
            if mechanism.startswith("SCRAM"):
                self.scram()
            else:
                assert token is not None
                self.authenticate(token, label)

    def request(self, label: str) -> None:
        """ApiVersions v3: answered, or the connection closed."""
        r = self._call(18, 3, {"client_software_name": "reauth-test", "client_software_version": "1"})
        self.out.append(("request", label, "closed" if r is None else int(r.error_code)))

    def close(self) -> None:
        self.sock.close()


def _scenarios() -> list[tuple[str, Any]]:
    def lifetimes(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "PLAIN")

    def lifetime_scram(s: Session) -> None:
        s.login("SCRAM-SHA-256")
        s.request("served")

    def lifetime_short_token(s: Session) -> None:
        s.login("OAUTHBEARER", client_first(unsecured_token("alice", scope=None, lifetime_s=2)), "2 s token")
        s.request("served")

    def lifetime_long_token(s: Session) -> None:
        s.login("OAUTHBEARER", client_first(unsecured_token("alice", scope=None)), "1 h token")

    def same_principal(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "first")
        s.request("after authentication")
        s.login("PLAIN", _plain("alice"), "re-authentication")
        s.request("after re-authentication")
        s.login("PLAIN", _plain("alice"), "again within a second")
        s.request("after the refused one")

    def same_principal_scram(s: Session) -> None:
        s.login("SCRAM-SHA-256")
        s.login("SCRAM-SHA-256")
        s.request("after re-authentication")

    def token_renewed(s: Session) -> None:
        s.login("OAUTHBEARER", client_first(unsecured_token("alice", scope=None, lifetime_s=2)), "2 s token")
        s.login("OAUTHBEARER", client_first(unsecured_token("alice", scope=None)), "a 1 h token")
        time.sleep(2.2)
        s.request("after the first token's expiry")

    def other_principal(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "alice")
        s.login("PLAIN", _plain("bob"), "bob")
        s.request("after")

    def other_token_principal(s: Session) -> None:
        s.login("OAUTHBEARER", client_first(unsecured_token("alice", scope=None)), "alice")
        s.login("OAUTHBEARER", client_first(unsecured_token("bob", scope=None)), "bob")
        s.request("after")

    def other_mechanism(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "alice")
        s.login("SCRAM-SHA-256")
        s.request("after")

    def unknown_mechanism(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "alice")
        s.handshake("GSSAPI")
        s.request("after")

    def wrong_password(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "alice")
        s.login("PLAIN", _plain("alice", "wrong"), "wrong password")
        s.request("after")

    def malformed_token(s: Session) -> None:
        s.login("OAUTHBEARER", client_first(unsecured_token("alice", scope=None)), "alice")
        s.login("OAUTHBEARER", b"auth=Bearer abc\x01\x01", "no GS2 header")

    def expired(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "alice")
        time.sleep(REAUTH_MS / 1000 + 0.3)
        s.request("after the session's expiry")

    def reauthenticated_after_expiry(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "alice")
        time.sleep(REAUTH_MS / 1000 + 0.3)
        s.login("PLAIN", _plain("alice"), "after the expiry")
        s.request("after")

    def before_handshake(s: Session) -> None:
        s.login("PLAIN", _plain("alice"), "alice")
        s.login("PLAIN", _plain("alice"), "re-authentication")
        s.request("once")
        time.sleep(1.1)
        s.handshake("PLAIN")
        s.request("instead of SaslAuthenticate")

    def instead_of_authenticate(s: Session) -> None:
        s.handshake("PLAIN")
        s.request("instead of SaslAuthenticate")
        s.request("after")

    return [(f.__name__, f) for f in (
        lifetimes, lifetime_scram, lifetime_short_token, lifetime_long_token, same_principal,
        same_principal_scram, token_renewed, other_principal, other_token_principal, other_mechanism,
        unknown_mechanism, wrong_password, malformed_token, expired, reauthenticated_after_expiry,
        before_handshake, instead_of_authenticate)]


def _transcripts(pair: tuple[Any, BrokerProcess]) -> dict[str, dict[str, list[Any]]]:
    """Each scenario's transcript on each broker (the scenarios run side by side, they sleep)."""
    out: dict[str, dict[str, list[Any]]] = {name: {} for name, _p, _s in _ports(pair)}

    def run(broker: str, port: int, label: str, scenario: Any) -> None:
        s = Session(port)
        try:
            scenario(s)
        finally:
            s.close()
        out[broker][label] = s.out
    threads = [threading.Thread(target=run, args=(name, sasl_port, label, f))
               for name, _p, sasl_port in _ports(pair) for label, f in _scenarios()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def test_reauthentication_exchanges_match_kafka(reauth_pair: tuple[Any, BrokerProcess]) -> None:
    got = _transcripts(reauth_pair)
    kafka, ours = got["kafka"], got["kafkalog"]
    diffs = [f"{label}:\n  kafka    {kafka.get(label)}\n  kafkalog {ours.get(label)}"
             for label, _f in _scenarios() if kafka.get(label) != ours.get(label)]
    assert not diffs, "\n".join(diffs)
    # what the comparison covers
    assert ours["lifetimes"][-1][-1] == str(REAUTH_MS), ours["lifetimes"]
    assert ours["lifetime_scram"][-2][-1] == str(SCRAM_REAUTH_MS), ours["lifetime_scram"]
    assert ours["lifetime_short_token"][-2][-1] == "0 < ms <= 2000", ours["lifetime_short_token"]
    assert ours["lifetime_long_token"][-1][-1] == str(REAUTH_MS), ours["lifetime_long_token"]
    assert ours["same_principal"][3:6] == [("handshake", "PLAIN", 0),
                                           ("authenticate", "re-authentication", 0, "", str(REAUTH_MS)),
                                           ("request", "after re-authentication", 0)], ours["same_principal"]
    assert ours["other_principal"][3][3] == ("Cannot change principals during re-authentication from "
                                             "User.alice: User.bob"), ours["other_principal"]
    assert ours["other_principal"][-1] == ("request", "after", "closed")
    assert ours["expired"][-1] == ("request", "after the session's expiry", "closed"), ours["expired"]
    assert ours["reauthenticated_after_expiry"][-1] == ("request", "after", 0)


# --- real clients ----------------------------------------------------------------------------------

def _produce_confluent(port: int, topic: str, seconds: float) -> tuple[int, int, int]:
    """confluent-kafka produces to ``topic`` for ``seconds`` (SASL/PLAIN as alice, one record every 20
    ms): (records sent, records delivered, re-authentications librdkafka logged)."""
    from confluent_kafka import Producer
    reauths: list[str] = []
    lock = threading.Lock()

    class Log:
        def log(self, level: int, msg: str, *args: Any) -> None:
            text = msg % args if args else msg
            if "Auth in state REAUTH" in text:
                with lock:
                    reauths.append(text)
    delivered = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": PASSWORDS["admin"],
                  "linger.ms": 5, "message.timeout.ms": 30000, "debug": "security", "logger": Log()})
    sent = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        p.produce(topic, f"r{sent}".encode(), on_delivery=on_delivery)
        sent += 1
        p.poll(0.02)
    assert p.flush(30) == 0
    return sent, delivered[0], len(reauths)


def test_confluent_kafka_reauthenticates(reauth_pair: tuple[Any, BrokerProcess]) -> None:
    """librdkafka re-authenticates its connections before each 3 s session ends while producing for
    10 s: every record is delivered on both brokers, and both see a similar number of
    re-authentications (each connection about 10 / 3 x 0.85 times)."""
    got = {}
    for name, _p, sasl_port in _ports(reauth_pair):
        got[name] = _produce_confluent(sasl_port, f"reauth-{name}-{uuid.uuid4().hex[:6]}", 10.0)
    print("confluent-kafka: sent, delivered, re-authentications:", got)
    for name, (sent, delivered, reauths) in got.items():
        assert sent == delivered > 100, (name, got)
        assert reauths >= 3, (name, got)
    k, o = got["kafka"][2], got["kafkalog"][2]
    assert abs(k - o) <= max(2, 0.25 * k), got


# --- docs/server.md's worked example ---------------------------------------------------------------

def test_docs_reauthentication_worked_example(tmp_path: Any) -> None:
    """The re-authentication example of docs/server.md's Security section, as written: ``kafkalog serve``
    from its properties, its confluent-kafka producer run as a script for its ten seconds; every record
    is delivered and the broker logged alice's re-authentications."""
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "server.md"), encoding="utf-8").read()
    start = text.index("**Worked example: sessions that end")
    section = text[start:text.index("**Worked example:", start + 10)]
    blocks = dict(re.findall(r"```(\w+)\n(.*?)```", section, flags=re.DOTALL))
    (tmp_path / "users.properties").write_text("user.alice=alice-secret\n")
    (tmp_path / "server.properties").write_text(blocks["properties"].replace(
        "sasl.credentials.file=users.properties", f"sasl.credentials.file={tmp_path}/users.properties"))
    b = BrokerProcess(str(tmp_path / "data"), ["listeners=SASL_PLAINTEXT://127.0.0.1:0"],
                      extra_args=["--config-file", str(tmp_path / "server.properties")]).start()
    try:
        script = blocks["python"].replace("127.0.0.1:9092", f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}")
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        m = re.fullmatch(r"(\d+) sent, 0 undelivered\n", r.stdout)
        assert m is not None and int(m[1]) > 100, r.stdout
    finally:
        assert b.stop() == 0, b.stderr()
    reauths = re.findall(r"re-authenticated alice with SASL/PLAIN \(session lifetime 3000 ms\)", b.stderr())
    assert len(reauths) >= 3, b.stderr()[-3000:]


@pytest.mark.slow
def test_java_client_reauthenticates(reauth_pair: tuple[Any, BrokerProcess]) -> None:
    """The Java client (4.3) re-authenticates its connections on its own while producing for 15 s with
    SCRAM-SHA-256 as admin (5 s sessions): every record acknowledged on both brokers, its
    ``successful-reauthentication-total`` similar on both."""
    from tests.server.java_client import JavaUnavailable, classpath, run_driver
    try:
        classpath("4.3.0")
    except JavaUnavailable as e:
        pytest.skip(str(e))
    got = {}
    for name, _p, sasl_port in _ports(reauth_pair):
        r = run_driver("4.3.0", f"127.0.0.1:{sasl_port}", f"reauth-java-{name}-{uuid.uuid4().hex[:6]}", 15, "reauth", {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": f'{SCRAM_MODULE} required username="admin" password="{SCRAM_PASSWORD}";'})
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        m = re.search(r"sent (\d+) acked (\d+) reauthentications (\d+)", r.stdout)
        assert m is not None, r.stdout
        got[name] = tuple(int(x) for x in m.groups())
    print("Java client: sent, acknowledged, re-authentications:", got)
    for sent, acked, reauths in got.values():
        assert sent == acked > 100, got
        assert reauths >= 2, got
    k, o = got["kafka"][2], got["kafkalog"][2]
    assert abs(k - o) <= max(1, 0.25 * k), got
