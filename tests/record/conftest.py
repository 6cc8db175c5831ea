"""Fixtures of the record tests: every decode path runs against both record kernels."""
from ..kernel_fixtures import KERNEL_MODULES, any_kernel  # noqa: F401 (pytest fixture)
