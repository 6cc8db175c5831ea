"""Signed OAUTHBEARER tokens (JWTs) checked as Kafka's ``OAuthBearerValidatorCallbackHandler`` and
``BrokerJwtValidator`` check them, with PyJWT doing the JWS work:

* the signature, with a key of ``sasl.oauthbearer.jwks.endpoint.url`` (:mod:`kafkalog.server.security.jwks`)
  chosen by the header's ``kid`` and ``alg`` (``none`` and HMAC are never accepted);
* ``exp`` and ``iat`` required, ``exp``/``nbf`` checked with ``sasl.oauthbearer.clock.skew.seconds``
  of leeway;
* ``iss`` equal to ``sasl.oauthbearer.expected.issuer`` and ``aud`` holding one of
  ``sasl.oauthbearer.expected.audience``; a broker without one of them refuses to start unless
  ``sasl.oauthbearer.allow.unverified.issuer`` / ``...audience`` is true (Kafka 4.4's rule);
* the principal is the ``sasl.oauthbearer.sub.claim.name`` claim (a non-blank string); the
  ``sasl.oauthbearer.scope.claim.name`` claim, when present, is a string or a list of strings.

Every refusal is ``{"status":"invalid_token"}`` to the client; the reason goes to the log.
"""

from __future__ import annotations

from typing import Any

import jwt

from kafkalog.server.security.jwks import JwksKeys, verification_key
from kafkalog.server.security.sasl_oauthbearer import TokenRejected


class JwtValidator:
    """:class:`~kafkalog.server.security.sasl_oauthbearer.TokenValidator` of signed JWTs."""

    def __init__(self, keys: JwksKeys, *, issuer: str | None, audiences: list[str] | None,
                 clock_skew_s: int, scope_claim: str, sub_claim: str) -> None:
        self.keys = keys
        self.issuer = issuer
        self.audiences = audiences or None
        self.clock_skew_s = clock_skew_s
        self.scope_claim = scope_claim
        self.sub_claim = sub_claim

    def validate(self, token: str) -> tuple[str, int]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as e:
            raise TokenRejected(f"Could not validate the access token: {e}") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or not isinstance(kid, (str, type(None))):
            raise TokenRejected(f"Could not validate the access token: JWS header {header}")
        candidates = self.keys.candidates(kid, alg)
        if not candidates:
            raise TokenRejected(f"Could not validate the access token: unable to find a suitable "
                                f"verification key for a JWS with header {header} in "
                                f"{self.keys.url}")
        claims: dict[str, Any] | None = None
        error: Exception | None = None
        for jwk in candidates:
            try:
                claims = jwt.decode(
                    token, verification_key(jwk, alg), algorithms=[alg], audience=self.audiences,
                    issuer=self.issuer, leeway=self.clock_skew_s,
                    options={"require": ["exp", "iat"], "verify_aud": self.audiences is not None,
                             "verify_iss": self.issuer is not None, "verify_iat": False})
                break
            except jwt.InvalidSignatureError as e:          # another key of the set may fit
                error = e
            except (jwt.InvalidTokenError, jwt.PyJWKError) as e:
                raise TokenRejected(f"Could not validate the access token: {e}") from None
        if claims is None:
            raise TokenRejected(f"Could not validate the access token: {error}")
        sub = claims.get(self.sub_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise TokenRejected(f"Could not extract the '{self.sub_claim}' claim from the access token")
        scope = claims.get(self.scope_claim)
        if scope is not None and not isinstance(scope, str) and not (
                isinstance(scope, list) and all(isinstance(s, str) for s in scope)):
            raise TokenRejected(f"Could not extract the '{self.scope_claim}' claim from the access token")
        for name in ("exp", "iat"):
            if not isinstance(claims[name], (int, float)) or claims[name] < 0:
                raise TokenRejected(f"{name} value must be non-negative; value given was "
                                    f'"{claims[name]}"')
        # Kafka's lifetimeMs: the exp claim (whole seconds, as jose4j's NumericDate keeps it) in ms
        return sub.strip(), int(claims["exp"]) * 1000
