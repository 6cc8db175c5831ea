"""Coordinator-level state that every front end shares (the embedded client and the network broker):
committed offsets in ``__consumer_offsets``, transactions in ``__transaction_state`` and producer ids,
stored in Kafka's own formats so Kafka's tools and a Kafka broker opening the directory read them."""
