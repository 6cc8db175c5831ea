"""The broker keys of SASL/OAUTHBEARER, read per listener as Kafka reads them, and the validator each
SASL listener gets.

Keys (Kafka's names and defaults): ``sasl.oauthbearer.jwks.endpoint.url``,
``sasl.oauthbearer.jwks.endpoint.refresh.ms`` (3600000), ``...retry.backoff.ms`` (100),
``...retry.backoff.max.ms`` (10000), ``sasl.oauthbearer.expected.issuer``,
``sasl.oauthbearer.expected.audience`` (a list), ``sasl.oauthbearer.allow.unverified.issuer`` /
``...audience`` (false), ``sasl.oauthbearer.clock.skew.seconds`` (30),
``sasl.oauthbearer.scope.claim.name`` (``scope``), ``sasl.oauthbearer.sub.claim.name`` (``sub``). Each
may be given for one listener: ``listener.name.<listener>.<key>`` (or with the mechanism,
``listener.name.<listener>.oauthbearer.<key>``) wins over ``<key>``.

The validator of a listener: ``listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class``
= ``org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler`` checks signed
JWTs against the JWKS (:mod:`kafkalog.server.security.jwt_validator`); without it (or naming Kafka's
``OAuthBearerUnsecuredValidatorCallbackHandler``), the unsecured tokens of
:mod:`kafkalog.server.security.unsecured_jws`, with the ``unsecuredValidator*`` options of
``listener.name.<listener>.oauthbearer.sasl.jaas.config`` (``OAuthBearerLoginModule required
unsecuredValidatorRequiredScope="..." ...;``).

``org.apache.kafka.sasl.oauthbearer.allowed.urls``: Kafka 4.4 takes it as a JVM system property and
refuses a JWKS URL it does not list (empty by default: none). kafkalog takes it as a broker key of the
same name: when given, the URL must be one of it (Kafka's message); when not given, every URL is
allowed, since the operator who writes the URL writes the list in the same file
(docs/kafka-compatibility.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafkalog.errors import InvalidConfigError
from kafkalog.server.security.sasl_oauthbearer import TokenValidator
from kafkalog.server.security.unsecured_jws import UnsecuredValidator

if TYPE_CHECKING:       # PyJWT (the ``server`` extra) is imported when a listener checks signed JWTs
    from kafkalog.server.security.jwks import JwksKeys

JWT_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
UNSECURED_HANDLER = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                     "OAuthBearerUnsecuredValidatorCallbackHandler")
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"

#: the validator's keys: name -> (type, default)
KEYS: dict[str, tuple[str, Any]] = {
    "sasl.oauthbearer.jwks.endpoint.url": ("string", None),
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": ("long", 3600000),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": ("long", 100),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": ("long", 10000),
    "sasl.oauthbearer.expected.issuer": ("string", None),
    "sasl.oauthbearer.expected.audience": ("list", None),
    "sasl.oauthbearer.allow.unverified.issuer": ("boolean", False),
    "sasl.oauthbearer.allow.unverified.audience": ("boolean", False),
    "sasl.oauthbearer.clock.skew.seconds": ("int", 30),
    "sasl.oauthbearer.scope.claim.name": ("string", "scope"),
    "sasl.oauthbearer.sub.claim.name": ("string", "sub"),
}
#: the mechanism's own keys, given per listener only (as Kafka takes them on a broker)
_PER_MECHANISM = ("sasl.jaas.config", "sasl.server.callback.handler.class")


def _typed(key: str, kind: str, raw: str) -> Any:
    raw = raw.strip()
    try:
        if kind in ("int", "long"):
            return int(raw)
        if kind == "boolean":
            if raw.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return raw.lower() == "true"
    except ValueError as e:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {key}: {e}") from None
    if kind == "list":
        return [s.strip() for s in raw.split(",") if s.strip()]
    return raw or None


def jaas_options(text: str, key: str) -> dict[str, str]:
    """The options of a one-module JAAS entry ``<LoginModule> required k="v" ...;``."""
    body = text.strip()
    if not body.endswith(";"):
        raise InvalidConfigError(f"{key}: a JAAS entry ends with ';' (<LoginModule> required "
                                 f'key="value" ...;)')
    try:
        words = shlex.split(body[:-1])
    except ValueError as e:
        raise InvalidConfigError(f"{key}: cannot read the JAAS entry: {e}") from None
    if len(words) < 2 or words[1] not in ("required", "requisite", "sufficient", "optional"):
        raise InvalidConfigError(f"{key}: expected <LoginModule> required key=\"value\" ...;")
    if words[0] != LOGIN_MODULE:
        raise InvalidConfigError(f"{key}: the OAUTHBEARER login module is {LOGIN_MODULE}, not {words[0]}")
    options: dict[str, str] = {}
    for w in words[2:]:
        k, sep, v = w.partition("=")
        if not sep or not k:
            raise InvalidConfigError(f"{key}: expected key=\"value\" options, found {w!r}")
        options[k] = v
    return options


def check_keys(raw: Mapping[str, str]) -> None:
    """Refuse an OAUTHBEARER key kafkalog does not know (a typo, a client-side key)."""
    for k in raw:
        if k == ALLOWED_URLS:
            continue
        rest = k
        if k.startswith("listener.name."):
            rest = k[len("listener.name."):].partition(".")[2]
            if rest.startswith("oauthbearer."):
                rest = rest[len("oauthbearer."):]
                if rest in _PER_MECHANISM:
                    continue
        if rest not in KEYS:
            raise InvalidConfigError(
                f"Unknown configuration {k!r}: kafkalog's broker validates OAUTHBEARER tokens with "
                f"{', '.join(KEYS)} (and, per listener, {', '.join(_PER_MECHANISM)}); it never logs in "
                f"itself, so the client's keys (token endpoint, client id) do not apply")


@dataclass
class OAuthBearerConfig:
    """The validator of each SASL listener (by listener name) and the key sets to keep fresh."""

    validators: dict[str, TokenValidator] = field(default_factory=dict)
    key_sets: list[JwksKeys] = field(default_factory=list)

    @classmethod
    def from_values(cls, raw: Mapping[str, str], listeners: list[str]) -> OAuthBearerConfig:
        check_keys(raw)
        allowed = raw.get(ALLOWED_URLS)
        allowed_urls = None if allowed is None else [u.strip() for u in allowed.split(",") if u.strip()]
        out = cls()
        for name in listeners:
            out.validators[name] = out._validator(raw, name.lower(), allowed_urls)
        return out

    def _validator(self, raw: Mapping[str, str], listener: str,
                   allowed_urls: list[str] | None) -> TokenValidator:
        prefix = f"listener.name.{listener}."

        def value(key: str) -> Any:
            for k in (f"{prefix}oauthbearer.{key}", prefix + key, key):
                if k in raw:
                    return _typed(k, KEYS[key][0], raw[k])
            return KEYS[key][1]
        handler = raw.get(f"{prefix}oauthbearer.sasl.server.callback.handler.class", "").strip()
        jaas_key = f"{prefix}oauthbearer.sasl.jaas.config"
        options = jaas_options(raw[jaas_key], jaas_key) if jaas_key in raw else {}
        if handler in ("", UNSECURED_HANDLER):
            return UnsecuredValidator(options)
        if handler != JWT_HANDLER:
            raise InvalidConfigError(
                f"{prefix}oauthbearer.sasl.server.callback.handler.class={handler}: kafkalog's "
                f"OAUTHBEARER validators are {JWT_HANDLER} (signed JWTs) and {UNSECURED_HANDLER}")
        try:
            from kafkalog.server.security.jwks import JwksKeys, check_url
            from kafkalog.server.security.jwt_validator import JwtValidator
        except ImportError as e:
            raise InvalidConfigError(f"{JWT_HANDLER} needs PyJWT with cryptography (pip install "
                                     f"'kafkalog[server]'): {e}") from None
        url = value("sasl.oauthbearer.jwks.endpoint.url")
        if url is None:
            raise InvalidConfigError(
                'The OAuth validator for the broker requires "sasl.oauthbearer.jwks.endpoint.url" to be '
                f"configured so that JWT signatures can be verified, but it was not set (listener "
                f"{listener})")
        check_url(url, allowed_urls)
        issuer, audiences = value("sasl.oauthbearer.expected.issuer"), value("sasl.oauthbearer.expected.audience")
        for what, given, allow in (("issuer", issuer, "sasl.oauthbearer.allow.unverified.issuer"),
                                   ("audience", audiences, "sasl.oauthbearer.allow.unverified.audience")):
            if not given and not value(allow):
                raise InvalidConfigError(
                    f'The OAuth validator for the broker requires "sasl.oauthbearer.expected.{what}" to '
                    f"be configured so that the token's {what} claim can be verified, but it was not set "
                    f'(listener {listener}). Set it, or set "{allow}" to true to accept tokens '
                    f"regardless of their {what}.")
        skew = value("sasl.oauthbearer.clock.skew.seconds")
        if skew < 0:
            raise InvalidConfigError(f"sasl.oauthbearer.clock.skew.seconds={skew}: must be at least 0")
        keys = next((k for k in self.key_sets if k.url == url), None)
        if keys is None:
            keys = JwksKeys(url, value("sasl.oauthbearer.jwks.endpoint.refresh.ms"),
                            value("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"),
                            value("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"))
            self.key_sets.append(keys)
        return JwtValidator(keys, issuer=issuer, audiences=audiences, clock_skew_s=skew,
                            scope_claim=value("sasl.oauthbearer.scope.claim.name") or "scope",
                            sub_claim=value("sasl.oauthbearer.sub.claim.name") or "sub")

    def load(self) -> None:
        """Read every key set now (before an event loop runs)."""
        for keys in self.key_sets:
            keys.load()

    async def start(self) -> None:
        for keys in self.key_sets:
            await keys.start()

    async def close(self) -> None:
        for keys in self.key_sets:
            await keys.close()
