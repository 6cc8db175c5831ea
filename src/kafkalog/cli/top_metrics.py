"""``kafkalog top --metrics-url URL``: the broker's Prometheus endpoint read once per refresh with
``prometheus_client``'s text parser: request latencies (Kafka's ``RequestMetrics`` ``TotalTimeMs``
under the JMX exporter's names: ``kafka_network_requestmetrics_totaltimems`` with its ``request``
label, its mean from ``_sum``/``_count``, its 99th percentile, requests per second from the count's
delta) and the log cleaner's figures (every ``kafka_log_logcleaner*`` family)."""

from __future__ import annotations

import importlib.util
from typing import Any

from kafkalog.errors import InvalidConfigError, KafkalogIOError

REQUEST_TIME = "kafka_network_requestmetrics_totaltimems"
CLEANER_PREFIX = "kafka_log_logcleaner"


def scrape(url: str, timeout: float = 5.0) -> str:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return str(r.read(64 << 20).decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = (e.reason if isinstance(e, urllib.error.URLError) else None) or e
        raise KafkalogIOError(f"cannot read the metrics endpoint {url}: {reason}") from None


class MetricsSource:
    def __init__(self, url: str) -> None:
        self.url = url
        if importlib.util.find_spec("prometheus_client") is None:   # the server extra's parser reads it
            raise InvalidConfigError("--metrics-url reads the endpoint with prometheus_client, which is not "
                                     "installed: pip install 'kafkalog[server]'")
        self._counts: dict[str, float] = {}
        self._time: float | None = None

    def figures(self, now: float) -> dict[str, Any]:
        """``requests`` and ``cleaner`` of one refresh (:func:`kafkalog.cli.top_view.figures`)."""
        from prometheus_client.parser import text_string_to_metric_families
        text = scrape(self.url)
        requests: dict[str, dict[str, Any]] = {}
        cleaner: dict[str, float] = {}
        try:
            families = list(text_string_to_metric_families(text))
        except (ValueError, TypeError) as e:
            raise KafkalogIOError(f"the metrics endpoint {self.url} did not answer Prometheus' text format: {e}") \
                from None
        for fam in families:
            if fam.name == REQUEST_TIME:
                for s in fam.samples:
                    req = s.labels.get("request")
                    if req is None:
                        continue
                    row = requests.setdefault(req, {"request": req})
                    if s.name == REQUEST_TIME and s.labels.get("quantile") == "0.99":
                        row["p99Ms"] = round(s.value, 3)
                    elif s.name.endswith("_count"):
                        row["count"] = s.value
                    elif s.name.endswith("_sum"):
                        row["sumMs"] = s.value
            elif fam.name.startswith(CLEANER_PREFIX):
                for s in fam.samples:
                    if s.name.endswith(("_created",)):
                        continue
                    key = s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items()))
                    cleaner[key] = s.value
        dt = now - self._time if self._time is not None else None
        rows = []
        for req, row in sorted(requests.items()):
            count = row.pop("count", None)
            total = row.pop("sumMs", None)
            row["meanMs"] = round(total / count, 3) if count and total is not None else None
            before = self._counts.get(req)
            row["perSec"] = round(max(0.0, count - before) / dt, 3) if dt and count is not None \
                and before is not None else None
            if count is not None:
                self._counts[req] = count
            rows.append(row)
        self._time = now
        return {"requests": rows, "cleaner": cleaner}
