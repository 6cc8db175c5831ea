"""The server side of SASL/OAUTHBEARER (RFC 7628) as Kafka's ``OAuthBearerSaslServer`` runs it: no
I/O, one token in, one token out.

* The client's first message is ``n,[a=authzid],%x01auth=Bearer <token>%x01[key=value%x01...]%x01``
  (the GS2 header, then kvpairs). A malformed one fails as Kafka's ``SaslException`` does ("Authentication
  failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"); a scheme
  other than Bearer closes the connection without an answer, as Kafka 4.4 does.
* The token goes to the listener's validator (:mod:`kafkalog.server.security.unsecured_jws` or
  :mod:`kafkalog.server.security.jwt_validator`). A rejected token is not a failure yet: the server answers
  the error JSON ``{"status":"invalid_token"}`` (with ``"scope"`` for a missing scope), the client
  answers ``%x01``, and only then does authentication fail, with that JSON as the message.
* An authorization id that is not the token's principal fails ("Client requested an authorization id
  (...) that is different from the token's principal name (...)"). Extensions are accepted and
  ignored, as Kafka's validator callback handlers accept every extension.
"""

from __future__ import annotations

import re
from typing import Protocol

from kafkalog.errors import SaslAuthenticationFailed, SaslStateError

OAUTHBEARER = "OAUTHBEARER"
_SEP = "\x01"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KVPAIRS = rf"(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+{_SEP})*"
_CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{_SEP}(?P<kvpairs>{_KVPAIRS}){_SEP}",
                           re.DOTALL)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
#: what Kafka's SaslServerAuthenticator answers for a ``SaslException`` of the mechanism
MALFORMED = ("Authentication failed during authentication due to invalid credentials with SASL "
             "mechanism OAUTHBEARER")


class TokenRejected(Exception):
    """A token the validator refuses: RFC 6750's error ``status`` (``invalid_token``,
    ``insufficient_scope``), the scope the client lacks, and why (logged, never sent)."""

    def __init__(self, reason: str, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope


class TokenValidator(Protocol):
    def validate(self, token: str) -> tuple[str, int]:
        """The token's principal name and its expiry (ms since the epoch: Kafka's ``lifetimeMs``), or
        :class:`TokenRejected`."""


def error_json(status: str, scope: str | None = None, openid_configuration: str | None = None) -> str:
    """Kafka's ``jsonErrorResponse``, spaces included."""
    out = f'{{"status":"{status}"'
    if scope is not None:
        out += f', "scope":"{scope}"'
    if openid_configuration is not None:
        out += f', "openid-configuration":"{openid_configuration}"'
    return out + "}"


def parse_client_first(message: bytes) -> tuple[str, str, dict[str, str]]:
    """(authorization id or "", token, extensions) of a client's first message; RFC 7628 §3.1 with
    Kafka's grammar (``OAuthBearerClientInitialResponse``)."""
    text = message.decode("utf-8", "replace")
    m = _CLIENT_FIRST.fullmatch(text)
    if m is None:
        raise SaslAuthenticationFailed(MALFORMED)
    pairs: dict[str, str] = {}
    for kv in m["kvpairs"].split(_SEP):
        if kv:
            key, _eq, value = kv.partition("=")
            pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise SaslAuthenticationFailed(MALFORMED)
    a = _AUTH.fullmatch(auth)
    if a is None:
        raise SaslAuthenticationFailed(MALFORMED)
    if a["scheme"].lower() != "bearer":
        # Kafka 4.4's message for this names a group its pattern lacks: the broker closes the connection
        raise SaslStateError(f"Invalid scheme in OAUTHBEARER client first message: {a['scheme']}")
    authzid = (m["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
    return authzid, a["token"], pairs


class OAuthBearerServer:
    """One connection's OAUTHBEARER exchange (the :class:`~kafkalog.server.security.sasl_mechanisms.SaslServer`
    protocol): :attr:`user` is the token's principal name once :attr:`complete`, :attr:`expires_ms`
    when the token expires (ms since the epoch): the session ends then (KIP-368)."""

    def __init__(self, validator: TokenValidator) -> None:
        self.validator = validator
        self.complete = False
        self.user: str | None = None
        self.expires_ms: int | None = None
        #: the error JSON sent last, until the client's %x01
        self.error: str | None = None
        #: why the token was refused (the log's, never the client's)
        self.reason: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("SASL/OAUTHBEARER authentication already complete")
        if token == b"\x01" and self.error is not None:
            raise SaslAuthenticationFailed(self.error)
        self.error = None
        authzid, value, _extensions = parse_client_first(token)
        try:
            principal, expires_ms = self.validator.validate(value)
        except TokenRejected as e:
            self.reason = e.reason
            self.error = error_json(e.status, e.scope)
            return self.error.encode()
        if authzid and authzid != principal:
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is "
                f"different from the token's principal name ({principal})")
        self.user = principal
        self.expires_ms = expires_ms
        self.complete = True
        return b""
