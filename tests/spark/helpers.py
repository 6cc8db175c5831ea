"""Helpers for the Spark tests: partition dirs from oracle vectors, reading back rows."""

from __future__ import annotations

import os

from tests.oracle import KAFKA_CLIENTS as VECTORS


def vector_bytes(name: str) -> bytes:
    with open(os.path.join(VECTORS, name + ".hex")) as f:
        return bytes.fromhex(f.read())


def make_partition(data_dir: str, topic: str, partition: int, data: bytes, base: int = 0) -> str:
    path = os.path.join(data_dir, f"{topic}-{partition}")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, f"{base:020d}.log"), "wb") as f:
        f.write(data)
    return path
