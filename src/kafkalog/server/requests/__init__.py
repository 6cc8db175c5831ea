"""Kafka's requests and responses as bytes, with no I/O and no broker state: framing
(:mod:`.frames`), the request and response headers around kio's message bodies (:mod:`.protocol`),
every length and count of a request checked against its frame before kio reads it
(:mod:`.request_bounds`, :mod:`.bounds_program` and the compiled kernel ``_bounds`` with its
pure-Python twin), and the encoders of the hand-written Produce and Fetch responses (:mod:`.wire`,
:mod:`.kio_build`). Kafka's ``org.apache.kafka.common.requests`` and ``protocol``."""
