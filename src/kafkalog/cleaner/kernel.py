"""The cleaner kernel of this process: the compiled ``_kernel`` or its pure-Python twin
``_kernel_py`` (the offset map's per-record loops), chosen for every layer at once by
:mod:`kafkalog.record.kernel_selection`.

Re-exports the kernel's API: ``offset_map_put_hash``, ``offset_map_get_hash``,
``offset_map_put_v2``, ``offset_map_filter_v2``, ``offset_map_build_v2``, ``offset_map_clean_v2``,
``CLEANER_MD5`` (``"openssl"`` / ``"hashlib"``), ``CLEANER_MD5_X4`` and ``IMPLEMENTATION``.
"""
from __future__ import annotations

from kafkalog.record.kernel_selection import load_kernel

#: the module in use (``kafkalog.cleaner._kernel`` or ``kafkalog.cleaner._kernel_py``)
implementation_module = load_kernel("kafkalog.cleaner._kernel")

IMPLEMENTATION: str = implementation_module.IMPLEMENTATION
CLEANER_MD5: str = implementation_module.CLEANER_MD5
CLEANER_MD5_X4: bool = implementation_module.CLEANER_MD5_X4
offset_map_put_hash = implementation_module.offset_map_put_hash
offset_map_get_hash = implementation_module.offset_map_get_hash
offset_map_put_v2 = implementation_module.offset_map_put_v2
offset_map_filter_v2 = implementation_module.offset_map_filter_v2
offset_map_build_v2 = implementation_module.offset_map_build_v2
offset_map_clean_v2 = implementation_module.offset_map_clean_v2

__all__ = ["CLEANER_MD5", "CLEANER_MD5_X4", "IMPLEMENTATION", "implementation_module",
           "offset_map_build_v2", "offset_map_clean_v2", "offset_map_filter_v2",
           "offset_map_get_hash", "offset_map_put_hash", "offset_map_put_v2"]
