"""``LogManager.metadata_stamp`` (issue 35): a broker keeps each topic's encoded Metadata entry
while the topic's stamp stays, so the stamp must move with every change of what the entry says
(partitions seen or removed, a topic committed or made, a partition's latest leader epoch) and
stay through what does not change it (appends, reads, checkpoints), never given twice (a topic
deleted and created again under its name has a new one)."""

from __future__ import annotations

from pathlib import Path

from kafkalog.log.manager import LogManager


def test_the_stamp_moves_with_what_metadata_says_and_only_with_it(tmp_path: Path) -> None:
    m = LogManager(tmp_path / "data", {}, background=False)
    try:
        seen: set[int] = set()

        def moved(before: int) -> int:
            now = m.metadata_stamp("t")
            assert now != before and now not in seen
            seen.add(now)
            return now

        assert m.metadata_stamp("t") == 0
        m.create_topic("t", 2)
        s = moved(0)
        log = m.get_log("t", 1)
        log.append_records([b"a", b"b"])
        log.read(0, 1 << 20)
        m.write_checkpoints()
        m.create_topic("other", 1)
        assert m.metadata_stamp("t") == s                   # nothing Metadata says changed

        cache = log.leader_epoch_cache
        assert cache is not None
        cache.assign(4, log.log_end_offset)
        s = moved(s)                                        # a new leader epoch
        cache.assign(4, log.log_end_offset + 5)
        assert m.metadata_stamp("t") == s                   # the same epoch again
        log.append_records([b"c"])
        assert m.metadata_stamp("t") == s
        cache.truncate_from_end(log.log_end_offset - 1)
        s = moved(s)                                        # back to the epoch before
        cache.assign(6, log.log_end_offset)
        s = moved(s)
        cache.clear()
        s = moved(s)
        cache.clear()
        assert m.metadata_stamp("t") == s                   # (it was empty)

        m.add_partitions("t", 3)
        s = moved(s)
        m.delete_topic("t")
        assert m.metadata_stamp("t") == 0
        cache.assign(9, 0)                                  # a deleted partition's cache: nothing
        assert m.metadata_stamp("t") == 0
        m.create_topic("t", 1)
        s = moved(0)                                        # never a stamp given before

        # committed (answered) before its partitions are made, then made on the creator thread
        m.commit_topics([("big", 130, None)])
        assert m.metadata_stamp("big") != 0
        m.wait_created("big")
        made = m.metadata_stamp("big")
        assert made != 0 and made not in seen
        assert m.metadata_stamp("t") == s
    finally:
        m.close()
