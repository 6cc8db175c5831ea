"""The Aiven remote storage manager's manifest and chunk index, checked against the plugin's own
test vectors (tiered-storage-for-apache-kafka: ChunkIndexSerializationTest,
SegmentManifestV1SerdeTest)."""

from __future__ import annotations

import json

import pytest

from kafkalog.errors import RemoteStorageError
from kafkalog.tiered.aiven_rsm import ChunkIndex, parse_manifest

# ChunkIndexSerializationTest.ENCODED_CHUNKS: sizes 10, 20, 30 (zstd + base64)
ENCODED_CHUNKS = "KLUv/SAPeQAAAAAAAwAAAAoBAAoAAAAe"

METADATA = ('{"remoteLogSegmentId":{"topicIdPartition":{"topicId":"lZ6vvmajTWKDBUTV6SQAtQ",'
            '"topicPartition":{"topic":"topic1","partition":42}},"id":"adh9f8BMS4anaUnD8KWfWg"},'
            '"startOffset":0,"endOffset":1000,"maxTimestampMs":1000000000,"brokerId":2,'
            '"eventTimestampMs":2000000000,"segmentLeaderEpochs":{"0":100,"1":200,"2":300}}')
# SegmentManifestV1SerdeTest.WITHOUT_ENCRYPTION_JSON
MANIFEST = ('{"version":"1","chunkIndex":{"type":"fixed","originalChunkSize":100,'
            '"originalFileSize":1000,"transformedChunkSize":110,"finalTransformedChunkSize":110},'
            '"segmentIndexes":{"offset":{"position":0,"size":1},"timestamp":{"position":1,'
            '"size":1},"producerSnapshot":{"position":2,"size":1},"leaderEpoch":{"position":3,'
            '"size":1},"transaction":{"position":4,"size":1}},"compression":false,'
            '"remoteLogSegmentMetadata":' + METADATA + '}')


def test_variable_chunk_index_of_the_plugin():
    idx = ChunkIndex.from_json({"type": "variable", "originalChunkSize": 100,
                                "originalFileSize": 250, "transformedChunks": ENCODED_CHUNKS}, "m")
    # Chunk(0, 0, 100, 0, 10), Chunk(1, 100, 100, 10, 20), Chunk(2, 200, 50, 30, 30)
    assert idx.transformed_starts == (0, 10, 30, 60)
    assert [idx.original_range(i) for i in range(idx.count)] == [(0, 100), (100, 200), (200, 250)]


def test_fixed_chunk_index_of_the_plugin():
    idx = ChunkIndex.from_json({"type": "fixed", "originalChunkSize": 100, "originalFileSize": 250,
                                "transformedChunkSize": 110, "finalTransformedChunkSize": 30}, "m")
    # Chunk(0, 0, 100, 0, 110), Chunk(1, 100, 100, 110, 110), Chunk(2, 200, 50, 220, 30)
    assert idx.transformed_starts == (0, 110, 220, 250)


def test_manifest_of_the_plugin():
    m = parse_manifest(MANIFEST.encode(), "k.rsm-manifest")
    assert (m.start_offset, m.end_offset, m.compression, m.data_key) == (0, 1000, False, None)
    assert m.indexes["offset"] == (0, 1) and m.indexes["transaction"] == (4, 1)
    assert m.chunk_index.count == 10
    without_txn = json.loads(MANIFEST)
    without_txn["segmentIndexes"]["transaction"] = None
    assert "transaction" not in parse_manifest(json.dumps(without_txn).encode(), "k").indexes


@pytest.mark.parametrize("change", [
    lambda d: d.pop("chunkIndex"),
    lambda d: d["chunkIndex"].pop("originalChunkSize"),
    lambda d: d["segmentIndexes"].pop("offset"),
    lambda d: d.pop("compression"),
    lambda d: d.update(version="2"),
    lambda d: d["chunkIndex"].update(type="variable", transformedChunks="!!"),
])
def test_bad_manifest_is_a_typed_error_naming_the_object(change):
    doc = json.loads(MANIFEST)
    change(doc)
    with pytest.raises(RemoteStorageError) as err:
        parse_manifest(json.dumps(doc).encode(), "s3://b/t-x/0/000.rsm-manifest")
    assert err.value.file == "s3://b/t-x/0/000.rsm-manifest"
