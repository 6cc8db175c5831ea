"""SASL on the ``SASL_PLAINTEXT`` and ``SASL_SSL`` listeners, as Kafka's
``SaslServerAuthenticator`` does it. No I/O: :class:`SaslAuthenticator` takes each frame of a
connection until the client is authenticated and says what to answer.

* Before the SaslHandshake only ApiVersions and SaslHandshake are served; any other request closes
  the connection (Kafka: "Unexpected Kafka request of type ... during SASL handshake"). After it,
  a request other than SaslAuthenticate is answered with its API's ILLEGAL_SASL_STATE error
  (:class:`SaslUnexpectedRequest`, answered by the network layer), then the connection is closed.
* SaslHandshake names a mechanism of ``sasl.enabled.mechanisms`` (else UNSUPPORTED_SASL_MECHANISM
  and the connection is closed). From v1 the SASL tokens travel in SaslAuthenticate requests
  (KIP-152); after a v0 handshake they are the bare frames of the legacy protocol.
* A failed authentication answers SASL_AUTHENTICATION_FAILED with Kafka's message (a legacy
  client just sees the connection closed) and closes the connection.
* Once authenticated, the connection is served like any other; a further SaslHandshake or
  SaslAuthenticate gets ILLEGAL_SASL_STATE (:mod:`kafkalog.server.handlers.sasl_handshake`), also
  on listeners without SASL, unless the session can be re-authenticated (below).

Re-authentication (KIP-368, Kafka's ``ReauthInfo`` and ``KafkaChannel``): SaslAuthenticate answers
the session's lifetime, ``connections.max.reauth.ms`` (``listener.name.<l>.<mechanism>.`` or
``listener.name.<l>.`` prefixed, else broker-wide; 0: none) and, for OAUTHBEARER, no later than the
token's expiry; 0 when neither is set (the session does not expire). A session that has an expiry
(even a 0 lifetime) may be re-authenticated on the open connection: a SaslHandshake then
SaslAuthenticate, at most one re-authentication started a second (a handshake sooner is answered
ILLEGAL_SASL_STATE by the handler). It must keep the mechanism (another enabled one is answered
success, then the connection is closed without an answer at the next frame, as Kafka does) and the
principal ("Cannot change principals during re-authentication ..."). The network layer closes a
connection whose session has expired at its next request other than a re-authentication
(:meth:`SaslAuthenticator.expired`): no timer per connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_response_schema

from kafkalog.errors import InvalidConfigError, SaslStateError
from kafkalog.server.requests.frames import frame
from kafkalog.server.requests.kio_build import build
from kafkalog.server.requests.protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    Request,
    encode_response,
    parse_request,
    peek_header,
)
from kafkalog.server.security.oauthbearer_config import OAuthBearerConfig
from kafkalog.server.security.sasl_credentials import Credentials
from kafkalog.server.security.sasl_mechanisms import (
    MECHANISMS,
    SaslAuthenticationFailed,
    SaslServer,
    sasl_server,
)
from kafkalog.server.security.sasl_oauthbearer import MALFORMED as OAUTHBEARER_MALFORMED
from kafkalog.server.security.sasl_oauthbearer import OAUTHBEARER, OAuthBearerServer

logger = logging.getLogger("kafkalog.server")

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

#: served versions: SaslHandshake v0 (legacy tokens) and v1, SaslAuthenticate v0-v2
SASL_VERSIONS = {SASL_HANDSHAKE_KEY: (0, 1), SASL_AUTHENTICATE_KEY: (0, 2)}


@dataclass(frozen=True)
class SaslConfig:
    """``sasl.enabled.mechanisms``, the users of ``sasl.credentials.file`` (PLAIN, SCRAM) and the
    OAUTHBEARER validator of each SASL listener (:mod:`kafkalog.server.security.oauthbearer_config`)."""

    mechanisms: tuple[str, ...]
    credentials: Credentials
    oauth: OAuthBearerConfig = field(default_factory=OAuthBearerConfig)
    #: ``connections.max.reauth.ms``, broker-wide
    max_reauth_ms: int = 0
    #: its listener-prefixed values: (listener, lower-case mechanism or None) -> ms
    listener_reauth_ms: Mapping[tuple[str, str | None], int] = field(default_factory=dict)

    def reauth_ms(self, listener: str | None, mechanism: str) -> int:
        """``connections.max.reauth.ms`` of a mechanism on a listener, as Kafka's
        ``SaslChannelBuilder`` resolves it: with the listener and mechanism prefix, then the listener
        prefix, then the broker-wide key."""
        name = (listener or "").upper()
        by = self.listener_reauth_ms
        for k in ((name, mechanism.lower()), (name, None)):
            if k in by:
                return by[k]
        return self.max_reauth_ms

    @classmethod
    def from_values(cls, values: dict[str, Any], oauth_values: dict[str, str] | None = None,
                    listeners: list[str] | None = None,
                    listener_values: Mapping[tuple[str, str | None, str], int] | None = None
                    ) -> SaslConfig:
        mechanisms = tuple(str(m).strip().upper() for m in values["sasl.enabled.mechanisms"])
        served = (*MECHANISMS, OAUTHBEARER)
        bad = [m for m in mechanisms if m not in served]
        if bad or not mechanisms:
            raise InvalidConfigError(
                f"Invalid value {','.join(mechanisms)!r} for configuration sasl.enabled.mechanisms: "
                f"kafkalog serves {', '.join(served)} (Kafka's default GSSAPI is not served)")
        oauth = OAuthBearerConfig.from_values(oauth_values or {}, list(listeners or []))
        path = values["sasl.credentials.file"]
        # PLAIN's users are the file's only; SCRAM's may all come from AlterUserScramCredentials (stored
        # in the data directory), as Kafka's come from its metadata log: a SCRAM listener with no user yet
        if not path and "PLAIN" in mechanisms:
            raise InvalidConfigError("a SASL_PLAINTEXT or SASL_SSL listener with PLAIN needs "
                                     "users: set sasl.credentials.file (docs/server.md)")
        reauth = {(lst, mech): v for (lst, mech, key), v in (listener_values or {}).items()
                  if key == "connections.max.reauth.ms"}
        return cls(mechanisms, Credentials.load(path) if path else Credentials({}, {}), oauth,
                   int(values.get("connections.max.reauth.ms") or 0), reauth)

    async def start(self) -> None:
        """Read the OAUTHBEARER key sets (before the listeners open) and keep them fresh."""
        await self.oauth.start()

    async def close(self) -> None:
        await self.oauth.close()


class SaslUnexpectedRequest(SaslStateError):
    """A request other than SaslAuthenticate once the mechanism is chosen: answered with its API's
    error response (ILLEGAL_SASL_STATE, Kafka's message), then the connection is closed."""

    def kafka_message(self, api_name: str) -> str:
        return f"Unexpected Kafka request of type {api_name} during SASL authentication."


#: Kafka's ``KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS``
MIN_REAUTH_INTERVAL_S = 1.0


class SaslAuthenticator:
    """One connection's authentication. :meth:`receive` returns the response frame to send (empty:
    nothing to send), or None when the frame is an ApiVersions request for the broker to answer;
    :attr:`failed` means close after sending; :class:`SaslStateError` means close at once."""

    def __init__(self, config: SaslConfig, listener: str | None = None) -> None:
        self.config = config
        self.listener = listener
        self.complete = False
        self.failed = False
        self.user: str | None = None
        self.mechanism: str | None = None
        #: when the session ends (``time.monotonic()`` seconds), None: never (Kafka's
        #: ``serverSessionExpirationTimeNanos``)
        self.session_expiry: float | None = None
        #: the re-authentications completed on this connection
        self.reauthentications = 0
        self._server: SaslServer | None = None
        self._legacy = False
        #: while re-authenticating: the mechanism and user of the session being renewed
        self._previous: tuple[str, str] | None = None
        self._reauth_started = 0.0
        #: a re-authentication's handshake named another mechanism: Kafka's message, at the next frame
        self._bad_mechanism: str | None = None

    def expired(self, now: float) -> bool:
        """The session has ended (Kafka's ``serverAuthenticationSessionExpired``)."""
        return self.session_expiry is not None and now > self.session_expiry

    def may_reauthenticate(self, now: float) -> bool:
        """A SaslHandshake now begins a re-authentication (Kafka's
        ``maybeBeginServerReauthentication``): the session has an expiry, and no re-authentication
        began less than a second ago."""
        return self.complete and self.session_expiry is not None and (
            self._reauth_started == 0.0 or now - self._reauth_started >= MIN_REAUTH_INTERVAL_S)

    def begin_reauthentication(self, handshake: bytes, now: float) -> bytes | None:
        """Re-authenticate the session with this SaslHandshake frame: its answer (as :meth:`receive`)."""
        assert self.mechanism is not None and self.user is not None
        self._previous = (self.mechanism, self.user)
        self._reauth_started = now
        self.complete = False
        self._server = None
        self._legacy = False
        self._bad_mechanism = None
        logger.debug("re-authenticating %s (SASL/%s)", self.user, self.mechanism)
        return self.receive(handshake)

    @property
    def _stage(self) -> str:
        return "re-authentication" if self._previous is not None else "authentication"

    def receive(self, data: bytes) -> bytes | None:
        if self._bad_mechanism is not None:
            # Kafka's REAUTH_BAD_MECHANISM: the connection is closed, nothing answered
            self.failed = True
            logger.info("SASL re-authentication failed: %s", self._bad_mechanism)
            return b""
        if self._server is not None and self._legacy:
            return self._legacy_token(data)
        try:
            key, version, corr = peek_header(data)
        except InvalidRequestError as e:
            raise SaslStateError(str(e)) from None
        expected = (SASL_AUTHENTICATE_KEY,) if self._server is not None else \
            (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY)
        if key not in expected:
            if self._server is not None and not self._legacy:
                # Kafka answers this one with its API's error response, then closes
                raise SaslUnexpectedRequest(f"Unexpected Kafka request of type api_key={key} during SASL "
                                            f"{self._stage} (correlation_id={corr})")
            stage = "authentication" if self._server is not None else "handshake"
            raise SaslStateError(f"Unexpected Kafka request of type api_key={key} during SASL "
                                 f"{stage} (correlation_id={corr}): the client is not "
                                 f"authenticated (or uses the wrong security protocol)")
        if key == API_VERSIONS_KEY:
            return None
        try:
            request = parse_request(data, SASL_VERSIONS)
        except InvalidRequestError as e:
            raise SaslStateError(str(e)) from None
        if key == SASL_HANDSHAKE_KEY:
            return self._handshake(request)
        return self._authenticate(request)

    def _handshake(self, request: Request) -> bytes:
        mechanism = request.body.mechanism
        enabled = list(self.config.mechanisms)
        if mechanism not in enabled:
            if self._previous is not None:
                # a re-authentication fails at once, unanswered (Kafka's processChannelException)
                raise SaslStateError(f"Unsupported SASL mechanism {mechanism} (re-authentication)")
            self.failed = True
            logger.info("SASL mechanism %r requested by the client is not enabled (%s)", mechanism,
                        ", ".join(enabled))
            return self._response(request, {"error_code": UNSUPPORTED_SASL_MECHANISM,
                                            "mechanisms": enabled})
        if self._previous is not None and mechanism != self._previous[0]:
            # answered as success, then refused at the next frame (Kafka's saslMechanismUnchanged)
            self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                   f"re-authentication of mechanism '{self._previous[0]}'")
            return self._response(request, {"error_code": 0, "mechanisms": enabled})
        self.mechanism = mechanism
        if mechanism == OAUTHBEARER:
            self._server = OAuthBearerServer(self.config.oauth.validators[self.listener or ""])
        else:
            self._server = sasl_server(mechanism, self.config.credentials)
        self._legacy = request.api_version == 0
        return self._response(request, {"error_code": 0, "mechanisms": enabled})

    def _authenticate(self, request: Request) -> bytes:
        assert self._server is not None
        try:
            token = self._server.evaluate(bytes(request.body.auth_bytes))
            lifetime_ms = self._done()
        except SaslAuthenticationFailed as e:
            self.failed = True
            message = e.message
            if self._previous is not None and message == OAUTHBEARER_MALFORMED:
                message = message.replace("during authentication", "during re-authentication")
            logger.info("SASL/%s %s failed: %s%s", self.mechanism, self._stage, message,
                        f" ({self._server.reason})" if isinstance(self._server, OAuthBearerServer) else "")
            return self._response(request, {"error_code": SASL_AUTHENTICATION_FAILED,
                                            "error_message": message, "auth_bytes": b"",
                                            "session_lifetime": 0})
        # Kafka answers an empty message, not a null one
        return self._response(request, {"error_code": 0, "error_message": "",
                                        "auth_bytes": token, "session_lifetime": lifetime_ms})

    def _legacy_token(self, data: bytes) -> bytes:
        assert self._server is not None
        try:
            token = self._server.evaluate(data)
            self._done()
        except SaslAuthenticationFailed as e:
            raise SaslStateError(f"SASL/{self.mechanism} {self._stage} failed: {e.message}") \
                from None
        return frame(token)

    def _done(self) -> int:
        """After a token: once the exchange is complete, the session and its lifetime (ms) to
        answer (Kafka's ``calcCompletionTimesAndReturnSessionLifetimeMs``); a re-authentication that
        names another principal fails."""
        server = self._server
        assert server is not None
        if not server.complete:
            return 0
        user = server.user
        assert user is not None
        if self._previous is not None and user != self._previous[1]:
            raise SaslAuthenticationFailed(f"Cannot change principals during re-authentication from "
                                           f"User.{self._previous[1]}: User.{user}")
        assert self.mechanism is not None
        max_ms = self.config.reauth_ms(self.listener, self.mechanism)
        expires_ms = server.expires_ms if isinstance(server, OAuthBearerServer) else None
        lifetime_ms = 0
        self.session_expiry = None
        if expires_ms is not None or max_ms > 0:
            now = time.monotonic()
            left_ms = None if expires_ms is None else expires_ms - int(time.time() * 1000)
            if left_ms is None:
                lifetime_ms = max_ms
            elif max_ms <= 0:
                lifetime_ms = max(left_ms, 0)
            else:
                lifetime_ms = max(min(left_ms, max_ms), 0)
            self.session_expiry = now + lifetime_ms / 1000.0
        self.complete = True
        self.user = user
        if self._previous is not None:
            self.reauthentications += 1
            logger.info("re-authenticated %s with SASL/%s (session lifetime %d ms)", user, self.mechanism,
                        lifetime_ms)
            self._previous = None
        else:
            logger.info("authenticated %s with SASL/%s", user, self.mechanism)
        return lifetime_ms

    @staticmethod
    def _response(request: Request, values: dict[str, Any]) -> bytes:
        cls = load_response_schema(request.api_key, request.api_version)
        return encode_response(request, build(cls, values))

