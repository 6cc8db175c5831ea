"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible with Kafka's on-disk files.

The Python API (:mod:`kafkalog.client`: ``kafkalog.open``, ``DataLog``, ``Producer``, ``Consumer``
...) is imported on first use; the typed errors (:mod:`kafkalog.errors`) are re-exported here.
"""

from typing import TYPE_CHECKING, Any, List

from kafkalog import errors
from kafkalog.errors import *  # noqa: F403 - the typed errors, as listed in kafkalog.errors.__all__

if TYPE_CHECKING:       # what the lazy re-exports below are, for type checkers
    from kafkalog.client import (  # noqa: F401
        Consumer,
        ConsumerRecord,
        DataLog,
        Producer,
        ProduceResult,
        RecordMetadata,
        TopicPartition,
        open,
    )

__version__ = "0.1.0"

#: the names of :mod:`kafkalog.client`'s ``__all__``, re-exported lazily
_CLIENT_NAMES = ("open", "DataLog", "Producer", "Consumer", "TopicPartition", "ConsumerRecord",
                 "RecordMetadata", "ProduceResult")

#: ``open`` is left out of ``__all__`` so that ``from kafkalog import *`` keeps the builtin ``open``
__all__ = ["__version__", "DataLog", "Producer", "Consumer", "TopicPartition", "ConsumerRecord",
           "RecordMetadata", "ProduceResult"]
__all__ += errors.__all__


def __getattr__(name: str) -> Any:
    """Lazy re-exports of the Python API (:mod:`kafkalog.client`): ``kafkalog.open`` etc."""
    if name in _CLIENT_NAMES:
        from kafkalog import client
        return getattr(client, name)        # the lazy re-export of a name of the client
    raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_CLIENT_NAMES))
