"""Every record-set vector in /work/shared/oracle/vectors decoded by kafkalog and compared, line
by line, with the verdict genuine kafka-clients 3.9.1 wrote (``*.oracle.jsonl``); both kernels."""
from __future__ import annotations

import glob
import io
import json
import os

import pytest

from kafkalog.cli.dump import DumpOptions, dump_record_set
from kafkalog.errors import InvalidRecordError
from kafkalog.record.constants import ControlRecordType
from kafkalog.record.control import EndTransactionMarker, parse_control_key
from tests.oracle import VECTORS_ROOT

VECTORS = VECTORS_ROOT


def _hex_file(path: str) -> bytes:
    with open(path) as f:
        return bytes.fromhex("".join(f.read().split()))


def _record_sets():
    out = []
    for hx in sorted(glob.glob(os.path.join(VECTORS, "*", "*.hex"))):
        name = os.path.basename(hx)
        if ".request." in name or name.startswith(("fetch_response_", "control_record_")):
            continue
        oracle = hx[:-4] + ".oracle.jsonl"
        if os.path.exists(oracle):
            out.append(pytest.param(hx, oracle, id=os.path.relpath(hx, VECTORS)))
    return out


RECORD_SETS = _record_sets()
pytestmark = pytest.mark.skipif(not RECORD_SETS, reason="oracle vectors not available")


@pytest.mark.parametrize("hex_path,oracle_path", RECORD_SETS)
def test_vector_matches_oracle(hex_path, oracle_path, any_kernel):
    buf = _hex_file(hex_path)
    with open(oracle_path) as f:
        want = [json.loads(line) for line in f if line.strip()]
    out = io.StringIO()
    status, summary = dump_record_set(buf, DumpOptions(deep_iteration=True, json=True, encoding="hex",
                                                       out=out, err=io.StringIO()))
    got = [json.loads(line) for line in out.getvalue().splitlines()]
    want_summary = want[-1]
    assert want_summary["type"] == "summary"
    for key in ("batches", "bytesInBatches", "totalBytes", "trailingBytes"):
        assert summary[key] == want_summary[key], key
    if "stopError" in want_summary:
        assert status == 1 and "stopError" in summary
        assert any(g["type"] == "error" for g in got)
        return
    assert summary["invalidBatches"] == want_summary["invalidBatches"]
    # damage found (a batch that fails validation, bytes after the last batch): exit status 1
    assert status == (1 if want_summary["invalidBatches"] or want_summary["trailingBytes"] else 0)
    got = [g for g in got if g["type"] in ("batch", "record")]
    want = [w for w in want if w["type"] in ("batch", "record")]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["type"] == w["type"]
        if "validError" in w:
            assert "validError" in g and not g["valid"]
        g.pop("validError", None)
        w.pop("validError", None)
        assert g == w


CONTROL_KEYS = {"aborttxctrlreckey": ControlRecordType.ABORT,
                "committxctrlreckey": ControlRecordType.COMMIT,
                "unknownctrlreckey": ControlRecordType.UNKNOWN}


@pytest.mark.parametrize("name,ctype", sorted(CONTROL_KEYS.items()))
def test_control_keys(name, ctype):
    path = os.path.join(VECTORS, "sarama", f"control_record_{name}.hex")
    if not os.path.exists(path):
        pytest.skip("vector missing")
    assert parse_control_key(_hex_file(path))[1] == ctype


@pytest.mark.parametrize("name,epoch", [("aborttxctrlrecvalue", 10), ("committxctrlrecvalue", 15)])
def test_control_values(name, epoch):
    path = os.path.join(VECTORS, "sarama", f"control_record_{name}.hex")
    if not os.path.exists(path):
        pytest.skip("vector missing")
    m = EndTransactionMarker.deserialize_value(ControlRecordType.COMMIT, _hex_file(path))
    assert m.coordinator_epoch == epoch
    with pytest.raises(InvalidRecordError):
        EndTransactionMarker.deserialize_value(ControlRecordType.COMMIT, _hex_file(path)[:5])
    with pytest.raises(InvalidRecordError):
        parse_control_key(b"\x00\x00\x00")
    with pytest.raises(InvalidRecordError):
        parse_control_key(b"\xff\xff\x00\x00")
