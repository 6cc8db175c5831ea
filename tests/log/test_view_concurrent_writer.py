"""A read-only reader never dies on a writer's legal actions: a writer process rolls segments and
closes the log (which trims the ``.index`` / ``.timeindex`` files it preallocated) in a loop while a
reader process opens read-only views and reads them in a loop. The reader must never be killed by
a signal (SIGBUS from a file shrinking under a memory map) and must read consistent data: every
record's value names its offset, offsets are contiguous from the log start to the log end."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

WRITER = textwrap.dedent("""
    import sys, time, kafkalog
    d, seconds = sys.argv[1], float(sys.argv[2])
    deadline = time.monotonic() + seconds
    nxt = {"small": 0, "big": 0}
    sessions = 0
    while time.monotonic() < deadline:
        with kafkalog.open(d, background=False) as dl:          # close trims the indexes
            dl.create_topic("small", 1, config={"segment.bytes": 4096, "index.interval.bytes": 1},
                            exist_ok=True)
            dl.create_topic("big", 1, config={"index.interval.bytes": 1}, exist_ok=True)
            for _ in range(20):
                for topic, pad in (("small", 100), ("big", 2000)):
                    dl.produce(topic, value=(b"%d:" % nxt[topic]).ljust(pad, b"x"), partition=0)
                    nxt[topic] += 1
        sessions += 1
    print(sessions, nxt["small"], nxt["big"], flush=True)
""")

READER = textwrap.dedent("""
    import glob, json, os, sys, time
    from kafkalog.errors import KafkalogError
    from kafkalog.log.read.data_dir_view import DataDirView
    from kafkalog.log.index.offset_index import OffsetIndex
    from kafkalog.log.index.time_index import TimeIndex
    d, seconds = sys.argv[1], float(sys.argv[2])
    deadline = time.monotonic() + seconds
    views = records = index_opens = 0
    while time.monotonic() < deadline:
        try:
            with DataDirView(d) as view:
                for topic in view.topics():
                    p = view.get_log(topic, 0)
                    start, end = p.log_start_offset, p.log_end_offset
                    expect = start
                    for b in p.batches(start, end):
                        for r in b.records():
                            if r.offset >= end:
                                break
                            if r.offset != expect or not bytes(r.value).startswith(b"%d:" % r.offset):
                                print(json.dumps({"bad": [topic, r.offset, expect]}), flush=True)
                                sys.exit(3)
                            expect += 1
                    if expect != end:
                        print(json.dumps({"short": [topic, expect, end]}), flush=True)
                        sys.exit(4)
                    records += end - start
                views += 1
        except KafkalogError:
            pass                           # a directory being created: a typed error is fine
        # the tools' read-only index access (dump-indexes, verify)
        for path in glob.glob(os.path.join(d, "*", "*.index")) + glob.glob(os.path.join(d, "*", "*.timeindex")):
            cls = OffsetIndex if path.endswith(".index") else TimeIndex
            try:
                idx = cls.open_read_only(path)
                n = idx.entries - idx.zero_filled_tail_entries()
                for i in range(0, n, max(1, n // 8)):
                    idx.entry(i)
                idx.close()
                index_opens += 1
            except KafkalogError:
                pass                       # deleted or changed under us: typed, not a crash
    print(json.dumps({"views": views, "records": records, "index_opens": index_opens}), flush=True)
""")


def test_reader_survives_a_writer_rolling_and_trimming_indexes(tmp_path):
    d = str(tmp_path / "data")
    seconds = "3"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, d, seconds], stdout=subprocess.PIPE,
                              text=True)
    reader = subprocess.Popen([sys.executable, "-c", READER, d, seconds], stdout=subprocess.PIPE,
                              text=True)
    r_out, _ = reader.communicate(timeout=120)
    w_out, _ = writer.communicate(timeout=120)
    assert writer.returncode == 0, w_out
    assert reader.returncode == 0, f"reader ended with {reader.returncode}: {r_out}"
    sessions, small, big = map(int, w_out.split())
    assert sessions >= 1 and small == big == 20 * sessions
    stats = json.loads(r_out.strip().splitlines()[-1])
    assert stats["views"] > 0 and stats["index_opens"] > 0
    # after the writer stopped, a view reads everything it wrote
    from kafkalog.log.read.data_dir_view import DataDirView
    with DataDirView(d) as view:
        for topic in ("small", "big"):
            p = view.get_log(topic, 0)
            assert (p.log_start_offset, p.log_end_offset) == (0, small)
            assert [bytes(r.value).split(b":")[0] for b in p.batches(0, small)
                    for r in b.records()] == [b"%d" % i for i in range(small)]
