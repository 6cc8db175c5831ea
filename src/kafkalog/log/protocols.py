"""What the log layer needs from the layers above it, as ``typing.Protocol``s: the log layer types
against these and the layer above hands in an implementation (imports only point downwards).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from kafkalog.log.naming import TopicPartition

if TYPE_CHECKING:
    from kafkalog.log.manager import LogManager

__all__ = ["Cleaner", "CleanerFactory"]


# --- the cleaner (kafkalog.cleaner.LogCleaner implements it) ------------------------------------------

class Cleaner(Protocol):
    """The background log cleaner of a data directory (Kafka's ``LogCleaner`` as its
    ``LogManager`` sees it): started after the logs are loaded, told when a partition goes away,
    stopped before the logs are closed."""

    def startup(self) -> None:
        """Start the cleaner threads."""
        ...

    def shutdown(self) -> None:
        """Stop the cleaner threads (an in-progress cleaning is aborted) and wait for them."""
        ...

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Abort (and forget) any cleaning of ``tp``: the partition is being deleted."""
        ...


#: builds the cleaner of a :class:`~kafkalog.log.manager.LogManager` (``log.cleaner.enable=true``)
CleanerFactory = Callable[["LogManager"], Cleaner]
