"""kafkalog's reliability torture suite: crashes, corruption, hostile input, full disks, concurrency.

Quick versions run in the default ``pytest`` run; the long run is ``python -m tests.reliability.run``
(see docs/reliability.md)."""
