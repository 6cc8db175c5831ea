"""The ``any_kernel`` fixture of the record-codec and compatibility tests: run decode paths against
both record kernels (imported by tests/record/conftest.py and tests/compat/conftest.py); and
:func:`pure_and_compiled`, every implementation of a kernel pair, for the parity tests."""
from __future__ import annotations

import importlib

import pytest

from kafkalog.record import _kernel_py, kernel

_NAMES = ("Record", "encode_records_v2", "decode_records_v2", "read_varint", "read_varlong",
          "write_varint", "write_varlong", "RecordsEncoder")


def pure_and_compiled(pure, compiled: str) -> list:
    """``[compiled module, pure]`` of a kernel pair, or ``[pure]`` when the compiled one is not
    built: the parity tests run every implementation there is."""
    mods = [pure]
    try:
        mods.insert(0, importlib.import_module(compiled))
    except ImportError:
        pass
    return mods


KERNEL_MODULES = [m for m in pure_and_compiled(_kernel_py, "kafkalog.record._kernel")
                  if hasattr(m, "decode_records_v2")]


@pytest.fixture(params=KERNEL_MODULES, ids=[m.IMPLEMENTATION for m in KERNEL_MODULES])
def any_kernel(request, monkeypatch):
    """Route ``kafkalog.record.kernel`` (used by batch.py and builder.py) to each kernel."""
    mod = request.param
    for name in _NAMES:
        if hasattr(mod, name):
            monkeypatch.setattr(kernel, name, getattr(mod, name))
    monkeypatch.setattr(kernel, "IMPLEMENTATION", mod.IMPLEMENTATION)
    return mod
