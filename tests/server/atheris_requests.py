"""Coverage-guided fuzzing of the request parser with atheris (libFuzzer), per API (issue 23).

    python -m tests.server.atheris_requests [--api KEY] -runs=N -timeout=10 -rss_limit_mb=2048 [CORPUS_DIR]

The input's first byte picks an API version the broker serves (of API ``KEY`` only with
``--api``); the rest is the request body, behind a valid request header of that version. For each
input the bounds walk of both kernels (the pure-Python twin, instrumented, and the compiled one)
must agree, and ``parse_request`` must return a request or raise ``InvalidRequestError``. Anything
else stops the run with the input written by libFuzzer: an untyped exception, a time-out, an RSS
above ``-rss_limit_mb``, or an abort (the process's address space is capped at 2 GiB, so an
allocation a length field asked for fails). A new corpus directory is seeded with well-formed
bodies of every version. libFuzzer prints ``Done N runs`` at the end (it ends the process with C's
``exit``: Python's ``atexit`` handlers never run).
"""
from __future__ import annotations

import os
import random
import resource
import sys

import atheris

# the parser and the bounds walk instrumented, nothing else the target does not run (the whole of
# kafkalog.server, the broker the handlers import, took ~11 s of instrumenting at each start)
with atheris.instrument_imports(include=["kafkalog.server.requests"]):
    from kafkalog.server.requests import _bounds_py
    from kafkalog.server.requests.bounds_program import bounds_program
    from kafkalog.server.requests.protocol import parse_request

from kafkalog.errors import InvalidRequestError
from kafkalog.server.handlers.kafka_apis import VERSIONS
from tests.kernel_fixtures import pure_and_compiled
from tests.server.request_wire import SERVED, request_body, request_header

ADDRESS_SPACE = 2 << 30
KERNELS = pure_and_compiled(_bounds_py, "kafkalog.server.requests._bounds")
TARGETS = SERVED


def one_input(data: bytes) -> None:
    if not data:
        return
    key, version = TARGETS[data[0] % len(TARGETS)]
    frame = request_header(key, version, 7) + data[1:]
    code = bounds_program(key, version).code
    results = {k.IMPLEMENTATION: k.walk(code, frame) for k in KERNELS}
    if len(set(results.values())) != 1:
        raise AssertionError(f"the kernels disagree on {key} v{version}: {results}")
    try:
        parse_request(frame, VERSIONS)
    except InvalidRequestError:
        pass


def seed(corpus: str) -> None:
    """Well-formed bodies of every target version (the input's first byte picks it)."""
    if os.listdir(corpus):
        return
    rng = random.Random(1)
    for i, (key, version) in enumerate(TARGETS):
        for j in range(3):
            body = request_body(rng, key, version, zeros=j != 2)
            with open(os.path.join(corpus, f"seed-{key}-{version}-{j}"), "wb") as f:
                f.write(bytes([i]) + body)


def main() -> None:
    global TARGETS
    argv = list(sys.argv)
    if "--api" in argv:
        at = argv.index("--api")
        key = int(argv[at + 1])
        del argv[at:at + 2]
        TARGETS = [(k, v) for k, v in SERVED if k == key]
        if not TARGETS:
            sys.exit(f"API key {key} is not served")
    corpora = [a for a in argv[1:] if not a.startswith("-")]
    for c in corpora:
        os.makedirs(c, exist_ok=True)
        seed(c)
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
