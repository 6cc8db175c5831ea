"""The plugin's encryption done by Java's own JCE (``java/AivenCrypto.java``, compiled once into
the Java cache of ``tests/server/java_client.py``): an independent implementation of AES-256-GCM
chunks and the RSA-OAEP(SHA3-512, MGF1 SHA3-512) wrap of the data key, to check kafkalog's reader
(and the Python fixture's encoder) against something other than themselves."""

from __future__ import annotations

import os
import subprocess
import tempfile

from tests.kafka44 import JAVA
from tests.server.java_client import compile_java

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "AivenCrypto.java")


def _der(private_key, public: bool) -> bytes:
    from cryptography.hazmat.primitives import serialization
    if public:
        return private_key.public_key().public_bytes(serialization.Encoding.DER,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo)
    return private_key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())


def run_java(mode: str, key_der: bytes, args: list[str], pieces: dict[str, bytes], n: int,
             out_suffix: str) -> tuple[list[bytes], dict[str, bytes]]:
    """Run ``AivenCrypto MODE KEY ARGS DIR N`` over a directory holding ``pieces`` (file name ->
    bytes); returns the ``i.<out_suffix>`` outputs and the directory's other files."""
    classes = compile_java([SOURCE], "aiven-crypto")
    with tempfile.TemporaryDirectory() as d:
        key = os.path.join(d, "key.der")
        with open(key, "wb") as f:
            f.write(key_der)
        for name, data in pieces.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        r = subprocess.run([*JAVA, "-cp", classes, "AivenCrypto", mode, key, *args, d, str(n)],
                           capture_output=True, text=True, timeout=300, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"AivenCrypto {mode} failed: {r.stdout[-2000:]}{r.stderr[-3000:]}")
        outs = []
        for i in range(n):
            with open(os.path.join(d, f"{i}.{out_suffix}"), "rb") as f:
                outs.append(f.read())
        files = {}
        for name in ("dataKey", "aad"):
            with open(os.path.join(d, name), "rb") as f:
                files[name] = f.read()
        files["stdout"] = r.stdout.encode()
    return outs, files


class JavaSegmentCipher:
    """:class:`~tests.objectstore.tiered_layouts.PythonSegmentCipher`'s job done by SunJCE: the
    data key and the AAD are generated in Java and never seen by Python."""

    def __init__(self, rsa_private_key, key_id: str = "key1") -> None:
        self.public_der = _der(rsa_private_key, public=True)
        self.key_id = key_id
        #: what Java printed (the provider that did the RSA step)
        self.reports: list[str] = []

    def encrypt_segment(self, pieces: list[bytes]) -> tuple[list[bytes], str, bytes]:
        outs, files = run_java("encrypt", self.public_der, [self.key_id],
                               {f"{i}.plain": p for i, p in enumerate(pieces)}, len(pieces), "enc")
        self.reports.append(files["stdout"].decode().strip())
        return outs, files["dataKey"].decode(), files["aad"]


def java_decrypt(rsa_private_key, data_key: str, aad: bytes, pieces: list[bytes]) -> list[bytes]:
    """SunJCE unwraps ``data_key`` (``keyId:base64``) and decrypts each ``IV || ct || tag``."""
    outs, _ = run_java("decrypt", _der(rsa_private_key, public=False), [],
                       {"dataKey": data_key.encode(), "aad": aad,
                        **{f"{i}.enc": p for i, p in enumerate(pieces)}}, len(pieces), "plain")
    return outs
