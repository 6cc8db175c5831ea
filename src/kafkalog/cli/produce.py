"""``kafkalog produce DATA_DIR TOPIC``: append records read from stdin (or ``--file``), as they arrive.

Input, one record a line:

* JSON lines (default): an object with ``key`` and ``value`` (UTF-8 strings or null; base64 with
  ``--base64``), optional ``headers`` (object or list of ``[key, value]``), ``timestamp`` (ms) and
  ``partition``. Any other field is refused with its line number: a typo such as ``"vlaue"`` must
  not write a tombstone.
* ``--input text``: the line is the value; with ``--key-separator SEP`` (kcat's ``-K``) the text before
  the first SEP is the key. ``--value-files`` reads each value from the file the line names.

Records are appended as they arrive (within ``linger.ms`` when input pauses), so
``tail -f events | kafkalog produce DIR topic`` works and a killed process loses at most what had not
lingered yet. The data directory and the topic are created only when the first valid record arrives
(``--partitions``, ``--config key=value``); a data directory created so is announced on stderr
(a typo in the path must not go unnoticed). A bad line stops the command with an error naming the
input, its line and the byte position in the input, after the records before it are appended (the
summary says ``"complete": false``: every line before the bad one was appended, none after).
Ctrl-C or SIGTERM appends what was read, shuts the directory down cleanly and ends with the
summary (``"interrupted": true``) and the signal's exit status (130, 143). The summary (one JSON
line, or text with ``--format text``) has the count of records appended and each partition's
first and last offset: where to resume. A failed append (a full disk) stops the command at once:
nothing after it is appended, the error names the file, the summary says what was written, the
exit code is 2, and the next open recovers the directory (it was not shut down cleanly).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import select
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple

import click

from kafkalog.cli import interrupt
from kafkalog.cli.output import EXIT_ERROR, emit, format_option, handle_errors, report_error, resolve_format
from kafkalog.cli.paths import new_or_existing_data_dir
from kafkalog.errors import InvalidRecordError, KafkalogError

__all__ = ["produce"]

JSON_FIELDS = frozenset({"key", "value", "headers", "timestamp", "partition"})
IDLE_FLUSH_S = 0.005            # the producer's default linger.ms


@dataclass
class InputRecord:
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Optional[List[Tuple[str, Optional[bytes]]]] = None
    timestamp: Optional[int] = None
    partition: Optional[int] = None


@dataclass
class LineParser:
    """Turns input lines into records; every error names the input and the line."""

    source: str
    input_format: str = "json"
    b64: bool = False
    key_separator: Optional[str] = None
    value_files: bool = False
    line: int = 0
    #: byte position in the input of the line being parsed, and of the next one
    position: int = 0
    next_position: int = 0

    def error(self, message: str, at: int = 0) -> InvalidRecordError:
        """An error of the current line, ``at`` bytes into it."""
        return InvalidRecordError(f"line {self.line}: {message}", file=self.source,
                                  position=self.position + at, line=self.line)

    def _bytes(self, v: Any, what: str) -> Optional[bytes]:
        if v is None:
            return None
        if not isinstance(v, str):
            raise self.error(f"{what} must be a string or null")
        if self.b64:
            try:
                return base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                raise self.error(f"{what} is not valid base64") from None
        return v.encode("utf-8")

    def _value_from_file(self, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise self.error(f"cannot read the value file {path!r}: {e.strerror or e}") from None

    def parse(self, raw: bytes) -> Optional[InputRecord]:
        """The record of one line (without its newline), or None for a blank line."""
        self.line += 1
        self.position = self.next_position
        self.next_position += len(raw) + 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"not UTF-8 (byte {e.start} of the line)", e.start) from None
        if text.endswith("\r"):
            text = text[:-1]
        if self.input_format == "text":
            return self._parse_text(text)
        if not text.strip():
            return None
        return self._parse_json(text)

    def _parse_text(self, text: str) -> InputRecord:
        key: Optional[bytes] = None
        value_text = text
        if self.key_separator is not None:
            if self.key_separator not in text:
                raise self.error(f"no key separator {self.key_separator!r} in the line")
            k, value_text = text.split(self.key_separator, 1)
            key = k.encode("utf-8")
        value = self._value_from_file(value_text) if self.value_files else value_text.encode("utf-8")
        return InputRecord(key, value)

    def _parse_json(self, text: str) -> InputRecord:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise self.error(f"invalid JSON: {e}", len(text[:e.pos].encode("utf-8"))) from None
        except ValueError as e:
            raise self.error(f"invalid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise self.error("expected a JSON object")
        unknown = sorted(set(obj) - JSON_FIELDS)
        if unknown:
            raise self.error(f"unknown field(s) {', '.join(map(repr, unknown))}; a record has "
                             f"{', '.join(sorted(JSON_FIELDS))}")
        if "value" not in obj and "key" not in obj:
            raise self.error("a record needs a \"value\" (null for a tombstone) or a \"key\"")
        key = self._bytes(obj.get("key"), "key")
        value = self._value_from_file(obj["value"]) if self.value_files and obj.get("value") is not None \
            else self._bytes(obj.get("value"), "value")
        headers = obj.get("headers")
        hs: Optional[List[Tuple[str, Optional[bytes]]]] = None
        if headers:
            items = headers.items() if isinstance(headers, dict) else headers
            if not isinstance(items, (list, type({}.items()))):
                raise self.error("headers must be an object or a list of [key, value] pairs")
            hs = []
            h: object
            for h in items:
                if not isinstance(h, (list, tuple)) or len(h) != 2 or not isinstance(h[0], str):
                    raise self.error("headers must be an object or a list of [key, value] pairs")
                hs.append((h[0], self._bytes(h[1], "header value")))
        ts = obj.get("timestamp")
        if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool) or ts < 0):
            raise self.error("timestamp must be a non-negative integer (ms)")
        part = obj.get("partition")
        if part is not None and (not isinstance(part, int) or isinstance(part, bool) or part < 0):
            raise self.error("partition must be a non-negative integer")
        return InputRecord(key, value, hs, ts, part)


def read_lines(stream: BinaryIO, idle_s: float, stop: Sequence[int] = ()) -> Iterator[Optional[bytes]]:
    """Lines of ``stream`` without their newline as they arrive; ``None`` each time the input has been
    idle for ``idle_s`` with nothing more to read (the moment to hand lingering records over).

    ``stop`` is where a signal handler records the signals received
    (:func:`kafkalog.cli.interrupt.flagged`): before each line and each wait, one there raises
    :class:`~kafkalog.cli.interrupt.Interrupted`, so a signal ends the input between two records,
    never in the middle of one. The waits also watch a signal wakeup pipe
    (``signal.set_wakeup_fd``): a signal that arrives while the input is idle ends the wait."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):    # an in-memory stream: no waiting
        for line in stream:
            _stop_if_signalled(stop)
            yield line[:-1] if line.endswith(b"\n") else line
        return
    with _signal_wakeup() as wakeup:
        pending = b""
        while True:
            nl = pending.find(b"\n")
            if nl >= 0:
                line, pending = pending[:nl], pending[nl + 1:]
                _stop_if_signalled(stop)
                yield line
                continue
            if not _wait_readable(fd, wakeup, idle_s, stop):
                yield None
                _wait_readable(fd, wakeup, None, stop)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if pending:
                    yield pending
                return
            pending += chunk


def _stop_if_signalled(stop: Sequence[int]) -> None:
    interrupt.check()                       # (a signal whose handler's exception was lost)
    if stop:
        raise interrupt.Interrupted(stop[0])


def _wait_readable(fd: int, wakeup: int, timeout: Optional[float], stop: Sequence[int]) -> bool:
    """Wait until ``fd`` is readable (True) or ``timeout`` passed (False). A byte on the ``wakeup``
    pipe means a signal arrived: it is drained and the signal raised (:func:`_stop_if_signalled`)."""
    while True:
        _stop_if_signalled(stop)
        ready, _, _ = select.select([fd, wakeup] if wakeup >= 0 else [fd], [], [], timeout)
        if wakeup in ready:
            try:
                os.read(wakeup, 64)
            except BlockingIOError:
                pass
            if fd not in ready:
                continue
        return fd in ready


@contextmanager
def _signal_wakeup() -> Iterator[int]:
    """A non-blocking pipe set as the signal wakeup fd while the lines are read (main thread
    only; -1 elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield -1
        return
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    try:
        yield r
    finally:
        signal.set_wakeup_fd(previous)
        os.close(r)
        os.close(w)


@dataclass
class ProduceRun:
    """The state of one ``produce``: opened lazily at the first valid record. Batches are appended
    on this thread only (at the linger deadline, when one is full, or when input pauses), so the first
    failed append (a full disk) is the last one: nothing after it is written past a hole."""

    data_dir: str
    topic: str
    partitions: int
    topic_config: Dict[str, str]
    compression: Optional[str]
    #: the data directory does not exist yet (or is empty): say so when it is created
    announce_new_dir: bool = False
    dl: Any = None
    producer: Any = None
    refused: Any = None
    offsets: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    #: when the oldest record not yet appended was sent (its linger deadline is IDLE_FLUSH_S later)
    lingering_since: Optional[float] = None

    def send(self, rec: InputRecord) -> None:
        if self.producer is None:
            import kafkalog
            from kafkalog.client.producer import Producer
            from kafkalog.client.producer_future import refused
            self.refused = refused
            self.dl = kafkalog.open(self.data_dir, background=False)
            if self.announce_new_dir:
                click.echo(f"kafkalog produce: created the data directory {os.path.abspath(self.data_dir)}",
                           err=True)
            if not self.dl.manager.has_topic(self.topic):
                self.dl.create_topic(self.topic, self.partitions, self.topic_config)
            self.producer = Producer(self.dl, {"compression.type": self.compression or "none"},
                                     linger_thread=False)
        fut = self.producer.send(self.topic, rec.value, rec.key, partition=rec.partition,
                                 timestamp_ms=rec.timestamp, headers=rec.headers)
        err = self.refused(fut)
        if err is not None:              # refused at once (RecordTooLargeError)
            raise err
        if self.producer.first_error is not None:      # a full batch failed to append
            raise self.producer.first_error
        now = time.monotonic()
        if self.lingering_since is None:
            self.lingering_since = now
        elif now - self.lingering_since >= IDLE_FLUSH_S:
            self.flush()

    def flush(self) -> None:
        if self.producer is None:
            return
        self.lingering_since = None
        self.producer.flush()
        self._collect_offsets()
        if self.producer.first_error is not None:
            raise self.producer.first_error

    def _collect_offsets(self) -> None:
        for (_t, p), (first, last) in self.producer.appended_offsets().items():
            prev = self.offsets.get(p)
            self.offsets[p] = (prev[0] if prev else first, last)

    def close(self) -> Optional[KafkalogError]:
        """Append what is open and shut down cleanly; the error of that, if any (the failed
        append's, also when it was the last one). After a failed append nothing more is appended:
        what was written is synced and the data directory is left without a clean shutdown (the
        next open recovers it, as after a crash)."""
        if self.producer is None:
            return None
        if self.producer.first_error is None:
            try:
                self.flush()
                self.producer.close()
                self.dl.close()
                return None
            except KafkalogError as e:
                if self.producer.first_error is not e:      # closing failed, not an append
                    if not self.dl.manager.closed:
                        self.dl.manager.abandon()
                    return e
        failure = self.producer.first_error
        self._collect_offsets()
        try:
            for p in self.offsets:
                self.dl.manager.get_log(self.topic, p).flush()
        except KafkalogError:
            pass                        # the append's error is the one reported
        self.dl.manager.abandon()
        return failure if isinstance(failure, KafkalogError) else None

    def summary(self, interrupted: bool, complete: bool) -> dict:
        """What was written (records appended, not records read) and where; ``complete``: every
        input line was appended."""
        return {"type": "summary", "topic": self.topic,
                "records": self.producer.records_sent if self.producer is not None else 0,
                "batches": self.producer.batches_sent if self.producer is not None else 0,
                "interrupted": interrupted, "complete": complete,
                "partitions": {str(p): {"firstOffset": a, "lastOffset": b}
                               for p, (a, b) in sorted(self.offsets.items())}}


def _parse_config(items: Tuple[str, ...]) -> Dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise click.BadParameter(f"expected key=value, got {it!r}", param_hint="--config")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _print_summary(s: dict, fmt: str) -> None:
    if fmt == "json":
        emit(s)
        return
    # "partition 2: offset 416", "partition 0: offsets 0..19"
    parts = ", ".join(f"partition {p}: offset {o['firstOffset']}" if o["firstOffset"] == o["lastOffset"]
                      else f"partition {p}: offsets {o['firstOffset']}..{o['lastOffset']}"
                      for p, o in s["partitions"].items())
    how = " (interrupted)" if s["interrupted"] else "" if s["complete"] else " (stopped by an error)"
    click.echo(f"{s['records']} record(s) appended to {s['topic']}{how}" + (f"; {parts}" if parts else ""),
               err=True)


@click.command("produce")
@click.argument("data_dir", type=click.Path())
@click.argument("topic")
@click.option("--file", "input_file", type=click.Path(dir_okay=False), default=None,
              help="Read records from this file instead of stdin.")
@click.option("--input", "input_format", type=click.Choice(["json", "text"]), default="json",
              show_default=True, help="Input: JSON lines (key, value, headers, timestamp, partition) or "
                                       "text lines (the value, or KEY<sep>VALUE with --key-separator).")
@click.option("-K", "--key-separator", default=None, metavar="SEP",
              help="With --input text: the key is the text before the first SEP (kcat's -K).")
@click.option("--value-files", is_flag=True,
              help="Each value names a file whose contents are the record's value.")
@click.option("--base64", "b64", is_flag=True, help="JSON keys, values and header values are base64.")
@click.option("--partitions", type=click.IntRange(1), default=1, show_default=True,
              help="Partitions of the topic when it is created.")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default=None, help="Batch compression (default: the topic's compression.type).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="Topic config for a new topic (repeatable), e.g. --config segment.bytes=1048576.")
@format_option()
@handle_errors()
def produce(data_dir: str, topic: str, input_file: Optional[str], input_format: str,
            key_separator: Optional[str], value_files: bool, b64: bool, partitions: int,
            compression: Optional[str], configs: Tuple[str, ...], fmt: Optional[str]) -> None:
    """Append records from stdin (JSON lines or text lines) to TOPIC in DATA_DIR as they arrive."""
    fmt = resolve_format(fmt)
    if key_separator is not None and input_format != "text":
        raise click.UsageError("--key-separator goes with --input text")
    if key_separator == "":
        raise click.BadParameter("the key separator cannot be empty", param_hint="-K")
    creating = new_or_existing_data_dir(data_dir)
    cfg = _parse_config(configs)
    source = input_file if input_file is not None else "<stdin>"
    parser = LineParser(source, input_format, b64, key_separator, value_files)
    run = ProduceRun(data_dir, topic, partitions, cfg, compression, announce_new_dir=creating)
    stream: BinaryIO = open(input_file, "rb") if input_file is not None else sys.stdin.buffer
    error: Optional[KafkalogError] = None
    signum: Optional[int] = None
    # from here a signal is recorded and ends the input between two records (read_lines)
    with interrupt.flagged() as stop:
        try:
            for raw in read_lines(stream, IDLE_FLUSH_S, stop):
                if raw is None:
                    run.flush()
                    continue
                rec = parser.parse(raw)
                if rec is not None:
                    run.send(rec)
        except KafkalogError as e:
            error = e
        except interrupt.Interrupted as e:
            interrupt.handled()
            signum = e.signum
        except KeyboardInterrupt:                # (in-process callers: click's test runner)
            signum = signal.SIGINT
        finally:
            with interrupt.ignored():             # a second signal must not cut the flush
                close_error = run.close()
                error = error or close_error
                if input_file is not None:
                    stream.close()
    _print_summary(run.summary(signum is not None, error is None and signum is None), fmt)
    if error is not None:
        report_error(error, fmt == "json")
        sys.exit(EXIT_ERROR)
    if signum is not None:
        sys.stdout.flush()
        sys.exit(interrupt.exit_code(signum))
