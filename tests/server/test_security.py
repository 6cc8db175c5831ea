"""TLS and SASL on ``kafkalog serve`` with real clients over real sockets: kafka-python, aiokafka,
confluent-kafka and the Java client over SSL, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
and SASL_SSL; wrong passwords refused with each client's authentication error; unauthenticated
requests refused; a plaintext client on a TLS port fails cleanly while the broker serves others.
A throwaway CA, server and client certificate come from the ``openssl`` command."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kafkalog.server.security.sasl_credentials import scram_credential
from tests.server.broker_process import BrokerProcess, lines_about, watch_log
from tests.server.java_client import DEFAULT_VERSIONS, VERSIONS, by_version
from tests.server.raw import api_versions_v0, captured_requests, connect, recv_frame

USERS = {"alice": "alice-secret"}
#: bob exists only as salted SCRAM-SHA-512 credentials (no password in the file)
BOB = ("bob", "bob-secret")
LISTENERS = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


@dataclass(frozen=True)
class Pki:
    ca: str
    server_pem: str          # certificate chain + key
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    d = str(tmp_path_factory.mktemp("pki"))
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=kafkalog test CA",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, cn in (("server", "localhost"), ("client", "kafkalog-client")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem", cwd=d)
    with open(os.path.join(d, "server-keystore.pem"), "w") as out:
        for part in ("server.pem", "ca.pem", "server.key"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    j = lambda n: os.path.join(d, n)    # noqa: E731
    return Pki(j("ca.pem"), j("server-keystore.pem"), j("server.pem"), j("server.key"),
               j("client.pem"), j("client.key"))


def _credentials_file(d: str) -> str:
    path = os.path.join(d, "users.properties")
    bob = scram_credential("SCRAM-SHA-512", BOB[1], iterations=4096).format()
    with open(path, "w") as f:
        f.write("# test users\n")
        for user, pw in USERS.items():
            f.write(f"user.{user}={pw}\n")
        f.write(f"scram-sha-512.{BOB[0]}={bob}\n")
    return path


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    """One broker with a listener of every security protocol."""
    root = tmp_path_factory.mktemp("secure")
    b = BrokerProcess(str(root / "data"), [
        "listeners=" + ",".join(f"{n}://127.0.0.1:0" for n in LISTENERS),
        "ssl.keystore.type=PEM", f"ssl.keystore.location={pki.server_pem}",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"sasl.credentials.file={_credentials_file(str(root))}",
        "connections.max.idle.ms=3000"]).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.stderr()


# --- the clients -------------------------------------------------------------------------------

#: (listener, mechanism) pairs every client runs; mechanism None = no SASL
CASES = [("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
         ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "PLAIN")]


def _topic(tag: str) -> str:
    return f"sec-{tag}-{uuid.uuid4().hex[:8]}"


#: each Python client's names for bootstrap, security protocol, mechanism, user, password
PY_KEYS = ("bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_plain_username",
           "sasl_plain_password")
CONFLUENT_KEYS = ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username",
                  "sasl.password")


def _client_config(keys: tuple[str, ...], b: BrokerProcess, listener: str, mech: str | None,
                   user: str, password: str) -> dict[str, object]:
    cfg: dict[str, object] = {keys[0]: f"127.0.0.1:{b.ports[listener]}", keys[1]: listener}
    if mech is not None:
        cfg.update({keys[2]: mech, keys[3]: user, keys[4]: password})
    return cfg


def _kafka_python_config(b: BrokerProcess, pki: Pki, listener: str, mech: str | None,
                         user: str = "alice", password: str = "alice-secret") -> dict[str, object]:
    cfg = _client_config(PY_KEYS, b, listener, mech, user, password)
    if "SSL" in listener:
        cfg.update(ssl_cafile=pki.ca, ssl_check_hostname=True)
    return cfg


@pytest.mark.parametrize("listener,mech", CASES)
def test_kafka_python(secure: BrokerProcess, pki: Pki, listener: str, mech: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = _topic("kp")
    cfg = _kafka_python_config(secure, pki, listener, mech)
    p = KafkaProducer(acks="all", **cfg)
    try:
        for i in range(20):
            p.send(topic, f"v{i}".encode(), partition=0)
        p.flush(30)
    finally:
        p.close()
    c = KafkaConsumer(enable_auto_commit=False, **cfg)
    got: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += [m.value for m in c.poll(1000).get(tp, [])]
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(20)]


def test_kafka_python_salted_scram_user(secure: BrokerProcess, pki: Pki) -> None:
    """bob has only a stored SCRAM-SHA-512 credential: SCRAM-SHA-512 works, PLAIN does not."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    p = KafkaProducer(**_kafka_python_config(secure, pki, "SASL_SSL", "SCRAM-SHA-512", *BOB))
    try:
        p.send(_topic("bob"), b"x").get(30)
    finally:
        p.close()
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_timeout_ms=3000,
                      **_kafka_python_config(secure, pki, "SASL_PLAINTEXT", "PLAIN", *BOB)).close()


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256"])
def test_kafka_python_wrong_password(secure: BrokerProcess, pki: Pki, mech: str,
                                     caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError, SaslAuthenticationFailedError
    with pytest.raises(KafkaError) as info:
        KafkaProducer(bootstrap_timeout_ms=3000,
                      **_kafka_python_config(secure, pki, "SASL_PLAINTEXT", mech, "alice", "wrong")).close()
    # kafka-python logs the broker's SASL_AUTHENTICATION_FAILED on the connection, then gives up
    assert isinstance(info.value, SaslAuthenticationFailedError) or \
        "SaslAuthenticationFailedError" in caplog.text


def _aiokafka_config(b: BrokerProcess, pki: Pki, listener: str, mech: str | None,
                     user: str = "alice", password: str = "alice-secret") -> dict[str, object]:
    from aiokafka.helpers import create_ssl_context
    cfg = _client_config(PY_KEYS, b, listener, mech, user, password)
    if "SSL" in listener:
        cfg["ssl_context"] = create_ssl_context(cafile=pki.ca)
    return cfg


@pytest.mark.parametrize("listener,mech", CASES)
def test_aiokafka(secure: BrokerProcess, pki: Pki, listener: str, mech: str | None) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    topic = _topic("aio")

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(acks="all", **_aiokafka_config(secure, pki, listener, mech))
        await p.start()
        try:
            for i in range(20):
                await p.send_and_wait(topic, f"v{i}".encode(), partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(enable_auto_commit=False, **_aiokafka_config(secure, pki, listener, mech))
        await c.start()
        got: list[bytes] = []
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            while len(got) < 20:
                batch = await c.getmany(tp, timeout_ms=5000)
                if not batch:
                    break
                got += [m.value for m in batch.get(tp, [])]
        finally:
            await c.stop()
        return got
    assert asyncio.run(run()) == [f"v{i}".encode() for i in range(20)]


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-512"])
def test_aiokafka_wrong_password(secure: BrokerProcess, pki: Pki, mech: str,
                                caplog: pytest.LogCaptureFixture) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

    async def run() -> None:
        p = AIOKafkaProducer(**_aiokafka_config(secure, pki, "SASL_SSL", mech, "alice", "wrong"))
        try:
            await p.start()
        finally:
            await p.stop()
    with pytest.raises((SaslAuthenticationFailed, KafkaConnectionError)) as info:
        asyncio.run(run())
    # aiokafka logs the broker's SASL_AUTHENTICATION_FAILED and gives up bootstrapping
    assert isinstance(info.value, SaslAuthenticationFailed) or \
        "SaslAuthenticationFailed: Authentication failed" in caplog.text


def _confluent_config(b: BrokerProcess, pki: Pki, listener: str, mech: str | None,
                      user: str = "alice", password: str = "alice-secret") -> dict[str, object]:
    cfg = _client_config(CONFLUENT_KEYS, b, listener, mech, user, password)
    if "SSL" in listener:
        cfg["ssl.ca.location"] = pki.ca
    return cfg


@pytest.mark.parametrize("listener,mech", CASES)
def test_confluent_kafka(secure: BrokerProcess, pki: Pki, listener: str, mech: str | None) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    topic = _topic("ck")
    cfg = _confluent_config(secure, pki, listener, mech)
    p = Producer({**cfg, "acks": "all", "enable.idempotence": True})
    errors: list[object] = []
    for i in range(20):
        p.produce(topic, f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and not errors
    c = Consumer({**cfg, "group.id": "sec-" + topic, "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(20)]


def test_confluent_kafka_wrong_password(secure: BrokerProcess, pki: Pki) -> None:
    from confluent_kafka import KafkaError, Producer
    seen: list[KafkaError] = []
    p = Producer({**_confluent_config(secure, pki, "SASL_SSL", "SCRAM-SHA-256", "alice", "wrong"),
                  "error_cb": seen.append})
    deadline = time.monotonic() + 30
    while not any(e.code() == KafkaError._AUTHENTICATION for e in seen) and time.monotonic() < deadline:
        p.poll(0.2)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen


def _java_properties(b: BrokerProcess, pki: Pki, listener: str, mech: str | None,
                     password: str = "alice-secret") -> dict[str, str]:
    props = {"security.protocol": listener, "kafkalog.codecs": "none,lz4", "kafkalog.admin": "false"}
    if "SSL" in listener:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca})
    if mech is not None:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mech == "PLAIN" else
                  "org.apache.kafka.common.security.scram.ScramLoginModule")
        props.update({"sasl.mechanism": mech,
                      "sasl.jaas.config": f'{module} required username="alice" password="{password}";'})
    return props


#: every listener and mechanism once with the newest or the oldest client, all with the one between
#: (``-m slow``)
_JAVA_SECURITY = [("4.4.0", "SSL", None), ("3.9.1", "SASL_PLAINTEXT", "SCRAM-SHA-256"),
                  ("3.9.1", "SASL_SSL", "PLAIN"), ("4.4.0", "SASL_SSL", "SCRAM-SHA-512"),
                  *((v, listener, mech) for v in VERSIONS if v not in DEFAULT_VERSIONS
                    for listener, mech in (("SSL", None), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
                                           ("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512")))]


@pytest.mark.parametrize("version,listener,mech", [by_version(c[0], *c) for c in _JAVA_SECURITY])
def test_java_client(secure: BrokerProcess, pki: Pki, version: str, listener: str, mech: str | None) -> None:
    from tests.server.java_client import JavaUnavailable, classpath, run_driver
    try:
        classpath(version)
    except JavaUnavailable as e:
        pytest.skip(str(e))
    prefix = "java-" + version.replace(".", "") + listener.lower().replace("_", "") + \
        (mech or "").lower().replace("-", "")
    r = run_driver(version, f"127.0.0.1:{secure.ports[listener]}", prefix, 30,
                   properties=_java_properties(secure, pki, listener, mech))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert {"codec none ok 30", "codec lz4 ok 30"} <= set(r.stdout.splitlines())


def test_java_client_wrong_password(secure: BrokerProcess, pki: Pki) -> None:
    from tests.server.java_client import JavaUnavailable, classpath, run_driver
    try:
        classpath("4.3.0")
    except JavaUnavailable as e:
        pytest.skip(str(e))
    r = run_driver("4.3.0", f"127.0.0.1:{secure.ports['SASL_SSL']}", "java-wrong", 1,
                   properties=_java_properties(secure, pki, "SASL_SSL", "SCRAM-SHA-256", password="wrong"))
    assert r.returncode != 0
    assert "SaslAuthenticationException" in r.stdout + r.stderr, r.stderr[-3000:]


# --- raw sockets: what the broker allows before authentication ---------------------------------

def _request(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    payload = struct.pack(">hhih", api_key, version, corr, 4) + b"test" + body
    return struct.pack(">i", len(payload)) + payload


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _closed(s: socket.socket) -> bool:
    try:
        return recv_frame(s) is None
    except (ConnectionResetError, BrokenPipeError):
        return True


def _with_acks_1(frame: bytes) -> bytes:
    """A captured Produce v7 frame (acks=0) asking for acks=1, so that it is answered."""
    pos = 4 + 8
    pos += 2 + struct.unpack_from(">h", frame, pos)[0]                 # client id
    tid = struct.unpack_from(">h", frame, pos)[0]                      # transactional id
    pos += 2 + max(tid, 0)
    assert struct.unpack_from(">h", frame, pos)[0] == 0
    return frame[:pos] + struct.pack(">h", 1) + frame[pos + 2:]


def test_unauthenticated_produce_is_refused(secure: BrokerProcess) -> None:
    """On a SASL listener ApiVersions is answered, a Produce before authentication closes the
    connection unanswered (and nothing is appended)."""
    produce = _with_acks_1(captured_requests()["confluent-none.Produce_v7"])
    with connect(secure.ports["SASL_PLAINTEXT"]) as s:
        s.sendall(api_versions_v0(3))
        resp = recv_frame(s)
        assert resp is not None and struct.unpack_from(">ih", resp) == (3, 0)
        s.sendall(produce)
        assert _closed(s)
    with connect(secure.ports["SASL_PLAINTEXT"]) as s:           # Metadata too
        s.sendall(_request(3, 0, 4, struct.pack(">i", 0)))
        assert _closed(s)
    # the same Produce is served on the PLAINTEXT listener of the same broker
    with connect(secure.ports["PLAINTEXT"]) as s:
        s.sendall(produce)
        resp = recv_frame(s)
        assert resp is not None and resp[:4] == produce[8:12]       # its correlation id


def test_a_hostile_request_before_authentication_is_not_parsed(secure: BrokerProcess) -> None:
    """Issue 23's frame (IncrementalAlterConfigs with a count of 25 billion) on a SASL listener
    before authentication: refused on its API key, before anything reads its body."""
    from tests.server.test_request_bounds import ISSUE_FRAME
    watch = watch_log(secure)
    with connect(secure.ports["SASL_PLAINTEXT"]) as s:
        s.sendall(ISSUE_FRAME)
        assert _closed(s)
        lines = lines_about(watch, s.getsockname()[1])
    assert len(lines) == 1, lines
    assert "Unexpected Kafka request of type api_key=44 during SASL handshake" in lines[0]
    assert "Tried to allocate" not in lines[0]
    assert secure.alive()


def test_sasl_receive_size_is_checked_on_the_size_field(secure: BrokerProcess) -> None:
    """Before authentication a frame may be at most sasl.server.max.receive.size (524288) bytes:
    only the size field is sent, and the connection is closed (the idle time is 3 s, the client
    waits for the close less)."""
    watch = watch_log(secure)
    with connect(secure.ports["SASL_PLAINTEXT"], timeout=2.5) as s:
        s.sendall(struct.pack(">i", 524289))
        assert _closed(s)
        lines = lines_about(watch, s.getsockname()[1])
    assert len(lines) == 1 and "larger than sasl.server.max.receive.size 524288" in lines[0], lines


def test_a_hostile_sasl_authenticate_is_refused_by_its_bounds(secure: BrokerProcess) -> None:
    """SaslHandshake, then a SaslAuthenticate v0 whose auth_bytes claim 2 GiB: the bounds walk
    refuses it (one line naming the API and version), the broker serves on."""
    watch = watch_log(secure)
    with connect(secure.ports["SASL_PLAINTEXT"]) as s:
        s.sendall(_request(17, 1, 1, _string("PLAIN")))
        assert recv_frame(s) is not None
        s.sendall(_request(36, 0, 2, struct.pack(">i", 2**31 - 1) + b"\0alice\0"))
        assert _closed(s)
        lines = lines_about(watch, s.getsockname()[1])
    assert len(lines) == 1, lines
    assert "apiKey: SaslAuthenticate, apiVersion: 0" in lines[0]
    assert "Error reading byte array of 2147483647 byte(s)" in lines[0]
    assert secure.alive()


def test_unsupported_mechanism_is_refused(secure: BrokerProcess) -> None:
    with connect(secure.ports["SASL_PLAINTEXT"]) as s:
        s.sendall(_request(17, 1, 5, _string("GSSAPI")))
        resp = recv_frame(s)
        assert resp is not None
        corr, error = struct.unpack_from(">ih", resp)
        assert (corr, error) == (5, 33)                          # UNSUPPORTED_SASL_MECHANISM
        assert b"SCRAM-SHA-512" in resp
        assert _closed(s)


def test_legacy_v0_handshake_with_bare_tokens(secure: BrokerProcess) -> None:
    """SaslHandshake v0: the PLAIN token follows as a bare frame, the answer is an empty frame;
    then the connection is served. A wrong password closes the connection."""
    with connect(secure.ports["SASL_PLAINTEXT"]) as s:
        s.sendall(_request(17, 0, 1, _string("PLAIN")))
        resp = recv_frame(s)
        assert resp is not None and struct.unpack_from(">ih", resp) == (1, 0)
        token = b"\0alice\0alice-secret"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert recv_frame(s) == b""
        s.sendall(api_versions_v0(2))
        resp = recv_frame(s)
        assert resp is not None and struct.unpack_from(">ih", resp) == (2, 0)
    with connect(secure.ports["SASL_PLAINTEXT"]) as s:
        s.sendall(_request(17, 0, 1, _string("PLAIN")))
        assert recv_frame(s) is not None
        token = b"\0alice\0nope"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert _closed(s)


def test_sasl_authenticate_failure_answers_then_closes(secure: BrokerProcess) -> None:
    with connect(secure.ports["SASL_PLAINTEXT"]) as s:
        s.sendall(_request(17, 1, 1, _string("PLAIN")))
        assert recv_frame(s) is not None
        token = b"\0alice\0nope"
        s.sendall(_request(36, 0, 2, struct.pack(">i", len(token)) + token))
        resp = recv_frame(s)
        assert resp is not None
        corr, error = struct.unpack_from(">ih", resp)
        assert (corr, error) == (2, 58)                          # SASL_AUTHENTICATION_FAILED
        assert b"Invalid username or password" in resp
        assert _closed(s)


def test_plaintext_client_on_tls_port_fails_cleanly(secure: BrokerProcess, pki: Pki) -> None:
    with connect(secure.ports["SSL"]) as s:
        s.sendall(api_versions_v0())
        assert _closed(s)
    # the broker keeps serving TLS clients on that port, and everyone else
    assert _tls_api_versions(secure.ports["SSL"], pki) is not None
    with connect(secure.ports["PLAINTEXT"]) as s:
        s.sendall(api_versions_v0())
        assert recv_frame(s) is not None
    assert secure.alive()


def _tls_connect(port: int, pki: Pki, cert: bool = False) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if cert:
        ctx.load_cert_chain(pki.client_cert, pki.client_key)
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                           server_hostname="localhost")


def _tls_api_versions(port: int, pki: Pki, cert: bool = False) -> bytes | None:
    with _tls_connect(port, pki, cert) as s:
        s.sendall(api_versions_v0())
        return recv_frame(s)


def test_tls_client_that_never_sends_or_reads_does_not_stall_others(secure: BrokerProcess,
                                                                      pki: Pki) -> None:
    """A client that completes TLS and sends nothing, and one that sends thousands of requests
    and never reads, cost the others nothing; the silent one is closed after
    connections.max.idle.ms."""
    silent = _tls_connect(secure.ports["SSL"], pki)
    hog = _tls_connect(secure.ports["SSL"], pki)
    try:
        hog.setblocking(False)
        frames = b"".join(api_versions_v0(i % 30000) for i in range(20000))
        try:
            hog.send(frames)
        except (ssl.SSLWantWriteError, BlockingIOError):
            pass
        for _ in range(3):
            assert _tls_api_versions(secure.ports["SSL"], pki) is not None
        silent.settimeout(30)
        assert silent.recv(1) == b""                             # closed by the broker
    finally:
        silent.close()
        hog.close()


# --- mutual TLS and configuration errors -------------------------------------------------------

def test_client_auth_required(tmp_path: os.PathLike[str], pki: Pki) -> None:
    """SSL listeners honour ssl.client.auth=required; SASL_SSL listeners ignore it (Kafka's rule,
    KIP-684): a client without a certificate reaches them and authenticates with SASL."""
    b = BrokerProcess(os.path.join(str(tmp_path), "data"), [
        "listeners=SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN",
        f"sasl.credentials.file={_credentials_file(str(tmp_path))}", "ssl.keystore.type=PEM",
        f"ssl.keystore.certificate.chain={open(pki.server_cert).read()}",
        f"ssl.keystore.key={open(pki.server_key).read()}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}",
        "ssl.client.auth=required"]).start()
    try:
        resp = _tls_api_versions(b.port, pki, cert=True)
        assert resp is not None and struct.unpack_from(">ih", resp) == (7, 0)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            r = _tls_api_versions(b.port, pki, cert=False)
            if r is None:                        # TLS 1.3: the refusal arrives after the handshake
                raise ConnectionError("closed")
        assert _tls_api_versions(b.port, pki, cert=True) is not None
        resp = _tls_api_versions(b.ports["SASL_SSL"], pki, cert=False)
        assert resp is not None and struct.unpack_from(">ih", resp) == (7, 0)
    finally:
        assert b.stop() == 0, b.stderr()


def _serve_fails(tmp: str, configs: list[str]) -> str:
    cmd = [sys.executable, "-m", "kafkalog.cli.main", "serve", os.path.join(tmp, "data"), "--port", "0"]
    for c in configs:
        cmd += ["--config", c]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0
    assert not os.path.exists(os.path.join(tmp, "data"))     # refused before anything is made
    return r.stdout + r.stderr


def test_configuration_errors(tmp_path: os.PathLike[str], pki: Pki) -> None:
    tmp = str(tmp_path)
    err = _serve_fails(tmp, ["listeners=SSL://127.0.0.1:0", f"ssl.keystore.location={pki.server_pem}"])
    assert "JKS" in err and "PEM" in err                      # Kafka's default type, refused
    err = _serve_fails(tmp, ["listeners=SSL://127.0.0.1:0"])
    assert "ssl.keystore" in err
    err = _serve_fails(tmp, ["listeners=SASL_PLAINTEXT://127.0.0.1:0"])
    assert "sasl.enabled.mechanisms" in err and "GSSAPI" in err
    err = _serve_fails(tmp, ["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN"])
    assert "sasl.credentials.file" in err
    bad = os.path.join(tmp, "bad.properties")
    with open(bad, "w") as f:
        f.write("scram-sha-256.carol=salt=AAAA,iterations=10\n")
    err = _serve_fails(tmp, ["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=PLAIN",
                             f"sasl.credentials.file={bad}"])
    assert "bad.properties" in err and "carol" in err
    err = _serve_fails(tmp, ["listeners=FOO://127.0.0.1:0"])
    assert "listener.security.protocol.map" in err


def test_large_fetch_over_tls(secure: BrokerProcess, pki: Pki) -> None:
    """Fetched slices large enough for ``sendfile`` on a plain socket are read from the segment
    and encrypted on a TLS connection: the bytes arrive whole."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    topic = _topic("big")
    values = [bytes([i]) * 8192 for i in range(48)]

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(acks="all", max_batch_size=1 << 20, linger_ms=50,
                             **_aiokafka_config(secure, pki, "SASL_SSL", "SCRAM-SHA-256"))
        await p.start()
        try:
            for f in [await p.send(topic, v, partition=0) for v in values]:
                await f
        finally:
            await p.stop()
        c = AIOKafkaConsumer(enable_auto_commit=False, max_partition_fetch_bytes=1 << 20,
                             **_aiokafka_config(secure, pki, "SASL_SSL", "SCRAM-SHA-256"))
        await c.start()
        got: list[bytes] = []
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            while len(got) < len(values):
                batch = await c.getmany(tp, timeout_ms=5000)
                if not batch:
                    break
                got += [m.value for m in batch.get(tp, [])]
        finally:
            await c.stop()
        return got
    assert asyncio.run(run()) == values


def test_pkcs12_key_store(tmp_path: os.PathLike[str], pki: Pki) -> None:
    """A PKCS12 key store (read with the ``cryptography`` package) serves like the PEM one."""
    pytest.importorskip("cryptography")
    p12 = os.path.join(str(tmp_path), "server.p12")
    _openssl("pkcs12", "-export", "-in", pki.server_cert, "-inkey", pki.server_key, "-out", p12,
             "-passout", "pass:storepass", cwd=str(tmp_path))
    b = BrokerProcess(os.path.join(str(tmp_path), "data"), [
        "listeners=SSL://127.0.0.1:0", "ssl.keystore.type=PKCS12", f"ssl.keystore.location={p12}",
        "ssl.keystore.password=storepass"]).start()
    try:
        resp = _tls_api_versions(b.port, pki)
        assert resp is not None and struct.unpack_from(">ih", resp) == (7, 0)
    finally:
        assert b.stop() == 0, b.stderr()
    again = os.path.join(str(tmp_path), "again")
    err = _serve_fails(again, ["listeners=SSL://127.0.0.1:0", "ssl.keystore.type=PKCS12",
                               f"ssl.keystore.location={p12}", "ssl.keystore.password=wrong"])
    assert "PKCS12" in err and "server.p12" in err
