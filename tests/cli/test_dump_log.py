"""``kafkalog dump`` on .log segments and raw record-set files (spec §6.1-6.2)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kafkalog.record import CompressionType, ControlRecordType, build_batch, build_end_txn_marker

V2 = build_batch([(b"k", b"v", 1000), (None, b"v2", 1005, [("h", b"x"), ("n", None)])],
                 partition_leader_epoch=0)
SPEC_EXAMPLE = """Dumping {path}
Log starting offset: 0
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1005 size: 86 magic: 2 compresscodec: none crc: 2492407460 isvalid: true
| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] key: k payload: v
| offset: 1 CreateTime: 1005 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [h,n] payload: v2
"""


def run(*args, cwd=None):
    p = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "dump", *args], cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def seg(tmp_path):
    def make(data: bytes, name: str = "00000000000000000000.log"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path
    return make


def test_spec_example_exact(seg):
    path = seg(V2)
    rc, out, err = run("--print-data-log", str(path))
    assert rc == 0 and err == ""
    assert out == SPEC_EXAMPLE.format(path=path)


def test_shallow_only_and_start_offset_from_name(seg):
    path = seg(build_batch([(b"a", b"b", 5)], base_offset=42), "00000000000000000042.log")
    rc, out, _ = run(str(path))
    lines = out.splitlines()
    assert lines[1] == "Log starting offset: 42"
    assert len(lines) == 3 and lines[2].startswith("baseOffset: 42 lastOffset: 42 count: 1 ")


def test_skip_record_metadata_quirk(seg):
    rc, out, _ = run("--print-data-log", "--skip-record-metadata", str(seg(V2)))
    assert out.splitlines()[3:] == ["| key: k payload: v", " payload: v2"]


def test_legacy_control_and_non_consecutive(seg):
    data = (V2 + build_batch([(b"a", b"b", 7)], magic=1, compression=CompressionType.GZIP,
                             base_offset=5)
            + build_batch([(None, b"z", 8)], magic=0, base_offset=6)
            + build_end_txn_marker(ControlRecordType.ABORT, producer_id=3, producer_epoch=1,
                                   coordinator_epoch=9, timestamp=1000, base_offset=7))
    path = seg(data)
    rc, out, err = run("--deep-iteration", str(path))
    lines = out.splitlines()
    assert rc == 0
    assert lines[5] == ("offset: 5 position: 86 CreateTime: 7 size: 72 magic: 1 compresscodec: "
                        "gzip crc: 4115527068 isvalid: true")
    assert lines[6].startswith("| offset: 5 CreateTime: 7 keySize: 1 valueSize: 1 isValid: true crc: ")
    assert lines[6].endswith("}")
    assert lines[7].startswith("offset: 6 position: 158 NoTimestampType: -1 size: ")
    assert lines[8].startswith("| offset: 6 NoTimestampType: -1 keySize: -1 valueSize: 1")
    assert lines[10] == ("| offset: 7 CreateTime: 1000 keySize: 4 valueSize: 6 sequence: -1 "
                         "headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 9")
    assert err == f"Non-consecutive offsets in {os.path.abspath(path)}\n  1 is followed by 5\n"


def test_trailing_bytes_and_max_bytes(seg):
    path = seg(V2 + V2[:40])
    rc, out, _ = run(str(path))
    assert out.splitlines()[-1] == f"Found 40 invalid bytes at the end of {path.name}"
    rc, out, _ = run("--max-bytes", "100", str(path))
    assert "invalid bytes" not in out and len(out.splitlines()) == 3


def test_corrupt_crc_reported_not_skipped(seg):
    bad = bytearray(V2)
    bad[-1] ^= 0xFF
    path = seg(bytes(bad) + V2)
    rc, out, _ = run("--format", "json", str(path))
    lines = [json.loads(x) for x in out.splitlines()]
    batches = [x for x in lines if x["type"] == "batch"]
    assert [b["valid"] for b in batches] == [False, True]
    assert "stored crc" in batches[0]["validError"]
    assert lines[-1]["invalidBatches"] == 1
    rc, out, _ = run(str(path))
    assert "isvalid: false" in out.splitlines()[2]


def _damaged_files(seg) -> dict:
    """A flipped byte in a batch's records (its CRC fails: ``isvalid: false``), a damaged length
    field (the rest is invalid bytes at the end), a file that is not Kafka's at all."""
    flipped = bytearray(V2 + V2)
    flipped[80] ^= 0xFF
    bad_length = bytearray(V2 + V2)
    bad_length[8 + 3] ^= 0x01
    return {"flipped": seg(bytes(flipped), "flipped/00000000000000000000.log"),
            "bad-length": seg(bytes(bad_length), "bad-length/00000000000000000000.log"),
            "not-kafka": seg(b"hello, this is not a Kafka segment\n" * 10, "not-kafka/00000000000000000000.log")}


def test_damage_found_exits_1_as_the_help_says(seg):
    """Issue 36, item 3: ``dump`` printed ``isvalid: false`` / ``Found N invalid bytes`` and exited 0,
    though its help and the README say 1 when damage is found; it says so once on stderr."""
    files = _damaged_files(seg)
    for name, path in files.items():
        rc, out, err = run(str(path))
        assert rc == 1, name
        assert ("isvalid: false" in out) == (name != "not-kafka"), name
        assert ("invalid bytes at the end" in out) == (name != "flipped"), name
        assert err.count("Error: ") == 1 and str(path) in err and "Traceback" not in err, (name, err)
        rc, out, err = run("--format", "json", str(path))
        summary = json.loads(out.splitlines()[-1])
        assert rc == 1 and summary["type"] == "summary" and err == "", name
        assert summary["invalidBatches"] or summary["trailingBytes"], name
    rc, out, err = run(str(seg(V2 + V2, "clean/00000000000000000000.log")))
    assert rc == 0 and err == "" and "isvalid: false" not in out
    assert run("--max-bytes", "100", str(files["bad-length"]))[0] == 1    # the first batch's CRC fails


def test_damage_found_prints_what_kafka44_prints(seg):
    """The same stdout as Kafka 4.4's DumpLogSegments, which exits 0 on each (the exit status is
    a difference listed in docs/kafka-compatibility.md)."""
    from tests import kafka44
    kafka44.require()
    for name, path in _damaged_files(seg).items():
        kafka = kafka44.run_tool("org.apache.kafka.tools.DumpLogSegments", "--files", str(path), check=False)
        rc, out, _err = run(str(path))
        assert (kafka.returncode, rc) == (0, 1), name
        assert out == kafka.stdout, name


def test_structural_error_json_line_and_exit_code(seg):
    path = seg(V2 + b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 10)
    rc, out, err = run("--format", "json", "--deep-iteration", str(path))
    assert rc == 1
    errors = [json.loads(x) for x in out.splitlines() if json.loads(x)["type"] == "error"]
    assert errors and errors[0]["error"] == "CorruptRecordError" and errors[0]["position"] == 86
    assert errors[0]["file"] == str(path)
    rc, out, err = run(str(path))
    assert rc == 1 and "at byte 86" in err


def test_bad_record_structure_exit_code(seg):
    bad = bytearray(build_batch([(b"k", b"v", 1)]))
    bad[-3] = 0x7E  # value length beyond record; CRC now wrong too
    path = seg(bytes(bad))
    rc, out, err = run("--deep-iteration", "--format", "json", str(path))
    kinds = [json.loads(x)["type"] for x in out.splitlines()]
    assert rc == 1 and kinds[:2] == ["file", "batch"] and "error" in kinds


def test_unknown_suffix_and_records_flag(seg):
    path = seg(V2, "capture.bin")
    rc, out, err = run(str(path))
    assert err.strip() == f"Ignoring unknown file {path}" and out == ""
    rc, out, err = run("--records", "--format", "json", "--deep-iteration", str(path))
    lines = [json.loads(x) for x in out.splitlines()]
    assert rc == 0 and [x["type"] for x in lines] == ["file", "batch", "record", "record", "summary"]
    assert lines[2]["key"] == "k" and lines[3]["headers"][1] == {"key": "n", "valueSize": -1,
                                                                   "value": None}
