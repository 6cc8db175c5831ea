"""``kafkalog consume DATA_DIR TOPIC``: print records, kcat-style, with the embedded
:class:`~kafkalog.client.consumer.Consumer`.

``--format json`` (the default when stdout is not a terminal) prints JSON lines (``topic``, ``partition``, ``offset``,
``timestamp``, ``timestampType``, ``key``, ``value``, ``headers``); keys and values are UTF-8 strings
when they decode, else base64 with ``keyEncoding``/``valueEncoding`` = ``base64`` (``--base64``
always). ``--format text`` prints values, one a line, with the key and ``-K SEP`` before.

Following (the default on a terminal) waits for new records, also those another process appends,
and for a topic another process has not created yet (read-only, without ``--group``).
Without ``--group`` the data directory is opened read-only (no ``.lock``, nothing written); with
``--group`` it is opened writable, to commit what was printed (at the end, on Ctrl-C, and every
``auto.commit.interval.ms`` while following). Ctrl-C or SIGTERM stops it between two polls: what
was printed is flushed and committed, and the exit status is the signal's (130, 143). Damage is
exit 1; an out-of-range start is exit 2 unless ``--auto-offset-reset`` asks for Kafka's reset."""

from __future__ import annotations

import sys
import time
from typing import Any, Optional

import click

from kafkalog.cli import interrupt
from kafkalog.cli.output import (
    EXIT_FINDINGS,
    FORMAT_OPTION_HELP,
    bytes_json,
    emit,
    format_option,
    handle_errors,
    report_error,
    resolve_format,
)
from kafkalog.cli.paths import existing_data_dir
from kafkalog.errors import CorruptRecordError, InvalidConfigError, InvalidTopicError, LogDirError
from kafkalog.log.naming import TopicPartition
from kafkalog.record.constants import TimestampType


def _text(b: Optional[bytes], force_b64: bool) -> tuple[Optional[str], Optional[str]]:
    return bytes_json(b, "base64" if force_b64 else "text")


def _json_record(r: Any, b64: bool) -> dict:
    k, ke = _text(r.key, b64)
    v, ve = _text(r.value, b64)
    hs = [[hk, _text(hv, b64)[0]] for hk, hv in r.headers]
    obj = {"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
           "timestampType": TimestampType.name_of(r.timestamp_type), "key": k, "value": v,
           "headers": hs}
    if ke:
        obj["keyEncoding"] = ke
    if ve:
        obj["valueEncoding"] = ve
    return obj


def _print_text(r: Any, key_sep: Optional[str]) -> None:
    out = sys.stdout.buffer
    if key_sep is not None:
        out.write(r.key or b"")
        out.write(key_sep.encode("utf-8"))
    out.write(r.value or b"")
    out.write(b"\n")


def _parse_offset(spec: Optional[str]) -> Optional[int | str]:
    """``beginning``, ``end``, ``N`` (an offset) or ``-N`` (N before the end)."""
    if spec is None or spec in ("beginning", "end"):
        return spec
    try:
        return int(spec)
    except ValueError:
        raise click.BadParameter(f"{spec!r}: expected an offset N, -N (N from the end), beginning or end",
                                 param_hint="--offset") from None


def _open(data_dir: str, writable: bool) -> Any:
    import kafkalog
    if not writable:
        return kafkalog.open(data_dir, read_only=True)
    try:
        return kafkalog.open(data_dir, background=False)
    except LogDirError as e:
        if "lock" in str(e).lower():
            raise LogDirError("another process holds the data directory's lock: --group needs to "
                              "open it writable to commit offsets (consume without --group reads it "
                              "read-only)", file=data_dir) from None
        raise


def _start(consumer: Any, tps: list[TopicPartition], offset: Optional[int | str],
           timestamp: Optional[int], group: Optional[str]) -> None:
    """Seek every partition to where this run starts."""
    for tp in tps:
        if timestamp is not None:
            found = consumer.offsets_for_times({tp: timestamp})[tp]
            if found is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, found.offset)
        elif offset == "beginning":
            consumer.seek_to_beginning(tp)
        elif offset == "end":
            consumer.seek_to_end(tp)
        elif isinstance(offset, int) and offset < 0:
            begin = consumer.beginning_offsets([tp])[tp]
            end = consumer.end_offsets([tp])[tp]
            consumer.seek(tp, max(begin, end + offset))
        elif isinstance(offset, int):
            consumer.seek(tp, offset)
        elif group is None or consumer.committed(tp) is None:
            consumer.seek_to_beginning(tp)
        # else: the group's committed offset, fetched by the consumer


class _Run:
    """Printing what the consumer polls, and committing what was printed (with ``--group``)."""

    def __init__(self, consumer: Any, group: Optional[str], fmt: str, key_sep: Optional[str],
                 b64: bool) -> None:
        self.consumer = consumer
        self.group = group
        self.fmt = fmt
        self.key_sep = key_sep
        self.b64 = b64
        self.printed: dict[TopicPartition, int] = {}
        from kafkalog.client.config import CONSUMER_DEFAULTS
        self.interval = CONSUMER_DEFAULTS["auto.commit.interval.ms"] / 1000.0

    def commit(self) -> None:
        if self.group is not None and self.printed:
            self.consumer.commit(dict(self.printed))

    def print_records(self, got: dict) -> int:
        n = 0
        for tp, recs in got.items():
            for r in recs:
                if self.fmt == "json":
                    emit(_json_record(r, self.b64))
                else:
                    _print_text(r, self.key_sep)
            self.printed[tp] = recs[-1].offset + 1
            n += len(recs)
        sys.stdout.flush()
        return n

    def loop(self, tps: list[TopicPartition], follow: bool, max_records: Optional[int],
             interrupted: list[int]) -> None:
        """Poll and print until the end of the log (not following), ``max_records``, or a
        signal; commit every ``auto.commit.interval.ms`` while following, and at the end."""
        consumer = self.consumer
        ends = None if follow else consumer.end_offsets(tps)
        left = max_records
        next_commit = time.monotonic() + self.interval
        while (left is None or left > 0) and not interrupted:
            got = consumer.poll(timeout_ms=1000 if follow else 0, max_records=left or 500)
            n = self.print_records(got)
            if left is not None:
                left -= n
            if ends is not None and not got and all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
            if follow and time.monotonic() >= next_commit:
                self.commit()
                next_commit = time.monotonic() + self.interval
        self.commit()


@click.command("consume")
@click.argument("data_dir", type=click.Path(file_okay=False))
@click.argument("topic")
@click.option("--partition", type=click.IntRange(0), default=None,
              help="Only this partition (default: every partition).")
@click.option("--offset", "offset_spec", default=None, metavar="N|-N|beginning|end",
              help="Start offset: N, -N (N records before the end), beginning or end (default: the "
                   "group's committed offset with --group, else beginning).")
@click.option("--from-beginning", is_flag=True, help="Same as --offset beginning.")
@click.option("--timestamp", type=click.IntRange(0), default=None,
              help="Start at the first record with a timestamp >= this (ms since the epoch).")
@click.option("--follow/--no-follow", default=None,
              help="Wait for new records (also appended by another process) until Ctrl-C, or stop at "
                   "the end of the log (default: follow when stdout is a terminal).")
@click.option("--group", "group", default=None,
              help="Consumer group: start at its committed offsets and commit what was printed "
                   "(opens the directory writable).")
@click.option("--auto-offset-reset", type=click.Choice(["earliest", "latest"]), default=None,
              help="Kafka's reset when the start is out of range (default: an error, exit 2).")
@click.option("--max-records", type=click.IntRange(0), default=None,
              help="Stop after this many records.")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True,
              help="read_committed skips aborted transactions and stops at the last stable offset.")
@format_option(FORMAT_OPTION_HELP + " text prints values, one a line (-K: keys too).")
@click.option("-K", "key_sep", default=None, metavar="SEP",
              help="With --format text: print the key, then SEP, then the value.")
@click.option("--base64", "b64", is_flag=True, help="Print keys, values and header values as base64 "
              "(--format json).")
@handle_errors()
def consume(data_dir: str, topic: str, partition: Optional[int], offset_spec: Optional[str],
            from_beginning: bool, timestamp: Optional[int], follow: Optional[bool], group: Optional[str],
            auto_offset_reset: Optional[str], max_records: Optional[int], isolation_level: str,
            fmt: Optional[str], key_sep: Optional[str], b64: bool) -> None:
    """Print the records of TOPIC in DATA_DIR (JSON lines or values), following new ones."""
    fmt = resolve_format("text" if fmt is None and key_sep is not None else fmt)
    offset = _parse_offset("beginning" if from_beginning and offset_spec is None else offset_spec)
    if timestamp is not None and offset is not None:
        raise click.UsageError("--offset and --timestamp are exclusive")
    if key_sep is not None and fmt != "text":
        raise click.UsageError("-K needs --format text")
    if follow is None:
        follow = sys.stdout.isatty()
    existing_data_dir(data_dir)
    dl = _open(data_dir, writable=group is not None)
    # from here Ctrl-C or SIGTERM ends the loop between polls (never inside a write of the
    # library): what was printed is flushed and committed, the directory closed, then the
    # signal's exit status (130, 143)
    with interrupt.flagged() as interrupted:
        try:
            if follow and group is None:
                dl = _wait_for_topic(dl, data_dir, topic, interrupted)
            if not interrupted:
                _consume_topic(dl, topic, partition, offset, timestamp, group, follow, auto_offset_reset,
                               max_records, isolation_level, _Run(None, group, fmt, key_sep, b64),
                               interrupted)
        finally:
            dl.close()
    if interrupted:
        sys.stdout.flush()
        sys.exit(interrupt.exit_code(interrupted[0]))


def _wait_for_topic(dl: Any, data_dir: str, topic: str, interrupted: list[int]) -> Any:
    """Following a topic that does not exist yet: wait until another process creates it (as
    kafka-console-consumer waits for a topic), looking again every :data:`TOPIC_WAIT_S`; returns
    the read-only view that has it (or the last one, after a signal)."""
    if dl.manager.partitions_of(topic):
        return dl
    sys.stderr.write(f"Waiting for topic {topic!r} to be created in {data_dir} (Ctrl-C to stop)\n")
    sys.stderr.flush()
    while not interrupted:
        time.sleep(TOPIC_WAIT_S)
        dl.close()
        dl = _open(data_dir, writable=False)
        if dl.manager.partitions_of(topic):
            break
    return dl


#: how often ``consume --follow`` looks for a topic it waits for
TOPIC_WAIT_S = 0.5


def _consume_topic(dl: Any, topic: str, partition: Optional[int], offset: Optional[int | str],
                   timestamp: Optional[int], group: Optional[str], follow: bool,
                   auto_offset_reset: Optional[str], max_records: Optional[int],
                   isolation_level: str, run: _Run, interrupted: list[int]) -> None:
    parts = dl.manager.partitions_of(topic)
    if not parts:
        raise InvalidTopicError(f"Unknown topic {topic!r}", file=dl.manager.data_dir)
    if partition is not None:
        if partition not in parts:
            raise InvalidTopicError(f"Partition {partition} of topic {topic!r} does not exist",
                                    file=dl.manager.data_dir)
        parts = [partition]
    tps = [TopicPartition(topic, p) for p in parts]
    consumer = run.consumer = dl.consumer(conf={"group.id": group, "enable.auto.commit": False,
                                                "isolation.level": isolation_level,
                                                "auto.offset.reset": auto_offset_reset or "none"})
    try:
        consumer.assign(tps)
        _start(consumer, tps, offset, timestamp, group)
        run.loop(tps, follow, max_records, interrupted)
    except CorruptRecordError as e:
        run.commit()
        report_error(e, run.fmt == "json")
        sys.exit(EXIT_FINDINGS)
    except InvalidConfigError as e:
        raise click.UsageError(str(e)) from None
    consumer.close(autocommit=False)
