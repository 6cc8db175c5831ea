"""The cleaner kernel of this process: the compiled ``_kernel`` or its pure-Python twin
``_kernel_py`` (the offset map's per-record loops), chosen for every layer at once by
:mod:`kafkalog._kernels`. Re-exports the twin's ``__all__`` and
``implementation_module`` (the module in use).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kafkalog._kernels import kernel_exports

if TYPE_CHECKING:       # the selected kernel, typed by its pure-Python twin
    from types import ModuleType

    from kafkalog.cleaner._kernel_py import *  # noqa: F403

    implementation_module: ModuleType
    __all__: list[str]
else:
    _exports = kernel_exports("kafkalog.cleaner._kernel")
    globals().update(_exports)
    __all__ = list(_exports)
