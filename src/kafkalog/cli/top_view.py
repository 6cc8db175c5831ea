"""What ``kafkalog top`` shows, apart from where it comes from: a :class:`Sample` of the topics' log end
offsets and sizes and the groups' committed offsets, two samples turned into rates
(:func:`figures`: records/s and bytes/s per topic from the deltas, lag per group), as one JSON
object per refresh or as rich tables (:func:`render`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Partition = tuple[str, int]


@dataclass
class Sample:
    """One look at the logs: per topic its partitions, the sum of their log end offsets and of
    their sizes; per group its committed offsets and lag (log end offset minus committed offset,
    summed over the partitions it committed; never below 0)."""
    time: float = 0.0
    topics: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    groups: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, partitions: dict[str, list[int]], ends: dict[Partition, int], sizes: dict[Partition, int],
           committed: dict[str, dict[Partition, int]]) -> Sample:
        topics = {t: (len(ps), sum(ends.get((t, p), 0) for p in ps), sum(sizes.get((t, p), 0) for p in ps))
                  for t, ps in partitions.items()}
        groups = {}
        for g, offsets in committed.items():
            lag = sum(max(0, ends[tp] - off) for tp, off in offsets.items() if tp in ends)
            groups[g] = (lag, len(offsets))
        return cls(0.0, topics, groups)


def _rate(now: int, before: int | None, dt: float) -> float | None:
    if before is None or dt <= 0:
        return None
    return round(max(0, now - before) / dt, 3)


def figures(sample: Sample, previous: Sample | None, metrics: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON object of one refresh: ``topics`` (``recordsPerSec``/``bytesPerSec`` null on the
    first refresh), ``groups``, and ``requests``/``cleaner`` when a metrics endpoint is read."""
    dt = sample.time - previous.time if previous is not None else 0.0
    topics = []
    for t, (n, end, size) in sorted(sample.topics.items()):
        before = previous.topics.get(t) if previous is not None else None
        topics.append({"topic": t, "partitions": n, "logEndOffset": end, "sizeInBytes": size,
                       "recordsPerSec": _rate(end, before[1] if before else None, dt) if previous else None,
                       "bytesPerSec": _rate(size, before[2] if before else None, dt) if previous else None})
    groups = [{"group": g, "lag": lag, "partitions": n} for g, (lag, n) in sorted(sample.groups.items())]
    out: dict[str, Any] = {"type": "top", "time": round(sample.time, 3), "topics": topics, "groups": groups}
    if metrics is not None:
        out.update(metrics)
    return out


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.1f}{suffix}{unit}"
    return f"{x:.0f}{unit}" if float(x).is_integer() else f"{x:.1f}{unit}"


def render(fig: dict[str, Any], source: str) -> Any:
    """The rich renderable of one refresh."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(f"kafkalog top  {source}  (q quits)", style="bold")]
    topics = Table(title="Topics", title_justify="left", expand=False)
    for col in ("TOPIC", "PARTITIONS", "LOG-END", "SIZE", "RECORDS/S", "BYTES/S"):
        topics.add_column(col, justify="left" if col == "TOPIC" else "right")
    for t in fig["topics"]:
        topics.add_row(t["topic"], str(t["partitions"]), str(t["logEndOffset"]), _num(t["sizeInBytes"], "B"),
                       _num(t["recordsPerSec"]), _num(t["bytesPerSec"], "B"))
    parts.append(topics)
    groups = Table(title="Groups", title_justify="left")
    for col in ("GROUP", "PARTITIONS", "LAG"):
        groups.add_column(col, justify="left" if col == "GROUP" else "right")
    for g in fig["groups"]:
        groups.add_row(g["group"], str(g["partitions"]), str(g["lag"]))
    parts.append(groups)
    if "requests" in fig:
        req = Table(title="Requests", title_justify="left")
        for col in ("REQUEST", "PER-SEC", "MEAN-MS", "P99-MS"):
            req.add_column(col, justify="left" if col == "REQUEST" else "right")
        for r in fig["requests"]:
            req.add_row(r["request"], _num(r.get("perSec")), _num(r.get("meanMs")), _num(r.get("p99Ms")))
        parts.append(req)
    if "cleaner" in fig:
        cl = Table(title="Log cleaner", title_justify="left")
        cl.add_column("METRIC")
        cl.add_column("VALUE", justify="right")
        for name, value in sorted(fig["cleaner"].items()):
            cl.add_row(name, _num(value))
        parts.append(cl)
    if fig.get("metricsError"):
        parts.append(Text(f"metrics: {fig['metricsError']}", style="red"))
    return Group(*parts)
