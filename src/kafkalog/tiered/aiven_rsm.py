"""Segments uploaded by Aiven's remote storage manager (``tiered-storage-for-apache-kafka``),
read back as Kafka's segment files.

The plugin's layout (read from its source: ``ObjectKeyFactory``, ``SegmentManifestV1``,
``ChunkIndex`` and its serde, ``SegmentIndexesV1Builder``, the transform enumerations):

- keys ``<prefix><topic>-<topicId>/<partition>/<20-digit base offset>-<segment uuid>.<suffix>``,
  suffix ``log`` (the segment, chunked and transformed), ``indexes`` (offset, time, producer
  snapshot, leader epoch and, when present, transaction index, concatenated, each transformed
  whole), ``rsm-manifest`` (JSON);
- the manifest ``{"version": "1", "chunkIndex": {...}, "segmentIndexes": {"offset":
  {"position", "size"}, ...}, "compression": bool, "encryption": {"dataKey", "aad"}?,
  "remoteLogSegmentMetadata": {"startOffset", "endOffset", ...}}``;
- the chunk index ``{"type": "fixed", "originalChunkSize", "originalFileSize",
  "transformedChunkSize", "finalTransformedChunkSize"}`` or ``{"type": "variable",
  "originalChunkSize", "originalFileSize", "transformedChunks": base64(zstd(sizes))}``, the
  sizes encoded as ``count:i32``, then (count > 1) ``base:i32``, ``bytesPerValue:i8``,
  ``count - 1`` values of ``bytesPerValue`` big-endian bytes over ``base``, the last in full;
- each chunk of the ``.log`` compressed with zstd (one frame) when ``compression`` is true, then,
  when encrypted, ``iv (12 bytes) || AES-256-GCM(chunk) || tag (16 bytes)`` with the manifest's
  ``aad``; the AES data key is ``"<key id>:" + base64(RSA-OAEP(SHA3-512, MGF1 SHA3-512))`` of
  it. Indexes are encrypted the same way, never compressed.

:class:`AivenPartitionFiles` presents one partition's objects as a Kafka partition directory
(``<base>.log``, ``.index``, ``.timeindex``, ``.txnindex``) through the read-only view's
:class:`~kafkalog.log.read.view_files.ViewFiles`, so :class:`~kafkalog.log.read.partition_view.SegmentSnapshot`
reads them unchanged: ranged reads of the ``.log`` fetch and detransform only the chunks they
cover (the last few kept).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from kafkalog.errors import KafkalogError, RemoteStorageError
from kafkalog.log.naming import offset_from_file_name
from kafkalog.log.read.view_files import SegmentBytes, ViewFiles

__all__ = ["ChunkIndex", "SegmentManifest", "AivenSegment", "AivenPartitionFiles",
           "parse_manifest", "decode_chunk_sizes", "object_name",
           "list_aiven_segments", "load_private_key", "IV_SIZE", "TAG_SIZE"]

#: ``SegmentEncryptionMetadataV1.IV_SIZE`` and the GCM tag (128 bits)
IV_SIZE = 12
TAG_SIZE = 16
#: ``TransformedChunksDeserializer.MAX_DECOMPRESSED_SIZE``
MAX_CHUNK_INDEX_BYTES = 10 * 1024 * 1024
#: manifests larger than this are refused
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
#: decoded chunks kept per segment (a reader walks forward; the last few cover a batch across
#: a chunk boundary)
_CACHED_CHUNKS = 4

_NAME = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})\.(log|indexes|rsm-manifest)$")
_INDEX_FIELDS = ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction")


def object_name(base_offset: int, segment_id: str, suffix: str) -> str:
    """``<20-digit base offset>-<segment uuid>.<suffix>`` (``ObjectKeyFactory.mainPath``)."""
    return f"{base_offset:020d}-{segment_id}.{suffix}"


# --- the chunk index ------------------------------------------------------------------------------

def decode_chunk_sizes(raw: bytes, where: str) -> List[int]:
    """``ChunkSizesBinaryCodec.decode``; :class:`RemoteStorageError` naming ``where`` when the
    bytes are short or hold a negative size."""
    try:
        (count,) = struct.unpack_from(">i", raw, 0)
        if count < 0 or count > len(raw):
            raise ValueError(f"chunk count {count}")
        if count == 0:
            return []
        if count == 1:
            return [struct.unpack_from(">i", raw, 4)[0]]
        base, width = struct.unpack_from(">ib", raw, 4)
        if not 1 <= width <= 4:
            raise ValueError(f"{width} bytes per value")
        pos = 9
        if pos + (count - 1) * width + 4 > len(raw):
            raise ValueError("short chunk index")
        values = [int.from_bytes(raw[pos + i * width:pos + (i + 1) * width], "big") + base
                  for i in range(count - 1)]
        values.append(struct.unpack_from(">i", raw, pos + (count - 1) * width)[0])
    except (struct.error, ValueError) as err:
        raise RemoteStorageError(f"invalid transformedChunks of the chunk index: {err}",
                                 file=where) from None
    if min(values) < 0:
        raise RemoteStorageError("negative chunk size in the chunk index", file=where)
    return values


@dataclass(frozen=True)
class ChunkIndex:
    """Chunk ``i`` holds original bytes ``[i * original_chunk_size, ...)`` of the ``.log``,
    stored at transformed bytes ``[transformed_starts[i], transformed_starts[i + 1])``."""
    original_chunk_size: int
    original_file_size: int
    transformed_starts: Tuple[int, ...]     # one more than the chunk count

    @property
    def count(self) -> int:
        return len(self.transformed_starts) - 1

    def original_range(self, i: int) -> Tuple[int, int]:
        start = i * self.original_chunk_size
        return start, min(start + self.original_chunk_size, self.original_file_size)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> ChunkIndex:
        if not isinstance(obj, dict):
            raise RemoteStorageError("chunkIndex is not an object", file=where)
        try:
            kind = obj["type"]
            chunk = int(obj["originalChunkSize"])
            size = int(obj["originalFileSize"])
            if chunk <= 0 or size < 0:
                raise ValueError(f"originalChunkSize {chunk}, originalFileSize {size}")
            count = -(-size // chunk)
            if kind == "fixed":
                fixed, final = int(obj["transformedChunkSize"]), int(obj["finalTransformedChunkSize"])
                if fixed < 0 or final < 0:
                    raise ValueError("negative transformed chunk size")
                sizes = [fixed] * max(count - 1, 0) + ([final] if count else [])
            elif kind == "variable":
                packed = base64.b64decode(obj["transformedChunks"], validate=True)
                sizes = decode_chunk_sizes(_zstd_frame(packed, MAX_CHUNK_INDEX_BYTES, where), where)
                if len(sizes) != count:
                    raise ValueError(f"{len(sizes)} chunk sizes for {count} chunks")
            else:
                raise ValueError(f"unknown chunk index type {kind!r}")
        except (KeyError, TypeError, ValueError, binascii.Error) as err:
            raise RemoteStorageError(f"invalid chunkIndex in the manifest: {err!r}",
                                     file=where) from None
        starts = [0]
        for s in sizes:
            starts.append(starts[-1] + s)
        return cls(chunk, size, tuple(starts))


def _zstd_frame(data: bytes, limit: int, where: str) -> bytes:
    """One zstd frame with its content size (as the plugin writes them), at most ``limit``
    bytes decompressed."""
    import zstandard
    try:
        params = zstandard.get_frame_parameters(data)
        size = params.content_size
        if size < 0 or size > limit:
            raise RemoteStorageError(f"zstd frame of {size} bytes (at most {limit} expected)",
                                     file=where)
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=max(size, 1))
    except zstandard.ZstdError as err:
        raise RemoteStorageError(f"invalid zstd frame: {err}", file=where) from None


# --- the manifest ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SegmentManifest:
    """An ``.rsm-manifest``: the chunk index, the positions of the indexes in the ``.indexes``
    object, the transforms, and the segment's first and last offsets."""
    chunk_index: ChunkIndex
    indexes: Mapping[str, Tuple[int, int]]      # field -> (position, size) in .indexes
    compression: bool
    data_key: Optional[str]                     # "<key id>:<base64 wrapped key>"
    aad: Optional[bytes]
    start_offset: Optional[int]
    end_offset: Optional[int]


def parse_manifest(raw: bytes, where: str) -> SegmentManifest:
    """The manifest JSON of a segment (:class:`RemoteStorageError` naming ``where`` when it is
    not version 1 or misses a required field)."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise RemoteStorageError(f"manifest of {len(raw)} bytes is too large", file=where)
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise RemoteStorageError(f"manifest is not JSON: {err}", file=where) from None
    if not isinstance(doc, dict) or doc.get("version") != "1":
        raise RemoteStorageError("not a version 1 segment manifest", file=where)
    chunks = ChunkIndex.from_json(doc.get("chunkIndex"), where)
    try:
        idx = doc["segmentIndexes"]
        indexes: Dict[str, Tuple[int, int]] = {}
        for name in _INDEX_FIELDS:
            entry = idx.get(name)
            if entry is None:
                if name != "transaction":
                    raise KeyError(name)
                continue
            pos, size = int(entry["position"]), int(entry["size"])
            if pos < 0 or size < 0:
                raise ValueError(f"{name} index at {pos} of {size} bytes")
            indexes[name] = (pos, size)
        compression = doc["compression"]
        if not isinstance(compression, bool):
            raise TypeError("compression is not a boolean")
        enc = doc.get("encryption")
        data_key = aad = None
        if enc is not None:
            data_key = str(enc["dataKey"])
            aad = base64.b64decode(enc["aad"], validate=True)
        meta = doc.get("remoteLogSegmentMetadata") or {}
        start = meta.get("startOffset")
        end = meta.get("endOffset")
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as err:
        raise RemoteStorageError(f"invalid segment manifest: missing or bad field {err!s}",
                                 file=where) from None
    return SegmentManifest(chunks, indexes, compression, data_key, aad,
                           None if start is None else int(start),
                           None if end is None else int(end))


# --- decryption -----------------------------------------------------------------------------------

def load_private_key(pem: bytes, where: str) -> Any:
    """An RSA private key from PEM bytes (needs the ``cryptography`` package)."""
    try:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key
    except ImportError:
        raise RemoteStorageError("reading encrypted segments needs the 'cryptography' package",
                                 file=where) from None
    try:
        return load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as err:
        raise RemoteStorageError(f"not a PEM private key: {err}", file=where) from None


def _mgf1_sha3_512(seed: bytes, length: int) -> bytes:
    out = b""
    counter = 0
    while len(out) < length:
        out += hashlib.sha3_512(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return out[:length]


def oaep_sha3_512_decode(em: bytes, k: int) -> bytes:
    """RSAES-OAEP decoding (RFC 8017 7.1.2) with SHA3-512 for the hash and MGF1, empty label
    (BouncyCastle's ``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding``; ``cryptography`` refuses SHA-3
    in OAEP, so the RSA step is done on the key's numbers); ValueError when invalid."""
    h = 64
    em = em.rjust(k, b"\0")
    if k < 2 * h + 2 or em[0] != 0:
        raise ValueError("decryption error")
    masked_seed, masked_db = em[1:1 + h], em[1 + h:]
    seed = bytes(a ^ b for a, b in zip(masked_seed, _mgf1_sha3_512(masked_db, h), strict=True))
    db = bytes(a ^ b for a, b in zip(masked_db, _mgf1_sha3_512(seed, k - h - 1), strict=True))
    if db[:h] != hashlib.sha3_512(b"").digest():
        raise ValueError("decryption error")
    rest = db[h:].lstrip(b"\0")
    if not rest or rest[0] != 1:
        raise ValueError("decryption error")
    return rest[1:]


def oaep_sha3_512_encode(message: bytes, k: int, seed: bytes) -> bytes:
    """RSAES-OAEP encoding, the inverse of :func:`oaep_sha3_512_decode` (for tools and tests
    that write the layout)."""
    h = 64
    if len(message) > k - 2 * h - 2:
        raise ValueError("message too long")
    db = hashlib.sha3_512(b"").digest() + b"\0" * (k - len(message) - 2 * h - 2) + b"\1" + message
    masked_db = bytes(a ^ b for a, b in zip(db, _mgf1_sha3_512(seed, k - h - 1), strict=True))
    masked_seed = bytes(a ^ b for a, b in zip(seed, _mgf1_sha3_512(masked_db, h), strict=True))
    return b"\0" + masked_seed + masked_db


def _rsa_decrypt(private_key: Any, ciphertext: bytes) -> bytes:
    numbers = private_key.private_numbers()
    n, d = numbers.public_numbers.n, numbers.d
    k = (n.bit_length() + 7) // 8
    c = int.from_bytes(ciphertext, "big")
    if len(ciphertext) != k or c >= n:
        raise ValueError("decryption error")
    return oaep_sha3_512_decode(pow(c, d, n).to_bytes(k, "big"), k)


class _Decryptor:
    """AES-GCM of one segment's chunks, the data key unwrapped with the user's RSA key."""

    def __init__(self, manifest: SegmentManifest, private_key: Any, where: str) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        assert manifest.data_key is not None
        key_id, sep, wrapped = manifest.data_key.partition(":")
        if not sep or ":" in wrapped or not key_id:
            raise RemoteStorageError("malformed encrypted data key string", file=where)
        try:
            data_key = _rsa_decrypt(private_key, base64.b64decode(wrapped, validate=True))
            self._aes = AESGCM(data_key)
        except (ValueError, binascii.Error) as err:
            raise RemoteStorageError(f"cannot unwrap the data key of key id {key_id!r} with the "
                                     f"private key given: {err}", file=where) from None
        self._aad = manifest.aad
        self._where = where

    def __call__(self, chunk: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        if len(chunk) < IV_SIZE + TAG_SIZE:
            raise RemoteStorageError(f"encrypted chunk of {len(chunk)} bytes is too short",
                                     file=self._where)
        try:
            return self._aes.decrypt(chunk[:IV_SIZE], chunk[IV_SIZE:], self._aad)
        except InvalidTag:
            raise RemoteStorageError("encrypted chunk fails authentication (wrong key or "
                                     "damaged object)", file=self._where) from None


# --- one segment ----------------------------------------------------------------------------------

class AivenSegment:
    """The three objects of one uploaded segment, read through ``files`` (the bucket's
    :class:`ViewFiles`): the manifest parsed when listed, chunks and indexes on demand."""

    def __init__(self, files: ViewFiles, directory: str, base_offset: int, segment_id: str,
                 manifest: SegmentManifest, private_key: Any = None) -> None:
        self.files = files
        self.directory = directory
        self.base_offset = base_offset
        self.segment_id = segment_id
        self.manifest = manifest
        self.log_key = files.join(directory, object_name(base_offset, segment_id, "log"))
        self.indexes_key = files.join(directory, object_name(base_offset, segment_id, "indexes"))
        self.manifest_key = files.join(directory, object_name(base_offset, segment_id,
                                                              "rsm-manifest"))
        self._decrypt: Optional[_Decryptor] = None
        if manifest.data_key is not None:
            if private_key is None:
                raise RemoteStorageError("the segment is encrypted: give the RSA private key "
                                         "(option remoteStorage.privateKeyFile)",
                                         file=self.manifest_key)
            self._decrypt = _Decryptor(manifest, private_key, self.manifest_key)
        self._chunks: OrderedDict[int, bytes] = OrderedDict()
        self._indexes: Optional[bytes] = None
        self._lock = threading.Lock()

    @property
    def next_offset(self) -> Optional[int]:
        """The offset after the segment's last (``endOffset + 1``), when the manifest says."""
        end = self.manifest.end_offset
        return None if end is None else end + 1

    def _detransform(self, data: bytes, decompress: bool, where: str) -> bytes:
        if self._decrypt is not None:
            data = self._decrypt(data)
        if decompress:
            data = _zstd_frame(data, self.manifest.chunk_index.original_chunk_size, where)
        return data

    def _fetch_chunks(self, first: int, last: int) -> None:
        """Fetch chunks ``first..last`` (one ranged GET) into the cache."""
        ci = self.manifest.chunk_index
        lo, hi = ci.transformed_starts[first], ci.transformed_starts[last + 1]
        raw = self.files.read_range(self.log_key, lo, hi - lo)
        if len(raw) != hi - lo:
            raise RemoteStorageError(f"object holds {lo + len(raw)} bytes, the manifest's chunk "
                                     f"index needs {hi}", file=self.log_key)
        for i in range(first, last + 1):
            part = raw[ci.transformed_starts[i] - lo:ci.transformed_starts[i + 1] - lo]
            data = self._detransform(part, self.manifest.compression, self.log_key)
            o_lo, o_hi = ci.original_range(i)
            if len(data) != o_hi - o_lo:
                raise RemoteStorageError(f"chunk {i} holds {len(data)} bytes, the chunk index "
                                         f"says {o_hi - o_lo}", file=self.log_key)
            self._chunks[i] = data
            self._chunks.move_to_end(i)
        while len(self._chunks) > max(_CACHED_CHUNKS, last - first + 1):
            self._chunks.popitem(last=False)

    def read_log(self, position: int, length: int) -> bytes:
        """Original bytes ``[position, position + length)`` of the segment (fewer at its end)."""
        ci = self.manifest.chunk_index
        end = min(position + length, ci.original_file_size)
        if position >= end:
            return b""
        first, last = position // ci.original_chunk_size, (end - 1) // ci.original_chunk_size
        with self._lock:
            missing = [i for i in range(first, last + 1) if i not in self._chunks]
            if missing:
                self._fetch_chunks(missing[0], missing[-1])
            parts = []
            for i in range(first, last + 1):
                o_lo, _ = ci.original_range(i)
                data = self._chunks[i]
                parts.append(data[max(position - o_lo, 0):end - o_lo])
        return b"".join(parts)

    def index_bytes(self, field: str) -> Optional[bytes]:
        """One index of the ``.indexes`` object (None when the manifest lists none)."""
        entry = self.manifest.indexes.get(field)
        if entry is None:
            return None
        pos, size = entry
        if size == 0:
            return b""
        with self._lock:
            if self._indexes is None:
                total = max(p + s for p, s in self.manifest.indexes.values())
                raw = self.files.read_range(self.indexes_key, 0, total)
                if len(raw) != total:
                    raise RemoteStorageError(f"object holds {len(raw)} bytes, the manifest's "
                                             f"segmentIndexes need {total}", file=self.indexes_key)
                self._indexes = raw
        return self._detransform(self._indexes[pos:pos + size], False, self.indexes_key)


class _LogRanges:
    """The :class:`~kafkalog.log.read.view_files.RangeSource` of an uploaded ``.log``."""

    def __init__(self, segment: AivenSegment) -> None:
        self.segment = segment

    def __call__(self, position: int, length: int) -> bytes:
        return self.segment.read_log(position, length)

    def close(self) -> None:
        pass


# --- a partition's objects as a partition directory ----------------------------------------------

_KIND_FIELD = {".index": "offset", ".timeindex": "timestamp", ".txnindex": "transaction"}


class AivenPartitionFiles:
    """:class:`ViewFiles` over the segments of one partition uploaded by the plugin, named as
    Kafka names segment files in :attr:`directory` (the partition's prefix)."""

    def __init__(self, directory: str, segments: Sequence[AivenSegment]) -> None:
        self.directory = directory
        self.segments: Dict[int, AivenSegment] = {s.base_offset: s for s in segments}
        self._index_cache: Dict[str, Optional[bytes]] = {}

    def join(self, directory: str, name: str) -> str:
        return f"{directory.rstrip('/')}/{name}"

    def is_dir(self, path: str) -> bool:
        return path.rstrip("/") == self.directory.rstrip("/")

    def list_dir(self, path: str) -> List[str]:
        names = []
        for base, seg in self.segments.items():
            names += [f"{base:020d}.log", f"{base:020d}.index", f"{base:020d}.timeindex"]
            if "transaction" in seg.manifest.indexes:
                names.append(f"{base:020d}.txnindex")
        return names

    def _lookup(self, path: str) -> Tuple[Optional[AivenSegment], str]:
        name = path.rsplit("/", 1)[-1]
        stem, dot, ext = name.partition(".")
        try:
            seg = self.segments.get(offset_from_file_name(stem + ".log"))
        except KafkalogError:
            return None, ""
        return seg, dot + ext

    def _index(self, path: str) -> Optional[bytes]:
        if path not in self._index_cache:
            seg, ext = self._lookup(path)
            field = _KIND_FIELD.get(ext)
            self._index_cache[path] = (None if seg is None or field is None
                                       else seg.index_bytes(field))
        return self._index_cache[path]

    def read_small(self, path: str) -> Optional[bytes]:
        return self._index(path)

    def size(self, path: str) -> Optional[int]:
        seg, ext = self._lookup(path)
        if seg is None:
            return None
        if ext == ".log":
            return seg.manifest.chunk_index.original_file_size
        data = self._index(path)
        return None if data is None else len(data)

    def read_range(self, path: str, position: int, length: int) -> bytes:
        seg, ext = self._lookup(path)
        if seg is not None and ext == ".log":
            return seg.read_log(position, length)
        data = self._index(path) or b""
        return data[position:position + length]

    def open_segment(self, path: str) -> Optional[SegmentBytes]:
        seg, ext = self._lookup(path)
        if seg is None or ext != ".log":
            return None
        return SegmentBytes(seg.log_key, b"", size=seg.manifest.chunk_index.original_file_size,
                            ranges=_LogRanges(seg))


def list_aiven_segments(files: ViewFiles, directory: str, private_key: Any = None,
                        ignore_from: Optional[int] = None) -> List[AivenSegment]:
    """The uploaded segments in one partition prefix, sorted by base offset, their manifests
    read. A manifest without its ``.log`` or ``.indexes`` object, or a ``.log`` without its
    manifest (an upload that did not finish), is a :class:`RemoteStorageError` naming the
    object, except for segments at or above ``ignore_from`` (the broker's local log still holds
    those offsets: the upload may be in progress)."""
    objects: Dict[Tuple[int, str], Dict[str, str]] = {}
    for name in files.list_dir(directory):
        m = _NAME.match(name)
        if m is not None:
            objects.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = name
    found = []
    for (base, seg_id), kinds in sorted(objects.items()):
        if ignore_from is not None and base >= ignore_from:
            continue
        for needed in ("rsm-manifest", "log", "indexes"):
            if needed not in kinds:
                present = ", ".join(files.join(directory, n) for n in sorted(kinds.values()))
                raise RemoteStorageError(
                    f"half-uploaded segment: {present} without its .{needed} object",
                    file=files.join(directory, object_name(base, seg_id, needed)))
        key = files.join(directory, kinds["rsm-manifest"])
        raw = files.read_small(key)
        if raw is None:
            raise RemoteStorageError("manifest disappeared after the listing", file=key)
        manifest = parse_manifest(raw, key)
        if manifest.start_offset is not None and manifest.start_offset != base:
            raise RemoteStorageError(f"manifest's startOffset {manifest.start_offset} differs "
                                     f"from the object name's {base}", file=key)
        found.append(AivenSegment(files, directory, base, seg_id, manifest, private_key))
    return found

