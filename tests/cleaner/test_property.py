"""Guarantees of compaction as properties over random keyed workloads (spec §4.11): after cleaning,
a consumer reading from offset 0 sees the latest value of every key (the reference model), offsets
and order never change, every surviving record is byte-for-byte the record written at its offset,
and the cleaned range holds one record per key."""
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalog.record.constants import CompressionType

from .helpers import NOW, append, clean, data_records, latest_per_key, open_log

keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", None])
value = st.one_of(st.none(), st.binary(min_size=0, max_size=30))
batch = st.lists(st.tuples(keys, value), min_size=1, max_size=5)
workload = st.lists(batch, min_size=1, max_size=60)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload, st.integers(200, 2000), st.sampled_from(list(CompressionType)),
       st.sampled_from([24 * 3, 24 * 8, 1 << 16]), st.booleans())
def test_compaction_matches_reference_model(work, seg_bytes, codec, map_mem, idempotent):
    d = tempfile.mkdtemp()
    try:
        log = open_log(d + "/t-0", **{"segment.bytes": seg_bytes})
        seq = 0
        for recs in work:
            kw = {"compression": codec}
            if idempotent:
                kw.update(producer_id=5, producer_epoch=0, base_sequence=seq)
                seq += len(recs)
            append(log, [(k, v, NOW) for k, v in recs], **kw)
        original = {r.offset: (r.key, r.value) for r in data_records(log)}
        model = latest_per_key(r for r in data_records(log))
        dirty = 0
        for _ in range(200):
            if dirty >= log.active_segment.base_offset:
                break
            end, _stats = clean(log, map_memory=map_mem, first_dirty=dirty)
            assert end > dirty
            dirty = end
        recs = data_records(log)
        assert latest_per_key(recs) == model
        offs = [r.offset for r in recs]
        assert offs == sorted(offs) and len(set(offs)) == len(offs)
        for r in recs:
            assert original[r.offset] == (r.key, r.value)
        if map_mem == 1 << 16:
            cleaned = [r for r in recs if r.offset < dirty]
            assert all(r.key is not None for r in cleaned)
            assert len({r.key for r in cleaned}) == len(cleaned)
        log.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
