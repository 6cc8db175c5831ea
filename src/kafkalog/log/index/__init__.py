"""A segment's indexes (Kafka's ``OffsetIndex``, ``TimeIndex``, ``TransactionIndex``): the
``.index`` and ``.timeindex`` memory-mapped (:mod:`._mmap_index`, file handling in
:mod:`._index_file`) and the ``.txnindex``."""
