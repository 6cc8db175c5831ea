"""Writes ``src/kafkalog/server/config_docs.py``, the doc strings DescribeConfigs answers with
``include_documentation``, from Kafka 4.4 itself: a fresh single-node broker (or the one at
``--port``) is asked for every topic and broker key with documentation, and the strings of the keys
kafkalog knows are kept. Run once when Kafka's version or kafkalog's keys change:

    PYTHONPATH=src python -m tests.kafka44.config_docs [--port PORT]

(tests/server/test_admin_answers.py checks the table against a running Kafka 4.4.)"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests import kafka44

TARGET = Path(__file__).resolve().parents[2] / "src" / "kafkalog" / "server" / "config_docs.py"
TOPIC = "kafkalog-config-docs"


def kafka_docs(port: int) -> tuple[dict[str, str], dict[str, str]]:
    """(topic key -> doc, broker key -> doc) as Kafka 4.4 at ``port`` answers them."""
    from tests.server.differential import Conn
    c = Conn("kafka", port)
    try:
        c.create_topic(TOPIC)
        r = c.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None},
                                            {"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
                              "include_synonyms": False, "include_documentation": True})
    finally:
        c.close()
    topic, broker = ({e.name: e.documentation for e in res.configs} for res in r.results)
    return topic, broker


def known_broker_keys() -> set[str]:
    from kafkalog.log.config import _SYNONYM_OF, BROKER_ONLY_CONFIGS
    from kafkalog.server.config import SERVER_CONFIGS
    return set(SERVER_CONFIGS) | set(BROKER_ONLY_CONFIGS) | set(_SYNONYM_OF)


def _chunks(text: str, width: int = 96) -> list[str]:
    """``text`` in pieces of at most ``width`` characters, cut after a space where there is one."""
    out = []
    while len(text) > width:
        cut = text.rfind(" ", 0, width) + 1 or width
        out.append(text[:cut])
        text = text[cut:]
    return out + [text]


def _literal(name: str, docs: dict[str, str]) -> str:
    lines = [f"{name}: dict[str, str] = {{"]
    for key, doc in sorted(docs.items()):
        lines.append(f"    {key!r}: (")
        lines += [f"        {c!r}" for c in _chunks(doc)]
        lines.append("    ),")
    return "\n".join(lines + ["}"]) + "\n"


def write(topic: dict[str, str], broker: dict[str, str]) -> None:
    from kafkalog.log.config import _SYNONYM_OF
    keep = known_broker_keys()
    # a broker key documented as its topic key is (log.cleanup.policy, compression.type) is not kept
    # twice: kafkalog answers the topic key's text
    broker = {k: v for k, v in broker.items()
              if k in keep and (k not in _SYNONYM_OF or topic.get(_SYNONYM_OF[k][0]) != v)}
    TARGET.write_text(
        '"""Kafka 4.4\'s documentation of its topic and broker configuration keys, as its DescribeConfigs\n'
        "answers them with ``include_documentation`` (Kafka's ``ConfigDef`` doc strings), written by\n"
        "``python -m tests.kafka44.config_docs`` from a running Kafka 4.4; only the broker keys kafkalog\n"
        "knows are kept, and not those Kafka documents as their topic key (``log.cleanup.policy``: the text\n"
        'of ``cleanup.policy``). kafkalog\'s own keys are documented in '
        ':mod:`kafkalog.server.handlers.config_admin`."""\n\n'
        + _literal("TOPIC_DOCS", topic) + "\n" + _literal("BROKER_DOCS", broker))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, help="a running Kafka 4.4 (else one is started)")
    port = ap.parse_args().port
    if port is not None:
        write(*kafka_docs(port))
        return
    kafka44.classpath()
    with tempfile.TemporaryDirectory() as d, kafka44.KafkaBroker(d) as broker:
        broker.format()
        broker.start()
        write(*kafka_docs(broker.port))


if __name__ == "__main__":
    main()
