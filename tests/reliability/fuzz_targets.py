"""Fuzz targets: every decoder of untrusted bytes, one function per input kind.

Each target takes ``bytes`` and must either succeed or raise a
:class:`~kafkalog.errors.KafkalogError` subclass. Anything else -- an untyped exception, a hang, an
allocation the input does not justify -- is a bug. The same targets are driven by hypothesis
(tests/reliability/test_fuzz.py), by atheris (``python -m tests.reliability.atheris_fuzz``) and by a
seeded mutation loop (:func:`mutation_fuzz`), which mutates real, valid inputs so it gets past the
CRCs and length checks into the deep decoders.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import random
import shutil
import signal
import struct
import tempfile
from typing import Callable, Dict, List

from crc32c import crc32c

from kafkalog.errors import KafkalogError
from kafkalog.record import _kernel_py, compression, kernel, varint
from kafkalog.record.builder import build_batch
from kafkalog.record.records import iter_batches


@functools.cache
def _tmp() -> str:
    """The targets' scratch directory: made at the first target that needs one, removed when the
    process exits (importing this module writes nothing)."""
    path = tempfile.mkdtemp(prefix="kafkalog-fuzz-")
    atexit.register(shutil.rmtree, path, True)
    return path


MAX_DECOMPRESSED = 1 << 20


def _consume_batches(data: bytes, strict: bool) -> None:
    for b in iter_batches(data, strict=strict, max_message_size=1 << 20):
        try:
            b.is_valid()
            _ = (b.base_offset, b.last_offset, b.max_timestamp, b.compression, b.timestamp_type)
            for r in b.records(MAX_DECOMPRESSED):
                _ = (r.offset, r.key, r.value, r.headers, r.timestamp)
        except KafkalogError:
            pass


def t_batches(data: bytes) -> None:
    """Record sets of any magic: header walk, CRC check, decompression, record decoding."""
    _consume_batches(data, strict=False)
    _consume_batches(data, strict=True)


def t_batches_crc_fixed(data: bytes) -> None:
    """A v2 batch header + body whose CRC and length are made right, so the fuzzer reaches the
    record decoder and the codecs behind the CRC."""
    if len(data) < 2:
        return
    attrs = data[0] & 0x27
    body = data[1:]
    count = body[0] % 8 if body else 0
    hdr = struct.pack(">bhiqqqhii", 2, attrs, max(count - 1, 0), 0, 0, -1, -1, -1, count)
    after_crc = hdr[1:] + body[1:]
    batch = struct.pack(">qiib", 0, 9 + len(after_crc), -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc
    _consume_batches(batch, strict=True)


def t_records(data: bytes) -> None:
    """The record kernels directly (compiled and pure Python), any count."""
    if not data:
        return
    count = data[0] % 16 - 2
    for mod in (kernel, _kernel_py):
        try:
            mod.decode_records_v2(data[1:], count, 0, 0, -1, -1)
        except KafkalogError:
            pass


def t_compression(data: bytes) -> None:
    """Every codec's decompressor, both magics, bounded output."""
    if not data:
        return
    codec = 1 + data[0] % 4
    for magic in (0, 1, 2):
        try:
            compression.decompress(codec, data[1:], magic=magic, max_size=MAX_DECOMPRESSED)
        except KafkalogError:
            pass


def t_varint(data: bytes) -> None:
    for fn in (varint.read_varint, varint.read_varlong, kernel.read_varint, kernel.read_varlong):
        try:
            fn(data, 0)
        except KafkalogError:
            pass


def _write(name: str, data: bytes) -> str:
    d = os.path.join(_tmp(), "f")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def t_indexes(data: bytes) -> None:
    """.index / .timeindex / .txnindex files: open read-only, sanity check, lookups, entries."""
    from kafkalog.log.index.offset_index import OffsetIndex
    from kafkalog.log.index.time_index import TimeIndex
    from kafkalog.log.index.txn_index import AbortedTxn, TransactionIndex
    for cls, name in ((OffsetIndex, "00000000000000000000.index"),
                      (TimeIndex, "00000000000000000000.timeindex")):
        path = _write(name, data)
        try:
            idx = cls.open_read_only(path)
        except KafkalogError:
            continue
        try:
            for call in (idx.sanity_check, idx.verify_entries, lambda idx=idx: idx.lookup(5),
                         lambda idx=idx: idx.lookup(1 << 40),
                         lambda idx=idx: [idx.entry(i) for i in range(min(idx._entries, 64))]):
                try:
                    call()
                except KafkalogError:
                    pass
        finally:
            idx.close()
    path = _write("00000000000000000000.txnindex", data)
    try:
        t = TransactionIndex(0, path)
        try:
            t.sanity_check()
            t.all_entries()
            t.collect_aborted_txns(0, 1 << 40)
        finally:
            t.close()
    except KafkalogError:
        pass
    try:
        AbortedTxn.from_bytes(data, 0)
    except KafkalogError:
        pass


def t_checkpoints(data: bytes) -> None:
    """Offset and leader-epoch checkpoints, partition.metadata, meta.properties,
    .kafka_cleanshutdown, producer snapshots, topic config properties."""
    from kafkalog.log import checkpoint as cp
    from kafkalog.log.producer_state import parse_snapshot
    for version, fmt in ((0, cp._OffsetFormatter()), (0, cp._EpochFormatter())):
        try:
            cp.parse_checkpoint(data, version, fmt)
        except KafkalogError:
            pass
    d = os.path.join(_tmp(), "cp")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "partition.metadata"), "wb") as f:
        f.write(data)
    with open(os.path.join(d, "meta.properties"), "wb") as f:
        f.write(data)
    with open(os.path.join(d, ".kafka_cleanshutdown"), "wb") as f:
        f.write(data)
    for call in (lambda: cp.PartitionMetadataFile(d).read(),
                 lambda: cp.MetaProperties.read(os.path.join(d, "meta.properties")),
                 lambda: cp.CleanShutdownFile(d).read(),
                 lambda: parse_snapshot(data)):
        try:
            call()
        except KafkalogError:
            pass
    try:
        from kafkalog.log.config import parse_properties
        parse_properties(data.decode("utf-8", "replace"))
    except KafkalogError:
        pass


def t_segment(data: bytes) -> None:
    """A partition directory holding the input as its only .log (+ a derived .index): open with
    full recovery, read every record, and `kafkalog verify` it."""
    from kafkalog.log.log import Log
    d = os.path.join(_tmp(), "seg", "t-0")
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "00000000000000000000.log"), "wb") as f:
        f.write(data)
    if data and data[0] & 1:
        with open(os.path.join(d, "00000000000000000000.index"), "wb") as f:
            f.write(data[:64])
    try:
        log = Log.open(d, {"segment.bytes": 1 << 20}, recovery_point=0,
                       had_clean_shutdown=bool(data and data[0] & 2))
    except KafkalogError:
        return
    try:
        for _ in log.records():
            pass
    except KafkalogError:
        pass
    finally:
        log.close()


def t_cli(data: bytes) -> None:
    """The CLI's inputs: `produce` JSON lines (topic name and config from the input too), and
    `dump` / `verify` of the input as a file."""
    from click.testing import CliRunner

    from kafkalog.cli.main import main
    runner = CliRunner()
    root = os.path.join(_tmp(), "cli")
    if os.path.exists(root):
        shutil.rmtree(root)
    data_dir = os.path.join(root, "data")
    os.makedirs(data_dir)
    text = data.decode("utf-8", "replace")
    first, _, rest = text.partition("\n")
    topic = first[:300] or "t"
    res = runner.invoke(main, ["produce", data_dir, topic], input=rest)
    _check_cli(res, "produce")
    _assert_contained(root, data_dir)
    path = _write("00000000000000000000.log", data)
    for args in (["dump", "--deep-iteration", "--print-data-log", path],
                 ["verify", "--no-progress", "--deep", os.path.dirname(path)]):
        _check_cli(runner.invoke(main, args), args[0])


def _check_cli(res, name: str) -> None:
    exc = res.exception
    if exc is None or isinstance(exc, SystemExit):
        return
    if isinstance(exc, KafkalogError):
        return
    raise exc


def _assert_contained(root: str, data_dir: str) -> None:
    """Nothing may be created outside the data directory."""
    for entry in os.listdir(root):
        if os.path.join(root, entry) != data_dir:
            raise AssertionError(f"a file escaped the data directory: {entry!r}")


def t_topic_names(data: bytes) -> None:
    """Topic names and partition directory names: validation, and LogManager never creates
    anything outside its data directory."""
    from kafkalog.log import naming
    from kafkalog.log.manager import LogManager
    name = data.decode("utf-8", "replace")[:400]
    try:
        naming.validate_topic(name)
    except KafkalogError:
        pass
    try:
        naming.parse_partition_dir_name(name)
    except KafkalogError:
        pass
    root = os.path.join(_tmp(), "names")
    if os.path.exists(root):
        shutil.rmtree(root)
    data_dir = os.path.join(root, "data")
    m = LogManager(data_dir, {}, background=False)
    try:
        try:
            m.create_topic(name, 1)
        except KafkalogError:
            pass
        for _tp, log in m.logs():
            if os.path.dirname(os.path.realpath(log.dir)) != os.path.realpath(data_dir):
                raise AssertionError(f"topic {name!r} escaped the data directory: {log.dir}")
    finally:
        m.close()
    _assert_contained(root, data_dir)


TARGETS: Dict[str, Callable[[bytes], None]] = {
    "batches": t_batches, "batches_crc_fixed": t_batches_crc_fixed, "records": t_records,
    "compression": t_compression, "varint": t_varint, "indexes": t_indexes,
    "checkpoints": t_checkpoints, "segment": t_segment, "cli": t_cli, "topic_names": t_topic_names,
}


# --- seeds: valid inputs of every kind, for mutation ----------------------------------------------

def seeds() -> Dict[str, List[bytes]]:
    rnd = random.Random(1)
    batches = []
    for codec in range(5):
        for magic in (0, 1, 2):
            if codec == 4 and magic < 2:
                continue
            recs = [(b"k%d" % i, bytes(rnd.randrange(256) for _ in range(rnd.randrange(40))),
                     1_700_000_000_000 + i, [("h", b"v")] if magic == 2 else None) for i in range(3)]
            batches.append(build_batch(recs, magic=magic, compression=codec))
    comp = [bytes([c - 1]) + compression.compress(c, b"hello world " * 20, magic=2) for c in range(1, 5)]
    idx = [struct.pack(">ii", 1, 0) + struct.pack(">ii", 5, 300),
           struct.pack(">qi", 1_700_000_000_000, 1) + struct.pack(">qi", 1_700_000_000_100, 5),
           struct.pack(">hqqqi", 0, 7, 10, 20, 15)]
    cps = [b"0\n2\nt 0 100\nt 1 5\n", b"0\n1\n3 42\n", b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n",
           b"version=1\nnode.id=1\ncluster.id=abc\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAA\n"]
    cli = [b"t\n" + b"\n".join(json.dumps({"key": f"k{i}", "value": f"v{i}", "headers": {"h": "x"}}).encode()
                                for i in range(3)),
           b"../escape\n{\"value\": \"x\"}\n", b"..\n{}\n"]
    names = [b"orders", b"../../etc", b"a/b", b"..", b".", b"x" * 300, b"t-0", b"__consumer_offsets"]
    allb = b"".join(batches)
    return {"batches": batches + [allb], "batches_crc_fixed": [b[60:] for b in batches if b[16] == 2],
            "records": [bytes([5]) + b[61:] for b in batches if b[16] == 2 and b[22] & 7 == 0],
            "compression": comp, "varint": [b"\x80\x80\x01", b"\xff" * 11],
            "indexes": idx, "checkpoints": cps, "segment": [allb, batches[0]], "cli": cli + [allb],
            "topic_names": names}


def mutate(data: bytes, rnd: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(6)
        if op == 0 and b:
            i = rnd.randrange(len(b))
            b[i] ^= 1 << rnd.randrange(8)
        elif op == 1 and b:
            b[rnd.randrange(len(b))] = rnd.choice([0, 0xFF, 0x7F, 0x80, rnd.randrange(256)])
        elif op == 2:
            del b[rnd.randrange(len(b) + 1):]
        elif op == 3:
            i = rnd.randrange(len(b) + 1)
            b[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 16)))
        elif op == 4 and len(b) >= 4:
            i = rnd.randrange(len(b) - 3)
            b[i:i + 4] = struct.pack(">i", rnd.choice([0, -1, 1 << 30, 2**31 - 1, -2**31, len(b)]))
        else:
            i = rnd.randrange(len(b) + 1)
            j = rnd.randrange(len(b) + 1)
            b[i:i] = b[j:j + rnd.randrange(1, 64)]
    return bytes(b)


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def run_one(name: str, data: bytes, time_limit: float = 10.0) -> None:
    """Run one input under a time bound; re-raise anything that is not a KafkalogError."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
        TARGETS[name](data)
    except KafkalogError:
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def mutation_fuzz(count: int, seed: int = 0, targets=None, progress=None) -> Dict[str, int]:
    """``count`` mutated inputs spread over the targets; returns inputs per target. Raises on
    the first untyped error or hang (with the input saved under /tmp for replay)."""
    rnd = random.Random(seed)
    sd = seeds()
    names = list(targets or TARGETS)
    # heavy file-system targets get fewer inputs
    weights = [1 if n in ("segment", "cli", "topic_names") else 6 for n in names]
    done = dict.fromkeys(names, 0)
    corpus = {n: list(sd[n]) for n in names}
    for i in range(count):
        name = rnd.choices(names, weights)[0]
        src = rnd.choice(corpus[name])
        data = mutate(src, rnd) if rnd.random() < 0.97 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(200)))
        try:
            run_one(name, data)
        except BaseException as e:
            path = os.path.join(tempfile.gettempdir(), f"kafkalog-fuzz-crash-{name}-{seed}-{i}.bin")
            with open(path, "wb") as f:
                f.write(data)
            raise AssertionError(f"target {name}: {type(e).__name__}: {e} (input saved to {path})") from e
        done[name] += 1
        if rnd.random() < 0.05 and len(corpus[name]) < 200:
            corpus[name].append(data)
        if progress is not None and i % 10000 == 0:
            progress(i, done)
    return done
