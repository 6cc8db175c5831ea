"""The options every dumper of ``kafkalog dump`` takes (:mod:`kafkalog.cli.dump`,
:mod:`kafkalog.cli.dump_indexes`)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, TextIO

if TYPE_CHECKING:
    from kafkalog.cli.dump_decoders import RecordDecoder

__all__ = ["DumpOptions"]


@dataclass
class DumpOptions:
    """Options shared by every dumper (names as kafka-dump-log.sh)."""

    deep_iteration: bool = False
    print_data_log: bool = False
    skip_record_metadata: bool = False
    max_bytes: Optional[int] = None
    max_message_size: int = 5 * 1024 * 1024
    verify_index_only: bool = False
    index_sanity_check: bool = False
    json: bool = False
    #: keys, values and header values in JSON lines: text (UTF-8, else base64 named in
    #: keyEncoding/valueEncoding, as ``consume`` prints them), base64, or hex (the oracle files')
    encoding: str = "text"
    #: kafka-dump-log.sh's --offsets-decoder / --transaction-log-decoder (:mod:`kafkalog.cli.dump_decoders`)
    decoder: Optional[RecordDecoder] = None
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.print_data_log
