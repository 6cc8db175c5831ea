"""kafkalog's Kafka-protocol broker (``kafkalog serve``), in Kafka's rooms (imports point down this
list; ``tests/test_layers.py`` checks it):

* :mod:`.requests`: bytes in, parsed requests out; responses in, bytes out. No I/O.
* :mod:`.coordinator`: the group coordinators' state machines (classic, consumer, share). No I/O.
* :mod:`.security`: SASL, TLS, principals, the authorizer and its ACLs.
* :mod:`.broker`: the state the handlers share (the ``LogManager``, topic IDs, the fetch waiters,
  the group and transaction coordinators), with :mod:`.config`, :mod:`.features`,
  :mod:`.fetch_session` and :mod:`.share_session`. It imports no handler.
* :mod:`.handlers`: one handler module per API group, named after Kafka's concepts, and the
  dispatch table (:mod:`.handlers.kafka_apis`).
* :mod:`.network`: the sockets (one asyncio loop, one process), connection limits, idle timeouts,
  ``sendfile``; it composes the broker's state with the handlers.
"""

from kafkalog._kio import import_kio

import_kio()      # kio without hypothesis (kafkalog._kio), before any module of the server imports it

