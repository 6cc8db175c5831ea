"""kafkalog's typed errors as Kafka's protocol error codes (``Errors.java``)."""

from __future__ import annotations

from kafkalog.errors import (
    CompressionError,
    CorruptRecordError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    KafkalogIOError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    TopicExistsError,
    UnsupportedCompressionTypeError,
)
from kafkalog.log.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
INVALID_REQUIRED_ACKS = 21
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_CONFIG = 40
INVALID_TRANSACTION_TIMEOUT = 50
TOPIC_DELETION_DISABLED = 73
UNSUPPORTED_COMPRESSION_TYPE = 76
UNKNOWN_TOPIC_ID = 100
INVALID_RECORD = 87
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
OFFSET_METADATA_TOO_LARGE = 12
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
UNSTABLE_OFFSET_COMMIT = 88
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
SECURITY_DISABLED = 54
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
NOT_ENOUGH_REPLICAS = 19
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
#: KIP-890: a transactional request the client should abort its transaction for (Produce v11+,
#: TxnOffsetCommit v4+ answer it where older versions get INVALID_TXN_STATE)
TRANSACTION_ABORTABLE = 120
#: Kafka's KafkaStorageException: an I/O failure of the log directory (disk full, EIO)
KAFKA_STORAGE_ERROR = 56
TRANSACTIONAL_ID_NOT_FOUND = 105
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128
#: KIP-1071 streams groups
STREAMS_INVALID_TOPOLOGY = 130
STREAMS_INVALID_TOPOLOGY_EPOCH = 131
STREAMS_TOPOLOGY_FENCED = 132
#: KIP-890: the transaction can be aborted and the producer go on
TRANSACTION_ABORTABLE = 120
#: KIP-932 share groups
INVALID_RECORD_STATE = 121
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
FENCED_STATE_EPOCH = 124
SHARE_SESSION_LIMIT_REACHED = 133
#: SCRAM credential administration (AlterUserScramCredentials, DescribeUserScramCredentials)
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
#: client quotas and the replica and feature administration of a single node
THROTTLING_QUOTA_EXCEEDED = 89
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_UPDATE_VERSION = 95

#: Kafka's default messages (``Errors.java``) of the codes its handlers answer with their message
_MESSAGES = {
    NONE: "NONE",
    UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
    INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client library or "
                     "the message was sent to an incompatible broker. See the broker logs for more details.",
}


def message(code: int) -> str | None:
    """Kafka's default message of ``code`` (``Errors.X.message()``), None where not kept here."""
    return _MESSAGES.get(code)


_TABLE: tuple[tuple[type[BaseException], int], ...] = (
    (OffsetOutOfRangeError, OFFSET_OUT_OF_RANGE),
    (RecordTooLargeError, MESSAGE_TOO_LARGE),
    (RecordBatchTooLargeError, RECORD_LIST_TOO_LARGE),
    (UnsupportedCompressionTypeError, UNSUPPORTED_COMPRESSION_TYPE),
    (CompressionError, CORRUPT_MESSAGE),
    (CorruptRecordError, CORRUPT_MESSAGE),
    (InvalidTimestampError, INVALID_TIMESTAMP),
    (InvalidRecordError, INVALID_RECORD),
    (OutOfOrderSequenceError, OUT_OF_ORDER_SEQUENCE_NUMBER),
    (InvalidProducerEpochError, INVALID_PRODUCER_EPOCH),
    (InvalidTxnStateError, INVALID_TXN_STATE),
    (TopicExistsError, TOPIC_ALREADY_EXISTS),
    (InvalidTopicError, INVALID_TOPIC_EXCEPTION),
    (InvalidConfigError, INVALID_CONFIG),
    (KafkalogIOError, KAFKA_STORAGE_ERROR),
)


def error_code(exc: BaseException) -> int:
    """Kafka's error code for ``exc`` (UNKNOWN_SERVER_ERROR for anything not a known failure)."""
    for cls, code in _TABLE:
        if isinstance(exc, cls):
            return code
    return UNKNOWN_SERVER_ERROR
