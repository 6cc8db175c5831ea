"""Record-batch encode/decode: kafkalog against aiokafka (C extension) and kafka-python.

Same data and method as the baseline (shared/notes/bench/codec_bench.py): N records (default
1,000,000), keys ``b"key-%012d"`` (16 B), values 100 hex characters from ``os.urandom(50).hex()``,
500 records per batch, explicit timestamps, no headers, magic 2. Best of N repeats per run; with
``--runs R`` the whole measurement runs R times and the median of the per-run ratios is printed.
Within a run the libraries' decode timings are interleaved (one call of each, back to back, per
repeat), so load from other jobs on a shared machine hits them alike: the ratios are what counts.

* **encode** = build the batch bytes, compression and CRC included (one builder per batch, every
  record appended through the library's public API).
* **decode** = parse each batch and iterate every record, touching key and value (the same work
  for every library: aiokafka's ``DefaultRecordBatch`` iteration also builds each record's offset,
  timestamp, key, value and headers without checking the CRC, as ``batch_at(buf).records()``
  does).

Each codec runs at the same level for every library where the library lets the level be set.
aiokafka and kafka-python hard-wire theirs (aiokafka: gzip 9, lz4 9 via cramjam's frame API,
zstd 3; kafka-python: gzip 9, lz4.frame default level 0, zstd 3), so kafkalog is run at aiokafka's
levels, and the table says where kafka-python's level differs. Note Kafka's lz4 level 9 means
LZ4's *fast* compressor (the broker's default), while aiokafka's cramjam level 9 is LZ4-HC-like.

Output: JSON lines (one per run, codec and library with rates and ratios; one ``"summary":
"median"`` line per codec and peer); a table on stderr.

Usage::

    python benchmarks/codec_bench.py --runs 5        # the issue's figure: median of five runs
    python benchmarks/codec_bench.py                 # 1,000,000 records, best of 3
    python benchmarks/codec_bench.py --quick         # 100,000 records, best of 2
    python benchmarks/codec_bench.py --pure-python   # kafkalog with its pure-Python kernel
    python benchmarks/codec_bench.py --codecs none,lz4 --libs kafkalog,aiokafka-C
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time

PER_BATCH = 500
TS0 = 1_700_000_000_000
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# The level every library runs at (aiokafka's fixed levels; Kafka's KIP-390 level names).
LEVELS = {"none": None, "gzip": 9, "snappy": None, "lz4": 9, "zstd": 3}
# Where a peer cannot be set to LEVELS[codec], the level it really uses.
PEER_LEVEL_NOTES = {
    ("kafka-python", "lz4"): "kafka-python lz4 uses lz4.frame level 0 (cannot be set)",
    ("aiokafka-C", "lz4"): "aiokafka lz4 level 9 = cramjam frame level 9 (HC); Kafka's 9 = fast",
}


def make_data(n: int):
    keys = [b"key-%012d" % i for i in range(n)]
    vals = [os.urandom(50).hex().encode() for _ in range(n)]
    return keys, vals


# --------------------------------------------------------------------------------------------------
# library adapters: encode(keys, vals, codec_name) -> list[bytes]; decode(batches) -> (n, nbytes)


class KafkalogAdapter:
    """kafkalog through its public batch API (BatchBuilder.append/build, batch_at(buf).records())."""

    def __init__(self) -> None:
        from kafkalog.record import kernel
        from kafkalog.record.builder import BatchBuilder
        from kafkalog.record.records import batch_at
        self.kernel = kernel.IMPLEMENTATION
        self.Builder = BatchBuilder
        self.batch_at = batch_at

    def encode(self, keys, vals, codec: str):
        out = []
        cid = CODECS[codec]
        level = LEVELS[codec]
        Builder = self.Builder
        n = len(keys)
        for start in range(0, n, PER_BATCH):
            b = Builder(magic=2, compression=cid, compression_level=level, base_offset=0)
            app = b.append
            for j in range(start, min(start + PER_BATCH, n)):
                app(keys[j], vals[j], TS0 + j)
            out.append(bytes(b.build()))
        return out

    def decode(self, batches):
        n = nbytes = 0
        batch_at = self.batch_at
        for buf in batches:
            for r in batch_at(buf).records():
                nbytes += len(r.key) + len(r.value)
                n += 1
        return n, nbytes


class KafkalogKernelAdapter:
    """kafkalog's layer-1 pieces wired by hand (record kernel + compression + crc32c).

    Used only when the public batch API (``kafkalog.record.builder`` / ``batch``) is not
    importable; the table then says ``kafkalog-kernel``.
    """

    _HEAD = struct.Struct(">qiibI")
    _TAIL = struct.Struct(">hiqqqhii")

    def __init__(self) -> None:
        import crc32c

        from kafkalog.record import compression, kernel
        self.K = kernel
        self.kernel = kernel.IMPLEMENTATION
        self.crc = crc32c.crc32c
        self.compress = compression.compress
        self.decompress = compression.decompress

    def encode(self, keys, vals, codec: str):
        out = []
        cid, level = CODECS[codec], LEVELS[codec]
        Enc, compress, crc = self.K.RecordsEncoder, self.compress, self.crc
        head, tail = self._HEAD, self._TAIL
        n = len(keys)
        for start in range(0, n, PER_BATCH):
            e = Enc()
            app = e.append
            for j in range(start, min(start + PER_BATCH, n)):
                app(keys[j], vals[j], TS0 + j)
            body = e.finish()
            if cid:
                body = compress(cid, body, magic=2, level=level)
            t = tail.pack(cid, e.last_offset_delta, e.base_timestamp, e.max_timestamp, -1, -1, -1,
                          e.count)
            c = crc(body, crc(t))
            out.append(head.pack(0, 49 + len(body), -1, 2, c) + t + body)
        return out

    def decode(self, batches):
        n = nbytes = 0
        dec, decompress, crc = self.K.decode_records_v2, self.decompress, self.crc
        unpack = struct.Struct(">qiibIhiqqqhii").unpack_from
        for buf in batches:
            (base_offset, length, _ple, _magic, stored, attrs, _lod, base_ts, _max_ts, _pid, _ep,
             base_seq, count) = unpack(buf, 0)
            if crc(memoryview(buf)[21:12 + length]) != stored:
                raise RuntimeError("crc")
            body = memoryview(buf)[61:12 + length]
            if attrs & 7:
                body = decompress(attrs & 7, body, magic=2, max_size=1 << 24)
            for r in dec(body, count, base_offset, base_ts, base_seq, -1):
                nbytes += len(r.key) + len(r.value)
                n += 1
        return n, nbytes


class AiokafkaAdapter:
    """aiokafka's C extension (DefaultRecordBatchBuilder / DefaultRecordBatch)."""

    def __init__(self) -> None:
        import aiokafka.util
        assert aiokafka.util.NO_EXTENSIONS is False, "aiokafka C extensions are not active"
        import aiokafka.record.default_records as ad
        assert ad.DefaultRecordBatchBuilder.__module__.startswith("aiokafka.record._crecords")
        self.B, self.R = ad.DefaultRecordBatchBuilder, ad.DefaultRecordBatch

    def encode(self, keys, vals, codec: str):
        out = []
        B = self.B
        c = CODECS[codec]
        n = len(keys)
        for start in range(0, n, PER_BATCH):
            b = B(2, c, 0, -1, -1, -1, 1 << 20)
            app = b.append
            for i, j in enumerate(range(start, min(start + PER_BATCH, n))):
                app(i, TS0 + j, keys[j], vals[j], [])
            out.append(bytes(b.build()))
        return out

    def decode(self, batches):
        n = nbytes = 0
        R = self.R
        for buf in batches:
            for r in R(buf):
                nbytes += len(r.key) + len(r.value)
                n += 1
        return n, nbytes


class KafkaPythonAdapter(AiokafkaAdapter):
    """kafka-python's DefaultRecordBatchBuilder / DefaultRecordBatch (pure Python)."""

    def __init__(self) -> None:
        import kafka.record.default_records as kd
        self.B, self.R = kd.DefaultRecordBatchBuilder, kd.DefaultRecordBatch


ADAPTERS = {"kafkalog": KafkalogAdapter, "aiokafka-C": AiokafkaAdapter,
            "kafka-python": KafkaPythonAdapter}


# --------------------------------------------------------------------------------------------------



def interleaved_best(repeats: int, calls: dict):
    """Best time of each ``name -> (fn, args)`` over ``repeats`` rounds, the calls of one round
    back to back (so a load change on the shared machine hits every library alike). A library
    that fails is reported and left out."""
    times = {name: [] for name in calls}
    results = {}
    for _ in range(repeats):
        for name, (fn, args) in calls.items():
            if name not in times:
                continue
            t = time.perf_counter()
            try:
                results[name] = fn(*args)
            except Exception as e:
                print(f"# {name}: failed: {e!r}", file=sys.stderr)
                del times[name]
                results.pop(name, None)
                continue
            times[name].append(time.perf_counter() - t)
    return {name: min(ts) for name, ts in times.items()}, results


def emit(obj) -> None:
    print(json.dumps(obj), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="100,000 records, best of 2")
    ap.add_argument("--repeats", type=int, default=None, help="timings per run (best is kept)")
    ap.add_argument("--runs", type=int, default=1,
                    help="independent runs; per-run ratios and their median are printed")
    ap.add_argument("--pure-python", action="store_true",
                    help="run kafkalog with its pure-Python kernels")
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--libs", default=",".join(ADAPTERS))
    args = ap.parse_args(argv)
    if args.pure_python:
        os.environ["KAFKALOG_PURE_PYTHON"] = "1"
    n = 100_000 if args.quick and args.records == 1_000_000 else args.records
    repeats = args.repeats or (2 if args.quick else 3)
    codecs = [c for c in args.codecs.split(",") if c]
    libs = [lib for lib in args.libs.split(",") if lib]

    keys, vals = make_data(n)
    payload = n * (16 + 100)
    adapters = {}
    for lib in libs:
        try:
            adapters[lib] = ADAPTERS[lib]()
        except Exception as e:
            print(f"# {lib}: not available: {e!r}", file=sys.stderr)
            if lib == "kafkalog":
                adapters["kafkalog-kernel"] = KafkalogKernelAdapter()
    kl = adapters.get("kafkalog") or adapters.get("kafkalog-kernel")
    kl_name = "kafkalog" if "kafkalog" in adapters else "kafkalog-kernel"
    emit({"bench": "codec", "records": n, "per_batch": PER_BATCH, "repeats": repeats,
          "runs": args.runs, "python": sys.version.split()[0],
          "kafkalog_kernel": getattr(kl, "kernel", "-"), "libraries": list(adapters)})
    ratios = {}   # (codec, lib) -> {"encode": [...], "decode": [...]}
    rates = {}    # (codec, lib) -> (encode rec/s, decode rec/s, MB) of the last run
    for run in range(1, args.runs + 1):
        for codec in codecs:
            enc_calls = {lib: (ad.encode, (keys, vals, codec)) for lib, ad in adapters.items()}
            enc_t, batches = interleaved_best(repeats, enc_calls)
            calls = {lib: (adapters[lib].decode, (batches[lib],)) for lib in batches}
            dec_t, decoded = interleaved_best(repeats, calls)
            for lib, (cnt, nbytes) in decoded.items():
                assert cnt == n and nbytes == payload, (lib, codec, cnt, nbytes)
                # cross-check: kafkalog reads every peer's batches and peers read kafkalog's
                if kl is not None and lib != kl_name:
                    assert kl.decode(batches[lib][:3])[0] == min(n, 3 * PER_BATCH)
                    assert adapters[lib].decode(batches[kl_name][:3])[0] == min(n, 3 * PER_BATCH)
            for lib in (lib for lib in decoded if lib in enc_t):
                mb = sum(len(b) for b in batches[lib]) / 1e6
                rates[(codec, lib)] = (n / enc_t[lib], n / dec_t[lib], mb)
                line = {"run": run, "codec": codec, "level": LEVELS[codec], "library": lib,
                        "mb": round(mb, 1), "encode_rec_s": round(n / enc_t[lib]),
                        "decode_rec_s": round(n / dec_t[lib])}
                if lib != kl_name and kl_name in decoded:
                    enc_x = enc_t[lib] / enc_t[kl_name]
                    dec_x = dec_t[lib] / dec_t[kl_name]
                    line.update(encode_ratio=round(enc_x, 3), decode_ratio=round(dec_x, 3))
                    r = ratios.setdefault((codec, lib), {"encode": [], "decode": []})
                    r["encode"].append(enc_x)
                    r["decode"].append(dec_x)
                emit(line)
    for (codec, lib), r in ratios.items():
        emit({"summary": "median", "codec": codec, "library": lib, "runs": len(r["decode"]),
              "encode_ratio_median": round(statistics.median(r["encode"]), 3),
              "decode_ratio_median": round(statistics.median(r["decode"]), 3),
              "encode_ratios": [round(x, 3) for x in r["encode"]],
              "decode_ratios": [round(x, 3) for x in r["decode"]],
              "note": PEER_LEVEL_NOTES.get((lib, codec), "")})
    _table(codecs, adapters, kl_name, rates, ratios)
    return 0


def _table(codecs, adapters, kl_name, rates, ratios) -> None:
    """The human-readable table (stderr): last run's rates, median ratios."""
    hdr = (f"{'codec':<7} {'level':>5} {'library':<15} {'MB':>7} {'encode rec/s':>13} "
           f"{'decode rec/s':>13} {'enc x':>6} {'dec x':>6}")
    out = [hdr, "-" * len(hdr)]
    for codec in codecs:
        for lib in adapters:
            r = rates.get((codec, lib))
            if r is None:
                continue
            enc, dec, mb = r
            x = ratios.get((codec, lib))
            ex = dx = ""
            if x is not None:
                ex = f"{statistics.median(x['encode']):5.2f}x"
                dx = f"{statistics.median(x['decode']):5.2f}x"
            lvl = "-" if LEVELS[codec] is None else str(LEVELS[codec])
            out.append(f"{codec:<7} {lvl:>5} {lib:<15} {mb:7.1f} {enc:13,.0f} {dec:13,.0f} "
                       f"{ex:>6} {dx:>6}")
    out.append(f"(enc x / dec x = {kl_name}'s rate divided by that library's, median of the runs)")
    print("\n".join(out), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
