"""Kafka's tiered storage through ``kafkalog.open(..., read_only=True)``: a broker directory whose
older segments were moved to an S3-compatible server (moto on 127.0.0.1), in Kafka's own file
names and in the layout of Aiven's remote storage manager (plain, zstd-compressed, encrypted);
offsets continuous across both; a deleted remote segment is data loss naming the offsets; a
half-uploaded segment is an error naming the object."""

from __future__ import annotations

import os
import shutil

import pytest

import kafkalog
from kafkalog.errors import DataLossError, InvalidConfigError, RemoteStorageError
from tests.objectstore.tiered_layouts import (
    AivenWriter,
    kafka_uuid,
    put_object,
    segment_bases,
    write_partition_metadata,
)

RECORDS = 6000
TOPIC = "orders"


@pytest.fixture(scope="module")
def broker_dir(tmp_path_factory):
    """A partition of several segments, as a broker would have it before tiering."""
    d = tmp_path_factory.mktemp("broker")
    with kafkalog.open(d, {"log.segment.bytes": 20_000}, background=False) as dl:
        dl.create_topic(TOPIC, partitions=1)
        dl.produce_many(TOPIC, [b"order-%06d" % i for i in range(RECORDS)], partition=0,
                        batch_size=200)
    assert len(segment_bases(d / f"{TOPIC}-0")) >= 6
    return d


def _tiered_copy(broker_dir, tmp_path, moved: int):
    """A copy of the broker directory whose first ``moved`` segments are gone (tiered out)
    except the last of them (a local copy not yet deleted by local retention)."""
    local = tmp_path / "local"
    shutil.copytree(broker_dir, local)
    pdir = local / f"{TOPIC}-0"
    bases = segment_bases(pdir)
    for base in bases[:moved - 1]:
        for name in os.listdir(pdir):
            if name.startswith(f"{base:020d}."):
                os.unlink(pdir / name)
    return local, pdir, bases


def _upload_kafka_layout(s3, pdir, bases, root: str, skip=()) -> None:
    for base in bases:
        if base in skip:
            continue
        for ext in ("log", "index", "timeindex"):
            name = f"{base:020d}.{ext}"
            put_object(s3, f"{root}/{TOPIC}-0/{name}", open(os.path.join(pdir, name), "rb").read())


def _read_all(local, options):
    with kafkalog.open(local, options, read_only=True) as dl:
        return [(r.offset, r.value) for r in dl.consume(TOPIC, 0)]


def _bucket(s3, name):
    try:
        s3.filesystem().create_dir(name)
    except OSError:
        pass


def _kafka_tiered(s3, broker_dir, tmp_path, root: str, skip=(), log_start=None):
    """A broker directory whose first 3 segments are only in remote storage (layout ``kafka``,
    under ``tiered/<root>``) but those in ``skip``; with a ``log-start-offset-checkpoint`` saying
    ``log_start`` when given. Returns (local dir, base offsets, read options)."""
    local, pdir, bases = _tiered_copy(broker_dir, tmp_path, moved=4)
    if log_start is not None:
        (local / "log-start-offset-checkpoint").write_text(f"0\n1\n{TOPIC} 0 {log_start}\n")
    _bucket(s3, "tiered")
    _upload_kafka_layout(s3, broker_dir / f"{TOPIC}-0", bases[:4], f"tiered/{root}", skip=skip)
    return local, bases, {**s3.options, "remoteStorage": f"s3://tiered/{root}"}


def test_kafka_layout_offsets_continuous(s3_server, broker_dir, tmp_path):
    local, pdir, bases = _tiered_copy(broker_dir, tmp_path, moved=4)
    _bucket(s3_server, "tiered")
    _upload_kafka_layout(s3_server, broker_dir / f"{TOPIC}-0", bases[:4], "tiered/kafka-plain")
    assert _read_all(local, {})[0][0] == bases[3]          # without remote storage: local only
    opts = {**s3_server.options, "remoteStorage": "s3://tiered/kafka-plain"}
    got = _read_all(local, opts)
    assert got == [(i, b"order-%06d" % i) for i in range(RECORDS)]
    with kafkalog.open(local, opts, read_only=True) as dl:
        assert dl.beginning_offsets(TOPIC) == {0: 0}
        assert dl.end_offsets(TOPIC) == {0: RECORDS}
        assert [r.offset for r in dl.consume(TOPIC, 0, offset=bases[1] + 3)][:2] == \
            [bases[1] + 3, bases[1] + 4]


def test_kafka_layout_deleted_segment_is_data_loss(s3_server, broker_dir, tmp_path):
    local, bases, opts = _kafka_tiered(s3_server, broker_dir, tmp_path, "kafka-gap",
                                       skip=(segment_bases(broker_dir / f"{TOPIC}-0")[1],))
    with pytest.raises(DataLossError) as err:
        _read_all(local, opts)
    assert f"offsets {bases[1]}..{bases[2] - 1}" in str(err.value)
    # a read after the gap does not cross it
    with kafkalog.open(local, opts, read_only=True) as dl:
        assert next(iter(dl.consume(TOPIC, 0, offset=bases[2]))).offset == bases[2]


def test_kafka_layout_half_uploaded(s3_server, broker_dir, tmp_path):
    local, pdir, bases = _tiered_copy(broker_dir, tmp_path, moved=3)
    _bucket(s3_server, "tiered")
    _upload_kafka_layout(s3_server, broker_dir / f"{TOPIC}-0", bases[:3], "tiered/kafka-half")
    s3_server.filesystem().delete_file(f"tiered/kafka-half/{TOPIC}-0/{bases[1]:020d}.index")
    opts = {**s3_server.options, "remoteStorage": "s3://tiered/kafka-half"}
    with pytest.raises(RemoteStorageError) as err:
        _read_all(local, opts)
    assert err.value.file == f"s3://tiered/kafka-half/{TOPIC}-0/{bases[1]:020d}.log"
    assert "without 00000000000000" in str(err.value)


def _aiven(s3_server, broker_dir, tmp_path, root, *, skip=(), half=None, **writer):
    local, pdir, bases = _tiered_copy(broker_dir, tmp_path, moved=5)
    topic_id = kafka_uuid()
    write_partition_metadata(pdir, topic_id)
    _bucket(s3_server, "aiven")
    w = AivenWriter(s3_server, f"aiven/{root}", **writer)
    keys = {}
    for base in bases[:5]:
        if base in skip:
            continue
        parts = ("log", "indexes", "rsm-manifest") if base != half else ("indexes", "rsm-manifest")
        keys[base] = w.upload(broker_dir / f"{TOPIC}-0", TOPIC, topic_id, 0, base, parts=parts)
    return local, bases, keys


@pytest.mark.parametrize("writer", [{}, {"compression": True}, {"chunk_size": 1000,
                                                                 "compression": True}],
                         ids=["plain", "zstd", "zstd-small-chunks"])
def test_aiven_layout_offsets_continuous(s3_server, broker_dir, tmp_path, writer):
    root = "p" + str(abs(hash(tuple(sorted(writer.items())))))
    local, bases, _ = _aiven(s3_server, broker_dir, tmp_path, root, **writer)
    opts = {**s3_server.options, "remoteStorage": f"s3://aiven/{root}",
            "remoteStorage.layout": "aiven"}
    assert _read_all(local, opts) == [(i, b"order-%06d" % i) for i in range(RECORDS)]
    with kafkalog.open(local, opts, read_only=True) as dl:
        # an index lookup inside an uploaded segment
        start = bases[2] + 57
        assert [r.offset for r in dl.consume(TOPIC, 0, offset=start)][:3] == \
            [start, start + 1, start + 2]


def test_aiven_layout_encrypted(s3_server, broker_dir, tmp_path):
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    from cryptography.hazmat.primitives import serialization
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    local, bases, _ = _aiven(s3_server, broker_dir, tmp_path, "enc", compression=True,
                             rsa_private_key=key)
    pem = tmp_path / "private.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    opts = {**s3_server.options, "remoteStorage": "s3://aiven/enc",
            "remoteStorage.layout": "aiven"}
    with pytest.raises(RemoteStorageError, match="remoteStorage.privateKeyFile"):
        _read_all(local, opts)
    opts["remoteStorage.privateKeyFile"] = str(pem)
    assert _read_all(local, opts) == [(i, b"order-%06d" % i) for i in range(RECORDS)]


def test_aiven_layout_deleted_segment_and_half_upload(s3_server, broker_dir, tmp_path):
    local, bases, keys = _aiven(s3_server, broker_dir, tmp_path / "gap", "gap")
    # delete a whole segment (its three objects): data loss naming the offsets
    fs = s3_server.filesystem()
    for suffix in ("log", "indexes", "rsm-manifest"):
        fs.delete_file(f"{keys[bases[2]]}.{suffix}")
    opts = {**s3_server.options, "remoteStorage": "s3://aiven/gap",
            "remoteStorage.layout": "aiven"}
    with pytest.raises(DataLossError, match=f"offsets {bases[2]}..{bases[3] - 1} "):
        _read_all(local, opts)

    local2, bases2, keys2 = _aiven(s3_server, broker_dir, tmp_path / "half", "half",
                                   half=bases_of(broker_dir)[1])
    opts["remoteStorage"] = "s3://aiven/half"
    with pytest.raises(RemoteStorageError) as err:
        _read_all(local2, opts)
    assert err.value.file == f"s3://{keys2[bases2[1]]}.log"
    assert "half-uploaded" in str(err.value)


def bases_of(broker_dir):
    return segment_bases(broker_dir / f"{TOPIC}-0")


def test_remote_storage_options_refused(broker_dir):
    for bad in ({"remoteStorage.layout": "aiven"},
                {"remoteStorage": "/tmp/x", "remoteStorage.layout": "hdfs-rsm"},
                {"remoteStorage": "/tmp/x", "remoteStorage.chunkSize": "1"},
                {"remoteStorage": "/tmp/x", "remoteStorage.topicId": "short",
                 "remoteStorage.layout": "aiven"}):
        with pytest.raises(InvalidConfigError):
            kafkalog.open(broker_dir, bad, read_only=True)


def test_kafka_layout_deleted_first_segment_is_data_loss(s3_server, broker_dir, tmp_path):
    local, bases, opts = _kafka_tiered(s3_server, broker_dir, tmp_path, "kafka-first",
                                       skip=(0,), log_start=0)
    with pytest.raises(DataLossError) as err:
        _read_all(local, opts)
    assert f"offsets 0..{bases[1] - 1} " in str(err.value)
    with kafkalog.open(local, opts, read_only=True) as dl:
        assert dl.beginning_offsets(TOPIC) == {0: 0}       # the broker's log start offset
        # an offset asked for inside the gap is data loss too, one after it is read
        with pytest.raises(DataLossError, match=f"offsets 5..{bases[1] - 1} "):
            next(iter(dl.consume(TOPIC, 0, offset=5)))
        assert next(iter(dl.consume(TOPIC, 0, offset=bases[1]))).offset == bases[1]


def test_kafka_layout_nothing_left_in_remote_storage_is_data_loss(s3_server, broker_dir, tmp_path):
    bases = segment_bases(broker_dir / f"{TOPIC}-0")
    local, _, opts = _kafka_tiered(s3_server, broker_dir, tmp_path, "kafka-empty",
                                   skip=tuple(bases[:4]), log_start=0)
    with pytest.raises(DataLossError, match=f"offsets 0..{bases[3] - 1} "):
        _read_all(local, opts)
    # without remote storage the same directory is read from its first local segment
    assert _read_all(local, {})[0][0] == bases[3]


def test_read_only_fail_on_data_loss_false_skips_gaps_with_a_warning(s3_server, broker_dir, tmp_path,
                                                                     caplog):
    bases = segment_bases(broker_dir / f"{TOPIC}-0")
    local, _, opts = _kafka_tiered(s3_server, broker_dir, tmp_path, "kafka-skip",
                                   skip=(bases[0], bases[2]), log_start=0)
    with pytest.raises(DataLossError):
        _read_all(local, {**opts, "failOnDataLoss": "true"})
    with caplog.at_level("WARNING"):
        got = _read_all(local, {**opts, "failOnDataLoss": "false"})
    kept = [i for i in range(RECORDS) if not (i < bases[1] or bases[2] <= i < bases[3])]
    assert got == [(i, b"order-%06d" % i) for i in kept]
    assert f"0..{bases[1] - 1}, {bases[2]}..{bases[3] - 1}" in caplog.text
    # the embedded consumer skips them too
    with kafkalog.open(local, {**opts, "FAILONDATALOSS": False}, read_only=True) as dl, \
            dl.consumer(TOPIC, auto_offset_reset="earliest") as c:
        offsets = [r.offset for batch in c.poll(timeout_ms=0, max_records=RECORDS).values()
                   for r in batch]
        while len(offsets) < len(kept):
            more = [r.offset for batch in c.poll(timeout_ms=0, max_records=RECORDS).values()
                    for r in batch]
            assert more
            offsets += more
        assert offsets == kept


def test_read_only_options_refused(broker_dir):
    for bad in ({"failOnDataLoss": "maybe"}, {"retention.msx": "1"}, {"fs.s3a.endpointx": "x"}):
        with pytest.raises(InvalidConfigError, match=next(iter(bad))):
            kafkalog.open(broker_dir, bad, read_only=True)
    # the writable mode's keys and the fs.* options are accepted read-only
    with kafkalog.open(broker_dir, {"log.segment.bytes": 1000, "fs.s3a.endpoint": "http://x"},
                       read_only=True) as dl:
        assert dl.topics() == [TOPIC]


def _jce_or_skip():
    pytest.importorskip("cryptography")
    from tests.objectstore import aiven_jce
    from tests.server.java_client import JavaUnavailable
    try:
        aiven_jce.compile_java([aiven_jce.SOURCE], "aiven-crypto")
    except JavaUnavailable as e:
        pytest.skip(str(e))
    return aiven_jce


def _pem(key, path):
    from cryptography.hazmat.primitives import serialization
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return str(path)


@pytest.mark.parametrize("compression", [False, True], ids=["fixed-chunks", "zstd"])
def test_aiven_layout_encrypted_by_java_jce(s3_server, broker_dir, tmp_path, compression):
    """Segments encrypted by SunJCE exactly as the plugin does (data key and AAD generated in Java,
    AES/GCM/NoPadding with the cipher's own 12-byte IV prepended, RSA/ECB/OAEPPadding with
    OAEPParameterSpec(SHA3-512, MGF1(SHA3-512), empty label)) read back by kafkalog; a wrong
    private key is a RemoteStorageError naming the manifest."""
    aiven_jce = _jce_or_skip()
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cipher = aiven_jce.JavaSegmentCipher(key, key_id="jce-key")
    root = f"jce-{compression}"
    local, bases, keys = _aiven(s3_server, broker_dir, tmp_path, root, compression=compression,
                                cipher=cipher)
    assert cipher.reports and all(r == "RSA SunJCE RSA/ECB/OAEPPadding" for r in cipher.reports)
    opts = {**s3_server.options, "remoteStorage": f"s3://aiven/{root}", "remoteStorage.layout": "aiven",
            "remoteStorage.privateKeyFile": _pem(key, tmp_path / "private.pem")}
    assert _read_all(local, opts) == [(i, b"order-%06d" % i) for i in range(RECORDS)]
    with kafkalog.open(local, opts, read_only=True) as dl:          # an index lookup, decrypted
        start = bases[1] + 31
        assert [r.offset for r in dl.consume(TOPIC, 0, offset=start)][:2] == [start, start + 1]

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    opts["remoteStorage.privateKeyFile"] = _pem(other, tmp_path / "other.pem")
    with pytest.raises(RemoteStorageError) as err:
        _read_all(local, opts)
    assert err.value.file == f"s3://{keys[bases[0]]}.rsm-manifest"
    assert "cannot unwrap the data key of key id 'jce-key'" in str(err.value)


def test_python_fixture_encryption_decrypts_with_java_jce():
    """The other direction: what the Python fixture writes (kafkalog's own OAEP encoder, AES-GCM
    from ``cryptography``) is unwrapped and decrypted by SunJCE to the same bytes."""
    aiven_jce = _jce_or_skip()
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.objectstore.tiered_layouts import PythonSegmentCipher
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    plain = [os.urandom(4096), b"", os.urandom(17)]
    pieces, data_key, aad = PythonSegmentCipher(key, "py-key").encrypt_segment(plain)
    assert data_key.startswith("py-key:")
    assert aiven_jce.java_decrypt(key, data_key, aad, pieces) == plain
