"""kafkalog's Kafka-protocol broker (``kafkalog serve``).

Layers, h11-style:

* :mod:`~kafkalog.server.frames` and :mod:`~kafkalog.server.protocol`: bytes in, parsed requests out;
  responses in, bytes out. No I/O.
* :mod:`~kafkalog.server.network`: the sockets (one asyncio loop, one process), connection limits,
  idle timeouts, ``sendfile``.
* :mod:`~kafkalog.server.broker`: the state the handlers share (the ``LogManager``, topic IDs, the
  fetch waiters, the group and transaction coordinators) and the dispatch table.
* One handler module per API group, named after Kafka's concepts: :mod:`.api_versions`,
  :mod:`.metadata`, :mod:`.topics`, :mod:`.configs`, :mod:`.produce`, :mod:`.fetch`,
  :mod:`.list_offsets`, :mod:`.init_producer_id`, :mod:`.groups`, :mod:`.offset_commit`,
  :mod:`.transactions`.
"""

from kafkalog._kio import import_kio

import_kio()      # kio without hypothesis (kafkalog._kio), before any module of the server imports it

