"""``kafkalog offsets DATA_DIR``: kafka-get-offsets.sh over a data directory, read-only.

Prints ``topic:partition:offset`` per partition (or JSON lines with ``--format json``) for
``--time``: ``earliest`` (-2, the log start offset), ``latest`` (-1, the log end offset),
``max-timestamp`` (-3, the offset of the record with the largest timestamp) or a timestamp in ms
(the first offset whose timestamp is at or after it; no offset when there is none, as Kafka's
ListOffsets answers). ``--topic`` is a regular expression matched against whole topic names, and
``--partitions`` a comma-separated list of partition ids.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, List, Optional, Tuple

import click

from kafkalog.cli.output import FORMAT_OPTION_HELP, emit, handle_errors
from kafkalog.cli.paths import existing_data_dir
from kafkalog.errors import InvalidTopicError

__all__ = ["offsets"]

_SPECIAL = {"earliest": -2, "latest": -1, "max-timestamp": -3}


def _time(value: str) -> int:
    if value in _SPECIAL:
        return _SPECIAL[value]
    try:
        t = int(value)
    except ValueError:
        raise click.BadParameter(f"expected earliest, latest, max-timestamp or a timestamp in ms, got "
                                 f"{value!r}", param_hint="--time") from None
    if t < -3:
        raise click.BadParameter(f"{t} is not a timestamp", param_hint="--time")
    return t


def _partition_list(value: Optional[str]) -> Optional[List[int]]:
    if value is None:
        return None
    try:
        parts = [int(p) for p in value.split(",") if p.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated partition ids, got {value!r}",
                                 param_hint="--partitions") from None
    if not parts or any(p < 0 for p in parts):
        raise click.BadParameter(f"expected comma-separated partition ids, got {value!r}",
                                 param_hint="--partitions")
    return parts


def _max_timestamp_offset(dl: Any, topic: str, partition: int) -> Optional[int]:
    best: Optional[Tuple[int, int]] = None
    for rec in dl.consume(topic, partition, from_beginning=True):
        if best is None or rec.timestamp > best[0]:
            best = (rec.timestamp, rec.offset)
    return None if best is None else best[1]


def partition_offsets(dl: Any, topics: Iterable[str], partitions: Optional[List[int]],
                      time: int) -> List[Tuple[str, int, Optional[int]]]:
    """(topic, partition, offset or None) for every selected partition, in order."""
    out: List[Tuple[str, int, Optional[int]]] = []
    for topic in topics:
        n = dl.partitions(topic)
        wanted = range(n) if partitions is None else [p for p in partitions if p < n]
        if time == -2:
            found = dl.beginning_offsets(topic)
        elif time == -1:
            found = dl.end_offsets(topic)
        elif time == -3:
            found = {p: _max_timestamp_offset(dl, topic, p) for p in wanted}
        else:
            found = dl.offsets_for_times(topic, time)
        out.extend((topic, p, found.get(p)) for p in wanted)
    return out


@click.command("offsets")
@click.argument("data_dir", type=click.Path())
@click.option("--topic", "topic_regex", default=".*", show_default=True, metavar="REGEX",
              help="Topics whose whole name matches this regular expression (internal topics need "
                   "to be named, e.g. --topic __consumer_offsets).")
@click.option("--partitions", default=None, metavar="0,1,..",
              help="Only these partition ids (default: every partition).")
@click.option("--time", "time_spec", default="latest", show_default=True,
              metavar="earliest|latest|max-timestamp|MS",
              help="Which offset: earliest (-2), latest (-1), max-timestamp (-3), or the first offset at or "
                   "after a timestamp in ms.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help=FORMAT_OPTION_HELP)
@handle_errors()
def offsets(data_dir: str, topic_regex: str, partitions: Optional[str], time_spec: str, fmt: str) -> None:
    """Offsets of partitions by time, like kafka-get-offsets.sh: topic:partition:offset lines."""
    existing_data_dir(data_dir)
    t = _time(time_spec)
    wanted = _partition_list(partitions)
    try:
        pattern = re.compile(topic_regex)
    except re.error as e:
        raise click.BadParameter(f"not a regular expression: {e}", param_hint="--topic") from None
    import kafkalog
    with kafkalog.open(data_dir, read_only=True) as dl:
        names = [n for n in sorted(dl.topics()) if pattern.fullmatch(n)
                 and (not n.startswith("__") or topic_regex != ".*")]
        if not names:
            raise InvalidTopicError(f"no topic matches {topic_regex!r}", file=data_dir)
        rows = partition_offsets(dl, names, wanted, t)
    for topic, p, off in rows:
        if fmt == "json":
            emit({"topic": topic, "partition": p, "offset": off})
        else:
            click.echo(f"{topic}:{p}:{'' if off is None else off}")
