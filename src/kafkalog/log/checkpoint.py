"""Checkpoint and small metadata files (spec §3.3-3.4, §3.6-3.8).

* :class:`CheckpointFile` -- Kafka's generic text checkpoint (``CheckpointFile``): a version line, a
  count line, one entry per line; written atomically via ``<name>.tmp``.
* :class:`OffsetCheckpointFile` -- ``{(topic, partition): offset}`` for
  ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``replication-offset-checkpoint`` and ``cleaner-offset-checkpoint``.
* :class:`LeaderEpochCheckpointFile` -- ``leader-epoch-checkpoint`` (``<epoch> <start_offset>``).
* :class:`PartitionMetadataFile` -- ``partition.metadata`` (topic id).
* :class:`MetaProperties` -- ``meta.properties`` (version 0/1).
* :class:`CleanShutdownFile` -- ``.kafka_cleanshutdown``.

Every parse failure raises :class:`~kafkalog.errors.CorruptCheckpointError` naming the file, the
line number and the byte position of the line.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import time
import uuid as _uuid
from dataclasses import dataclass
from typing import Dict, Generic, Iterable, List, Mapping, NamedTuple, Optional, Tuple, TypeVar

from kafkalog.errors import CorruptCheckpointError, InvalidConfigError, KafkalogIOError
from kafkalog.log.config import format_properties, parse_properties
from kafkalog.log.fsutil import (
    atomic_write,
    fsync_dir,
    fsync_file,
    io_error,
    parent_dir,
    read_bytes,
    read_file,
    wrap_os_errors,
)
from kafkalog.log.naming import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    TopicPartition,
)
from kafkalog.record.constants import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

__all__ = [
    # the file names (defined in kafkalog.log.naming), re-exported for the checkpoint readers
    "CLEAN_SHUTDOWN_FILE", "CLEANER_OFFSET_CHECKPOINT_FILE", "LEADER_EPOCH_CHECKPOINT_FILE",
    "LOG_START_OFFSET_CHECKPOINT_FILE", "META_PROPERTIES_FILE", "PARTITION_METADATA_FILE",
    "RECOVERY_POINT_CHECKPOINT_FILE", "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "parse_java_int", "java_split_ws", "EntryFormatter", "CheckpointFile", "parse_checkpoint",
    "OffsetCheckpointFile", "OffsetCheckpointText", "EpochEntry", "LeaderEpochCheckpointFile", "ZERO_UUID",
    "uuid_to_kafka_string", "uuid_from_kafka_string", "PartitionMetadata", "PartitionMetadataFile",
    "MetaProperties", "CleanShutdownFile",
]

T = TypeVar("T")


_WS = re.compile(r"[ \t\n\x0b\f\r]+")
_INT_RE = re.compile(r"[+-]?[0-9]+")


def parse_java_int(text: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> Optional[int]:
    """``Integer.parseInt`` / ``Long.parseLong`` (ASCII digits): the value, or ``None``."""
    if not _INT_RE.fullmatch(text):
        return None
    v = int(text)
    return v if lo <= v <= hi else None


def java_split_ws(line: str) -> List[str]:
    """Java's ``Pattern.compile("\\\\s+").split(line)``: leading empty field kept, trailing
    empty fields dropped."""
    if line == "":
        return [""]
    parts = _WS.split(line)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def _java_lines(text: str) -> List[Tuple[str, int]]:
    """Lines as Java's ``BufferedReader.readLine`` sees them (``\\n``, ``\\r``, ``\\r\\n``), each
    with its character position."""
    if "\r" not in text:            # (every file Kafka or kafkalog writes: split in C)
        parts = text.split("\n")
        if parts[-1] == "":
            parts.pop()             # (after the last line's end)
        lines = []
        pos = 0
        for part in parts:
            lines.append((part, pos))
            pos += len(part) + 1
        return lines
    out = []
    i, n = 0, len(text)
    while i < n:
        j = i
        while j < n and text[j] not in "\r\n":
            j += 1
        out.append((text[i:j], i))
        if j < n and text[j] == "\r" and j + 1 < n and text[j + 1] == "\n":
            j += 1
        i = j + 1
    return out


class EntryFormatter(Generic[T]):
    """Converts checkpoint entries to and from one text line."""

    def to_line(self, entry: T) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def from_line(self, line: str) -> Optional[T]:  # pragma: no cover - interface
        """The entry, or ``None`` if the line is malformed."""
        raise NotImplementedError

    def parse_canonical(self, data: bytes, version: int) -> Optional[List[T]]:
        """The entries of a file of version ``version`` written as Kafka writes it, in one step;
        None for anything else (then the file is parsed line by line, and what is wrong named)."""
        return None


def encode_checkpoint(version: int, lines: List[str]) -> bytes:
    """A checkpoint file's bytes: its version and count lines, then its entries' lines."""
    head = f"{version}\n{len(lines)}\n"
    return (head + "".join(line + "\n" for line in lines)).encode("utf-8")


class CheckpointFile(Generic[T]):
    """Kafka's generic checkpoint file.

    Args:
        path: the file.
        version: the expected version (0 for every Kafka checkpoint).
        formatter: converts entries to/from lines.
        create: create an empty file when missing (Kafka does, on construction).
    """

    def __init__(self, path: os.PathLike[str] | str, version: int, formatter: EntryFormatter[T],
                 create: bool = True) -> None:
        self.path = os.fspath(path)
        self.version = version
        self.formatter = formatter
        if create and not os.path.exists(self.path):
            self.create_if_missing()

    def write(self, entries: Iterable[T], sync: bool = True) -> None:
        """Write ``entries`` atomically (``.tmp`` + fsync + rename + dir fsync)."""
        self.write_lines([self.formatter.to_line(e) for e in entries], sync)

    def write_lines(self, lines: List[str], sync: bool = True) -> None:
        """Write entries already formatted as lines (the version and count lines added)."""
        atomic_write(self.path, encode_checkpoint(self.version, lines), sync=sync)

    def create_if_missing(self) -> None:
        """Create the file, empty, unless it exists (Kafka's checkpoint file on construction)."""
        with wrap_os_errors(self.path, "create checkpoint file"):
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))

    def sync_if_exists(self) -> bool:
        """fsync the file as it is and its directory (a write made without fsync made durable,
        not written again); False when the file is missing."""
        if not os.path.exists(self.path):
            return False
        fsync_file(self.path)
        fsync_dir(parent_dir(self.path))
        return True

    def write_if_dir_exists(self, entries: Iterable[T], sync: bool = True) -> bool:
        """Like :meth:`write`, but do nothing (return ``False``) when the directory is gone."""
        if not os.path.isdir(os.path.dirname(os.path.abspath(self.path))):
            return False
        try:
            self.write(entries, sync)
        except KafkalogIOError:
            if not os.path.isdir(os.path.dirname(os.path.abspath(self.path))):
                return False
            raise
        return True

    def read(self) -> List[T]:
        """Parse the file (missing or empty -> ``[]``); :class:`CorruptCheckpointError` naming the
        file and line on anything malformed."""
        entries = self.read_if_exists()
        return [] if entries is None else entries

    def read_if_exists(self) -> Optional[List[T]]:
        """:meth:`read`, None when the file is missing (one open: no stat before it)."""
        try:
            data = read_file(self.path)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise io_error(err, self.path, "read checkpoint file") from err
        return parse_checkpoint(data, self.version, self.formatter, file=self.path)


def parse_checkpoint(data: bytes, version: int, formatter: EntryFormatter[T],
                     file: Optional[str] = None) -> List[T]:
    """Parse checkpoint bytes with Kafka's ``CheckpointReadBuffer`` rules."""
    canonical = formatter.parse_canonical(data, version)
    if canonical is not None:
        return canonical
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"Checkpoint file is not valid UTF-8: {e.reason}",
                                     file=file, position=e.start) from None
    lines = _java_lines(text)

    def bytepos(charpos: int) -> int:
        return len(text[:charpos].encode("utf-8"))

    def malformed(idx: int) -> CorruptCheckpointError:
        line, cpos = lines[idx]
        shown = line if len(line) <= 200 else line[:200] + "..."
        return CorruptCheckpointError(f"Malformed line in checkpoint file (line {idx + 1}): "
                                      f"'{shown}'", file=file, position=bytepos(cpos))

    if not lines:
        return []
    v = parse_java_int(lines[0][0])
    if v is None:
        raise malformed(0)
    if v != version:
        raise CorruptCheckpointError(f"Unrecognized version of the checkpoint file (line 1): {v}",
                                     file=file, position=0)
    if len(lines) < 2:
        return []
    expected = parse_java_int(lines[1][0])
    if expected is None:
        raise malformed(1)
    entries: List[T] = []
    for i in range(2, len(lines)):
        entry = formatter.from_line(lines[i][0])
        if entry is None:
            raise malformed(i)
        entries.append(entry)
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"Expected {expected} entries in checkpoint file, but found only {len(entries)}",
            file=file, position=len(data))
    return entries


# --- offset checkpoints ---------------------------------------------------------------------------

def _offset_lines(offsets: Iterable[Tuple[Tuple[str, int], int]]) -> List[str]:
    """``topic partition offset`` lines, each formatted in one step (100,000 a write)."""
    return [f"{t} {p} {o}" for (t, p), o in offsets]


def _check_topic_name(topic: str, path: str) -> None:
    """A topic name an offset checkpoint line can hold (not empty, no whitespace), else
    :class:`CorruptCheckpointError` naming the file ``path``."""
    if not topic or _WS.search(topic):
        raise CorruptCheckpointError(f"Topic name {topic!r} cannot be written to a checkpoint", file=path)


class OffsetCheckpointText:
    """An offset checkpoint's entries kept between writes, each topic's lines kept formatted (the
    broker's three offset files, rewritten every few seconds while any partition's offset moves).
    A change formats its topic's lines again; a write joins the topics' texts in one C call. So
    the Python work of a write follows the partitions that moved, not all the file holds (issue 35:
    at 100,000 partitions, formatting every line took 100-150 ms of the interpreter lock each time,
    and the broker's event loop waited for the lock at each system call meanwhile).

    Lines are sorted by topic, then by partition number (Kafka's order is unspecified). ``dirty``
    says the entries changed since they were last written (:meth:`OffsetCheckpointFile.write_text`)."""

    __slots__ = ("_by_topic", "_order", "_text", "count", "dirty", "topics_formatted")

    def __init__(self) -> None:
        self._by_topic: Dict[str, Dict[int, int]] = {}
        #: each topic's lines, for the topics that did not change since they were formatted
        self._text: Dict[str, str] = {}
        #: the topics sorted, None when one came or went since
        self._order: Optional[List[str]] = None
        #: entries held
        self.count = 0
        self.dirty = True
        #: how many times a topic's lines were formatted (what a write costs in Python)
        self.topics_formatted = 0

    def set(self, topic: str, partition: int, offset: int) -> None:
        parts = self._by_topic.get(topic)
        if parts is None:
            self._by_topic[topic] = parts = {}
            self._order = None
        old = parts.get(partition)
        if old != offset:
            if old is None:
                self.count += 1
            parts[partition] = offset
            self._text.pop(topic, None)
            self.dirty = True

    def discard(self, topic: str, partition: int) -> None:
        parts = self._by_topic.get(topic)
        if parts is None or parts.pop(partition, None) is None:
            return
        self.count -= 1
        self._text.pop(topic, None)
        if not parts:
            del self._by_topic[topic]
            self._order = None
        self.dirty = True

    def get(self, topic: str, partition: int) -> Optional[int]:
        parts = self._by_topic.get(topic)
        return None if parts is None else parts.get(partition)

    def data(self, path: str) -> bytes:
        """The file's bytes (``path`` names it in the error about a topic name a checkpoint cannot
        hold)."""
        order = self._order
        if order is None:
            self._order = order = sorted(self._by_topic)
        texts = self._text
        for topic in order:
            if topic not in texts:
                _check_topic_name(topic, path)
                parts = self._by_topic[topic]
                texts[topic] = "".join([f"{topic} {p} {parts[p]}\n" for p in sorted(parts)])
                self.topics_formatted += 1
        return (f"{OffsetCheckpointFile.VERSION}\n{self.count}\n" + "".join([texts[t] for t in order])).encode("utf-8")


class _OffsetFormatter(EntryFormatter[Tuple[TopicPartition, int]]):
    def to_line(self, entry: Tuple[TopicPartition, int]) -> str:
        return _offset_lines([entry])[0]

    def from_line(self, line: str) -> Optional[Tuple[TopicPartition, int]]:
        parts = java_split_ws(line)
        if len(parts) != 3 or not parts[0]:
            return None
        p = parse_java_int(parts[1])
        o = parse_java_int(parts[2], INT64_MIN, INT64_MAX)
        if p is None or o is None:
            return None
        return (TopicPartition(parts[0], p), o)


class OffsetCheckpointFile:
    """``{(topic, partition): offset}`` checkpoint (recovery point, log start offset, high
    watermark, cleaner offsets)."""

    VERSION = 0

    def __init__(self, path: os.PathLike[str] | str, create: bool = True) -> None:
        self._file = CheckpointFile(path, self.VERSION, _OffsetFormatter(), create)
        self.path = self._file.path

    def write(self, offsets: Mapping[Tuple[str, int], int], sync: bool = True) -> None:
        """Write all offsets atomically. (Each topic name checked once, each line formatted in
        one step: the broker writes 100,000 entries every few seconds while records arrive.)"""
        for topic in {tp[0] for tp in offsets}:
            _check_topic_name(topic, self.path)
        self._file.write_lines(_offset_lines(offsets.items()), sync)

    def write_if_dir_exists(self, offsets: Mapping[Tuple[str, int], int], sync: bool = True) -> bool:
        return self._file.write_if_dir_exists(
            [(TopicPartition(t, p), o) for (t, p), o in offsets.items()], sync)

    def write_text(self, text: OffsetCheckpointText, sync: bool = True) -> None:
        """Write the entries ``text`` holds atomically; ``text`` is no longer dirty."""
        atomic_write(self.path, text.data(self.path), sync=sync)
        text.dirty = False

    def read(self) -> Dict[TopicPartition, int]:
        """All offsets; empty when the file is missing or empty."""
        return dict(self._file.read())

    @classmethod
    def parse(cls, data: bytes, file: Optional[str] = None) -> Dict[TopicPartition, int]:
        """The offsets of a checkpoint file's bytes (read by the caller, e.g. a read-only view)."""
        return dict(parse_checkpoint(data, cls.VERSION, _OffsetFormatter(), file=file))


# --- leader epochs --------------------------------------------------------------------------------

class EpochEntry(NamedTuple):
    """``(epoch, start_offset)`` of ``leader-epoch-checkpoint``."""
    epoch: int
    start_offset: int


#: a version-0 ``leader-epoch-checkpoint`` as Kafka (and kafkalog) writes it: the count, then
#: ``epoch offset`` lines, each number unsigned and short enough to be in range (an int32 epoch,
#: an int64 offset)
_CANONICAL_EPOCHS = re.compile(rb"0\n([0-9]{1,9})\n((?:[0-9]{1,9} [0-9]{1,18}\n)*)")


class _EpochFormatter(EntryFormatter[EpochEntry]):
    def to_line(self, entry: EpochEntry) -> str:
        return f"{entry[0]} {entry[1]}"

    def parse_canonical(self, data: bytes, version: int) -> Optional[List[EpochEntry]]:
        """One match a file (a restart reads every partition's): 10 calls a line fewer."""
        m = _CANONICAL_EPOCHS.fullmatch(data) if version == 0 else None
        if m is None:
            return None
        numbers = [int(n) for n in m.group(2).split()]
        if len(numbers) != 2 * int(m.group(1)):
            return None                 # (the line-by-line parse names the count's error)
        return [EpochEntry(numbers[i], numbers[i + 1]) for i in range(0, len(numbers), 2)]

    def from_line(self, line: str) -> Optional[EpochEntry]:
        parts = java_split_ws(line)
        if len(parts) != 2:
            return None
        e = parse_java_int(parts[0])
        o = parse_java_int(parts[1], INT64_MIN, INT64_MAX)
        if e is None or o is None:
            return None
        return EpochEntry(e, o)


class LeaderEpochCheckpointFile:
    """``leader-epoch-checkpoint``: ``[EpochEntry]`` in ascending epoch order."""

    VERSION = 0

    def __init__(self, path: os.PathLike[str] | str, create: bool = True) -> None:
        self._file = CheckpointFile(path, self.VERSION, _EpochFormatter(), create)
        self.path = self._file.path

    def write(self, entries: Iterable[EpochEntry], sync: bool = True) -> None:
        self._file.write([EpochEntry(*e) for e in entries], sync)

    @classmethod
    def encode(cls, entries: Iterable[EpochEntry]) -> bytes:
        """The file's bytes holding ``entries`` (a new partition's, made with its directory)."""
        return encode_checkpoint(cls.VERSION, [_EpochFormatter().to_line(e) for e in entries])

    def write_if_dir_exists(self, entries: Iterable[EpochEntry], sync: bool = True) -> bool:
        return self._file.write_if_dir_exists([EpochEntry(*e) for e in entries], sync)

    def read(self) -> List[EpochEntry]:
        return self._file.read()

    def read_if_exists(self) -> Optional[List[EpochEntry]]:
        return self._file.read_if_exists()

    def create_if_missing(self) -> None:
        self._file.create_if_missing()

    def sync_if_exists(self) -> bool:
        return self._file.sync_if_exists()


# --- partition.metadata ---------------------------------------------------------------------------

ZERO_UUID = _uuid.UUID(int=0)


def uuid_to_kafka_string(u: _uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes without padding (22 chars)."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def uuid_from_kafka_string(s: str) -> _uuid.UUID:
    """Kafka's ``Uuid.fromString``; ``ValueError`` when not 16 bytes of URL-safe base64."""
    if len(s) > 24 or not re.fullmatch(r"[A-Za-z0-9_-]+={0,2}", s):
        raise ValueError(f"Invalid UUID string: {s}")
    try:
        raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"Invalid UUID string: {s}") from None
    if len(raw) != 16:
        raise ValueError(f"Unexpected length {len(raw)} of UUID string: {s}")
    return _uuid.UUID(bytes=raw)


class PartitionMetadata(NamedTuple):
    version: int
    topic_id: _uuid.UUID


class PartitionMetadataFile:
    """``partition.metadata``: ``version: 0\\ntopic_id: <base64url uuid>`` (no trailing newline)."""

    CURRENT_VERSION = 0

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self.path = os.fspath(path)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def write(self, topic_id: _uuid.UUID | str, sync: bool = True) -> None:
        """Write atomically; ``topic_id`` is a :class:`uuid.UUID` or Kafka's string form."""
        atomic_write(self.path, self.encode(topic_id, self.path), sync=sync)

    @classmethod
    def encode(cls, topic_id: _uuid.UUID | str, path: str = "") -> bytes:
        """The file's bytes naming ``topic_id`` (the zero ID refused, naming ``path``)."""
        u = topic_id if isinstance(topic_id, _uuid.UUID) else uuid_from_kafka_string(topic_id)
        if u == ZERO_UUID:
            raise CorruptCheckpointError("Cannot write the zero topic id", file=path or None)
        return f"version: {cls.CURRENT_VERSION}\ntopic_id: {uuid_to_kafka_string(u)}".encode()

    def read(self) -> PartitionMetadata:
        """Parse the file; :class:`CorruptCheckpointError` when malformed."""
        try:
            data = read_file(self.path)
        except OSError as err:
            raise io_error(err, self.path, "read partition metadata") from err
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError("partition.metadata is not valid UTF-8",
                                         file=self.path, position=e.start) from None
        lines = _java_lines(text)

        def malformed(i: int) -> CorruptCheckpointError:
            pos = len(text[:lines[i][1]].encode("utf-8")) if i < len(lines) else len(data)
            return CorruptCheckpointError(f"Malformed line in checkpoint file (line {i + 1})",
                                          file=self.path, position=pos)
        if not lines:
            raise malformed(0)
        parts = re.split(r":\s+", lines[0][0])
        if parts[0] != "version" or len(parts) != 2:
            raise malformed(0)
        version = parse_java_int(parts[1])
        if version is None:
            raise malformed(0)
        if version != self.CURRENT_VERSION:
            raise CorruptCheckpointError(f"Unrecognized version of partition metadata file: {version}",
                                         file=self.path, position=0)
        if len(lines) < 2:
            raise malformed(1)
        parts = re.split(r":\s+", lines[1][0])
        if parts[0] != "topic_id" or len(parts) != 2:
            raise malformed(1)
        try:
            topic_id = uuid_from_kafka_string(parts[1])
        except ValueError:
            raise malformed(1) from None
        if topic_id == ZERO_UUID:
            raise CorruptCheckpointError("Invalid topic ID in partition metadata file (zero UUID)",
                                         file=self.path, position=len(text[:lines[1][1]].encode()))
        return PartitionMetadata(version, topic_id)

    def delete(self) -> bool:
        return _unlink(self.path)


# --- meta.properties ------------------------------------------------------------------------------

@dataclass
class MetaProperties:
    """``meta.properties`` of a log dir. ``version`` 0 (ZooKeeper: ``broker.id``) or 1 (KRaft:
    ``node.id``, ``cluster.id`` required). ``node_id`` holds ``broker.id`` for version 0."""

    version: int = 1
    cluster_id: Optional[str] = None
    node_id: Optional[int] = None
    directory_id: Optional[str] = None

    def to_properties(self) -> Dict[str, str]:
        props = {"version": str(self.version)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.node_id is not None:
            props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        return props

    @classmethod
    def from_properties(cls, props: Mapping[str, str], file: Optional[str] = None) -> MetaProperties:
        vtext = props.get("version", "0").strip()
        version = parse_java_int(vtext)
        if version not in (0, 1):
            raise CorruptCheckpointError(f"Unknown meta.properties version '{vtext}'", file=file)
        id_key = "broker.id" if version == 0 else "node.id"
        node_id = None
        if id_key in props:
            node_id = parse_java_int(props[id_key].strip())
            if node_id is None:
                raise CorruptCheckpointError(f"Failed to parse {id_key} property as an int: "
                                             f"'{props[id_key]}'", file=file)
        cluster_id = props.get("cluster.id")
        directory_id = props.get("directory.id")
        if directory_id is not None:
            try:
                uuid_from_kafka_string(directory_id)
            except ValueError:
                raise CorruptCheckpointError(f"Invalid directory.id '{directory_id}'", file=file) from None
        if version == 0 and node_id is None:
            # every Kafka that wrote version 0 named its broker (and read it back as required):
            # without it the file identifies nothing (a damaged or foreign file)
            raise CorruptCheckpointError("Missing required property 'broker.id' (version 0)", file=file)
        if version == 1:
            if cluster_id is None:
                raise CorruptCheckpointError("cluster.id was not found.", file=file)
            if node_id is None:
                raise CorruptCheckpointError("node.id was not found.", file=file)
        return cls(version, cluster_id, node_id, directory_id)

    def write(self, path: os.PathLike[str] | str, sync: bool = True) -> None:
        """Write like ``Properties.store(writer, "")``: ``#``, ``#<date>``, ``key=value``."""
        stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
        atomic_write(path, format_properties(self.to_properties(), ["", stamp]).encode("utf-8"),
                     sync=sync)

    @classmethod
    def read(cls, path: os.PathLike[str] | str) -> MetaProperties:
        p = os.fspath(path)
        data = read_bytes(p, "read meta.properties")
        try:
            text = data.decode("latin-1")
            props = parse_properties(text, file=p)
        except InvalidConfigError as e:
            raise CorruptCheckpointError(e.message, file=p, position=e.position) from None
        return cls.from_properties(props, file=p)


# --- .kafka_cleanshutdown -------------------------------------------------------------------------

class CleanShutdownFile:
    """``.kafka_cleanshutdown`` in a log dir: its existence means "clean shutdown"; content
    ``{"version":0,"brokerEpoch":N}`` (older Kafka: empty)."""

    VERSION = 0

    def __init__(self, log_dir: os.PathLike[str] | str) -> None:
        self.path = os.path.join(os.fspath(log_dir), CLEAN_SHUTDOWN_FILE)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def write(self, broker_epoch: int = -1, sync: bool = True) -> None:
        data = json.dumps({"version": self.VERSION, "brokerEpoch": int(broker_epoch)},
                          separators=(",", ":"))
        atomic_write(self.path, data.encode("utf-8"), sync=sync)

    def read(self) -> int:
        """The broker epoch, or -1 when missing, empty or unreadable (like Kafka)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(1 << 16)
            obj = json.loads(data.decode("utf-8"))
            epoch = obj.get("brokerEpoch", -1) if isinstance(obj, dict) else -1
            return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else -1
        except (OSError, ValueError, UnicodeDecodeError, RecursionError):
            return -1

    def delete(self) -> bool:
        try:
            return _unlink(self.path)
        except OSError as err:
            raise io_error(err, self.path, "delete clean shutdown file") from err


def _unlink(path: str) -> bool:
    """Delete ``path``: False when it did not exist."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
