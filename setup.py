"""Build the compiled kernels (Cython), each beside its pure-Python twin.

Every ``.pyx`` under ``src/kafkalog`` is a kernel; the pairs are the table ``KERNELS`` of
``kafkalog._kernels`` (the record codec, the batch-header walker, the log layer's index and fetch
lookups and recovery's producer rows, the cleaner's offset map, the client's per-record classes,
Spark's Arrow columns). They cimport the inline readers of ``src/kafkalog/record/_wire.pxd`` (and
the client kernel the record kernel's encoder, ``record/_kernel.pxd``). The kernels are optional
at import time: when none is built (or KAFKALOG_PURE_PYTHON=1) kafkalog uses every pure-Python
twin. So the build is optional too: without Cython, or without a C compiler, ``pip install -e .``
still succeeds and prints a warning. A partial build (some kernels built, some not) is refused at
import.

Rebuild in place after editing a .pyx or .pxd: ``python setup.py build_ext --inplace -q``.
Set ``KAFKALOG_NO_EXTENSIONS=1`` to skip the build entirely.
"""
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def kernel_sources():
    """``(module, source)`` of every compiled kernel: each ``.pyx`` under ``src/kafkalog`` (their
    pairs with the pure-Python twins are listed in ``KERNELS`` of
    ``kafkalog._kernels``, so a new kernel is one line there)."""
    src = HERE / "src"
    return [(".".join(pyx.relative_to(src).with_suffix("").parts), pyx.relative_to(HERE).as_posix())
            for pyx in sorted((src / "kafkalog").rglob("*.pyx"))]


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when a kernel cannot be compiled."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - any compiler/setup failure
            self._warn(e)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._warn(e)

    @staticmethod
    def _warn(e):
        sys.stderr.write(f"WARNING: a compiled kafkalog kernel was not built ({e}); "
                         "kafkalog will refuse a partial build at import: rebuild, or delete the "
                         "built kernels to run pure Python.\n")


def extensions():
    if os.environ.get("KAFKALOG_NO_EXTENSIONS") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        sys.stderr.write("WARNING: Cython is not installed; building kafkalog without its compiled "
                         "kernels.\n")
        return []
    exts = [Extension(name, [source], extra_compile_args=["-O3"])
            for name, source in kernel_sources()]
    return cythonize(
        exts,
        include_path=["src"],
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True,
                             "initializedcheck": False},
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
