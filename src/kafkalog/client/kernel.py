"""The client kernel of this process (the producer's send path, batch and record future; the
consumer's record class and a batch decoded into it): the compiled ``_kernel`` or its pure-Python
twin ``_kernel_py``, as :func:`kafkalog._kernels.select_kernel` selects it for every layer at once."""
from typing import TYPE_CHECKING

from kafkalog._kernels import select_kernel

if TYPE_CHECKING:       # typed by its pure-Python twin
    from kafkalog.client._kernel_py import *  # noqa: F403
else:
    select_kernel(globals())
