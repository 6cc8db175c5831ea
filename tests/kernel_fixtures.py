"""The ``any_kernel`` fixture of the record-codec and compatibility tests: run decode paths against
both record kernels (imported by tests/record/conftest.py and tests/compat/conftest.py)."""
from __future__ import annotations

import importlib

import pytest

from kafkalog.record import _kernel_py, kernel

_NAMES = ("Record", "encode_records_v2", "decode_records_v2", "read_varint", "read_varlong",
          "write_varint", "write_varlong", "RecordsEncoder")


def _available():
    mods = [_kernel_py]
    try:
        cy = importlib.import_module("kafkalog.record._kernel")
        if hasattr(cy, "decode_records_v2"):
            mods.insert(0, cy)
    except ImportError:
        pass
    return mods


KERNEL_MODULES = _available()


@pytest.fixture(params=KERNEL_MODULES, ids=[m.IMPLEMENTATION for m in KERNEL_MODULES])
def any_kernel(request, monkeypatch):
    """Route ``kafkalog.record.kernel`` (used by batch.py and builder.py) to each kernel."""
    mod = request.param
    for name in _NAMES:
        if hasattr(mod, name):
            monkeypatch.setattr(kernel, name, getattr(mod, name))
    monkeypatch.setattr(kernel, "IMPLEMENTATION", mod.IMPLEMENTATION)
    return mod
