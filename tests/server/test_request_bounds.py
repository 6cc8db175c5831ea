"""The bounds walk (kafkalog.server.requests.request_bounds) in front of kio's reader, in-process: it steps
over exactly the bytes kio reads for every API version the broker serves, it refuses every
length or count the frame cannot hold (the class of issue 23's 131-byte frame) with Kafka 4.4's
message, and Kafka's own limits (1,000,000 array elements, 10,000 tagged fields). Both kernels,
compiled and pure Python, give the same answers. The broker-level behaviour (the connection
closed, one log line, the broker serving on) is in test_hostile_frames.py."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import textwrap
from types import ModuleType

import pytest

from kafkalog.errors import InvalidRequestError, RequestBoundsError
from kafkalog.server.handlers.kafka_apis import VERSIONS
from kafkalog.server.requests import _bounds_py
from kafkalog.server.requests.bounds_program import bounds_program
from kafkalog.server.requests.protocol import _readers, parse_request
from kafkalog.server.requests.request_bounds import (
    MAX_ARRAY_LENGTH,
    MAX_TAGGED_FIELD_COUNT,
    check_request_bounds,
)
from tests.kernel_fixtures import pure_and_compiled
from tests.server.request_wire import (
    SERVED,
    count_positions,
    huge_values,
    mutations,
    replace_count,
    request_frame,
    request_header,
    uvarint,
)

KERNELS = pure_and_compiled(_bounds_py, "kafkalog.server.requests._bounds")
any_kernel = pytest.mark.parametrize("k", KERNELS, ids=[m.IMPLEMENTATION for m in KERNELS])

#: issue 23: IncrementalAlterConfigs v1, a valid header and random bytes; kio asked for 201 GB
ISSUE_FRAME = bytes.fromhex(
    "0000007f002c000114f8a802000666757a7a657200b4e4ddd15d0a079b9f4faede8ecece5096563031f84f84cb"
    "d7c86fc02a4f212bc432a704c5fdca1544e8a6edd2c6f70c2050844c99437d1d914e7ba3fef555dc86d6cbfa71"
    "44400ee29a7cebb3df6cf174976c59225ec4ee92c2e4c48ee7ce42e9f8c5dec7a66527a9abeac62f15")


def _walk(k: ModuleType, data: bytes, key: int, version: int) -> object:
    return k.walk(bounds_program(key, version).code, data)


def test_the_issue_frame_is_refused_before_kio_reads_it() -> None:
    data = ISSUE_FRAME[4:]
    assert len(ISSUE_FRAME) == 131
    with pytest.raises(RequestBoundsError) as e:
        parse_request(data, VERSIONS)
    err = e.value
    assert isinstance(err, InvalidRequestError)
    assert (err.api_key, err.api_version) == (44, 1)
    assert "apiKey: IncrementalAlterConfigs, apiVersion: 1" in str(err)
    assert "Tried to allocate a collection of size 25135903283, but there are only 105 bytes " \
           "remaining." in str(err)
    assert err.position == 17 and "at byte 17" in str(err)


@any_kernel
def test_the_walk_ends_where_kio_ends_for_every_served_version(k: ModuleType) -> None:
    """Well-formed requests of every served version (arrays, nulls, nested structs, known
    tagged fields): the walk accepts them and ends exactly where kio's reader ends."""
    rng = random.Random(23)
    for key, version in SERVED:
        read_header, read_body, _f, _p = _readers(key, version)
        for i in range(25):
            data = request_frame(rng, key, version, i)[4:]
            _h, hsize = read_header(data, 0)
            _b, bsize = read_body(data, hsize)
            assert _walk(k, data, key, version) == hsize + bsize, (key, version, data.hex())


@any_kernel
def test_every_length_and_count_beyond_the_frame_is_refused(k: ModuleType) -> None:
    """The class of the issue: every length or count field of every served version (strings,
    bytes, records, arrays, tagged-field counts, the header's client id), set to each of a set of
    huge values, is refused by the walk, so kio never reads it."""
    rng = random.Random(4)
    checked = 0
    for key, version in SERVED:
        frame = request_frame(rng, key, version)
        body = frame[4:]
        for pos, width in count_positions(body, key, version):
            for value in huge_values(width):
                data = replace_count(body, pos, width, value)
                result = _walk(k, data, key, version)
                assert type(result) is tuple, (key, version, pos, value, data.hex())
                checked += 1
    assert checked > 3000


@any_kernel
def test_kafkas_limits(k: ModuleType) -> None:
    # Metadata v0: topics [string]; each element 2 bytes (an empty name)
    head = request_header(3, 0, 1)
    for n, ok in ((MAX_ARRAY_LENGTH, True), (MAX_ARRAY_LENGTH + 1, False)):
        data = head + struct.pack(">i", n) + b"\x00\x00" * n
        result = _walk(k, data, 3, 0)
        if ok:
            assert result == len(data)
        else:
            assert result == (_bounds_py.V_ARRAY_MAX, _name(3, 0, "topics"), n, 2 * n, len(head))
    # ApiVersions v3: two compact strings, then the tagged fields: empty unknown tags, 2 bytes each
    head = request_header(18, 3, 1)
    for n, ok in ((MAX_TAGGED_FIELD_COUNT, True), (MAX_TAGGED_FIELD_COUNT + 1, False)):
        data = head + b"\x01\x01" + uvarint(n) + b"\x07\x00" * n
        result = _walk(k, data, 18, 3)
        if ok:
            assert result == len(data)
        else:
            assert result[:3] == (_bounds_py.V_TAGS_MAX, -1, n)
    # kafkalog's own: 1,000,000 array elements in all (OffsetFetch v1: two topics of 600,000
    # partition ids each, each array within Kafka's limit)
    head = request_header(9, 1, 1)
    topic = b"\x00\x01t" + struct.pack(">i", 600_000) + b"\x00\x00\x00\x01" * 600_000
    data = head + b"\x00\x01g" + struct.pack(">i", 2) + topic + topic
    result = _walk(k, data, 9, 1)
    assert type(result) is tuple and result[:3] == (_bounds_py.V_ELEMENTS_MAX,
                                                   _name(9, 1, "partition_indexes"), 1_200_002)
    assert _walk(k, head + b"\x00\x01g" + struct.pack(">i", 1) + topic, 9, 1) == \
        len(head) + 3 + 4 + len(topic)
    head = request_header(18, 3, 1)
    message = check_request_bounds(head + b"\x01\x01" + uvarint(10_001) + b"\x07\x00" * 10_001,
                                   18, 3)
    assert message is not None
    assert message.message == ("Tried to read 10001 tagged fields, which exceeds the maximum "
                               "allowed count of 10000.")


def _name(key: int, version: int, field: str) -> int:
    names = bounds_program(key, version).names
    return max(i for i, n in enumerate(names) if n == field)


@pytest.mark.parametrize("case,message", [
    # Metadata v12: topics is nullable; OffsetFetch v8: groups is not
    ("null array", "non-nullable field groups was serialized as null"),
    ("long string", "string field group_id had invalid length 32768"),
    ("long bytes", "Error reading byte array of 1000 byte(s): only 3 byte(s) available"),
    ("tags beyond", "Tried to read 100 tagged fields, but there are only 0 bytes remaining."),
    ("negative tags", "Invalid negative number of tagged fields 4294967295"),
    ("long varint", "Varint is too long, the most significant bit in the 5th byte is set"),
    ("negative array", "field topics had invalid negative length -2"),
])
def test_kafkas_messages(case: str, message: str) -> None:
    if case == "null array":
        key, version, body = 9, 8, b"\x00" + b"\x00\x00"
    elif case == "long string":
        key, version, body = 9, 8, b"\x02" + uvarint(0x8001) + b"x" * 0x8000
    elif case == "long bytes":                          # SaslAuthenticate v2: compact bytes
        key, version, body = 36, 2, uvarint(1001) + b"abc"
    elif case == "tags beyond":
        key, version, body = 18, 3, b"\x01\x01" + uvarint(100)
    elif case == "negative tags":
        key, version, body = 18, 3, b"\x01\x01" + uvarint(2**32 - 1)
    elif case == "long varint":
        key, version, body = 18, 3, b"\x01\x01\xff\xff\xff\xff\xff\x01"
    else:                                               # Metadata v4: int32 count -2
        key, version, body = 3, 4, struct.pack(">i", -2) + b"\x01"
    data = request_header(key, version, 1) + body
    v = check_request_bounds(data, key, version)
    assert v is not None and v.message == message
    with pytest.raises(RequestBoundsError, match="apiVersion"):
        parse_request(data, VERSIONS)


def test_the_twins_agree_on_hostile_frames() -> None:
    if len(KERNELS) < 2:
        pytest.skip("the compiled kernel is not built")
    compiled, pure = KERNELS
    rng = random.Random(99)
    for key, version in SERVED:
        code = bounds_program(key, version).code
        for frame in mutations(rng, key, version, 60):
            data = frame[4:]
            assert compiled.walk(code, data) == pure.walk(code, data), (key, version, data.hex())
        for _ in range(20):
            data = request_header(key, version, 1) + rng.randbytes(rng.randrange(64))
            assert compiled.walk(code, data) == pure.walk(code, data), (key, version, data.hex())


def test_hostile_frames_never_allocate_beyond_a_limit() -> None:
    """parse_request over 300 hostile frames of every served version, in a process whose
    address space is capped at 2 GiB: every frame parses or raises InvalidRequestError; without
    the walk the first huge count aborts the process (Rust's failed allocation)."""
    code = textwrap.dedent("""
        import random, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from kafkalog.server.handlers.kafka_apis import VERSIONS
        from kafkalog.errors import InvalidRequestError
        from kafkalog.server.requests.protocol import parse_request
        from tests.server.request_wire import SERVED, mutations
        rng = random.Random(int(sys.argv[1]))
        refused = parsed = 0
        for key, version in SERVED:
            for frame in mutations(rng, key, version, 300):
                try:
                    parse_request(frame[4:], VERSIONS)
                    parsed += 1
                except InvalidRequestError:
                    refused += 1
        print(parsed, refused)
    """)
    p = subprocess.run([sys.executable, "-c", code, "7"], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    parsed, refused = map(int, p.stdout.split())
    assert parsed + refused == 300 * len(SERVED) and parsed > 1000 and refused > 10000


def _atheris(tmp_path: str, runs: int, *args: str) -> None:
    pytest.importorskip("atheris")
    p = subprocess.run([sys.executable, "-m", "tests.server.atheris_requests", *args, f"-runs={runs}",
                        "-timeout=10", "-rss_limit_mb=2048", "-seed=1",
                        f"-artifact_prefix={tmp_path}/", f"{tmp_path}/corpus"],
                       capture_output=True, text=True, timeout=3600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"Done {runs} runs" in p.stderr


def test_atheris_request_parser_quick(tmp_path: object) -> None:
    """Coverage-guided (tests/server/atheris_requests.py): 2,000 bodies over every served
    version, both kernels compared, parse_request under a 2 GiB address-space limit."""
    _atheris(str(tmp_path), 2000)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(VERSIONS))
def test_atheris_request_parser_per_api(tmp_path: object, key: int) -> None:
    """``KAFKALOG_ATHERIS_REQUESTS`` runs (default 20,000) per API key."""
    _atheris(str(tmp_path), int(os.environ.get("KAFKALOG_ATHERIS_REQUESTS", "20000")), "--api",
             str(key))
