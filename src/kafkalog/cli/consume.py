"""``kafkalog consume DATA_DIR TOPIC``: print records as JSON lines (``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, ``key``, ``value``, ``headers``). Keys and values are
UTF-8 strings when they decode, else base64 with ``keyEncoding``/``valueEncoding`` = ``base64``;
``--base64`` always uses base64.

The data directory is opened read-only (``kafkalog.open(dir, read_only=True)``): no ``.lock``, no
recovery, nothing written, so it can be read while an application or a Kafka broker holds it."""

from __future__ import annotations

import base64
from typing import Optional

import click

from kafkalog.cli.output import emit, handle_errors


def _text(b: Optional[bytes], force_b64: bool):
    if b is None:
        return None, None
    if not force_b64:
        try:
            return b.decode("utf-8"), None
        except UnicodeDecodeError:
            pass
    return base64.b64encode(b).decode("ascii"), "base64"


@click.command("consume")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("topic")
@click.option("--partition", type=click.IntRange(0), default=None,
              help="Only this partition (default: every partition, one after another).")
@click.option("--offset", type=click.IntRange(0), default=None, help="Start offset.")
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset (default when "
              "neither --offset nor --timestamp is given).")
@click.option("--timestamp", type=int, default=None, help="Start at the first record with a "
              "timestamp >= this (ms).")
@click.option("--max-records", type=click.IntRange(0), default=None,
              help="Stop after this many records.")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True,
              help="read_committed skips aborted transactions and stops at the last stable offset.")
@click.option("--base64", "b64", is_flag=True, help="Print keys, values and header values as base64.")
@handle_errors()
def consume(data_dir: str, topic: str, partition: Optional[int], offset: Optional[int],
            from_beginning: bool, timestamp: Optional[int], max_records: Optional[int],
            isolation_level: str, b64: bool) -> None:
    """Print the records of TOPIC in DATA_DIR as JSON lines."""
    import kafkalog
    with kafkalog.open(data_dir, read_only=True) as dl:
        for r in dl.consume(topic, partition, offset=offset, timestamp=timestamp,
                            from_beginning=True, isolation=isolation_level,
                            max_records=max_records):
            k, ke = _text(r.key, b64)
            v, ve = _text(r.value, b64)
            hs = []
            for hk, hv in r.headers:
                t, _e = _text(hv, True) if b64 else _text(hv, False)
                hs.append([hk, t])
            obj = {"topic": r.topic, "partition": r.partition, "offset": r.offset,
                   "timestamp": r.timestamp, "timestampType": r.timestamp_type, "key": k,
                   "value": v, "headers": hs}
            if ke:
                obj["keyEncoding"] = ke
            if ve:
                obj["valueEncoding"] = ve
            emit(obj)
