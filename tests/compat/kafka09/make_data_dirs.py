"""How ``clean/`` and ``killed/`` were made (run by hand, not by the suite): a genuine Apache Kafka
0.9.0.1 broker (``pom.xml``: kafka_2.11 0.9.0.1 and its ZooKeeper 3.4.6, on Java 17) with
``log.segment.bytes=2048``, ``log.index.interval.bytes=100``, ``log.index.size.max.bytes=4096``;
librdkafka (confluent-kafka, ``broker.version.fallback=0.9.0.1``) produces 200 v0 messages to each of
``legacy-{gzip,snappy,lz4,none}`` in small message sets (compressed wrappers of up to 7 messages,
null keys every third message); SIGTERM (``clean/``: ``.kafka_cleanshutdown``, trimmed indexes);
then a restart, 100 more messages each, and SIGKILL (``killed/``: the active segments' indexes
preallocated, no clean-shutdown marker).

Kafka before 0.11 indexed an append by its first offset, so the ``.index`` entries of compressed
wrappers name the wrapper's first inner offset, not its (last) offset: Kafka 4.4 loads them and its
DumpLogSegments ``--verify-index-only`` lists them as mismatches (exit 0).

Usage: ``python3 make_data_dirs.py OUT_DIR`` (needs java, mvn and free ports 12181 / 19092).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

HERE = Path(__file__).resolve().parent
ZK_PORT, KAFKA_PORT = 12181, 19092
CODECS = ("gzip", "snappy", "lz4", "none")


def produce(first: int, last: int) -> None:
    for codec in CODECS:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{KAFKA_PORT}", "api.version.request": False,
                      "broker.version.fallback": "0.9.0.1", "compression.codec": codec,
                      "linger.ms": 20, "batch.num.messages": 7, "acks": "all"})
        for i in range(first, last):
            p.produce(f"legacy-{codec}", key=(b"k%d" % (i % 5)) if i % 3 else None,
                      value=b"value-%04d-" % i + b"x" * (i % 13))
            if i % 11 == 0:
                p.flush(10)
        assert p.flush(30) == 0


def start_kafka(cp: str, work: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["java", "-Xmx256m", f"-Dlog4j.configuration=file:{work / 'log4j.properties'}",
                             "-cp", cp, "kafka.Kafka", str(work / "server.properties")],
                            stdout=open(work / "kafka.out", "ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while b"started (kafka.server.KafkaServer)" not in (work / "kafka.out").read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, "Kafka 0.9.0.1 did not start"
        time.sleep(0.2)
    return proc


def main(out: Path) -> None:
    work = out / "work"
    (work / "zk").mkdir(parents=True)
    cpf = work / "cp.txt"
    subprocess.run(["mvn", "-q", "-B", "-f", str(HERE / "pom.xml"), "dependency:build-classpath",
                    f"-Dmdep.outputFile={cpf}"], check=True)
    cp = cpf.read_text().strip()
    data = work / "data"
    (work / "server.properties").write_text(
        f"broker.id=0\nport={KAFKA_PORT}\nhost.name=127.0.0.1\nlog.dirs={data}\n"
        f"zookeeper.connect=127.0.0.1:{ZK_PORT}\nnum.partitions=1\nlog.segment.bytes=2048\n"
        "log.index.interval.bytes=100\nlog.index.size.max.bytes=4096\noffsets.topic.replication.factor=1\n"
        "offsets.topic.num.partitions=1\nlog.flush.interval.messages=1\n")
    (work / "log4j.properties").write_text(
        "log4j.rootLogger=INFO, stdout\nlog4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n")
    kafka = None
    zk = subprocess.Popen(["java", "-Xmx128m", "-cp", cp, "org.apache.zookeeper.server.ZooKeeperServerMain",
                           str(ZK_PORT), str(work / "zk")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        kafka = start_kafka(cp, work)
        produce(0, 200)
        kafka.send_signal(signal.SIGTERM)
        kafka.wait(60)
        shutil.copytree(data, out / "clean", ignore=shutil.ignore_patterns(".lock"))
        kafka = start_kafka(cp, work)
        produce(200, 300)
        kafka.kill()
        kafka.wait(60)
        shutil.copytree(data, out / "killed", ignore=shutil.ignore_patterns(".lock"))
    finally:
        if kafka is not None and kafka.poll() is None:
            kafka.kill()
        zk.kill()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
