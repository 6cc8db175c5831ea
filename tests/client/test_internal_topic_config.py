"""``kafkalog.open(dir, config)``: ``offsets.topic.num.partitions`` and
``transaction.state.log.num.partitions`` give the partition counts of the internal topics this
directory creates (an existing one keeps its count, as Kafka does); an unknown key is refused
before anything is created."""

import os

import pytest

import kafkalog
from kafkalog import InvalidConfigError, TopicPartition


def _partition_dirs(d, topic):
    return sorted(n for n in os.listdir(d) if n.rsplit("-", 1)[0] == topic)


def test_internal_topics_get_the_configured_partition_counts(tmp_path):
    d = tmp_path / "d"
    conf = {"offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 2}
    with kafkalog.open(d, conf, background=False) as dl:
        dl.create_topic("t", partitions=1)
        dl.produce("t", value=b"v", partition=0)
        with dl.consumer(group_id="g", enable_auto_commit=False) as c:
            c.assign([TopicPartition("t", 0)])
            c.commit({TopicPartition("t", 0): 1})
        with dl.producer(transactional_id="tx") as p:
            p.init_transactions()
            p.begin_transaction()
            p.send("t", b"w", partition=0)
            p.commit_transaction()
    assert _partition_dirs(d, "__consumer_offsets") == [f"__consumer_offsets-{i}" for i in range(3)]
    assert _partition_dirs(d, "__transaction_state") == [f"__transaction_state-{i}" for i in range(2)]
    # reopened with another count: the existing topics keep theirs, the commit is still there
    with kafkalog.open(d, {"offsets.topic.num.partitions": 7}, background=False) as dl, \
            dl.consumer(group_id="g", enable_auto_commit=False) as c:
        assert c.committed(TopicPartition("t", 0)) == 1
        c.commit({TopicPartition("t", 0): 2})
    assert _partition_dirs(d, "__consumer_offsets") == [f"__consumer_offsets-{i}" for i in range(3)]


@pytest.mark.parametrize("bad", [{"retention.msx": 1}, {"log.retention.msx": 1},
                                 {"offsets.topic.num.partitions": 0}])
def test_unknown_or_invalid_key_is_refused_before_anything_is_created(tmp_path, bad):
    d = tmp_path / "d"
    key = next(iter(bad))
    with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
        kafkalog.open(d, bad, background=False)
    assert not d.exists()


def test_known_keys_still_accepted(tmp_path):
    conf = {"log.segment.bytes": 20_000, "log.retention.hours": 1, "log.cleaner.enable": False,
            "transaction.max.timeout.ms": 60_000}
    with kafkalog.open(tmp_path / "d", conf, background=False) as dl:
        dl.create_topic("t")
        assert dl.topic_config("t")["segment.bytes"] == 20_000
        assert dl.topic_config("t")["retention.ms"] == 3_600_000
