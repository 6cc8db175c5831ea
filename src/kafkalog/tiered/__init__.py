"""Object storage and Kafka's tiered storage (KIP-405), beside the log layer: data directories
read through ``pyarrow.fs`` (:mod:`.filesystem`), a partition's segments that a remote storage
manager moved out of the broker's directory (:mod:`.remote_segments`), in Kafka's layout or in
Aiven's remote storage manager's (:mod:`.aiven_rsm`). Read-only; the log layer never imports it."""
