"""Serving a log range to a loopback socket: ``Log.send_to`` against raw ``os.sendfile``.

Goal 4 (issue "The log storage engine"): serving a 1 GiB range to a loopback socket at >= 90% of the
throughput of raw ``os.sendfile`` over the same file. The receiver is a separate process on
127.0.0.1 doing ``recv_into`` with a 4 MiB buffer (as in ``shared/notes/bench/prim_bench.py``); the
clock stops when the receiver has counted every byte. Page cache hot. Both sides alternate in the
same run, best of ``--repeat``.

* whole range: ``Log.send_to(sock, 0, 1 GiB)`` (one offset-index lookup, then ``os.sendfile`` of the
  slice) vs ``os.sendfile`` of the same 1 GiB of the ``.log`` file;
* context, consumer-like: 1 MiB fetches (``max.partition.fetch.bytes`` default) from consecutive
  offsets, each ``Log.send_to(sock, offset, 1 MiB)`` vs raw ``os.sendfile`` of the same byte ranges.

Run: ``python benchmarks/log_sendfile_bench.py [--mb 1024] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C

GOAL = 0.90


def _sink(port_q, n_q) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    buf = bytearray(4 * C.MiB)
    mv = memoryview(buf)
    while True:
        conn, _ = srv.accept()
        n = 0
        while True:
            r = conn.recv_into(mv)
            if r == 0:
                break
            n += r
        conn.close()
        n_q.put(n)
        if n == 0:
            break
    srv.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="range to serve (MiB)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="256 MiB")
    args = ap.parse_args(argv)
    if args.quick:
        args.mb = 256
    rng = args.mb * C.MiB

    ctx = mp.get_context("fork")
    port_q, n_q = ctx.Queue(), ctx.Queue()
    sink = ctx.Process(target=_sink, args=(port_q, n_q), daemon=True)
    sink.start()                       # before the big allocations, so the fork is small
    port = port_q.get(timeout=20)

    from kafkalog.log.log import Log
    from kafkalog.record import kernel
    C.check_disk(rng)
    batches = C.make_batches(500, total_bytes=rng + 2 * C.MiB)
    one = len(batches[0])
    seg_bytes = rng + 64 * C.MiB       # the whole range in one segment
    d = C.fresh_dir("sendfile-")
    try:
        log = Log.open(d, {"segment.bytes": seg_bytes})
        for i in range(0, len(batches), 256):
            log.append(bytearray(b"".join(batches[i:i + 256])))
        del batches
        seg = log.active_segment
        assert len(log.segments) == 1 and seg.size >= rng, (len(log.segments), seg.size)
        path = seg.log_path
        with open(path, "rb") as f:    # page cache hot
            while f.read(8 * C.MiB):
                pass
        fd = os.open(path, os.O_RDONLY)

        def run(send) -> float:
            s = socket.create_connection(("127.0.0.1", port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t0 = time.perf_counter()
            sent = send(s)
            s.shutdown(socket.SHUT_WR)
            s.close()
            got = n_q.get(timeout=120)
            dt = time.perf_counter() - t0
            assert got == sent, (got, sent)
            return dt, sent

        def raw_range(s, ranges):
            out = s.fileno()
            total = 0
            for pos, size in ranges:
                done = 0
                while done < size:
                    n = os.sendfile(out, fd, pos + done, size - done)
                    if n == 0:
                        break
                    done += n
                total += done
            return total

        # whole range
        def k_whole(s):
            return log.send_to(s, 0, rng)

        # 1 MiB fetches from consecutive offsets (offsets follow from the fixed batch size)
        fetch = C.MiB
        per_fetch = fetch // one
        starts = list(range(0, rng - fetch + 1, per_fetch * one))
        fetch_ranges = [(p, fetch) for p in starts]

        def k_fetches(s):
            total = 0
            st = log.send_to
            for p in starts:
                total += st(s, (p // one) * 500, fetch)
            return total

        res = {k: [] for k in ("raw", "klog", "raw1m", "klog1m")}
        sizes = {}
        for r in range(args.repeat):
            plan = [("raw", lambda s: raw_range(s, [(0, rng)])), ("klog", k_whole),
                    ("raw1m", lambda s: raw_range(s, fetch_ranges)), ("klog1m", k_fetches)]
            if r % 2:
                plan = plan[::-1]
            for name, fn in plan:
                dt, sent = run(fn)
                res[name].append(dt)
                sizes[name] = sent
        assert sizes["raw"] == sizes["klog"] == rng and sizes["raw1m"] == sizes["klog1m"], sizes
        os.close(fd)
        print(f"kafkalog sendfile benchmark; record kernel: {kernel.IMPLEMENTATION}; dir {C.WORKDIR}")
        print(f"\n== goal 4: serve {rng / C.MiB:,.0f} MiB of a {seg.size / C.MiB:,.0f} MiB segment "
              f"({one:,} B batches) to a receiver process on 127.0.0.1, best of {args.repeat}")
        mb = {k: sizes[k] / min(v) / 1e6 for k, v in res.items()}
        print(f"  raw os.sendfile, whole range       : {mb['raw']:7,.0f} MB/s  ({C.spread(res['raw'])})")
        print(f"  Log.send_to(sock, 0, {args.mb} MiB)     : {mb['klog']:7,.0f} MB/s  ({C.spread(res['klog'])})")
        ratio = mb["klog"] / mb["raw"]
        print(f"  ratio = {ratio:.1%} of raw sendfile; goal >= {GOAL:.0%}: {C.verdict(ratio, GOAL)}")
        print(f"-- context: {len(starts):,} fetches of 1 MiB from consecutive offsets")
        print(f"  raw os.sendfile of the same ranges : {mb['raw1m']:7,.0f} MB/s  ({C.spread(res['raw1m'])})")
        print(f"  Log.send_to(sock, offset, 1 MiB)   : {mb['klog1m']:7,.0f} MB/s  ({C.spread(res['klog1m'])})"
              f"  -> {mb['klog1m'] / mb['raw1m']:.1%}")
        log.close()
    finally:
        C.rmtree(d)
        s = socket.create_connection(("127.0.0.1", port))
        s.close()
        sink.join(timeout=10)
        if sink.is_alive():
            sink.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
