"""Kafka's tiered storage (KIP-405) for the read-only view: the older segments of a partition
that a remote storage manager moved out of the broker's directory, found in remote storage and
read as :class:`~kafkalog.log.read.partition_view.SegmentSnapshot` s below the local ones.

Two layouts (``remoteStorage.layout``):

- ``kafka``: segment files copied under Kafka's own names, ``<root>/<topic>-<partition>/
  <base>.log`` with its ``.index``, ``.timeindex`` (and ``.txnindex``);
- ``aiven``: the objects of Aiven's remote storage manager
  (:mod:`kafkalog.tiered.aiven_rsm`), ``<root>/<topic>-<topicId>/<partition>/...``.

Options (case-insensitive, the same for ``kafkalog.open(..., read_only=True)`` and the Spark
source): ``remoteStorage`` (a local path or URI; its ``fs.*`` options are the data directory's),
``remoteStorage.layout`` (``kafka``, the default, or ``aiven``), ``remoteStorage.topicId`` (the
Aiven layout, when the local ``partition.metadata`` does not tell and the prefix holds several
incarnations of a topic), ``remoteStorage.privateKeyFile`` (PEM RSA private key of encrypted
Aiven segments). Any other ``remoteStorage.*`` key is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional

from kafkalog.errors import InvalidConfigError, RemoteStorageError
from kafkalog.log.naming import offset_index_file, time_index_file
from kafkalog.log.read.view_files import ViewFiles
from kafkalog.tiered.aiven_rsm import AivenPartitionFiles, list_aiven_segments, load_private_key
from kafkalog.tiered.filesystem import files_for

__all__ = ["RemoteStorage", "REMOTE_STORAGE_OPTIONS", "LAYOUTS", "remote_storage_from_options",
           "RemotePartition", "remote_partition", "topic_id_of"]

REMOTE_STORAGE_OPTIONS = ("remotestorage", "remotestorage.layout", "remotestorage.topicid",
                          "remotestorage.privatekeyfile")
LAYOUTS = ("kafka", "aiven")

_TOPIC_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


@dataclass(frozen=True)
class RemoteStorage:
    """Where a data directory's remote segments are, and in which layout."""
    uri: str
    layout: str = "kafka"
    topic_id: Optional[str] = None
    private_key_file: Optional[str] = None
    fs_options: tuple[tuple[str, str], ...] = ()

    def remote_partition(self, topic: str, partition: int, *, local_files: ViewFiles,
                         local_dir: Optional[str],
                         local_start: Optional[int]) -> Optional[RemotePartition]:
        """The remote segments of ``topic``-``partition`` (:func:`remote_partition`)."""
        return remote_partition(self, topic, partition, local_files=local_files,
                                local_dir=local_dir, local_start=local_start)


def remote_storage_from_options(options: Mapping[str, Any]) -> Optional[RemoteStorage]:
    """The :class:`RemoteStorage` of ``remoteStorage*`` options (None without
    ``remoteStorage``); unknown ``remoteStorage.*`` keys and bad values are an
    :class:`InvalidConfigError`."""
    from kafkalog.tiered.filesystem import FS_OPTIONS
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    for key in opts:
        if key.startswith("remotestorage") and key not in REMOTE_STORAGE_OPTIONS:
            raise InvalidConfigError(f"unknown option {key!r} (remote storage options: "
                                     "remoteStorage, remoteStorage.layout, remoteStorage.topicId, "
                                     "remoteStorage.privateKeyFile)")
    uri = opts.get("remotestorage")
    if uri is None:
        extra = [k for k in opts if k.startswith("remotestorage.")]
        if extra:
            raise InvalidConfigError(f"option {extra[0]!r} needs option 'remoteStorage'")
        return None
    layout = opts.get("remotestorage.layout", "kafka").lower()
    if layout not in LAYOUTS:
        raise InvalidConfigError(f"option 'remoteStorage.layout' must be one of "
                                 f"{', '.join(LAYOUTS)}, got {layout!r}")
    topic_id = opts.get("remotestorage.topicid")
    if topic_id is not None and not _TOPIC_ID.match(topic_id):
        raise InvalidConfigError(f"option 'remoteStorage.topicId' is not a Kafka topic id "
                                 f"(22 base64url characters): {topic_id!r}")
    key_file = opts.get("remotestorage.privatekeyfile")
    if layout != "aiven" and (topic_id is not None or key_file is not None):
        raise InvalidConfigError("options 'remoteStorage.topicId' and "
                                 "'remoteStorage.privateKeyFile' apply to layout 'aiven' only")
    fs = tuple(sorted((k, v) for k, v in opts.items() if k in FS_OPTIONS))
    return RemoteStorage(uri.rstrip("/"), layout, topic_id, key_file, fs)


def topic_id_of(files: ViewFiles, partition_dir: str) -> Optional[str]:
    """The topic id of a partition directory's ``partition.metadata`` (None when absent)."""
    raw = files.read_small(files.join(partition_dir, "partition.metadata"))
    if raw is None:
        return None
    for line in raw.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id" and _TOPIC_ID.match(value.strip()):
            return value.strip()
    return None


@dataclass
class RemotePartition:
    """One partition's remote segments: a :class:`ViewFiles` and the directory to read them
    from as Kafka segment files, their base offsets, and the offset after each one's last when
    known (from the manifest) or None (walk the segment to find it)."""
    files: ViewFiles
    directory: str
    bases: List[int]
    next_offsets: List[Optional[int]]


def _half_uploaded(files: ViewFiles, directory: str, base: int, what: str) -> RemoteStorageError:
    return RemoteStorageError(f"half-uploaded segment: {what}",
                              file=files.join(directory, f"{base:020d}.log"))


def _kafka_layout(storage: RemoteStorage, topic: str, partition: int,
                  ignore_from: Optional[int]) -> Optional[RemotePartition]:
    files = files_for(storage.uri, dict(storage.fs_options))
    directory = files.join(storage.uri, f"{topic}-{partition}")
    if not files.is_dir(directory):
        return None
    names = set(files.list_dir(directory))
    bases = set()
    for name in names:
        stem, _, ext = name.partition(".")
        if ext in ("log", "index", "timeindex") and stem.isdigit() and len(stem) == 20:
            bases.add(int(stem))
    found = []
    for base in sorted(bases):
        if ignore_from is not None and base >= ignore_from:
            continue
        log_name = f"{base:020d}.log"
        if log_name not in names:
            raise _half_uploaded(files, directory, base,
                                 "its indexes are there without the .log object")
        for index in (offset_index_file(directory, base), time_index_file(directory, base)):
            if index.rsplit("/", 1)[-1] not in names:
                raise RemoteStorageError(f"half-uploaded segment: the .log is there without "
                                         f"{index.rsplit('/', 1)[-1]}",
                                         file=files.join(directory, log_name))
        found.append(base)
    return RemotePartition(files, directory, found, [None] * len(found))


def _aiven_layout(storage: RemoteStorage, topic: str, partition: int,
                  local_files: ViewFiles, local_dir: Optional[str],
                  ignore_from: Optional[int]) -> Optional[RemotePartition]:
    files = files_for(storage.uri, dict(storage.fs_options))
    topic_id = storage.topic_id
    if topic_id is None and local_dir is not None:
        topic_id = topic_id_of(local_files, local_dir)
    if topic_id is None:
        if not files.is_dir(storage.uri):
            return None
        ids = sorted(n[len(topic) + 1:] for n in files.list_dir(storage.uri)
                     if n.startswith(topic + "-") and _TOPIC_ID.match(n[len(topic) + 1:]))
        if not ids:
            return None
        if len(ids) > 1:
            raise RemoteStorageError(f"several incarnations of topic {topic!r} ({', '.join(ids)}) "
                                     "and no partition.metadata: set option "
                                     "'remoteStorage.topicId'", file=storage.uri)
        topic_id = ids[0]
    directory = files.join(files.join(storage.uri, f"{topic}-{topic_id}"), str(partition))
    if not files.is_dir(directory):
        return None
    key = None
    if storage.private_key_file is not None:
        pem = files_for(storage.private_key_file).read_small(storage.private_key_file)
        if pem is None:
            raise RemoteStorageError("private key file does not exist",
                                     file=storage.private_key_file)
        key = load_private_key(pem, storage.private_key_file)
    segments = list_aiven_segments(files, directory, key, ignore_from)
    return RemotePartition(AivenPartitionFiles(directory, segments), directory,
                           [s.base_offset for s in segments], [s.next_offset for s in segments])


def remote_partition(storage: RemoteStorage, topic: str, partition: int, *,
                     local_files: ViewFiles, local_dir: Optional[str],
                     local_start: Optional[int]) -> Optional[RemotePartition]:
    """The remote segments of ``topic``-``partition`` below ``local_start`` (the base offset of
    the broker's first local segment: the local copy wins where both exist); None when remote
    storage holds none of this partition."""
    if storage.layout == "aiven":
        return _aiven_layout(storage, topic, partition, local_files, local_dir, local_start)
    return _kafka_layout(storage, topic, partition, local_start)
