"""Crash-test writer: appends to a partition log with flush.messages=1 and prints every
acknowledged (flushed) offset range as ``ACK <first> <last> <tag>`` (record i of the append has
value ``<tag>:<i>``). Killed with SIGKILL by tests/log/test_crash.py at random points.

usage: python crash_writer.py DIR SEED
"""

import random
import sys

from kafkalog.log.log import Log
from kafkalog.record.builder import build_batch


def main() -> None:
    path, seed = sys.argv[1], int(sys.argv[2])
    rnd = random.Random(seed)
    config = {"segment.bytes": 2048, "index.interval.bytes": 128, "flush.messages": 1,
              "segment.index.bytes": 4096}
    log = Log.open(path, config, had_clean_shutdown=False, recovery_point=0)
    print(f"OPEN {log.log_end_offset}", flush=True)
    n = 0
    while True:
        n += 1
        tag = f"{seed}-{n}"
        buf = bytearray()
        total = 0
        for _ in range(rnd.randint(1, 4)):
            k = rnd.randint(1, 6)
            recs = [(None, f"{tag}:{total + i}".encode() + b"x" * rnd.randint(0, 120), 1_700_000_000_000 + n, None)
                    for i in range(k)]
            buf += build_batch(recs, compression=rnd.choice([0, 0, 1, 3]))
            total += k
        info = log.append(buf)
        print(f"ACK {info.first_offset} {info.last_offset} {tag}", flush=True)
        if rnd.random() < 0.05:
            log.roll()


if __name__ == "__main__":
    main()
