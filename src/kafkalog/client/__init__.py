"""The embedded client: a Kafka data directory used from Python with Kafka's semantics."""

from kafkalog.client.consumer import Consumer, ConsumerRecord, TopicPartition
from kafkalog.client.datalog import DataLog, ProduceResult, open
from kafkalog.client.producer import Producer, RecordMetadata

__all__ = ["open", "DataLog", "Producer", "Consumer", "TopicPartition", "ConsumerRecord", "RecordMetadata",
           "ProduceResult"]
