"""The group coordinators' state machines (Kafka's ``coordinator/group``), with no sockets and no
requests, on one group framework (:mod:`.group`: groups, clocks, persistence, session and rebalance
timers, the modern groups' state): the classic group protocol (:mod:`.classic_group`), the consumer
group protocol of KIP-848 (:mod:`.consumer_group`, its assignors :mod:`.assignors` and regular
expressions :mod:`.topic_regex`), share groups of KIP-932 (:mod:`.share_group`), groups moving
between the classic and the consumer protocol (:mod:`.group_migration`), and the adoption of the
producer ids a former broker reserved (:mod:`.producer_id_migration`). The transaction coordinator
and the records these coordinators write are in :mod:`kafkalog.coordinator`."""
