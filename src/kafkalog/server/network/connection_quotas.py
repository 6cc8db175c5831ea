"""Kafka's ``ConnectionQuotas``: what a new connection must pass before it is served.

At accept, in Kafka's order (``ConnectionQuotas.inc``):

1. a connection slot: ``max.connections`` broker-wide and ``listener.name.<l>.max.connections``; while
   none is free the listener accepts nothing more and the accepted connection waits (Kafka's acceptor
   blocks) until one closes; and ``max.connection.creation.rate`` (broker-wide, and per listener
   with the prefix): above it the listener's accepting pauses for the throttle time;
2. the connection creation rate of the client's IP (KIP-612): the ``connection_creation_rate`` of
   AlterClientQuotas' ``ip`` entity of that address, else of the default ip entity. A connection
   above it is not served and is closed after the throttle time (Kafka holds it, then closes it),
   and counts in no rate;
3. ``max.connections.per.ip`` (``max.connections.per.ip.overrides`` for an address): the excess
   connection is closed at once.

A rate is Kafka's ``Rate`` (:class:`~kafkalog.server.quota.quotas.Rate`, ``quota.window.num``
samples of ``quota.window.size.seconds``), its throttle time (rate - quota) / quota x the measured
window, at most one window. Nothing is measured for an address without an IP quota, nor while no
connection rate is set; an address's rate that saw no connection for the whole measuring span is
forgotten at a later accept (at most once a minute): nothing runs per second or per idle connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import TYPE_CHECKING

from kafkalog.record.constants import INT32_MAX
from kafkalog.server.quota.quotas import Rate, now_ms

if TYPE_CHECKING:
    from kafkalog.server.config import ServerConfig
    from kafkalog.server.quota.quotas import ClientQuotas

logger = logging.getLogger("kafkalog.server")

CONNECTION_CREATION_RATE = "connection_creation_rate"
_PRUNE_MS = 60_000.0


class ConnectionThrottled(Exception):
    """The IP's connection creation rate is over its quota: close the connection after ``ms``."""

    def __init__(self, ip: str, ms: int) -> None:
        super().__init__(f"{ip}: connection_creation_rate exceeded, closed after {ms} ms")
        self.ms = ms


class TooManyConnections(Exception):
    """The IP has its maximum of connections (``max.connections.per.ip``): close at once."""

    def __init__(self, ip: str, count: int) -> None:
        super().__init__(f"Rejected connection from {ip}, address already has the configured maximum of "
                         f"{count} connections.")


def normalized(ip: str) -> str:
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        return ip


class ConnectionQuotas:
    """The connection counts and rates of one broker's listeners."""

    def __init__(self, config: ServerConfig, client_quotas: ClientQuotas) -> None:
        values = config.values
        self.client_quotas = client_quotas
        self.max_connections = config.max_connections
        self.max_per_ip = values["max.connections.per.ip"]
        self.per_ip_overrides = config.max_connections_per_ip_overrides
        self.samples = values["quota.window.num"]
        self.window_ms = values["quota.window.size.seconds"] * 1000.0
        lv = config.listener_values
        self.listener_max = {lst: v for (lst, _m, k), v in lv.items() if k == "max.connections"}
        self.broker_rate_quota: int = values["max.connection.creation.rate"]
        self.listener_rate_quota = {lst: v for (lst, _m, k), v in lv.items()
                                    if k == "max.connection.creation.rate"}
        self.total = 0
        self.counts: dict[str, int] = {}
        self.listener_counts: dict[str, int] = {}
        self._broker_rate: Rate | None = None
        self._listener_rates: dict[str, Rate] = {}
        self._ip_rates: dict[str, Rate] = {}
        self._ip_quotas: dict[str | None, int] = {}
        self._quotas_seen: object = None
        self._next_prune = 0.0
        self._slot_freed: asyncio.Event | None = None

    # --- the rates -------------------------------------------------------------------------------

    def _throttle_ms(self, rate: Rate, quota: int, now: float) -> int:
        """Record one connection: the throttle time (ms) it earns (Kafka's ``recordAndGetThrottleTimeMs``)."""
        rate.record(1.0, now)
        measured = rate.measure(now)
        if not measured > quota:
            return 0
        ms = (measured - quota) / quota * rate.window(now)
        return int(round(min(ms, self.window_ms)))

    def _rate(self, rates: dict[str, Rate], key: str, now: float) -> Rate:
        rate = rates.get(key)
        if rate is None:
            rate = rates[key] = Rate(self.samples, self.window_ms, now)
        return rate

    def _ip_quota(self, ip: str) -> int | None:
        """The ``connection_creation_rate`` of ``ip``'s entity, else of the default ip (None: none)."""
        quotas = self.client_quotas.quotas
        if self._quotas_seen is not self.client_quotas.version:
            self._quotas_seen = self.client_quotas.version
            self._ip_quotas = {}
            for entity, values in quotas.items():
                if len(entity) == 1 and entity[0][0] == "ip" and CONNECTION_CREATION_RATE in values:
                    name = entity[0][1]
                    self._ip_quotas[None if name is None else normalized(name)] = \
                        int(values[CONNECTION_CREATION_RATE])
        if not self._ip_quotas:
            return None
        q = self._ip_quotas.get(ip, self._ip_quotas.get(None))
        return None if q is None or q >= INT32_MAX else q

    def _record_broker_rates(self, listener: str, now: float) -> int:
        """Record in the broker's and the listener's creation rates (when set): the longer throttle."""
        ms = 0
        if self.broker_rate_quota < INT32_MAX:
            if self._broker_rate is None:
                self._broker_rate = Rate(self.samples, self.window_ms, now)
            ms = self._throttle_ms(self._broker_rate, self.broker_rate_quota, now)
        quota = self.listener_rate_quota.get(listener, INT32_MAX)
        if quota < INT32_MAX:
            ms = max(ms, self._throttle_ms(self._rate(self._listener_rates, listener, now), quota, now))
        return ms

    def _unrecord_broker_rates(self, listener: str) -> None:
        if self._broker_rate is not None:
            self._broker_rate.unrecord(1.0)
        rate = self._listener_rates.get(listener)
        if rate is not None:
            rate.unrecord(1.0)

    # --- a connection's life ---------------------------------------------------------------------

    def _slot_available(self, listener: str) -> bool:
        return self.listener_counts.get(listener, 0) < self.listener_max.get(listener, INT32_MAX) and \
            self.total < self.max_connections

    async def inc(self, listener: str, ip: str) -> None:
        """Count a new connection of ``ip`` on ``listener`` (Kafka's ``ConnectionQuotas.inc``): waits for
        a slot and the broker's rates; :class:`ConnectionThrottled` or :class:`TooManyConnections`
        when the connection must be closed (it is then not counted)."""
        now = now_ms()
        throttle = self._record_broker_rates(listener, now) \
            if self.broker_rate_quota < INT32_MAX or self.listener_rate_quota else 0
        if throttle > 0:
            logger.debug("listener %s: max.connection.creation.rate reached, accepting again in %d ms",
                         listener, throttle)
            await asyncio.sleep(throttle / 1000.0)
        while not self._slot_available(listener):
            if self._slot_freed is None:
                self._slot_freed = asyncio.Event()
            await self._slot_freed.wait()
        quota = self._ip_quota(ip)
        if quota is not None:
            now = now_ms()
            self._prune(now)
            rate = self._rate(self._ip_rates, ip, now)
            ms = self._throttle_ms(rate, quota, now)
            if ms > 0:
                rate.unrecord(1.0)
                self._unrecord_broker_rates(listener)
                raise ConnectionThrottled(ip, ms)
        count = self.counts.get(ip, 0)
        self.counts[ip] = count + 1
        self.total += 1
        self.listener_counts[listener] = self.listener_counts.get(listener, 0) + 1
        limit = self.per_ip_overrides.get(ip, self.max_per_ip)
        if count >= limit:
            self.dec(listener, ip)
            raise TooManyConnections(ip, limit)

    def dec(self, listener: str, ip: str) -> None:
        """A counted connection has closed."""
        count = self.counts.get(ip, 0)
        if count <= 1:
            self.counts.pop(ip, None)
        else:
            self.counts[ip] = count - 1
        self.total -= 1
        self.listener_counts[listener] = self.listener_counts.get(listener, 1) - 1
        event = self._slot_freed
        if event is not None:       # an acceptor waits for a slot: let it look again
            self._slot_freed = None
            event.set()

    def _prune(self, now: float) -> None:
        """Forget the rates of addresses that connected nobody for a whole measuring span."""
        if now < self._next_prune:
            return
        self._next_prune = now + _PRUNE_MS
        horizon = now - self.samples * self.window_ms
        for ip in [ip for ip, r in self._ip_rates.items() if r.last_used() < horizon]:
            del self._ip_rates[ip]
