# cython: language_level=3
"""Compiled record kernel (placeholder until the kernel lands)."""
IMPLEMENTATION = "cython"
