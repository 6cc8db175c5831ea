"""The log layer's kernel in this process: the compiled ``_kernel`` or its pure-Python twin
``_kernel_py`` (the offset index's search, the fetch path's step to a batch), chosen for every
layer at once by :mod:`kafkalog.record.kernel_selection`. Re-exports ``index_slot``,
``find_v2_batch`` and ``IMPLEMENTATION``."""
from __future__ import annotations

from kafkalog.record.kernel_selection import load_kernel

#: the module in use (``kafkalog.log._kernel`` or ``kafkalog.log._kernel_py``)
implementation_module = load_kernel("kafkalog.log._kernel")

IMPLEMENTATION: str = implementation_module.IMPLEMENTATION
index_slot = implementation_module.index_slot
find_v2_batch = implementation_module.find_v2_batch

__all__ = ["IMPLEMENTATION", "find_v2_batch", "implementation_module", "index_slot"]
