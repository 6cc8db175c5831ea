"""A small OAuth 2 identity provider on 127.0.0.1 for the OAUTHBEARER tests: an RSA key pair (the
``cryptography`` package), its JSON Web Key Set at ``/jwks``, and a token endpoint at ``/token`` that
answers the client-credentials grant (RFC 6749 §4.4: ``grant_type=client_credentials``, the client's
id and secret in HTTP Basic or in the form) with a JWT signed by PyJWT (``sub`` = the client id, the
requested ``scope``, ``iss``, ``aud``, ``iat``, ``exp``). :meth:`IdP.token` signs any claims, with any
key id, for the failure cases."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://idp.kafkalog.test"
AUDIENCE = "kafka-cluster"


class IdP:
    """Start with :meth:`start`, stop with :meth:`stop`; :attr:`clients` maps client id -> secret."""

    def __init__(self, clients: dict[str, str], kid: str = "k1") -> None:
        self.clients = clients
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        #: a key the JWKS does not hold (a bad signature)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        #: client id -> keyword arguments of :meth:`token` for that client's tokens (a wrong audience...)
        self.claims_for: dict[str, dict[str, Any]] = {}
        self.tokens_issued = 0
        self.jwks_requests = 0
        self._server: ThreadingHTTPServer | None = None

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def token(self, sub: str, scope: str | None = "kafka", *, kid: str | None = None, key: Any = None,
              iss: str | None = ISSUER, aud: str | None = AUDIENCE, lifetime_s: int = 3600,
              iat_offset_s: int = 0, **extra: Any) -> str:
        now = int(time.time()) + iat_offset_s
        claims: dict[str, Any] = {"sub": sub, "iat": now, "exp": now + lifetime_s, **extra}
        if scope is not None:
            claims["scope"] = scope
        if iss is not None:
            claims["iss"] = iss
        if aud is not None:
            claims["aud"] = aud
        return jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid})

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> IdP:
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/jwks":
                    idp.jwks_requests += 1
                    self._answer(200, idp.jwks())
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:
                if self.path != "/token":
                    self._answer(404, {"error": "not_found"})
                    return
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
                client_id, secret = (form.get("client_id") or [""])[0], (form.get("client_secret") or [""])[0]
                auth = self.headers.get("Authorization", "")
                if auth.startswith("Basic "):
                    raw = base64.b64decode(auth[6:]).decode()
                    client_id, _sep, secret = raw.partition(":")
                    client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
                if (form.get("grant_type") or [""])[0] != "client_credentials" or \
                        idp.clients.get(client_id) != secret or not secret:
                    self._answer(401, {"error": "invalid_client"})
                    return
                idp.tokens_issued += 1
                scope = (form.get("scope") or ["kafka"])[0]
                token = idp.token(client_id, scope, **idp.claims_for.get(client_id, {}))
                self._answer(200, {"access_token": token, "token_type": "Bearer",
                                   "expires_in": 3600})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def unsecured_token(sub: str, scope: str | None = "kafka", lifetime_s: int = 3600, iat_offset_s: int = 0) -> str:
    """An unsecured JWS (``"alg":"none"``), as librdkafka's and Kafka's unsecured login make them."""
    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    now = int(time.time()) + iat_offset_s
    claims: dict[str, Any] = {"sub": sub, "iat": now, "exp": now + lifetime_s}
    if scope is not None:
        claims["scope"] = scope
    return f"{b64({'alg': 'none'})}.{b64(claims)}."


def client_first(token: str, authzid: str = "") -> bytes:
    """RFC 7628's initial client response: the GS2 header, ``auth=Bearer <token>``, the kvpairs' end."""
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()
