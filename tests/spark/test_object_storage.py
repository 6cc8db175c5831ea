"""The Spark source and sink with object storage (moto's S3 server on 127.0.0.1)."""

from __future__ import annotations

import os

import pytest

import kafkalog
from kafkalog.errors import LogDirError
from tests.objectstore.s3_server import s3_server  # noqa: F401 - a pytest fixture


def test_writes_to_object_storage_are_refused_clearly(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LogDirError, match="needs a POSIX file system.*read_only=True"):
        kafkalog.open("s3://bucket/logs")
    assert os.listdir(tmp_path) == []          # no ./s3:/bucket/logs created by mistake
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="kafkalog sink .* needs a POSIX file system"):
        df.write.format("kafkalog").option("topic", "t").mode("append").save("s3a://bucket/x")
    assert os.listdir(tmp_path) == []
    # file:// is a local path
    with kafkalog.open("file://" + str(tmp_path / "d"), background=False) as dl:
        dl.create_topic("t")
    assert (tmp_path / "d" / "t-0").is_dir()
