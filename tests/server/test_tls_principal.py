"""The principal of a TLS client certificate on ``kafkalog serve`` and on Apache Kafka 4.4 with an SSL
listener (``ssl.client.auth=required``), the same certificates and the same ``ssl.principal.mapping.rules``
on both (issue 38). The principal is seen through the authorizer: one topic per candidate principal, an
ACL letting only that principal DESCRIBE it; each client lists the topics it may see (Metadata with the
authorized operations) and the cluster operations it may do, and the answers of the two brokers are
compared. Two certificates: ``CN=kafkalog-client`` and one whose subject needs RFC 2253's escaping
(``CN=svc-tls,OU=Platform,O=kafkalog\\, Inc.,ST=London,C=GB``)."""

from __future__ import annotations

import os
import ssl
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests import kafka44
from tests.server import raw
from tests.server.broker_process import BrokerProcess
from tests.server.test_security import Pki, pki  # noqa: F401  (the throwaway CA and certificates)

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
RULES = r"RULE:^CN=([^,]*),OU=Platform,.*$/$1/L,RULE:^CN=(.*?)-client$/$1/U,DEFAULT"
#: candidate principal -> the topic only it may describe
CANDIDATES = {
    "User:KAFKALOG": "tls-1",
    "User:svc-tls": "tls-2",
    "User:CN=kafkalog-client": "tls-3",
    "User:CN=svc-tls,OU=Platform,O=kafkalog\\, Inc.,ST=London,C=GB": "tls-4",
    "User:SVC-TLS": "tls-5",
    "User:ANONYMOUS": "tls-6",
}


@pytest.fixture(scope="module")
def second_client(pki: Pki) -> tuple[str, str]:  # noqa: F811
    """A client certificate with a subject of several attributes, one holding a comma."""
    d = os.path.dirname(pki.ca)
    subj = "/C=GB/ST=London/O=kafkalog, Inc./OU=Platform/CN=svc-tls"
    for args in (["req", "-newkey", "rsa:2048", "-nodes", "-subj", subj, "-keyout", "svc.key", "-out", "svc.csr"],
                 ["x509", "-req", "-in", "svc.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                  "-days", "2", "-out", "svc.pem"]):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)
    return os.path.join(d, "svc.pem"), os.path.join(d, "svc.key")


@pytest.fixture(scope="module")
def ssl_pair(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[dict[str, tuple[int, int]]]:  # noqa: F811
    """broker name -> (PLAINTEXT port, SSL port), both with the SSL listener, the rules and the authorizer."""
    try:
        kafka44.require()
    except kafka44.Kafka44Unavailable as e:
        pytest.skip(str(e))
    root = tmp_path_factory.mktemp("tls-principal")
    keys = {"ssl.keystore.type": "PEM", "ssl.keystore.location": pki.server_pem, "ssl.truststore.type": "PEM",
            "ssl.truststore.location": pki.ca, "ssl.client.auth": "required", "ssl.principal.mapping.rules": RULES,
            "authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"}
    k = kafka44.KafkaBroker(root / "kafka")
    ssl_port = kafka44.free_port()
    k.properties.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{k.port},SSL://127.0.0.1:{ssl_port},CONTROLLER://127.0.0.1:{k.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{k.port},SSL://127.0.0.1:{ssl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", **keys})
    k._write_config()
    k.format()
    k.start()
    ours = BrokerProcess(str(root / "kafkalog"), configs=[
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", *(f"{key}={v}" for key, v in keys.items())])
    try:
        ours.start()
        yield {"kafka": (k.port, ssl_port), "kafkalog": (ours.ports["PLAINTEXT"], ours.ports["SSL"])}
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
        k.stop()


def _seen_by(port: int, ca: str, cert: str, key: str) -> Any:
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    with ctx.wrap_socket(raw.connect(port), server_hostname="localhost") as s:
        s.sendall(raw.request_frame(3, 12, 1, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": True}))
        md = raw.response_of(raw.recv_frame(s), 3, 12)
        s.sendall(raw.request_frame(60, 1, 2, {"include_cluster_authorized_operations": True, "endpoint_type": 1}))
        dc = raw.response_of(raw.recv_frame(s), 60, 1)
    return (sorted((t.name, t.topic_authorized_operations) for t in md.topics if t.name.startswith("tls-")),
            int(dc.cluster_authorized_operations))


def test_tls_principal_matches_kafka(ssl_pair: dict[str, tuple[int, int]], pki: Pki,  # noqa: F811
                                     second_client: tuple[str, str]) -> None:
    """Each certificate's principal, mapped by the same rules, is Kafka 4.4's: the same topic visible, the
    same cluster operations."""
    from tests.server.test_authorizer import DESCRIBE, TOPIC, SaslConn, acl
    seen = {}
    for name, (plain_port, ssl_port) in ssl_pair.items():
        admin = SaslConn(name, plain_port, None)                     # ANONYMOUS: the super user here
        for topic in CANDIDATES.values():
            admin.create_topic(topic)
        r = admin.request(30, 3, {"creations": [acl(TOPIC, t, p, DESCRIBE) for p, t in CANDIDATES.items()]})
        assert [int(x.error_code) for x in r.results] == [0] * len(CANDIDATES), r
        admin.close()
        deadline = 30.0
        import time
        until = time.monotonic() + deadline
        while True:          # Kafka's broker learns the ACLs from its controller a moment later
            out = {c: _seen_by(ssl_port, pki.ca, *files) for c, files in
                   (("kafkalog-client", (pki.client_cert, pki.client_key)), ("svc-tls", second_client))}
            if all(v[0] for v in out.values()) or time.monotonic() > until:
                break
            time.sleep(0.2)
        seen[name] = out
    assert seen["kafka"] == seen["kafkalog"], seen
    assert seen["kafkalog"]["kafkalog-client"][0] == [("tls-1", 1 << DESCRIBE)], seen
    assert seen["kafkalog"]["svc-tls"][0] == [("tls-2", 1 << DESCRIBE)], seen
