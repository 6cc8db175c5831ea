"""Where the oracle vectors (byte vectors with genuine Kafka's verdicts) are: the directory named
by ``$KAFKALOG_ORACLE_VECTORS``, else ``shared/oracle/vectors`` beside the checkout (``../shared``,
the layout of the development machines and CI), else ``/work/shared/oracle/vectors``."""

from __future__ import annotations

import os


def _root() -> str:
    env = os.environ.get("KAFKALOG_ORACLE_VECTORS")
    if env:
        return env
    beside = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                                           "oracle", "vectors"))
    return beside if os.path.isdir(beside) else "/work/shared/oracle/vectors"


#: every vector set
VECTORS_ROOT = _root()
#: the record sets written and read by genuine kafka-clients 3.9.1
KAFKA_CLIENTS = os.path.join(VECTORS_ROOT, "kafka-clients-3.9.1")
