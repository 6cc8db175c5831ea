import pytest

from kafkalog.errors import InvalidTopicError, LogDirError
from kafkalog.log import naming as n


def test_file_names(tmp_path):
    assert n.filename_prefix_from_offset(123) == "00000000000000000123"
    assert n.log_file(tmp_path, 5).endswith("/00000000000000000005.log")
    assert n.offset_index_file("d", 5, ".deleted") == "d/00000000000000000005.index.deleted"
    assert n.offset_from_file_name("00000000000000000123.log.deleted") == 123
    assert n.offset_from_file_name("/x/9223372036854775807.snapshot") == 2**63 - 1
    for bad in ["abc.log", ".log", "-1.log", "99999999999999999999.log", "１２.log"]:
        with pytest.raises(LogDirError):
            n.offset_from_file_name(bad)


@pytest.mark.parametrize("topic", ["", ".", "..", "a" * 250, "a/b", "a b", "ä", "a\0"])
def test_invalid_topics(topic):
    with pytest.raises(InvalidTopicError):
        n.validate_topic(topic)


def test_valid_topics():
    for t in ["a", "A.b_c-d", "a" * 249, "...", "-"]:
        assert n.validate_topic(t) == t


def test_partition_dirs():
    assert n.partition_dir_name("my-topic", 3) == "my-topic-3"
    assert n.parse_partition_dir_name("my-topic-3") == ("my-topic", 3, "", None)
    uid = "0" * 31 + "1"
    d = n.log_delete_dir_name("t.x", 2, uid)
    assert d == f"t.x-2.{uid}-delete"
    assert n.parse_partition_dir_name(d) == ("t.x", 2, "delete", uid)
    assert n.parse_partition_dir_name(n.log_future_dir_name("t", 0, uid)).kind == "future"
    assert n.parse_partition_dir_name(n.log_stray_dir_name("t", 0, uid)).kind == "stray"
    long = n.log_delete_dir_name("a" * 249, 1, uid)
    assert len(long) == 255 and n.parse_partition_dir_name(long).partition == 1
    for bad in ["topic", "topic-", "-1", "topic-x", "a-1.b-delete-x", "..-1", "a b-1",
                "t-1.u-delete" + "x", "t-99999999999", "x-1.-delete"]:
        with pytest.raises(LogDirError):
            n.parse_partition_dir_name(bad)
