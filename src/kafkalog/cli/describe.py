"""``kafkalog describe DATA_DIR``: topics and partitions of a data directory with log start/end
offsets, sizes and segment counts. Strictly read-only: nothing is locked, recovered or written;
the log end offset is read from the last batch of the last segment (found through the offset
index), the log start offset from ``log-start-offset-checkpoint`` or the first segment."""

from __future__ import annotations

import os
import struct
from typing import List, Optional

import click

from kafkalog.cli.output import FORMAT_OPTION_HELP, emit, handle_errors
from kafkalog.cli.paths import existing_data_dir
from kafkalog.errors import KafkalogError, LogDirError
from kafkalog.log.checkpoint import OffsetCheckpointFile
from kafkalog.log.naming import TopicPartition, parse_partition_dir_name

_PREFIX = struct.Struct(">qiiB")


def _next_offset(log_path: str, base: int) -> int:
    """Next offset after the last complete entry of a ``.log`` (shallow walk from the last sane
    offset-index entry)."""
    start = 0
    idx = log_path[:-4] + ".index"
    size = os.path.getsize(log_path)
    try:
        isz = os.path.getsize(idx)
        if isz >= 8:
            with open(idx, "rb") as f:
                n = isz // 8
                f.seek((n - 1) * 8)
                rel, pos = struct.unpack(">ii", f.read(8))
                if rel > 0 and 0 <= pos < size:
                    start = pos
    except OSError:
        pass
    nxt = base
    with open(log_path, "rb") as f:
        pos = start
        while pos + 17 <= size:
            f.seek(pos)
            offset, length, _e, magic = _PREFIX.unpack(f.read(17))
            if length < 14 or pos + 12 + length > size:
                break
            if magic == 2:
                f.seek(pos + 23)
                lod = struct.unpack(">i", f.read(4))[0]
                nxt = offset + lod + 1
            else:
                nxt = offset + 1
            pos += 12 + length
    return nxt


def describe_dir(data_dir: str) -> List[dict]:
    """One JSON-able dict per partition directory."""
    starts: dict[TopicPartition, int] = {}
    try:
        starts = OffsetCheckpointFile(os.path.join(data_dir, "log-start-offset-checkpoint"),
                                      create=False).read()
    except KafkalogError:
        pass
    out = []
    for name in sorted(os.listdir(data_dir)):
        d = os.path.join(data_dir, name)
        if not os.path.isdir(d):
            continue
        try:
            parsed = parse_partition_dir_name(name)
        except KafkalogError:
            continue
        if parsed.kind:
            continue
        logs = sorted(n for n in os.listdir(d) if n.endswith(".log") and n.split(".")[0].isdigit())
        bases = [int(n.split(".")[0]) for n in logs]
        size = sum(os.path.getsize(os.path.join(d, n)) for n in logs)
        leo: Optional[int] = None
        for n, b in reversed(list(zip(logs, bases))):
            nxt = _next_offset(os.path.join(d, n), b)
            if nxt > b or n == logs[0]:
                leo = nxt
                break
        first = bases[0] if bases else 0
        lso = max(starts.get(TopicPartition(parsed.topic, parsed.partition), first), first)
        out.append({"topic": parsed.topic, "partition": parsed.partition,
                    "logStartOffset": lso, "logEndOffset": leo if leo is not None else lso,
                    "sizeInBytes": size, "numSegments": len(logs), "dir": d})
    out.sort(key=lambda r: (r["topic"], r["partition"]))        # t-2 before t-10 (not as text)
    return out


@click.command("describe")
@click.argument("data_dir", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help=FORMAT_OPTION_HELP)
@handle_errors()
def describe(data_dir: str, fmt: str) -> None:
    """Topics, partitions, offsets, sizes and segment counts of DATA_DIR (read-only)."""
    existing_data_dir(data_dir)
    if not os.access(data_dir, os.R_OK):
        raise LogDirError("cannot read the data directory", file=data_dir)
    rows = describe_dir(data_dir)
    if fmt == "json":
        for r in rows:
            emit(r)
        return
    if not rows:
        click.echo(f"{data_dir}: no partitions")
        return
    head = ("TOPIC", "PARTITION", "LOG-START-OFFSET", "LOG-END-OFFSET", "SIZE", "SEGMENTS")
    table = [head] + [(r["topic"], str(r["partition"]), str(r["logStartOffset"]),
                       str(r["logEndOffset"]), str(r["sizeInBytes"]), str(r["numSegments"]))
                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
