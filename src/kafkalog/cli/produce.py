"""``kafkalog produce DATA_DIR TOPIC``: append JSON lines from stdin.

Each input line is an object with ``key`` and ``value`` (UTF-8 strings or null; base64 with
``--base64``), optional ``headers`` (object or list of ``[key, value]``), ``timestamp`` (ms) and
``partition``. The topic is created when missing (``--partitions``, ``--config key=value``).
Prints one JSON summary line; a malformed input line stops the command with a JSON error line
naming the line number (records before it are appended).
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from typing import Any, Optional

import click

from kafkalog.cli.output import EXIT_ERROR, emit, handle_errors
from kafkalog.errors import InvalidRecordError, KafkalogError


def _bytes(v: Any, b64: bool, what: str, line: int) -> Optional[bytes]:
    if v is None:
        return None
    if not isinstance(v, str):
        raise InvalidRecordError(f"line {line}: {what} must be a string or null")
    if b64:
        try:
            return base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRecordError(f"line {line}: {what} is not valid base64") from None
    return v.encode("utf-8")


def _parse_config(items) -> dict:
    out = {}
    for it in items:
        if "=" not in it:
            raise click.BadParameter(f"expected key=value, got {it!r}", param_hint="--config")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


@click.command("produce")
@click.argument("data_dir", type=click.Path(file_okay=False))
@click.argument("topic")
@click.option("--base64", "b64", is_flag=True, help="Keys, values and header values are base64.")
@click.option("--partitions", type=click.IntRange(1), default=1, show_default=True,
              help="Partitions of the topic when it is created.")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default=None, help="Batch compression (default: the topic's compression.type).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="Topic config for a new topic (repeatable).")
@click.option("--batch-size", type=click.IntRange(1), default=256 * 1024, show_default=True)
@handle_errors()
def produce(data_dir: str, topic: str, b64: bool, partitions: int, compression: Optional[str],
            configs, batch_size: int) -> None:
    """Append JSON-lines records from stdin to TOPIC in DATA_DIR."""
    import kafkalog
    cfg = _parse_config(configs)
    dl = kafkalog.open(data_dir, background=False)
    error = None
    try:
        if not dl.manager.has_topic(topic):
            dl.create_topic(topic, partitions, cfg)
        p = dl.producer(compression_type=compression or "none", batch_size=batch_size)
        n = 0
        stdin = sys.stdin
        for lineno, line in enumerate(stdin, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                error = InvalidRecordError(f"line {lineno}: invalid JSON: {e}")
                break
            if not isinstance(obj, dict):
                error = InvalidRecordError(f"line {lineno}: expected a JSON object")
                break
            try:
                key = _bytes(obj.get("key"), b64, "key", lineno)
                value = _bytes(obj.get("value"), b64, "value", lineno)
                headers = obj.get("headers")
                hs = None
                if headers:
                    items = headers.items() if isinstance(headers, dict) else headers
                    hs = []
                    for h in items:
                        if not isinstance(h, (list, tuple)) or len(h) != 2 or not isinstance(h[0], str):
                            raise InvalidRecordError(f"line {lineno}: headers must be an object or a "
                                                     f"list of [key, value] pairs")
                        hs.append((h[0], _bytes(h[1], b64, "header value", lineno)))
                ts = obj.get("timestamp")
                if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool)):
                    raise InvalidRecordError(f"line {lineno}: timestamp must be an integer")
                part = obj.get("partition")
                if part is not None and (not isinstance(part, int) or isinstance(part, bool)):
                    raise InvalidRecordError(f"line {lineno}: partition must be an integer")
                fut = p.send(topic, value, key, partition=part, timestamp_ms=ts, headers=hs)
                if fut.failed():
                    raise fut.exception  # type: ignore[misc]
            except KafkalogError as e:
                error = e
                break
            n += 1
        p.close()
        offsets = p.appended_offsets()
        if error is None and p.first_error is not None:
            error = p.first_error
        summary = {"type": "summary", "topic": topic, "records": n, "batches": p.batches_sent,
                   "partitions": {str(tp[1]): {"firstOffset": a, "lastOffset": b}
                                  for tp, (a, b) in sorted(offsets.items())}}
        emit(summary)
    finally:
        dl.close()
    if error is not None:
        raise error
