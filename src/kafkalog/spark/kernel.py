"""The Spark kernel of this process (Arrow column builders and encoders, keyed partitioning of a
column): the compiled ``_kernel`` or its pure-Python twin ``_kernel_py``, as
:func:`kafkalog._kernels.select_kernel` selects it for every layer at once."""
from typing import TYPE_CHECKING

from kafkalog._kernels import select_kernel

if TYPE_CHECKING:       # typed by its pure-Python twin
    from kafkalog.spark._kernel_py import *  # noqa: F403
else:
    select_kernel(globals())
