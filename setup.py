"""Build the compiled record kernel (Cython) beside the pure-Python reference.

The kernel is optional at import time: if it is missing (or KAFKALOG_PURE_PYTHON=1),
kafkalog uses the pure-Python reference implementation of the same functions.
"""
from setuptools import Extension, setup
from Cython.Build import cythonize

extensions = [
    Extension(
        "kafkalog.record._kernel",
        ["src/kafkalog/record/_kernel.pyx"],
        extra_compile_args=["-O3"],
    ),
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    ),
)
