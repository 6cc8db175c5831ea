"""Unsecured OAUTHBEARER tokens, as Kafka's default broker validator
(``OAuthBearerUnsecuredValidatorCallbackHandler``) takes them: a JWS with ``"alg":"none"`` and no
signature, for development and tests only (anyone can write one).

Its JAAS options: ``unsecuredValidatorPrincipalClaimName`` (default ``sub``: the principal),
``unsecuredValidatorScopeClaimName`` (default ``scope``), ``unsecuredValidatorRequiredScope``
(space-separated scopes the token must carry, else ``insufficient_scope``) and
``unsecuredValidatorAllowableClockSkewMs`` (default 0). The checks are Kafka's
(``OAuthBearerUnsecuredJws``, ``OAuthBearerValidationUtils``): three dot-separated parts, the last
empty; the header's ``alg`` is ``none``; ``exp`` a number, not yet passed (minus the skew); ``iat``,
when present, a number not in the future (plus the skew) and before ``exp``; the principal claim a
non-blank string.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafkalog.errors import InvalidConfigError
from kafkalog.server.security.sasl_oauthbearer import TokenRejected

PRINCIPAL_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
CLOCK_SKEW_OPTION = "unsecuredValidatorAllowableClockSkewMs"


def _part(text: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenRejected("malformed Base64 URL encoded value") from None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise TokenRejected("malformed JSON") from None
    if not isinstance(value, dict):
        raise TokenRejected("malformed JSON")
    return value


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def token_scope(value: object) -> set[str]:
    """A scope claim: a space-separated string or a list of strings (Kafka's ``calculateScope``)."""
    if isinstance(value, str):
        return {s for s in value.split(" ") if s}
    if isinstance(value, list):
        return {s for s in value if isinstance(s, str)}
    return set()


class UnsecuredValidator:
    """:class:`~kafkalog.server.security.sasl_oauthbearer.TokenValidator` of unsecured JWSs."""

    def __init__(self, options: Mapping[str, str], clock: Callable[[], float] = time.time) -> None:
        self.principal_claim = options.get(PRINCIPAL_OPTION, "").strip() or "sub"
        self.scope_claim = options.get(SCOPE_CLAIM_OPTION, "").strip() or "scope"
        self.required_scope = [s for s in options.get(REQUIRED_SCOPE_OPTION, "").split(" ") if s]
        skew = options.get(CLOCK_SKEW_OPTION, "").strip() or "0"
        try:
            self.skew_ms = int(skew)
        except ValueError:
            raise InvalidConfigError(f"{CLOCK_SKEW_OPTION}={skew!r}: not an integer") from None
        if self.skew_ms < 0:
            raise InvalidConfigError(f"Allowable clock skew millis must not be negative: {skew}")
        self.clock = clock

    def validate(self, token: str) -> tuple[str, int]:
        if ".." in token:
            raise TokenRejected("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenRejected("Unsecured JWS compact serializations must have 3 dot-separated "
                                "Base64URL-encoded values")
        header, claims = _part(parts[0]), _part(parts[1])
        if header.get("alg") != "none":
            raise TokenRejected("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise TokenRejected("Unsecured JWS must not contain a digital signature")
        exp = claims.get("exp")
        if exp is None:
            raise TokenRejected("No expiration time in JWT")
        if not _number(exp):
            raise TokenRejected(f"The exp claim had the incorrect type: {type(exp).__name__}")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenRejected(f"No principal name in JWT claim: {self.principal_claim}")
        now_ms = int(self.clock() * 1000)
        iat = claims.get("iat")
        if iat is not None:
            if not _number(iat):
                raise TokenRejected(f"The iat claim had the incorrect type: {type(iat).__name__}")
            if iat * 1000 > now_ms + self.skew_ms:
                raise TokenRejected(f"The Issued At value ({iat} seconds) was after the indicated time "
                                    f"({now_ms} ms) plus allowable clock skew ({self.skew_ms} ms)")
        if now_ms - self.skew_ms >= exp * 1000:
            raise TokenRejected(f"The indicated time ({now_ms} ms) minus allowable clock skew "
                                f"({self.skew_ms} ms) was on or after the Expiration Time value "
                                f"({exp} seconds)")
        if iat is not None and exp <= iat:
            raise TokenRejected(f"The Expiration Time time ({exp} seconds) was not after the Issued At "
                                f"time ({iat} seconds)")
        scope = token_scope(claims.get(self.scope_claim))
        for s in self.required_scope:
            if s not in scope:
                raise TokenRejected(
                    f"The provided scope ({sorted(scope)}) was missing a required scope ({s}).  All "
                    f"required scope elements: {self.required_scope}", "insufficient_scope",
                    "[" + ", ".join(self.required_scope) + "]")
        # Kafka's lifetimeMs: the exp claim in ms, rounded (OAuthBearerUnsecuredJws)
        return principal, int(round(exp * 1000))
