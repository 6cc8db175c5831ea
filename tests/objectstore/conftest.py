"""The S3-compatible server fixture (tests/objectstore/s3_server.py) for these tests."""

from tests.objectstore.s3_server import s3_server  # noqa: F401 - a pytest fixture
