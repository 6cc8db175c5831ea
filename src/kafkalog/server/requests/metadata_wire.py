"""The topics of a Metadata response written by hand (issue 35): a Metadata request for every
topic of a node with 10,000 partitions built 10,000 partition entities through kio (~300 ms on
the event loop); here a partition is one ``struct`` pack of its fixed-size entry. The rest of the
response (header, brokers, cluster id...) is kio's: it is encoded with an empty topics array, and
the topics written here take that array's place (:func:`splice_topics`). The bytes are kio's
for every version (tests/server/test_metadata_wire.py compares them)."""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Sequence

from kafkalog.server.requests import wire
from kafkalog.server.requests.frames import frame

#: the first flexible version; topic IDs from v10, nullable names from v12, a top-level error from v13
FIRST_FLEXIBLE = 9
_BOOL = struct.Struct(">?")


@functools.cache
def _partition_entry(version: int, node: int) -> tuple[struct.Struct, bytes]:
    """A led partition's entry: error code, index, leader, leader epoch (v7+), then a tail the
    same for every partition: replicas and ISR (this node alone), the empty offline replicas
    (v5+), the empty tags (flexible versions)."""
    flex = version >= FIRST_FLEXIBLE
    this_node = wire.array_len(1, flex) + wire.INT32.pack(node)
    tail = this_node + this_node + (wire.array_len(0, flex) if version >= 5 else b"") + \
        (wire.EMPTY_TAGS if flex else b"")
    return struct.Struct(">hii" + ("i" if version >= 7 else "") + f"{len(tail)}s"), tail


def partitions_entry(version: int, node: int, epochs: Sequence[tuple[int, int]]) -> bytes:
    """The partitions array of a topic this node leads whole: ``epochs`` gives (index, leader
    epoch) of each partition."""
    entry, tail = _partition_entry(version, node)
    pack = entry.pack
    if version >= 7:
        body = [pack(0, p, node, e, tail) for p, e in epochs]
    else:
        body = [pack(0, p, node, tail) for p, _e in epochs]
    return wire.array_len(len(body), version >= FIRST_FLEXIBLE) + b"".join(body)


def topic_entry(version: int, error_code: int, name: str | None, topic_id: uuid.UUID | None,
                is_internal: bool, partitions: bytes | None, operations: int) -> bytes:
    """One topic of the response; ``partitions`` is :func:`partitions_entry` (None: no partition)."""
    return topic_head(version, error_code, name, topic_id, is_internal, partitions) + \
        topic_tail(version, operations)


def topic_head(version: int, error_code: int, name: str | None, topic_id: uuid.UUID | None,
               is_internal: bool, partitions: bytes | None) -> bytes:
    """A topic's entry up to its partitions included: what does not depend on who asks."""
    flex = version >= FIRST_FLEXIBLE
    out = [wire.INT16.pack(error_code),
           wire.nullable_string(name, flex) if version >= 12 else wire.string(name or "", flex)]
    if version >= 10:
        out.append(wire.uuid_bytes(topic_id))
    if version >= 1:
        out.append(_BOOL.pack(is_internal))
    out.append(partitions if partitions is not None else wire.array_len(0, flex))
    return b"".join(out)


@functools.lru_cache(maxsize=256)
def topic_tail(version: int, operations: int) -> bytes:
    """The rest of a topic's entry after its partitions: the authorized operations (v8+), the
    empty tags (flexible versions)."""
    return (wire.INT32.pack(operations) if version >= 8 else b"") + \
        (wire.EMPTY_TAGS if version >= FIRST_FLEXIBLE else b"")


def splice_topics(version: int, without_topics: bytes, topics: list[bytes]) -> bytes:
    """The response frame ``without_topics`` (kio's encoding of the response with an empty topics
    array, size field included) with ``topics`` in that array's place. After the topics come the
    cluster's authorized operations (v8-v10), the top-level error code (v13+) and the tags
    (flexible versions)."""
    flex = version >= FIRST_FLEXIBLE
    after = (4 if 8 <= version <= 10 else 0) + (2 if version >= 13 else 0) + (1 if flex else 0)
    empty = wire.array_len(0, flex)
    end = len(without_topics) - after
    start = end - len(empty)
    if without_topics[start:end] != empty:
        raise AssertionError(f"Metadata v{version}: no empty topics array where expected")
    return frame(b"".join([without_topics[4:start], wire.array_len(len(topics), flex), *topics,
                           without_topics[end:]]))
