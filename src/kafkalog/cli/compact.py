"""``kafkalog compact DATA_DIR [TOPIC]``: compact now (spec §4.11), with a progress bar on a
terminal and a summary: bytes and records before and after, distinct keys, tombstones removed,
keyless records dropped, time. ``--format json`` prints one JSON line per cleaning round and a
summary line."""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from typing import Optional

import click

from kafkalog.cli.output import emit, format_option, handle_errors, resolve_format
from kafkalog.cli.paths import existing_data_dir
from kafkalog.cli.progress import ProgressBar, progress_bar, progress_enabled
from kafkalog.log.naming import TopicPartition


@dataclass
class _Progress:
    """The bar of a compaction and the partition it is at."""

    bar: Optional[ProgressBar] = None
    tp: Optional[TopicPartition] = None


def _why_not_cleaned(log) -> str:
    """Why the cleaner may find nothing to clean in ``log``: Kafka never cleans the active segment,
    keeps records younger than min.compaction.lag.ms and waits for min.cleanable.dirty.ratio."""
    segments = log.segments
    cfg = log.config
    if log.size == 0:
        return "no records"
    if len(segments) <= 1:
        return ("only the active segment holds records, and the active segment is never cleaned "
                f"(it rolls at segment.bytes={cfg.get('segment.bytes')} or segment.ms={cfg.get('segment.ms')})")
    return (f"the dirty part of the {len(segments) - 1} inactive segment(s) is below "
            f"min.cleanable.dirty.ratio={cfg.get('min.cleanable.dirty.ratio')}, or its records are younger "
            f"than min.compaction.lag.ms={cfg.get('min.compaction.lag.ms')} (the active segment is never cleaned)")


def _not_cleaned_lines(idle: dict[tuple[str, int], str]) -> list[str]:
    """One line per topic and reason: ``orders-0: nothing cleaned: ...`` for one partition,
    ``__consumer_offsets: 49 partitions (0-2,4-49): nothing cleaned: ...`` for several (a data directory's
    empty offsets topic is one line, not fifty)."""
    by_reason: dict[tuple[str, str], list[int]] = {}
    for (t, p), why in sorted(idle.items()):
        by_reason.setdefault((t, why), []).append(p)
    lines = []
    for (t, why), parts in sorted(by_reason.items(), key=lambda kv: (kv[0][0], kv[1][0])):
        if len(parts) == 1:
            lines.append(f"  {t}-{parts[0]}: nothing cleaned: {why}")
        else:
            runs: list[list[int]] = []
            for p in parts:
                if runs and p == runs[-1][1] + 1:
                    runs[-1][1] = p
                else:
                    runs.append([p, p])
            which = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
            lines.append(f"  {t}: {len(parts)} partitions ({which}): nothing cleaned: {why}")
    return lines


@click.command("compact")
@click.argument("data_dir", type=click.Path())
@click.argument("topic", required=False)
@format_option()
@click.option("--force", is_flag=True,
              help="Compact TOPIC even when its cleanup.policy does not contain 'compact'.")
@click.option("--dedupe-buffer-size", type=int, default=None,
              help="log.cleaner.dedupe.buffer.size in bytes (default 134217728).")
@click.option("--no-progress", is_flag=True, help="Never draw a progress bar.")
@handle_errors()
def compact(data_dir: str, topic: Optional[str], fmt: Optional[str], force: bool,
            dedupe_buffer_size: Optional[int], no_progress: bool) -> None:
    """Compact every compacted topic of DATA_DIR (or only TOPIC) now."""
    fmt = resolve_format(fmt)
    existing_data_dir(data_dir)
    from kafkalog.cleaner import compact_data_dir
    from kafkalog.cleaner.stats import CleanerStats
    broker = {}
    if dedupe_buffer_size is not None:
        broker["log.cleaner.dedupe.buffer.size"] = dedupe_buffer_size
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        state = _Progress()
        waiting: dict[tuple[str, int], str] = {}

        def on_open(selected) -> None:
            for tp, log in selected:
                waiting[(tp.topic, tp.partition)] = _why_not_cleaned(log)
            state.bar = stack.enter_context(progress_bar(
                len(selected), "compacting", enabled=progress_enabled(no_progress or fmt == "json")))

        def on_progress(tp, log, result) -> None:
            bar = state.bar
            if result is None:
                if state.tp is not None and state.tp != tp and bar is not None:
                    bar.advance(1, description=f"compacting {tp.topic}-{tp.partition}")
                state.tp = tp
                return
            if fmt == "json":
                emit({"type": "round", **result.to_json()})

        results = compact_data_dir(data_dir, topic, broker_config=broker, force=force,
                                   progress=on_progress, on_open=on_open)
        if state.bar is not None and state.tp is not None:
            state.bar.advance(1)
    total = CleanerStats()
    failed = [r for r in results if r.error]
    parts: dict[tuple[str, int], list[int]] = {}
    for r in results:
        total.merge(r.stats)
        key = (r.topic_partition.topic, r.topic_partition.partition)
        first = parts.setdefault(key, [r.size_before, r.size_after])
        first[1] = r.size_after
    idle = {k: why for k, why in waiting.items() if k not in parts or not any(
        r.stats.messages_read for r in results if (r.topic_partition.topic, r.topic_partition.partition) == k)}
    size_before = sum(v[0] for v in parts.values())
    size_after = sum(v[1] for v in parts.values())
    elapsed = time.monotonic() - started
    summary = {"type": "summary", "partitions": len(parts), "rounds": len(results),
               "bytesBefore": size_before, "bytesAfter": size_after,
               "recordsBefore": total.messages_read, "recordsAfter": total.messages_written,
               "distinctKeys": total.distinct_keys, "tombstonesRemoved": total.tombstones_removed,
               "invalidMessages": total.invalid_messages,
               "abortedBatchesRemoved": total.aborted_batches_removed,
               "errors": [{"topic": r.topic_partition.topic,
                           "partition": r.topic_partition.partition, "error": r.error}
                          for r in failed],
               "notCleaned": [{"topic": t, "partition": p, "reason": why}
                              for (t, p), why in sorted(idle.items())],
               "elapsedSecs": round(elapsed, 3)}
    if fmt == "json":
        emit(summary)
    else:
        click.echo(f"Compacted {len(parts)} partition(s) in {len(results)} round(s), "
                   f"{elapsed:.2f} s")
        click.echo(f"  bytes:   {size_before:,} -> {size_after:,}")
        click.echo(f"  records: {total.messages_read:,} -> {total.messages_written:,} "
                   f"(recopied range)")
        click.echo(f"  distinct keys: {total.distinct_keys:,}; tombstones removed: "
                   f"{total.tombstones_removed:,}")
        if total.invalid_messages:
            click.echo(f"  dropped {total.invalid_messages:,} record(s) without a key: a compacted "
                       f"topic keeps only keyed records (as Kafka's cleaner does)")
        if not waiting:
            click.echo("  no partition of a topic with cleanup.policy=compact"
                       + (f" named {topic}" if topic else "") + " (use --force TOPIC for another policy)")
        for line in _not_cleaned_lines(idle):
            click.echo(line)
        for r in failed:
            click.echo(f"  FAILED {r.topic_partition.topic}-{r.topic_partition.partition}: "
                       f"{r.error}", err=True)
    if failed:
        sys.exit(1)
