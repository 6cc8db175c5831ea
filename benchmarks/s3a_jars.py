"""Spark's ``s3a://`` file system for the object-storage benchmark: hadoop-aws and the AWS SDK bundle.

Maven Central is not reachable here, but PyPI is, and the source distribution of
``sagemaker_pyspark==1.4.5`` ships ``hadoop-aws-3.3.1.jar`` and ``aws-java-sdk-bundle-1.11.901.jar``
under ``deps/jars/``. They are fetched once with pip into the Java cache of the broker tests
(``$KAFKALOG_JAVA_CACHE``, else ``~/.cache/kafkalog-java``), each checked against its SHA-256.
hadoop-aws 3.3.1 runs on pyspark 4's Hadoop 3.5 client when given the numeric forms of the
settings whose 3.5 defaults carry units ("60s"), and the credentials provider of the SDK v1
(:data:`SPARK_CONF`)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile

from tests.server.java_client import _sha256, cache_dir, install_checked

__all__ = ["SPARK_CONF", "S3aUnavailable", "s3a_jars"]

_SDIST = ("sagemaker_pyspark", "1.4.5")
JARS = {
    "hadoop-aws-3.3.1.jar": "6be50ad8a8b445d2802381b085b2a3ede5c29d353450a6a21f16b2fefa962b6e",
    "aws-java-sdk-bundle-1.11.901.jar": "b87175b32a16544cc1b37cf40390eb375833e62bed67f8ce6cde4b7ad6429ead",
}

#: Hadoop settings (without the ``spark.hadoop.`` prefix) hadoop-aws 3.3.1 needs on Hadoop 3.5
SPARK_CONF = {
    "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "fs.s3a.path.style.access": "true",
    "fs.s3a.connection.ssl.enabled": "false",
    "fs.s3a.threads.keepalivetime": "60",
    "fs.s3a.connection.timeout": "200000",
    "fs.s3a.connection.establish.timeout": "5000",
    "fs.s3a.connection.request.timeout": "60000",
    "fs.s3a.connection.acquisition.timeout": "60000",
    "fs.s3a.connection.idle.time": "60000",
    "fs.s3a.connection.ttl": "300000",
    "fs.s3a.multipart.purge.age": "86400",
    "fs.s3a.multipart.size": "67108864",
    "fs.s3a.multipart.threshold": "134217728",
    "fs.s3a.block.size": "33554432",
    "fs.s3a.readahead.range": "65536",
    "fs.s3a.retry.interval": "500",
    "fs.s3a.retry.throttle.interval": "100",
    "fs.s3a.paging.maximum": "5000",
}


class S3aUnavailable(RuntimeError):
    """The jars could not be fetched (a digest mismatch is java_client's JavaUnavailable)."""


def s3a_jars() -> list[str]:
    """Paths of the checked jars (fetched on first use)."""
    jar_dir = os.path.join(cache_dir(), "s3a-jars")
    paths = [os.path.join(jar_dir, j) for j in JARS]
    if all(os.path.exists(p) and _sha256(p) == JARS[os.path.basename(p)] for p in paths):
        return paths
    os.makedirs(jar_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        name, version = _SDIST
        print(f'{{"type": "progress", "fetching": "{name}=={version} (jars for s3a, ~180 MB)"}}',
              file=sys.stderr, flush=True)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                            "-q", "-d", tmp, f"{name}=={version}"], capture_output=True, text=True,
                           timeout=1800, check=False)
        if r.returncode != 0:
            raise S3aUnavailable(f"pip download {name}=={version} failed: {r.stderr[-500:]}")
        sdist = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".tar.gz"))
        with tarfile.open(sdist) as t:
            for jar, digest in JARS.items():
                member = t.getmember(f"{name}-{version}/deps/jars/{jar}")
                src = t.extractfile(member)
                if src is None:
                    raise S3aUnavailable(f"{jar} is not a file in {sdist}")
                with src:
                    install_checked(src, os.path.join(jar_dir, jar), digest, sdist)
    return paths
