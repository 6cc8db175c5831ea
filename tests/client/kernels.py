"""The client kernel's implementations for the parity tests: each as one module-like object that
also answers with its record kernel's names (``K.decode_consumer_records`` and
``K.encode_records_v2`` of the same implementation), the compiled pair first when built."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest

from kafkalog.client import _kernel_py as _client_py
from kafkalog.record import _kernel_py as _record_py


class KernelPair:
    """The client kernel ``client`` and the record kernel ``record`` of one implementation."""

    def __init__(self, client: ModuleType, record: ModuleType) -> None:
        self.client = client
        self.record = record
        self.__name__ = client.__name__
        self.IMPLEMENTATION = client.IMPLEMENTATION

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client if hasattr(self.client, name) else self.record, name)


def _compiled() -> KernelPair | None:
    try:
        return KernelPair(importlib.import_module("kafkalog.client._kernel"),
                          importlib.import_module("kafkalog.record._kernel"))
    except ImportError:
        return None


CY = _compiled()
PY = KernelPair(_client_py, _record_py)
KERNELS = [k for k in (CY, PY) if k is not None]
IDS = [k.__name__.rsplit(".", 1)[1] for k in KERNELS]
both = pytest.mark.skipif(CY is None, reason="needs both kernels")
kernels = pytest.mark.parametrize("K", KERNELS, ids=IDS)
