"""The embedded client under a small open-files limit (tests/log/test_file_handles.py): with the
soft ``RLIMIT_NOFILE`` set to LIMIT before kafkalog is imported, ``write`` creates TOPIC with
PARTITIONS partitions and produces one record to each (then a second round to every partition),
``verify`` reads every partition back from a new process. Prints ``OK <records>``.

usage: python fd_limit_client.py DIR LIMIT PARTITIONS write|verify
"""

import resource
import sys


def main() -> None:
    path, limit, partitions, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    import kafkalog
    from kafkalog.log.naming import TopicPartition

    with kafkalog.open(path) as dl:
        if mode == "write":
            dl.create_topic("t", partitions=partitions)
            with dl.producer() as producer:
                for rnd in range(2):
                    futures = [producer.send("t", f"{p}:{rnd}".encode(), partition=p)
                               for p in range(partitions)]
                    producer.flush()
                    for f in futures:
                        f.get(timeout=30)
        consumer = dl.consumer(auto_offset_reset="earliest")
        consumer.assign([TopicPartition("t", p) for p in range(partitions)])
        got: dict[int, list[bytes]] = {}
        n = 0
        while n < 2 * partitions:
            batch = consumer.poll(timeout_ms=2000)
            if not batch:
                break
            for records in batch.values():
                for r in records:
                    got.setdefault(r.partition, []).append(r.value)
                    n += 1
        consumer.close()
        want = {p: [f"{p}:0".encode(), f"{p}:1".encode()] for p in range(partitions)}
        if got != want:
            missing = sorted(p for p in want if got.get(p) != want[p])
            print(f"MISMATCH {len(missing)} partitions, first {missing[:5]}", flush=True)
            sys.exit(1)
        print(f"OK {n}", flush=True)


if __name__ == "__main__":
    main()
