"""The serving edge (Kafka's ``network`` package: ``SocketServer``, ``RequestChannel``): the
listening sockets and connections (:mod:`.socket_server`, which composes the broker's state with
the API handlers of :mod:`kafkalog.server.handlers`), their byte transports (:mod:`.channel`) and
``queued.max.requests`` (:mod:`.request_queue`)."""
