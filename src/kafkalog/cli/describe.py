"""``kafkalog describe DATA_DIR``: topics and partitions of a data directory with log start/end
offsets, sizes and segment counts. Strictly read-only, through the log layer's read-only view
(:class:`~kafkalog.log.read.data_dir_view.DataDirView`): nothing is locked, recovered or written;
the log end offset is read from the last batch of the last segment (found through the offset
index), the log start offset from ``log-start-offset-checkpoint`` or the first segment."""

from __future__ import annotations

import os
from typing import List

import click

from kafkalog.cli.output import emit, format_option, handle_errors, resolve_format
from kafkalog.cli.paths import existing_data_dir
from kafkalog.errors import LogDirError


def describe_dir(data_dir: str) -> List[dict]:
    """One JSON-able dict per partition directory."""
    from kafkalog.log.read.data_dir_view import DataDirView
    out = []
    with DataDirView(data_dir) as view:
        for pdir in view.partition_dirs():
            log = view.get_log(pdir.topic, pdir.partition)
            out.append({"topic": pdir.topic, "partition": pdir.partition,
                        "logStartOffset": log.log_start_offset,
                        "logEndOffset": log.log_end_offset, "sizeInBytes": log.size,
                        "numSegments": len(log.segments), "dir": pdir.path})
    return out


@click.command("describe")
@click.argument("data_dir", type=click.Path())
@format_option()
@handle_errors()
def describe(data_dir: str, fmt: str | None) -> None:
    """Topics, partitions, offsets, sizes and segment counts of DATA_DIR (read-only)."""
    fmt = resolve_format(fmt)
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
