"""The log layer's kernel of this process (the offset index's search, the fetch path's step to a
batch, the producer batches a recovery applies): the compiled ``_kernel`` or its pure-Python twin
``_kernel_py``, as :func:`kafkalog._kernels.select_kernel` selects it for every layer at once."""
from typing import TYPE_CHECKING

from kafkalog._kernels import select_kernel

if TYPE_CHECKING:       # typed by its pure-Python twin
    from kafkalog.log._kernel_py import *  # noqa: F403
else:
    select_kernel(globals())
