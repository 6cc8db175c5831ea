"""Crash-test writer over more partitions than its open-files limit allows (issue 35): opens
PARTITIONS partition logs under DIR with the soft ``RLIMIT_NOFILE`` at LIMIT (so segment
descriptors are evicted and reopened all the time, most with appends not fsynced), appends batches
to random partitions (rolling now and then; half the partitions preallocate their segments) and
prints every acknowledged range as ``ACK <partition> <first> <last> <tag>`` (record i has value
``<tag>:<i>``). Killed with SIGKILL by tests/log/test_file_handles.py.

usage: python crash_writer_many.py DIR SEED LIMIT PARTITIONS
"""

import os
import random
import resource
import sys


def config(p: int) -> dict:
    return {"segment.bytes": 4096, "index.interval.bytes": 256, "segment.index.bytes": 4096,
            "preallocate": p % 2 == 0}


def main() -> None:
    path, seed, limit, partitions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from kafkalog.log.log import Log
    from kafkalog.record.builder import build_batch

    rnd = random.Random(seed)
    logs = [Log.open(os.path.join(path, f"t-{p}"), config(p), had_clean_shutdown=False,
                     recovery_point=0) for p in range(partitions)]
    print("OPEN", flush=True)
    n = 0
    while True:
        n += 1
        p = rnd.randrange(partitions)
        tag = f"{seed}-{n}"
        k = rnd.randint(1, 4)
        recs = [(None, f"{tag}:{i}".encode() + b"x" * rnd.randint(0, 200), 1_700_000_000_000 + n, None)
                for i in range(k)]
        info = logs[p].append(build_batch(recs, compression=rnd.choice([0, 0, 1])))
        print(f"ACK {p} {info.first_offset} {info.last_offset} {tag}", flush=True)
        if rnd.random() < 0.02:
            logs[p].roll()


if __name__ == "__main__":
    main()
