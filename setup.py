"""Build the compiled record kernel (Cython) beside the pure-Python reference.

The kernel is optional at import time: if it is missing (or KAFKALOG_PURE_PYTHON=1),
kafkalog uses the pure-Python reference implementation of the same functions
(``kafkalog.record.kernel`` picks one). So the build is optional too: without Cython, or
without a C compiler, ``pip install -e .`` still succeeds and prints a warning.

Rebuild in place after editing the .pyx: ``python setup.py build_ext --inplace -q``.
Set ``KAFKALOG_NO_EXTENSIONS=1`` to skip the build entirely.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNEL_PYX = "src/kafkalog/record/_kernel.pyx"


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when the kernel cannot be compiled."""

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
        sys.stderr.write(f"WARNING: kafkalog's compiled record kernel was not built ({e}); "
                         "the pure-Python kernel will be used.\n")


def extensions():
    if os.environ.get("KAFKALOG_NO_EXTENSIONS") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        sys.stderr.write("WARNING: Cython is not installed; building kafkalog without its compiled "
                         "record kernel.\n")
        return []
    ext = Extension(
        "kafkalog.record._kernel",
        [KERNEL_PYX],
        extra_compile_args=["-O3"],
    )
    walker = Extension("kafkalog.record._header_walk", ["src/kafkalog/record/_header_walk.pyx"],
                       extra_compile_args=["-O3"])
    return cythonize(
        [ext, walker],
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True,
                             "initializedcheck": False},
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
