"""The client quotas in force (Kafka's ``ClientQuotaManager``, ``ClientRequestQuotaManager`` and
``DefaultQuotaCallback``): each request's principal and client id find their quota of each kind by
Kafka's precedence, first match wins:

1. user + client-id, 2. user + default client-id, 3. user, 4. default user + client-id,
5. default user + default client-id, 6. default user, 7. client-id, 8. default client-id.

The match also names the rate the request counts in: a default's rate is still per user (per client
id), as Kafka's metric tags are. A rate is Kafka's ``Rate`` over ``quota.window.num`` samples of
``quota.window.size.seconds`` each; a request that takes it above the quota is answered at once with
``throttle_time_ms`` = (rate - quota) / quota x the measured window (Kafka 2.0+, KIP-219), then its
connection is not read for that long (:meth:`ClientQuotas.take_mute`: the network layer sleeps that
connection's task; nothing is kept for a connection that is not throttled). ``producer_byte_rate``
counts the Produce request's bytes, ``consumer_byte_rate`` the Fetch response's (a throttled Fetch is
answered empty, its bytes not counted, as Kafka does), ``request_percentage`` the time the broker
spent handling the client's requests, as a percentage of one thread (its throttle at most one
window, as Kafka's). Nothing is measured while no quota is set.

The quotas themselves are set by AlterClientQuotas (:mod:`.client_quotas`) and kept by
:mod:`.quota_store`."""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping
from typing import Any

from kafkalog.server.quota.quota_store import Entity, Quotas, QuotaStore

USER, CLIENT_ID = "user", "client-id"
PRODUCE_KEY, FETCH_KEY, REQUEST_KEY = 0, 1, None
#: Kafka's precedence (DefaultQuotaCallback.quotaMetricTags): which entity, then the rate's tags
#: (True: the request's own name; None: not part of the tags)
_PRECEDENCE = (
    ((USER, True), (CLIENT_ID, True)), ((USER, True), (CLIENT_ID, None)), ((USER, True),),
    ((USER, None), (CLIENT_ID, True)), ((USER, None), (CLIENT_ID, None)), ((USER, None),),
    ((CLIENT_ID, True),), ((CLIENT_ID, None),),
)
#: how often rates of clients that stopped sending are forgotten
_PRUNE_S = 60.0


class Rate:
    """Kafka's ``Rate`` (a ``SampledStat`` of sums): ``samples`` windows of ``window_ms``."""

    __slots__ = ("current", "samples", "starts", "values", "window_ms")

    def __init__(self, samples: int, window_ms: float, now_ms: float) -> None:
        self.window_ms = window_ms
        self.samples = samples
        self.starts = [now_ms]
        self.values = [0.0]
        self.current = 0

    def record(self, value: float, now_ms: float) -> None:
        i = self.current
        if now_ms - self.starts[i] >= self.window_ms:
            i = (i + 1) % self.samples
            if i >= len(self.starts):
                self.starts.append(now_ms)
                self.values.append(0.0)
            else:
                self.starts[i] = now_ms
                self.values[i] = 0.0
            self.current = i
        self.values[i] += value

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self.starts):
            if now_ms - start >= expire:
                self.starts[i] = now_ms
                self.values[i] = 0.0

    def window(self, now_ms: float) -> float:
        """Kafka's ``Rate.windowSize``: from the oldest sample, at least ``samples - 1`` full windows."""
        self._purge(now_ms)
        elapsed = now_ms - min(self.starts)
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        """Per second."""
        window = self.window(now_ms)
        return sum(self.values) / (window / 1000.0)

    def unrecord(self, value: float) -> None:
        self.values[self.current] -= value

    def last_used(self) -> float:
        return self.starts[self.current]


class TokenBucket:
    """Kafka's ``TokenBucket`` (``controller_mutation_rate``): ``quota`` tokens a second, at most
    ``burst``; starts full; a record may take it below 0."""

    __slots__ = ("burst", "last_ms", "quota", "tokens")

    def __init__(self, quota: float, burst: float, now_ms: float) -> None:
        self.quota = quota
        self.burst = burst
        self.tokens = burst
        self.last_ms = now_ms

    def _refill(self, now_ms: float) -> None:
        self.tokens = min(self.burst, self.tokens + self.quota * (now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms

    def exceeded(self, now_ms: float) -> bool:
        self._refill(now_ms)
        return self.tokens < 0

    def record(self, permits: float, now_ms: float) -> None:
        self._refill(now_ms)
        self.tokens = min(self.burst, self.tokens - permits)

    def throttle_ms(self, now_ms: float) -> int:
        """Until the bucket is back at 0 (Kafka's ``-tokens / quota`` seconds)."""
        self._refill(now_ms)
        return int(round(-self.tokens / self.quota * 1000)) if self.tokens < 0 else 0

    def last_used(self) -> float:
        return self.last_ms


class ClientQuotas:
    """The quotas of one broker: set (:attr:`quotas`, stored), resolved per request, measured."""

    def __init__(self, store: QuotaStore, window_num: int = 11, window_size_s: int = 1) -> None:
        self.store = store
        self.quotas: Quotas = store.load()
        self.samples = window_num
        self.window_ms = window_size_s * 1000.0
        #: connection token -> seconds its reading stays muted (taken by the network layer)
        self.mutes: dict[object, float] = {}
        self._rates: dict[tuple[str, str | None, str | None], Rate | TokenBucket] = {}
        self._resolved: dict[tuple[str, str, str], tuple[float, str | None, str | None] | None] = {}
        self._next_prune = 0.0
        self.active = _client_quota_set(self.quotas)
        #: a new object at each change (the connection quotas read the ip entities again)
        self.version = object()

    def change(self, changed: Mapping[Entity, dict[str, float]]) -> None:
        """Apply AlterClientQuotas: stored first (a failed write changes nothing), then in force."""
        new = dict(self.quotas)
        for entity, values in changed.items():
            if values:
                new[entity] = dict(values)
            else:
                new.pop(entity, None)
        self.store.save(new)
        self.quotas.clear()
        self.quotas.update(new)
        self._resolved.clear()
        self.active = _client_quota_set(new)
        self.version = object()

    def quota(self, key: str, user: str, client_id: str) -> tuple[float, str | None, str | None] | None:
        """The quota ``key`` of a user's client: (its value, the rate's user and client-id tags), None
        when none applies."""
        cache_key = (key, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        found = None
        own = {USER: user, CLIENT_ID: client_id}
        for rule in _PRECEDENCE:
            entity = tuple(sorted((t, own[t] if mine else None) for t, mine in rule))
            value = self.quotas.get(entity, {}).get(key)
            if value is not None:
                tags = {t: own[t] for t, _m in rule}
                found = (value, tags.get(USER), tags.get(CLIENT_ID))
                break
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[cache_key] = found
        return found

    def _rate(self, key: str, user_tag: str | None, client_tag: str | None, now_ms: float) -> Rate:
        rk = (key, user_tag, client_tag)
        rate = self._rates.get(rk)
        if not isinstance(rate, Rate):
            rate = self._rates[rk] = Rate(self.samples, self.window_ms, now_ms)
        return rate

    def bucket(self, key: str, user: str, client_id: str, now_ms: float, create: bool = True
               ) -> TokenBucket | None:
        """The token bucket of quota ``key`` for a user's client (None: no quota applies)."""
        q = self.quota(key, user, client_id)
        if q is None:
            return None
        bound, user_tag, client_tag = q
        rk = (key, user_tag, client_tag)
        b = self._rates.get(rk)
        burst = bound * self.samples * self.window_ms / 1000.0
        if not isinstance(b, TokenBucket):
            if not create:
                return None
            b = self._rates[rk] = TokenBucket(bound, burst, now_ms)
        b.quota, b.burst = bound, burst
        return b

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: float,
               cap_ms: float | None = None) -> tuple[int, Rate | None]:
        """Count ``value`` in the client's rate of quota ``key``: the throttle time (ms) it earns, and
        the rate (None: no quota applies)."""
        q = self.quota(key, user, client_id)
        if q is None:
            return 0, None
        bound, user_tag, client_tag = q
        rate = self._rate(key, user_tag, client_tag, now_ms)
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        if not measured > bound:
            return 0, rate
        ms = (measured - bound) / bound * rate.window(now_ms)
        if cap_ms is not None:
            ms = min(ms, cap_ms)
        return int(round(ms)), rate

    def prune(self, now_ms: float) -> None:
        """Forget the rates of clients that sent nothing for a whole measuring span (at most once a
        minute)."""
        if now_ms < self._next_prune:
            return
        self._next_prune = now_ms + _PRUNE_S * 1000
        horizon = now_ms - self.samples * self.window_ms
        for rk in [rk for rk, r in self._rates.items() if r.last_used() < horizon]:
            del self._rates[rk]

    def mute(self, connection: object, ms: int) -> None:
        if ms > 0 and connection is not None:
            self.mutes[connection] = max(self.mutes.get(connection, 0.0), ms / 1000.0)

    def take_mute(self, connection: object) -> float:
        """Seconds the connection's reading stays muted after the response just sent (0: none)."""
        return self.mutes.pop(connection, 0.0) if self.mutes else 0.0

    def forget(self, connection: object) -> None:
        self.mutes.pop(connection, None)


def _client_quota_set(quotas: Quotas) -> bool:
    """A user or client-id quota is set (an ip entity's quota is the connection quotas' alone)."""
    return any(values and entity[0][0] != "ip" for entity, values in quotas.items())


def now_ms() -> float:
    return time.monotonic() * 1000.0


def user_of(principal: str | None) -> str:
    """The quota user of a session's principal (``User:alice`` -> ``alice``)."""
    if not principal:
        return "ANONYMOUS"
    return principal.split(":", 1)[1] if ":" in principal else principal


def with_throttle(entity: Any, ms: int) -> Any:
    """A kio response entity with its ``throttle_time`` set (entities without one as they are)."""
    if ms <= 0 or not any(f.name == "throttle_time" for f in dataclasses.fields(entity)):
        return entity
    return dataclasses.replace(entity, throttle_time=datetime.timedelta(milliseconds=ms))
