"""Writer for the full-disk tests: appends until the file system refuses, acknowledging records
after each flush; reports the error it got.

usage: python -m tests.reliability.diskfull_writer DATA_DIR FSIZE_LIMIT_BYTES|0 SEED [INDEX_INTERVAL]

Segments are 8 MiB (larger than any limit used, so the .log itself hits it) with the default
10 MiB sparse, memory-mapped indexes; a small INDEX_INTERVAL makes the index mmap grow into new
pages while the file system is full (the SIGBUS hazard of mmap-ed files).

Prints ``ACK offset value`` lines (after flush), then ``ERR <ExceptionType> <message>`` for the
first failing operation, then tries a second append (``ERR2 ...`` / ``OK2``) and a clean close
(``CLOSE-ERR ...`` / ``CLOSED``). Exit status 0 whatever happens (SIGBUS/SIGSEGV would show).
"""
from __future__ import annotations

import random
import resource
import signal
import sys


def main() -> None:
    data_dir, limit, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    interval = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
    if limit:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # get EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    from kafkalog.log.manager import LogManager
    from kafkalog.record.builder import build_batch
    rnd = random.Random(seed)
    out = sys.stdout
    m = LogManager(data_dir, {}, background=False)
    m.create_topic("t", 1, {"segment.bytes": 8 << 20, "index.interval.bytes": interval,
                                  # indexes reserve their blocks (posix_fallocate), so keep them
                                  # small enough that the .log, not the first index, fills the fs
                                  "segment.index.bytes": 65536}, exist_ok=True)
    log = m.get_log("t", 0)
    pending = []
    n = 0
    try:
        while n < 200000:
            n += 1
            recs = [(None, f"{seed}.{n}.{j}|".encode() + b"y" * rnd.randrange(400), 1_700_000_000_000, None)
                    for j in range(rnd.randint(1, 5))]
            info = log.append(build_batch(recs, compression=rnd.choice([0, 1, 3])))
            pending += [(info.first_offset + j, r[1].decode()) for j, r in enumerate(recs)]
            if n % 3 == 0:
                log.flush()
                if n % 9 == 0:
                    m.write_checkpoints()
                out.write("".join(f"ACK {o} {v}\n" for o, v in pending))
                out.flush()
                pending.clear()
    except BaseException as e:
        out.write(f"ERR {type(e).__module__}.{type(e).__name__} {e}\n".replace("\n", " ") + "\n")
        out.flush()
    try:
        log.append(build_batch([(None, b"second", 1_700_000_000_000, None)]))
        log.flush()
        out.write("OK2\n")
    except BaseException as e:
        out.write(f"ERR2 {type(e).__module__}.{type(e).__name__} {e}\n".replace("\n", " ") + "\n")
    out.flush()
    try:
        m.close()
        out.write("CLOSED\n")
    except BaseException as e:
        out.write(f"CLOSE-ERR {type(e).__module__}.{type(e).__name__} {e}\n".replace("\n", " ") + "\n")
        try:
            m.abandon()
        except BaseException:
            pass
    out.flush()


if __name__ == "__main__":
    main()
