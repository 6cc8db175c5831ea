"""The same request-by-request scenario against Kafka 4.4 and kafkalog serve at once (one thread
each), and the comparison of the two transcripts: what the consumer group, share group and
transactions v2 protocol tests share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar


class Transcribing(Protocol):
    transcript: list[Any]

    def close(self) -> None: ...


C = TypeVar("C", bound=Transcribing)


def run_side_by_side(kafka_port: int, ours_port: int, open_client: Callable[[int], tuple[C, str]],
                     scenario: Callable[[C, str], None]) -> list[list[Any]]:
    """``scenario(client, suffix)`` on a client of each broker (``open_client(port)`` gives the
    client and the suffix of the names it uses); the two transcripts, Kafka's first. A scenario that
    fails on either side raises, naming the side and its transcript so far."""
    results: dict[str, list[Any]] = {}
    errors: list[BaseException] = []

    def run(name: str, port: int) -> None:
        c, suffix = open_client(port)
        try:
            scenario(c, suffix)
            results[name] = c.transcript
        except BaseException as e:      # reported below
            errors.append(AssertionError(f"{name}: {e!r}; transcript so far: {c.transcript}"))
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=a) for a in (("kafka", kafka_port), ("kafkalog", ours_port))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if errors:
        raise errors[0]
    return [results["kafka"], results["kafkalog"]]


def assert_same(transcripts: list[list[Any]]) -> list[Any]:
    """Kafka's and kafkalog's transcripts step by step; kafkalog's."""
    theirs, mine = transcripts
    for i, (a, b) in enumerate(zip(theirs, mine, strict=False)):
        assert a == b, (f"step {i}: Kafka 4.4 answered {a}, kafkalog {b}\nKafka 4.4: {theirs[:i]}\n"
                        f"kafkalog: {mine[:i]}")
    assert len(theirs) == len(mine)
    return mine
