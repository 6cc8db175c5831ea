"""The metrics registry every layer counts into: counters (a Kafka ``Meter``'s ``Count``), timers (a
Kafka ``Histogram``/``Timer``: count, sum, percentiles over a window of the latest samples) and
collectors (callables computing figures when a scraper asks, so a per-partition or per-group gauge
costs nothing between scrapes). Plain Python, no third-party import: counting is an attribute
increment. :class:`PrometheusCollector` hands a registry to ``prometheus_client`` (the ``server``
extra), which serves it; an application embedding kafkalog registers it on its own registry
(docs/server.md, "Metrics").

The names are those the Prometheus JMX exporter's standard Kafka rules give Kafka's MBeans
(``kafka_server_brokertopicmetrics_bytesin_total{topic=...}``,
``kafka_network_requestmetrics_totaltimems{request=...,quantile="0.99"}`` ...): a counter's family
name without its ``_total``, a timer's without ``_count``/``_sum``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = ["QUANTILES", "Counter", "CounterVec", "Family", "MetricsRegistry", "PrometheusCollector",
           "Sample", "Timer", "TimerVec"]

#: the percentiles of Kafka's histograms (``50thPercentile`` ... ``999thPercentile``) with the
#: ``quantile`` label the JMX exporter's rule ``quantile: "0.$N"`` gives each
QUANTILES: tuple[tuple[str, float], ...] = (("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95),
                                            ("0.98", 0.98), ("0.99", 0.99), ("0.999", 0.999))
T = TypeVar("T")
#: samples a timer keeps for its percentiles (the size of Kafka's Yammer reservoir)
WINDOW = 1028


class Sample(NamedTuple):
    """One exposed value: the suffix after the family name (``""``, ``"_total"``, ``"_count"``,
    ``"_sum"``), its labels and the value."""

    suffix: str
    labels: Mapping[str, str]
    value: float


class Family(NamedTuple):
    """One metric family as a scrape sees it: ``kind`` is ``counter``, ``gauge`` or ``summary``."""

    name: str
    kind: str
    help: str
    samples: list[Sample]


class Counter:
    """A monotonic count (a Kafka ``Meter``'s ``Count``; Prometheus computes the rate)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, n: int = 1) -> None:
        self.value += n


class Timer:
    """A Kafka ``Histogram``/``Timer``: how many, their sum, and the latest :data:`WINDOW` samples for
    the percentiles (Kafka's reservoir favours the last five minutes; this one keeps the latest
    samples). :meth:`update` is O(1); the percentiles are sorted at scrape time."""

    __slots__ = ("count", "sum", "window")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        #: the latest samples: the n-th update goes to slot n % WINDOW
        self.window: list[float] = []

    def update(self, value: float) -> None:
        n = self.count
        self.count = n + 1
        self.sum += value
        w = self.window
        if n < WINDOW:
            w.append(value)
        else:
            w[n % WINDOW] = value

    def quantiles(self) -> list[tuple[str, float]]:
        """``(quantile label, value)`` of :data:`QUANTILES` over the window (0 when empty)."""
        values = sorted(self.window)
        if not values:
            return [(label, 0.0) for label, _q in QUANTILES]
        n = len(values)
        return [(label, values[min(int(q * n), n - 1)]) for label, q in QUANTILES]

    def samples(self, labels: Mapping[str, str]) -> list[Sample]:
        out = [Sample("", {**labels, "quantile": label}, v) for label, v in self.quantiles()]
        out.append(Sample("_count", labels, self.count))
        out.append(Sample("_sum", labels, self.sum))
        return out


class _Vec(Generic[T]):
    """Children by label values (a tuple of strings in ``labelnames``' order), made on first use;
    ``total`` is the child exposed without labels (Kafka's all-topics meter beside each topic's)."""

    def __init__(self, name: str, help: str, labelnames: Sequence[str], total: bool,
                 factory: Callable[[], T]) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        self._factory = factory
        self.children: dict[tuple[str, ...], T] = {}
        self.total: T | None = factory() if total or not labelnames else None
        self._lock = threading.Lock()

    def labels(self, *values: str) -> T:
        """The child of these label values (made on first use)."""
        child = self.children.get(values)
        return child if child is not None else self._child(values)

    def family(self) -> Family:
        raise NotImplementedError

    def _child(self, values: tuple[str, ...]) -> T:
        with self._lock:
            child = self.children.get(values)
            if child is None:
                if len(values) != len(self.labelnames):
                    raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected "
                                     f"({', '.join(self.labelnames)}), got {values!r}")
                child = self.children[values] = self._factory()
            return child

    def remove(self, *values: str) -> None:
        """Forget a child (a deleted topic's meters)."""
        with self._lock:
            self.children.pop(tuple(values), None)

    def _items(self) -> Iterator[tuple[dict[str, str], T]]:
        if self.total is not None:
            yield {}, self.total
        for values, child in list(self.children.items()):
            yield dict(zip(self.labelnames, values)), child


class CounterVec(_Vec[Counter]):
    """Counters by labels: ``vec.labels("topic-a").inc(n)``; ``vec.total`` when made with ``total``."""

    def family(self) -> Family:
        return Family(self.name, "counter", self.help,
                      [Sample("_total", labels, c.value) for labels, c in self._items()])


class TimerVec(_Vec[Timer]):
    """Timers by labels: ``vec.labels("Produce").update(ms)``."""

    def family(self) -> Family:
        return Family(self.name, "summary", self.help,
                      [s for labels, t in self._items() for s in t.samples(labels)])


#: a collector: called at scrape time (from the scraper's thread), returns families
Collector = Callable[[], Iterable[Family]]


class MetricsRegistry:
    """Named counters and timers plus collectors, exposed together by :meth:`collect`.

    A component makes its instruments once (``registry.counter(...)``, ``registry.timer(...)``:
    asking again for a name returns the same instrument) and counts into them on its hot path;
    figures that are cheaper to read than to keep (a log's size, a group's state, a consumer's lag)
    come from a collector, ``registry.add_collector(fn)``, called only when scraped. The scraper
    runs on its own thread: a collector reads shared state without waiting for the event loop, so
    it iterates over copies (``list(d.items())``) and tolerates a value changing under it."""

    def __init__(self) -> None:
        self._instruments: dict[str, _Vec[Any]] = {}
        self._collectors: list[Collector] = []
        self._lock = threading.Lock()

    def counter(self, name: str, help: str, labelnames: Sequence[str] = (), *, total: bool = False) -> CounterVec:
        """The counter family ``name`` (exposed as ``name_total``): children by ``labelnames``
        (``.labels(...)``), and ``.total`` (no labels) when ``total`` or when there are no labels."""
        vec = self._instrument(name, lambda: CounterVec(name, help, labelnames, total, Counter))
        assert isinstance(vec, CounterVec), f"{name} is not a counter"
        return vec

    def timer(self, name: str, help: str, labelnames: Sequence[str] = (), *, total: bool = False) -> TimerVec:
        """The timer family ``name`` (percentile gauges with ``quantile``, ``name_count``, ``name_sum``)."""
        vec = self._instrument(name, lambda: TimerVec(name, help, labelnames, total, Timer))
        assert isinstance(vec, TimerVec), f"{name} is not a timer"
        return vec

    def _instrument(self, name: str, make: Callable[[], _Vec[Any]]) -> _Vec[Any]:
        with self._lock:
            inst = self._instruments.get(name)
            if inst is None:
                inst = self._instruments[name] = make()
            return inst

    def add_collector(self, collector: Collector) -> Callable[[], None]:
        """Call ``collector`` at every scrape; returns the function that removes it."""
        with self._lock:
            self._collectors.append(collector)

        def remove() -> None:
            with self._lock:
                if collector in self._collectors:
                    self._collectors.remove(collector)
        return remove

    def collect(self) -> list[Family]:
        """Every family: the instruments' then each collector's, families of one name merged."""
        with self._lock:
            instruments = list(self._instruments.values())
            collectors = list(self._collectors)
        out: dict[str, Family] = {}
        for inst in instruments:
            fam = inst.family()
            out[fam.name] = fam
        for c in collectors:
            for fam in c():
                have = out.get(fam.name)
                if have is None:
                    out[fam.name] = Family(fam.name, fam.kind, fam.help, list(fam.samples))
                else:
                    have.samples.extend(fam.samples)
        return list(out.values())

    def value(self, name: str, labels: Mapping[str, str] | None = None, suffix: str = "") -> float | None:
        """One sample's value (tests, ``kafkalog top``): None when absent."""
        want = dict(labels or {})
        for fam in self.collect():
            if fam.name == name:
                for s in fam.samples:
                    if s.suffix == suffix and dict(s.labels) == want:
                        return s.value
        return None


class PrometheusCollector:
    """A ``prometheus_client`` collector of a :class:`MetricsRegistry`:
    ``prometheus_client.CollectorRegistry().register(PrometheusCollector(registry))``. It imports
    ``prometheus_client`` when made (the ``server`` extra)."""

    def __init__(self, registry: MetricsRegistry) -> None:
        from prometheus_client.metrics_core import Metric
        self._metric = Metric
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        for fam in self.registry.collect():
            m = self._metric(fam.name, fam.help, fam.kind)
            for s in fam.samples:
                m.add_sample(fam.name + s.suffix, dict(s.labels), float(s.value))
            yield m

    def describe(self) -> list[Any]:
        """No description: the families are known when collected (a registry calls collect() instead)."""
        return []
