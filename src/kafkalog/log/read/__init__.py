"""The read pipeline of the log layer: how every reader reads a partition (Kafka's read-side
rules over segment views), and the read-only snapshot of a partition directory and of a data
directory, read through :mod:`.view_files`."""
