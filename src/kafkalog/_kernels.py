"""All-or-nothing selection of kafkalog's compiled kernels (py-lmdb style), once per process.

Every layer with a hot loop has a compiled kernel beside a pure-Python twin with the same API; the
pairs are listed in :data:`KERNELS` (adding a pair is one line). The choice is made once, for
every pair, when this module is imported:

* ``KAFKALOG_PURE_PYTHON=1`` (any value but ``""`` / ``"0"``): every pure-Python twin;
* no compiled kernel built at all (no compiler at install): every pure-Python twin, with a
  :class:`KernelWarning`;
* every compiled kernel built: every compiled kernel;
* some built and some not (a partial build): :class:`KernelBuildError` naming the missing one.

Each layer then imports its kernel through a selector module (``kafkalog.record.kernel``,
``kafkalog.log.kernel``, ``kafkalog.cleaner.kernel``, ``kafkalog.client.kernel``,
``kafkalog.spark.kernel``) that is one call of :func:`select_kernel`: it fills the module with the
twin's ``__all__`` from the selected kernel (:func:`kernel_exports`, so a selector's names cannot
drift from its twin's; the type checker reads the twin's); a compiled kernel
that does not import, or lacks a symbol its pure twin exports in ``__all__`` (a stale build),
raises :class:`KernelBuildError` naming the module and the symbol. There is no per-function
fallback: a process never mixes compiled and pure-Python kernels.

Whether a kernel is built is decided from its extension file, without importing it: the upper
layers' packages are not imported from here (imports point downwards).
"""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import kafkalog
from kafkalog.errors import KernelBuildError

__all__ = ["ENV_PURE_PYTHON", "IMPLEMENTATION", "KERNELS", "KernelBuildError", "KernelPair",
           "KernelWarning", "kernel_exports", "load_kernel", "select_implementation", "select_kernel"]

#: the environment variable that selects every pure-Python twin
ENV_PURE_PYTHON = "KAFKALOG_PURE_PYTHON"


@dataclass(frozen=True)
class KernelPair:
    """A compiled kernel module and its pure-Python twin; the symbols the compiled module must
    have are the twin's ``__all__``."""

    compiled: str
    pure: str


#: every kernel pair of kafkalog, lowest layer first
KERNELS: tuple[KernelPair, ...] = (
    KernelPair("kafkalog.record._kernel", "kafkalog.record._kernel_py"),
    KernelPair("kafkalog.record._header_walk", "kafkalog.record._header_walk_py"),
    KernelPair("kafkalog.log._kernel", "kafkalog.log._kernel_py"),
    KernelPair("kafkalog.cleaner._kernel", "kafkalog.cleaner._kernel_py"),
    KernelPair("kafkalog.client._kernel", "kafkalog.client._kernel_py"),
    KernelPair("kafkalog.spark._kernel", "kafkalog.spark._kernel_py"),
    KernelPair("kafkalog.server.requests._bounds", "kafkalog.server.requests._bounds_py"),
)


class KernelWarning(UserWarning):
    """No compiled kernel is built: kafkalog runs its pure-Python twins (slower)."""


_REMEDY = ("rebuild the kernels (`python setup.py build_ext --inplace`, or reinstall kafkalog) "
           f"or set {ENV_PURE_PYTHON}=1 to run pure Python")


def _extension_file(module: str) -> Path | None:
    """The built extension file of ``module`` (a ``kafkalog.`` module), or None."""
    parts = module.split(".")[1:]
    for root in kafkalog.__path__:
        base = Path(root).joinpath(*parts)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = base.with_name(base.name + suffix)
            if candidate.is_file():
                return candidate
    return None


def select_implementation(environ: dict[str, str] | None = None) -> str:
    """``"cython"`` or ``"python"`` for every kernel of this process (see the module docstring);
    raises :class:`KernelBuildError` on a partial build."""
    env = os.environ if environ is None else environ
    if env.get(ENV_PURE_PYTHON, "") not in ("", "0"):
        return "python"
    missing = [pair.compiled for pair in KERNELS if _extension_file(pair.compiled) is None]
    if len(missing) == len(KERNELS):
        warnings.warn("kafkalog's compiled kernels are not built; using the pure-Python kernels "
                      "(slower)", KernelWarning, stacklevel=2)
        return "python"
    if missing:
        built = [pair.compiled for pair in KERNELS if pair.compiled not in missing]
        raise KernelBuildError(
            f"partial build of kafkalog's compiled kernels: {missing[0]} is not built "
            f"({', '.join(built)} are); {_REMEDY}")
    return "cython"


#: the implementation of every kernel in this process: ``"cython"`` or ``"python"``
IMPLEMENTATION: str = select_implementation()


def load_kernel(compiled: str) -> ModuleType:
    """The kernel module of the pair whose compiled module is ``compiled``, as selected for the
    process: the pure twin, or the compiled module once checked to export every symbol of the
    twin's ``__all__`` (:class:`KernelBuildError` naming the module and symbol if not)."""
    pair = next((p for p in KERNELS if p.compiled == compiled), None)
    if pair is None:
        raise KernelBuildError(f"{compiled} is not a kernel of kafkalog "
                               f"(known: {', '.join(p.compiled for p in KERNELS)})")
    pure = importlib.import_module(pair.pure)
    if IMPLEMENTATION == "python":
        return pure
    try:
        module = importlib.import_module(pair.compiled)
    except ImportError as e:
        raise KernelBuildError(f"the compiled kernel {pair.compiled} does not import ({e}); "
                               f"{_REMEDY}") from e
    names = vars(module)
    lacking = [name for name in pure.__all__ if name not in names]
    if lacking:
        more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
        raise KernelBuildError(
            f"stale build: the compiled kernel {pair.compiled} lacks {lacking[0]!r}{more}, which "
            f"its pure-Python twin {pair.pure} has; {_REMEDY}")
    return module


def kernel_exports(compiled: str) -> dict[str, Any]:
    """The API of the kernel pair whose compiled module is ``compiled``, as selected for the
    process (:func:`load_kernel`): every name of the pure twin's ``__all__``, plus
    ``implementation_module``. A selector module does ``globals().update(kernel_exports(...))``."""
    module = load_kernel(compiled)
    pair = next(p for p in KERNELS if p.compiled == compiled)
    names = importlib.import_module(pair.pure).__all__
    out = {name: getattr(module, name) for name in names}      # the twin's __all__, by name
    out["implementation_module"] = module
    return out


def select_kernel(namespace: dict[str, Any]) -> None:
    """Fill a selector module (``kafkalog.<layer>.kernel``, passing its ``globals()``) with the
    kernel of its layer's pair (``kafkalog.<layer>._kernel``, :func:`kernel_exports`), and its
    ``__all__``."""
    exports = kernel_exports(namespace["__name__"].rpartition(".")[0] + "._kernel")
    namespace.update(exports)
    namespace["__all__"] = list(exports)
