"""SASL on the ``SASL_PLAINTEXT`` and ``SASL_SSL`` listeners, as Kafka's
``SaslServerAuthenticator`` does it. No I/O: :class:`SaslAuthenticator` takes each frame of a
connection until the client is authenticated and says what to answer.

* Before the SaslHandshake only ApiVersions and SaslHandshake are served; any other request closes
  the connection (Kafka: "Unexpected Kafka request of type ... during SASL handshake").
* SaslHandshake names a mechanism of ``sasl.enabled.mechanisms`` (else UNSUPPORTED_SASL_MECHANISM
  and the connection is closed). From v1 the SASL tokens travel in SaslAuthenticate requests
  (KIP-152); after a v0 handshake they are the bare frames of the legacy protocol.
* A failed authentication answers SASL_AUTHENTICATION_FAILED with Kafka's message (a legacy
  client just sees the connection closed) and closes the connection.
* Once authenticated, the connection is served like any other; a further SaslHandshake or
  SaslAuthenticate gets ILLEGAL_SASL_STATE (:mod:`kafkalog.server.handlers.sasl_handshake`), also
  on listeners without SASL.
"""

from __future__ import annotations

import logging
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

    @classmethod
    def from_values(cls, values: dict[str, Any], oauth_values: dict[str, str] | None = None,
                    listeners: list[str] | None = None) -> SaslConfig:
        mechanisms = tuple(str(m).strip().upper() for m in values["sasl.enabled.mechanisms"])
        served = (*MECHANISMS, OAUTHBEARER)
        bad = [m for m in mechanisms if m not in served]
        if bad or not mechanisms:
            raise InvalidConfigError(
                f"Invalid value {','.join(mechanisms)!r} for configuration sasl.enabled.mechanisms: "
                f"kafkalog serves {', '.join(served)} (Kafka's default GSSAPI is not served)")
        oauth = OAuthBearerConfig.from_values(oauth_values or {}, list(listeners or []))
        path = values["sasl.credentials.file"]
        if not path and any(m in MECHANISMS for m in mechanisms):
            raise InvalidConfigError("a SASL_PLAINTEXT or SASL_SSL listener with PLAIN or SCRAM needs "
                                     "users: set sasl.credentials.file (docs/server.md)")
        return cls(mechanisms, Credentials.load(path) if path else Credentials({}, {}), oauth)

    async def start(self) -> None:
        """Read the OAUTHBEARER key sets (before the listeners open) and keep them fresh."""
        await self.oauth.start()

    async def close(self) -> None:
        await self.oauth.close()


class SaslAuthenticator:
    """One connection's authentication. :meth:`receive` returns the response frame to send, or
    None when the frame is an ApiVersions request for the broker to answer; :attr:`failed` means
    close after sending; :class:`SaslStateError` means close at once."""

    def __init__(self, config: SaslConfig, listener: str | None = None) -> None:
        self.config = config
        self.listener = listener
        self.complete = False
        self.failed = False
        self.user: str | None = None
        self.mechanism: str | None = None
        self._server: SaslServer | None = None
        self._legacy = False

    def receive(self, data: bytes) -> bytes | None:
        if self._server is not None and self._legacy:
            return self._legacy_token(data)
        try:
            key, version, corr = peek_header(data)
        except InvalidRequestError as e:
            raise SaslStateError(str(e)) from None
        expected = (SASL_AUTHENTICATE_KEY,) if self._server is not None else \
            (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY)
        if key not in expected:
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
            self.failed = True
            logger.info("SASL mechanism %r requested by the client is not enabled (%s)", mechanism,
                        ", ".join(enabled))
            return self._response(request, {"error_code": UNSUPPORTED_SASL_MECHANISM,
                                            "mechanisms": enabled})
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
        except SaslAuthenticationFailed as e:
            self.failed = True
            logger.info("SASL/%s authentication failed: %s%s", self.mechanism, e.message,
                        f" ({self._server.reason})" if isinstance(self._server, OAuthBearerServer) else "")
            return self._response(request, {"error_code": SASL_AUTHENTICATION_FAILED,
                                            "error_message": e.message, "auth_bytes": b"",
                                            "session_lifetime": 0})
        self._done()
        # Kafka answers an empty message, not a null one
        return self._response(request, {"error_code": 0, "error_message": "",
                                        "auth_bytes": token, "session_lifetime": 0})

    def _legacy_token(self, data: bytes) -> bytes:
        assert self._server is not None
        try:
            token = self._server.evaluate(data)
        except SaslAuthenticationFailed as e:
            raise SaslStateError(f"SASL/{self.mechanism} authentication failed: {e.message}") \
                from None
        self._done()
        return frame(token)

    def _done(self) -> None:
        assert self._server is not None
        if self._server.complete:
            self.complete = True
            self.user = self._server.user
            logger.info("authenticated %s with SASL/%s", self.user, self.mechanism)

    @staticmethod
    def _response(request: Request, values: dict[str, Any]) -> bytes:
        cls = load_response_schema(request.api_key, request.api_version)
        return encode_response(request, build(cls, values))

