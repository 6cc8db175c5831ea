"""The figures the broker counts as it serves, in Kafka's MBeans' JMX-exporter names: per topic and
in total, ``kafka.server:type=BrokerTopicMetrics`` (BytesIn, BytesOut, MessagesIn,
TotalProduceRequests, TotalFetchRequests, FailedProduceRequests, FailedFetchRequests) and, per
request type, ``kafka.network:type=RequestMetrics`` (RequestsPerSec by version, TotalTimeMs,
RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs, ResponseSendTimeMs). Each call costs O(1) (a dict
lookup and additions; a request's timers are looked up once per API key and version)."""

from __future__ import annotations

from typing import Any

from kio.index import api_key_map

from kafkalog.log.metrics import WINDOW, Counter, CounterVec, MetricsRegistry, Timer

__all__ = ["BrokerMetrics", "request_name"]

FETCH = 1
_BTM = "kafka_server_brokertopicmetrics_"
_RM = "kafka_network_requestmetrics_"

#: (attribute, family name, Kafka's meter, help)
_TOPIC_METERS = (
    ("bytes_in", _BTM + "bytesin", "BytesInPerSec", "Bytes of record batches appended by Produce"),
    ("bytes_out", _BTM + "bytesout", "BytesOutPerSec", "Bytes of record batches sent by Fetch"),
    ("messages_in", _BTM + "messagesin", "MessagesInPerSec", "Records appended by Produce"),
    ("total_produce", _BTM + "totalproducerequests", "TotalProduceRequestsPerSec",
     "Partitions of Produce requests (each partition of a request counts once)"),
    ("total_fetch", _BTM + "totalfetchrequests", "TotalFetchRequestsPerSec",
     "Partitions of Fetch requests (each partition of a request counts once)"),
    ("failed_produce", _BTM + "failedproducerequests", "FailedProduceRequestsPerSec",
     "Partitions of Produce requests that failed"),
    ("failed_fetch", _BTM + "failedfetchrequests", "FailedFetchRequestsPerSec",
     "Partitions of Fetch requests that failed"),
)

#: (family name, Kafka's histogram) of the request timers, in ms
_REQUEST_TIMERS = (
    (_RM + "totaltimems", "TotalTimeMs", "The time from a request's arrival to its response sent, in ms"),
    (_RM + "requestqueuetimems", "RequestQueueTimeMs",
     "The time a request waited for its connection's task (queued.max.requests), in ms"),
    (_RM + "localtimems", "LocalTimeMs", "The time the request's handler ran, in ms"),
    (_RM + "remotetimems", "RemoteTimeMs",
     "The time the request waited for something else (a long poll, a group's rebalance), in ms"),
    (_RM + "responsesendtimems", "ResponseSendTimeMs",
     "The time its response took to go out when the socket did not take it at once, in ms"),
)


def request_name(api_key: int) -> str:
    """Kafka's ``ApiKeys`` name of an API (``Produce``, ``ListOffsets``, ``ApiVersions`` ...)."""
    snake = api_key_map.get(api_key)
    return "".join(w.capitalize() for w in snake.split("_")) if snake else f"ApiKey{api_key}"


class _RequestInstruments:
    __slots__ = ("requests", "timers")

    def __init__(self, requests: list[Counter], timers: list[list[Timer]]) -> None:
        self.requests = requests
        #: one list per request name, each (total, queue, local, remote, send)
        self.timers = timers


class BrokerMetrics:
    """The broker's registry (:attr:`registry`, which :mod:`.endpoint` serves) and its request-path
    instruments. ``Broker.metrics`` is one of these while metrics are on (None: nothing counted)."""

    bytes_in: CounterVec
    bytes_out: CounterVec
    messages_in: CounterVec
    total_produce: CounterVec
    total_fetch: CounterVec
    failed_produce: CounterVec
    failed_fetch: CounterVec

    def __init__(self, registry: MetricsRegistry | None = None) -> None:
        self.registry = r = registry if registry is not None else MetricsRegistry()
        for attr, name, mbean, doc in _TOPIC_METERS:
            setattr(self, attr, r.counter(name, f"{doc} (kafka.server:type=BrokerTopicMetrics,name={mbean})",
                                          ("topic",), total=True))
        self.requests = r.counter(_RM + "requests", "Requests served (kafka.network:type=RequestMetrics,"
                                                    "name=RequestsPerSec)", ("request", "version"))
        self.timers = [r.timer(name, f"{doc} (kafka.network:type=RequestMetrics,name={mbean})", ("request",))
                       for name, mbean, doc in _REQUEST_TIMERS]
        self._by_request: dict[tuple[int, int], _RequestInstruments] = {}

    # --- BrokerTopicMetrics ----------------------------------------------------------------------

    def _mark(self, vec: CounterVec, topic: str, n: int) -> None:
        vec.labels(topic).value += n
        total = vec.total
        assert total is not None
        total.value += n

    def produced(self, topic: str, nbytes: int, records: int) -> None:
        """A batch of ``records`` records, ``nbytes`` bytes, appended to ``topic`` by Produce."""
        self._mark(self.bytes_in, topic, nbytes)
        self._mark(self.messages_in, topic, records)

    def produce_partition(self, topic: str, failed: bool) -> None:
        """One partition of a Produce request (Kafka marks TotalProduceRequests per partition)."""
        self._mark(self.total_produce, topic, 1)
        if failed:
            self._mark(self.failed_produce, topic, 1)

    def fetched(self, topic: str, nbytes: int, failed: bool) -> None:
        """One partition of a Fetch answer with ``nbytes`` bytes of records."""
        self._mark(self.total_fetch, topic, 1)
        if nbytes:
            self._mark(self.bytes_out, topic, nbytes)
        if failed:
            self._mark(self.failed_fetch, topic, 1)

    # --- RequestMetrics --------------------------------------------------------------------------

    def _instruments(self, api_key: int, version: int) -> _RequestInstruments:
        got = self._by_request.get((api_key, version))
        if got is None:
            name = request_name(api_key)
            # Kafka's RequestChannel: a consumer's Fetch counts as FetchConsumer and as Fetch
            names = ("FetchConsumer", name) if api_key == FETCH else (name,)
            got = self._by_request[(api_key, version)] = _RequestInstruments(
                [self.requests.labels(n, str(version)) for n in names],
                [[t.labels(n) for t in self.timers] for n in names])
        return got

    def request_done(self, api_key: int, version: int, queue_s: float, local_s: float, remote_s: float,
                     send_s: float) -> None:
        """One request answered: its times in seconds (recorded in ms)."""
        inst = self._by_request.get((api_key, version)) or self._instruments(api_key, version)
        for c in inst.requests:
            c.value += 1
        values = ((queue_s + local_s + remote_s + send_s) * 1000.0, queue_s * 1000.0, local_s * 1000.0,
                  remote_s * 1000.0, send_s * 1000.0)
        for timers in inst.timers:      # Timer.update, inline: this runs for every request
            for t, v in zip(timers, values):
                n = t.count
                t.count = n + 1
                t.sum += v
                if n < WINDOW:
                    t.window.append(v)
                else:
                    t.window[n % WINDOW] = v

    def describe(self) -> dict[str, Any]:
        """The families by name (tests)."""
        return {f.name: f for f in self.registry.collect()}
