"""The verification keys of ``sasl.oauthbearer.jwks.endpoint.url``: a JSON Web Key Set (RFC 7517) read
from a ``file://`` path or fetched over ``http(s)://``, as Kafka's ``RefreshingHttpsJwks`` /
``JwksFileVerificationKeyResolver`` keep it.

* Read once when the broker starts (a set that cannot be read or holds no usable key refuses the
  start, naming the URL), then again every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``; a failed
  refresh keeps the keys it had and is retried with ``sasl.oauthbearer.jwks.endpoint.retry.backoff.ms``
  doubling up to ``...retry.backoff.max.ms``.
* A token naming a key id the set does not hold is refused, and a refresh is started at once (Kafka's
  ``maybeExpediteRefresh``: once a minute per key id, ids of at most 1000 characters).
* Every read (the file, the HTTP request) runs in a worker thread: the event loop never waits for
  it. A response larger than :data:`MAX_JWKS_BYTES` is refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
import urllib.request
from collections import OrderedDict
from typing import Any

import jwt

from kafkalog.errors import InvalidConfigError

logger = logging.getLogger("kafkalog.server")

URL_KEY = "sasl.oauthbearer.jwks.endpoint.url"
MAX_JWKS_BYTES = 1 << 20
HTTP_TIMEOUT_S = 10.0
#: Kafka's RefreshingHttpsJwks constants
MISSING_KEY_ID_CACHE_MAX_ENTRIES = 16
MISSING_KEY_ID_CACHE_IN_FLIGHT_S = 60.0
MISSING_KEY_ID_MAX_KEY_LENGTH = 1000

#: the signature algorithms of each key type (never ``none``, never HMAC: a JWKS holds public keys)
ALGORITHMS = {"RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
              "EC": ("ES256", "ES384", "ES512", "ES256K"), "OKP": ("EdDSA", "Ed25519")}


def check_url(url: str, allowed: list[str] | None) -> str:
    """The URL's scheme, after Kafka's checks (``ConfigurationUtils.validateUrl``) and the allow-list
    (``org.apache.kafka.sasl.oauthbearer.allowed.urls``; None: every URL)."""
    parsed = urllib.parse.urlparse(url)
    if not parsed.scheme:
        raise InvalidConfigError(f"The OAuth configuration option {URL_KEY} contains a URL ({url}) that "
                                 f"is missing the protocol")
    if parsed.scheme not in ("http", "https", "file"):
        raise InvalidConfigError(f"The OAuth configuration option {URL_KEY} contains a URL ({url}) that "
                                 f'contains an invalid protocol ({parsed.scheme}); only "http", "https", '
                                 f'and "file" protocol are supported')
    if allowed is not None and url not in allowed:
        raise InvalidConfigError(f"The {URL_KEY} cannot be accessed due to restrictions. Update the "
                                 f"configuration 'org.apache.kafka.sasl.oauthbearer.allowed.urls' to "
                                 f"allow the {URL_KEY} to be accessed.")
    return parsed.scheme


def _read(url: str) -> bytes:
    """The JWKS document (a worker thread's job)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = urllib.request.url2pathname(parsed.path)
        with open(path, "rb") as f:
            data = f.read(MAX_JWKS_BYTES + 1)
    else:
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r:     # the scheme was checked
            data = r.read(MAX_JWKS_BYTES + 1)
    if len(data) > MAX_JWKS_BYTES:
        raise ValueError(f"the key set is larger than {MAX_JWKS_BYTES} bytes")
    return data


def parse_jwks(data: bytes) -> list[dict[str, Any]]:
    """The signature keys of a JWKS document (keys for encryption, ``"use":"enc"``, left out)."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ValueError('not a JSON Web Key Set (an object with a "keys" array)')
    keys = [k for k in doc["keys"] if isinstance(k, dict) and k.get("kty") in ALGORITHMS
            and k.get("use", "sig") == "sig"]
    if not keys:
        raise ValueError("the key set holds no RSA, EC or OKP signature key")
    return keys


class JwksKeys:
    """The current key set of one URL, refreshed in the background once :meth:`start` ran."""

    def __init__(self, url: str, refresh_ms: int, backoff_ms: int, backoff_max_ms: int) -> None:
        self.url = url
        self.refresh_s = max(refresh_ms, 1) / 1000.0
        self.backoff_s = max(backoff_ms, 1) / 1000.0
        self.backoff_max_s = max(backoff_max_ms, backoff_ms, 1) / 1000.0
        self.keys: list[dict[str, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._missing: OrderedDict[str, float] = OrderedDict()

    def load(self) -> None:
        """The first read, before the event loop runs (``kafkalog serve``: before the data directory
        is opened); refuses the start when it fails."""
        try:
            self.keys = parse_jwks(_read(self.url))
        except (OSError, ValueError) as e:
            raise InvalidConfigError(f"{URL_KEY}={self.url}: cannot read the JSON Web Key Set: "
                                     f"{e}") from None
        logger.info("OAUTHBEARER: %d verification key(s) from %s", len(self.keys), self.url)

    async def start(self) -> None:
        """The first read unless :meth:`load` did it (in a worker thread; refuses the start when it
        fails), then the refresher."""
        self._loop = asyncio.get_running_loop()
        if not self.keys:
            await self._loop.run_in_executor(None, self.load)
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._refresher())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _fetch(self) -> list[dict[str, Any]]:
        assert self._loop is not None
        return parse_jwks(await self._loop.run_in_executor(None, _read, self.url))

    async def _refresher(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.refresh_s)
            except TimeoutError:
                pass
            self._wake.clear()
            backoff = self.backoff_s
            while True:
                try:
                    self.keys = await self._fetch()
                    logger.debug("OAUTHBEARER: refreshed %d key(s) from %s", len(self.keys), self.url)
                    break
                except (OSError, ValueError) as e:
                    logger.warning("OAUTHBEARER: refreshing the keys of %s failed (kept the %d "
                                   "known, retry in %.1f s): %s", self.url, len(self.keys), backoff, e)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.backoff_max_s)

    def candidates(self, kid: str | None, alg: str) -> list[dict[str, Any]]:
        """The keys a token with header ``kid``/``alg`` may be verified with; none for an unknown key
        id (which starts a refresh, at most once a minute per id)."""
        found = [k for k in self.keys if (kid is None or k.get("kid") == kid)
                 and alg in ALGORITHMS.get(k["kty"], ()) and k.get("alg", alg) == alg]
        if not found and kid is not None:
            self._expedite(kid)
        return found

    def _expedite(self, kid: str) -> None:
        if len(kid) > MISSING_KEY_ID_MAX_KEY_LENGTH or self._wake is None:
            return
        now = time.monotonic()
        last = self._missing.get(kid)
        if last is not None and now - last < MISSING_KEY_ID_CACHE_IN_FLIGHT_S:
            return
        self._missing[kid] = now
        self._missing.move_to_end(kid)
        while len(self._missing) > MISSING_KEY_ID_CACHE_MAX_ENTRIES:
            self._missing.popitem(last=False)
        logger.info("OAUTHBEARER: a token names key id %r, not in %s: refreshing the keys", kid[:80],
                    self.url)
        self._wake.set()


def verification_key(jwk: dict[str, Any], alg: str) -> Any:
    """The public key of ``jwk`` for ``alg`` (PyJWT's reading of the JWK)."""
    return jwt.PyJWK(jwk, algorithm=alg).key
