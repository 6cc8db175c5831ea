"""The Spark tests: every one of them marked ``spark`` (the session is ``tests/conftest.py``'s ``spark``)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", __import__("sys").executable)

pyspark = pytest.importorskip("pyspark")



def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/spark" in str(item.fspath):
            item.add_marker(pytest.mark.spark)
