"""Fixtures of Kafka's tiered storage: a broker data directory whose older segments were moved to
an S3-compatible server, in the two layouts kafkalog reads.

- ``kafka``: the segment files copied under Kafka's names to ``<root>/<topic>-<p>/``;
- ``aiven``: what Aiven's remote storage manager (tiered-storage-for-apache-kafka) uploads,
  written here from a reading of its source (``RemoteStorageManager.copyLogSegmentData``,
  ``ObjectKeyFactory``, ``SegmentManifestV1`` and its Jackson serde, ``ChunkSizesBinaryCodec``,
  ``CompressionChunkEnumeration``, ``EncryptionChunkEnumeration``, ``RsaEncryptionProvider``):
  ``<topic>-<topicId>/<p>/<base:020d>-<segmentId>.log|.indexes|.rsm-manifest``.

Independent of kafkalog's reader on purpose: zstd, AES-GCM and RSA come from their libraries.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import uuid

IV_SIZE = 12


def kafka_uuid() -> str:
    """A Kafka ``Uuid.toString()``: base64url of 16 bytes without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def segment_bases(partition_dir) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(partition_dir) if n.endswith(".log"))


def _index_bytes(path) -> bytes:
    """An index file as a sealed segment has it (Kafka trims the preallocation on roll)."""
    return open(path, "rb").read() if os.path.exists(path) else b""


def _chunk_sizes(values: list[int]) -> bytes:
    """``ChunkSizesBinaryCodec.encode``."""
    if not values:
        return struct.pack(">i", 0)
    if len(values) == 1:
        return struct.pack(">ii", 1, values[0])
    base = min(values[:-1])
    width = max(1 if v - base <= 0xFF else 2 if v - base <= 0xFFFF
                else 3 if v - base <= 0xFFFFFF else 4 for v in values[:-1])
    return (struct.pack(">iib", len(values), base, width)
            + b"".join((v - base).to_bytes(4, "big")[4 - width:] for v in values[:-1])
            + struct.pack(">i", values[-1]))


class PythonSegmentCipher:
    """The plugin's encryption done here: AES-GCM from ``cryptography``, the RSA-OAEP(SHA3-512)
    wrap of the data key with kafkalog's own OAEP encoder (``cryptography`` refuses SHA-3 in OAEP;
    ``tests/objectstore/java/AivenCrypto.java`` checks this encoder against Java's JCE)."""

    def __init__(self, rsa_private_key, key_id: str = "key1") -> None:
        self.private_key = rsa_private_key
        self.key_id = key_id

    def _encrypt(self, key: bytes, aad: bytes, data: bytes) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        iv = os.urandom(IV_SIZE)
        return iv + AESGCM(key).encrypt(iv, data, aad)

    def _wrap(self, key: bytes) -> str:
        """RSA/NONE/OAEPWithSHA3-512AndMGF1Padding (BouncyCastle) of the data key."""
        from kafkalog.tiered.aiven_rsm import oaep_sha3_512_encode
        pub = self.private_key.public_key().public_numbers()
        k = (pub.n.bit_length() + 7) // 8
        em = oaep_sha3_512_encode(key, k, os.urandom(64))
        wrapped = pow(int.from_bytes(em, "big"), pub.e, pub.n).to_bytes(k, "big")
        return f"{self.key_id}:{base64.b64encode(wrapped).decode()}"

    def encrypt_segment(self, pieces: list[bytes]) -> tuple[list[bytes], str, bytes]:
        """A new data key and AAD for one segment: its pieces (chunks, indexes) encrypted, the
        serialized wrapped data key (``keyId:base64``) and the AAD."""
        data_key, aad = os.urandom(32), os.urandom(32)
        return [self._encrypt(data_key, aad, p) for p in pieces], self._wrap(data_key), aad


class AivenWriter:
    """Uploads segments as the plugin does (``chunk.size``, ``compression.enabled``,
    ``encryption.enabled`` with an RSA key pair: ``rsa_private_key``, or any ``cipher`` with
    :meth:`PythonSegmentCipher.encrypt_segment`)."""

    def __init__(self, s3, root: str, *, chunk_size: int = 4096, compression: bool = False,
                 rsa_private_key=None, key_id: str = "key1", cipher=None) -> None:
        self.s3 = s3
        self.root = root.rstrip("/")
        self.chunk_size = chunk_size
        self.compression = compression
        self.cipher = cipher if cipher is not None or rsa_private_key is None \
            else PythonSegmentCipher(rsa_private_key, key_id)

    def _zstd(self, data: bytes) -> bytes:
        import zstandard
        return zstandard.ZstdCompressor(write_content_size=True).compress(data)

    def put(self, key: str, data: bytes) -> None:
        put_object(self.s3, key, data)

    def upload(self, partition_dir, topic: str, topic_id: str, partition: int, base: int,
               *, parts: tuple[str, ...] = ("log", "indexes", "rsm-manifest")) -> str:
        """Upload one local segment; returns its key without suffix."""
        seg_id = kafka_uuid()
        main = f"{self.root}/{topic}-{topic_id}/{partition}/{base:020d}-{seg_id}"
        log = open(os.path.join(partition_dir, f"{base:020d}.log"), "rb").read()
        encrypted = self.cipher is not None
        chunks = [log[i:i + self.chunk_size] for i in range(0, len(log), self.chunk_size)]
        out = [self._zstd(c) for c in chunks] if self.compression else chunks
        # indexes: offset, timestamp, producer snapshot, leader epoch, transaction (if any)
        stem = os.path.join(partition_dir, f"{base:020d}")
        sources = [("offset", _index_bytes(stem + ".index")),
                   ("timestamp", _index_bytes(stem + ".timeindex")),
                   ("producerSnapshot", b""), ("leaderEpoch", b"0\n0\n")]
        if os.path.exists(stem + ".txnindex"):
            sources.append(("transaction", open(stem + ".txnindex", "rb").read()))
        if encrypted:
            # every chunk, then every non-empty index (empty ones stay empty), one data key
            nonempty = [i for i, (_n, raw) in enumerate(sources) if raw]
            n = len(out)
            pieces, data_key, aad = self.cipher.encrypt_segment(out + [sources[i][1] for i in nonempty])
            out = pieces[:n]
            for i, enc in zip(nonempty, pieces[n:], strict=True):
                sources[i] = (sources[i][0], enc)
        if self.compression:
            chunk_index = {"type": "variable", "originalChunkSize": self.chunk_size,
                           "originalFileSize": len(log), "transformedChunks": base64.b64encode(
                               self._zstd(_chunk_sizes([len(c) for c in out]))).decode()}
        else:
            fixed = self.chunk_size + (IV_SIZE + 16 if encrypted else 0)
            chunk_index = {"type": "fixed", "originalChunkSize": self.chunk_size,
                           "originalFileSize": len(log), "transformedChunkSize": fixed,
                           "finalTransformedChunkSize": len(out[-1]) if out else 0}
        blob, pos = b"", 0
        seg_indexes: dict[str, dict[str, int] | None] = {}
        for name, raw in sources:
            seg_indexes[name] = {"position": pos, "size": len(raw)}
            blob += raw
            pos += len(raw)
        seg_indexes.setdefault("transaction", None)
        last = _last_offset(log)
        manifest = {"version": "1", "chunkIndex": chunk_index, "segmentIndexes": seg_indexes,
                    "compression": self.compression}
        if encrypted:
            manifest["encryption"] = {"dataKey": data_key,
                                      "aad": base64.b64encode(aad).decode()}
        manifest["remoteLogSegmentMetadata"] = {
            "remoteLogSegmentId": {"topicIdPartition": {
                "topicId": topic_id, "topicPartition": {"topic": topic, "partition": partition}},
                "id": seg_id},
            "startOffset": base, "endOffset": last, "maxTimestampMs": 0, "brokerId": 0,
            "eventTimestampMs": 0, "segmentLeaderEpochs": {"0": base}}
        if "log" in parts:
            self.put(main + ".log", b"".join(out))
        if "indexes" in parts:
            self.put(main + ".indexes", blob)
        if "rsm-manifest" in parts:
            self.put(main + ".rsm-manifest", json.dumps(manifest).encode())
        return main


def _last_offset(log: bytes) -> int:
    """The last offset of the last v2 batch of a segment (base offset + lastOffsetDelta)."""
    pos, last = 0, -1
    while pos + 12 <= len(log):
        base, length = struct.unpack_from(">qi", log, pos)
        (delta,) = struct.unpack_from(">i", log, pos + 23)
        last = base + delta
        pos += 12 + length
    return last


def put_object(s3, key: str, data: bytes) -> None:
    """One PUT of ``bucket/key`` to the test server (boto3: a single request, where pyarrow's
    streamed upload is slow against moto)."""
    import boto3
    bucket, _, name = key.partition("/")
    client = boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    client.put_object(Bucket=bucket, Key=name, Body=data)


def write_partition_metadata(partition_dir, topic_id: str) -> None:
    with open(os.path.join(partition_dir, "partition.metadata"), "w") as f:
        f.write(f"version: 0\ntopic_id: {topic_id}\n")
