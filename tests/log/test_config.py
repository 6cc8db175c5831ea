import random

import pytest

from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import TOPIC_CONFIGS, BrokerConfig, LogConfig, parse_properties


def test_defaults():
    c = LogConfig()
    assert c.segment_bytes == 1073741824 and c.segment_ms == 604800000
    assert c.segment_index_bytes == 10485760 and c.index_interval_bytes == 4096
    assert c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.max_message_bytes == 1048588 and c.cleanup_policy == ["delete"]
    assert c.delete and not c.compact and c.compression_type == "producer"
    assert c.message_timestamp_type == "CreateTime" and c.flush_messages == 2**63 - 1
    assert c.min_cleanable_dirty_ratio == 0.5 and c.init_file_size == 0
    assert c.random_segment_jitter() == 0 and c.to_dict() == {}


def test_broker_synonym_precedence():
    c = LogConfig({}, {"log.retention.hours": 1, "log.retention.minutes": 2})
    assert c.retention_ms == 120000
    c = LogConfig({}, {"log.retention.hours": 1, "log.retention.ms": 5, "log.roll.hours": 2})
    assert c.retention_ms == 5 and c.segment_ms == 7200000
    c = LogConfig({"retention.ms": "7"}, {"log.retention.ms": 5, "log.segment.bytes": "2000"})
    assert c.retention_ms == 7 and c.segment_bytes == 2000 and c.to_dict() == {"retention.ms": 7}
    b = BrokerConfig({"log.cleaner.threads": "3", "log.segment.bytes": 100})
    assert b.log_cleaner_threads == 3 and b.log_config().segment_bytes == 100
    assert b.log_retention_check_interval_ms == 300000
    assert b.log_cleaner_io_buffer_load_factor == 0.9


def test_derived():
    c = LogConfig({"cleanup.policy": "compact,delete", "max.compaction.lag.ms": 1000,
                   "segment.jitter.ms": 50, "preallocate": "true", "segment.bytes": 1 << 20})
    assert c.compact and c.delete and c.max_segment_ms == 1000 and c.init_file_size == 1 << 20
    r = random.Random(3)
    assert all(0 <= c.random_segment_jitter(r) < 50 for _ in range(100))


@pytest.mark.parametrize("key,value", [
    ("segment.bytes", 13), ("segment.bytes", "x"), ("segment.bytes", 2**31), ("segment.ms", 0),
    ("cleanup.policy", "foo"), ("cleanup.policy", "delete,delete"), ("compression.type", "brotli"),
    ("min.cleanable.dirty.ratio", 1.5), ("message.timestamp.type", "Now"), ("preallocate", "yes"),
    ("retention.ms", -2), ("compression.gzip.level", 0), ("compression.lz4.level", 18),
    ("no.such.key", 1), ("segment.index.bytes", 3), ("index.interval.bytes", True),
])
def test_invalid(key, value):
    with pytest.raises(InvalidConfigError) as e:
        LogConfig({key: value})
    assert key in str(e.value)


def test_compaction_lag_conflict_and_unknown_broker_key():
    with pytest.raises(InvalidConfigError):
        LogConfig({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5})
    with pytest.raises(InvalidConfigError):
        BrokerConfig({"log.no.such": 1})
    BrokerConfig({"log.no.such": 1}, strict=False)


def test_timestamp_difference_fallback():
    c = LogConfig({"message.timestamp.difference.max.ms": 100})
    assert c.message_timestamp_before_max_ms == 100
    c = LogConfig({"message.timestamp.difference.max.ms": 100, "message.timestamp.before.max.ms": 5})
    assert c.message_timestamp_before_max_ms == 5


def test_properties_roundtrip():
    c = LogConfig({"cleanup.policy": ["compact"], "retention.ms": 5, "preallocate": True,
                   "min.cleanable.dirty.ratio": 0.25})
    text = c.to_properties()
    assert "cleanup.policy=compact" in text and "preallocate=true" in text
    assert LogConfig.from_properties(text) == c
    assert parse_properties("# c\n! c\n a = b\\\n  c\nk:v\nx y\nu=\\u0041\n") == \
        {"a": "bc", "k": "v", "x": "y", "u": "A"}
    assert set(TOPIC_CONFIGS) >= {"segment.bytes", "retention.ms", "cleanup.policy"}
