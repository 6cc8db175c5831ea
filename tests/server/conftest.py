from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.server.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One ``kafkalog serve`` per test module (topics are named per test)."""
    d = str(tmp_path_factory.mktemp("broker") / "data")
    b = BrokerProcess(d).start()
    try:
        yield b
    finally:
        if b.alive():
            rc = b.stop()
            assert rc == 0, b.stderr()
            assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown")), b.stderr()
        else:
            b.kill()
