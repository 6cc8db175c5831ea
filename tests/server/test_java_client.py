"""The genuine Java client, kafka-clients 3.9.1, 4.3.0 and 4.4.0 (Produce v11/v13 by topic ID, Fetch
v17/v18), against ``kafkalog serve``: admin create/describe/delete, idempotent produce with every
codec, assign-and-seek consume reading back exactly what was produced."""

from __future__ import annotations

import pytest

from tests.server.broker_process import BrokerProcess
from tests.server.java_client import VERSIONS, by_version, driver_output


@pytest.mark.parametrize("version", [by_version(v) for v in VERSIONS])
def test_java_client(broker: BrokerProcess, version: str) -> None:
    lines = driver_output(version, broker.bootstrap, "java-" + version.replace(".", ""), 150)
    assert "admin ok" in lines
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert f"codec {codec} ok 150" in lines
