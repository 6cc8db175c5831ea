"""The server side of the SASL mechanisms ``kafkalog serve`` offers: PLAIN (RFC 4616) and
SCRAM-SHA-256/512 (RFC 5802, RFC 7677), each a small state machine with no I/O: feed it the client's
token, get the server's token back; :attr:`complete` once the client is authenticated.

Failures raise :class:`SaslAuthenticationFailed` with the message Kafka's ``PlainSaslServer`` and
``ScramSaslServer`` give the client (never whether the user exists)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Protocol

from kafkalog.errors import SaslAuthenticationFailed
from kafkalog.server.security.sasl_credentials import SCRAM_HASHES, Credentials

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *SCRAM_HASHES)


class SaslServer(Protocol):
    complete: bool
    user: str | None

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServer:
    """RFC 4616: one message ``[authzid] NUL authcid NUL passwd``, an empty answer."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.complete = False
        self.user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("SASL/PLAIN authentication already complete")
        parts = token.decode("utf-8", "replace").split("\0")
        if len(parts) != 3:
            raise SaslAuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got "
                                           f"{len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self.credentials.password(user)
        # compare even for an unknown user, so the time taken does not tell which users exist
        ok = hmac.compare_digest((expected or "\0unknown").encode(), password.encode())
        if expected is None or not ok:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an "
                                           "authorization id that is different from username")
        self.user = user
        self.complete = True
        return b""


_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,n=(?P<user>{_SASLNAME}),"
                           r"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<extensions>(?:,[a-zA-Z]=[^,]*)*)$")
_CLIENT_FINAL = re.compile(r"c=(?P<channel>[A-Za-z0-9+/=]+),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
                           r"(?:,[a-zA-Z]=[^,]*)*,p=(?P<proof>[A-Za-z0-9+/=]+)$")
_INVALID = "Authentication failed: Invalid user credentials"


def _saslname(s: str) -> str:
    return s.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """RFC 5802 server: client-first -> server-first (nonce, salt, iterations); client-final
    (proof checked against the stored key) -> server-final (the server signature)."""

    def __init__(self, mechanism: str, credentials: Credentials) -> None:
        self.mechanism = mechanism
        self.hash = SCRAM_HASHES[mechanism]
        self.credentials = credentials
        self.complete = False
        self.user: str | None = None
        self._state = 0
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed(f"Invalid {self.mechanism} message: not UTF-8") from None
        if self._state == 0:
            return self._client_first(text)
        if self._state == 1:
            return self._client_final(text)
        raise SaslAuthenticationFailed(f"Unexpected {self.mechanism} message after completion")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.match(text)
        if m is None:
            raise SaslAuthenticationFailed(f"Invalid SCRAM client first message: {self.mechanism}")
        user = _saslname(m["user"])
        authzid = _saslname(m["authzid"]) if m["authzid"] else ""
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an "
                                           "authorization id that is different from username")
        cred = self.credentials.scram_credential(self.mechanism, user)
        if cred is None:
            raise SaslAuthenticationFailed(_INVALID)
        self.user = user
        self._gs2 = text[:m.start("user") - 2]
        self._client_first_bare = text[len(self._gs2):]
        self._nonce = m["nonce"] + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},"
                              f"i={cred.iterations}")
        self._state = 1
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.match(text)
        if m is None:
            raise SaslAuthenticationFailed(f"Invalid SCRAM client final message: {self.mechanism}")
        if m["nonce"] != self._nonce:
            raise SaslAuthenticationFailed("Invalid client nonce in the final client message.")
        if base64.b64decode(m["channel"]) != self._gs2.encode():
            raise SaslAuthenticationFailed("Invalid channel binding in the final client message.")
        assert self.user is not None
        cred = self.credentials.scram_credential(self.mechanism, self.user)
        assert cred is not None
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        proof = base64.b64decode(m["proof"])
        signature = hmac.digest(cred.stored_key, auth_message, self.hash)
        if len(proof) != len(signature):
            raise SaslAuthenticationFailed(_INVALID)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), cred.stored_key):
            raise SaslAuthenticationFailed(_INVALID)
        self._state = 2
        self.complete = True
        server_signature = hmac.digest(cred.server_key, auth_message, self.hash)
        return b"v=" + base64.b64encode(server_signature)


def sasl_server(mechanism: str, credentials: Credentials) -> SaslServer:
    if mechanism == PLAIN:
        return PlainServer(credentials)
    return ScramServer(mechanism, credentials)
