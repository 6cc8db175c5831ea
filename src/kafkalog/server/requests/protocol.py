"""Requests in, responses out: Kafka's request and response headers around kio's message bodies.

No I/O. :func:`parse_request` turns one frame (without its size field) into a :class:`Request`;
:func:`encode_response` turns a kio response entity back into a frame. The Produce and Fetch
responses are written by their handlers (:mod:`.produce`, :mod:`.fetch`) after
:func:`response_header`.

Kafka's rules kept here: the request header is v2 (tagged fields) for flexible request versions,
else v1; the response header is v1 for flexible versions except ApiVersions (always v0, so a client
can read the error of a version it does not share); bytes after a request body are ignored
(librdkafka 2.16 leaves some); a body that does not parse closes the connection, as in Kafka.
Before kio reads a request, :mod:`.request_bounds` checks every length and count in it against
the frame (kio's reader trusts them): a request that breaks a bound raises
:class:`RequestBoundsError`, never reaching kio.
"""

from __future__ import annotations

import functools
import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from kafkalog.errors import InvalidRequestError, RequestBoundsError, UnsupportedVersionError
from kafkalog.server.requests.bounds_program import BoundsProgram, bounds_program
from kafkalog.server.requests.frames import frame
from kafkalog.server.requests.message_schemas import request_schema
from kafkalog.server.requests.request_bounds import violation, walk

_HEADER_PREFIX = struct.Struct(">hhi")
#: a frame's API key and version, its first four bytes
_KEY_VERSION = struct.Struct(">hh")
_INT32 = struct.Struct(">i")

API_VERSIONS_KEY = 18
#: ApiVersions v3 introduced the flexible (v2) request header.
_API_VERSIONS_FIRST_FLEXIBLE = 3


@dataclass(slots=True)
class Request:
    """One parsed request."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    #: kio's request class (``__flexible__`` tells the header versions)
    flexible: bool
    size: int

    def describe(self) -> str:
        return f"api_key={self.api_key} v{self.api_version} correlation_id={self.correlation_id} " \
               f"client_id={self.client_id!r}"


def peek_header(data: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame; :class:`InvalidRequestError` if short."""
    if len(data) < _HEADER_PREFIX.size:
        raise InvalidRequestError(f"request of {len(data)} bytes is shorter than a request header")
    key, version, corr = _HEADER_PREFIX.unpack_from(data, 0)
    return key, version, corr


#: the first four bytes (API key and version) of the frames whose readers :func:`_readers` made
_READERS_MADE: set[bytes] = set()


@functools.cache
def _readers(key: int, version: int) -> tuple[Any, Any, bool, BoundsProgram]:
    """(header reader, body reader, flexible, bounds program) of one API version: made once."""
    cls = request_schema(key, version)
    flexible = bool(cls.__flexible__)
    readers = (entity_reader(RequestHeaderV2 if flexible else RequestHeaderV1), entity_reader(cls),
               flexible, bounds_program(key, version))
    _READERS_MADE.add(_KEY_VERSION.pack(key, version))
    return readers


def parses_at_once(data: bytes, supported: dict[int, tuple[int, int]]) -> bool:
    """Whether :func:`parse_request` of ``data`` has nothing to make first: its API version's
    readers are made, or it is refused before them (too short, a version outside ``supported``).
    The first request of an API version imports kio's classes of it and compiles its bounds
    program (9-23 ms each here: Metadata v12 15 ms, Fetch v12 23 ms), which a broker does off
    its event loop."""
    prefix = data[:4]
    if prefix in _READERS_MADE or len(prefix) < 4:
        return True
    return not _served(supported, *_KEY_VERSION.unpack(prefix))


def _served(supported: dict[int, tuple[int, int]], key: int, version: int) -> bool:
    """Whether ``supported`` (key -> (min, max)) holds API ``key`` at ``version``."""
    rng = supported.get(key)
    return rng is not None and rng[0] <= version <= rng[1]


def parse_request(data: bytes, supported: dict[int, tuple[int, int]]) -> Request:
    """Parse one request frame. Raises :class:`UnsupportedVersionError` for an API or version
    outside ``supported`` (key -> (min, max)) and :class:`InvalidRequestError` for bytes that do not
    parse."""
    if len(data) < _HEADER_PREFIX.size:
        peek_header(data)                       # raises: too short for a header
    key, version, corr = _HEADER_PREFIX.unpack_from(data, 0)
    if not _served(supported, key, version):
        raise UnsupportedVersionError(f"unsupported API key {key} version {version}", key, version, corr)
    read_header, read_body, flexible, program = _readers(key, version)
    bounds = walk(program.code, data)
    if type(bounds) is not int:
        v = violation(program, bounds)
        raise RequestBoundsError(f"Error getting request for apiKey: {v.api_name}, apiVersion: "
                                 f"{version}, correlationId: {corr}: {v.message}", key, version,
                                 corr, v.position)
    try:
        header: Any
        header, hsize = read_header(data, 0)
        body, _size = read_body(data, hsize)     # trailing bytes are ignored
    except Exception as e:
        raise InvalidRequestError(f"cannot parse request api_key={key} v{version} "
                                  f"correlation_id={corr}: {type(e).__name__}: {e}") from None
    return Request(key, version, corr, header.client_id, body, flexible, len(data))


def client_id_of_unsupported(data: bytes) -> str | None:
    """The client id of a request whose version is not supported (best effort, for logs)."""
    if len(data) < 10:
        return None
    n = struct.unpack_from(">h", data, 8)[0]
    if n < 0 or 10 + n > len(data):
        return None
    return data[10:10 + n].decode("utf-8", "replace")


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """The response header: v1 (correlation id + empty tagged fields) when ``flexible``, else v0."""
    return _INT32.pack(correlation_id) + (b"\x00" if flexible else b"")


def encode_response(request: Request, response: Any) -> bytes:
    """A whole response frame (size, header, body) for a kio response entity."""
    buf = io.BytesIO()
    header_cls = response.__header_schema__
    corr = i32(request.correlation_id)
    if header_cls is ResponseHeaderV1:
        entity_writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=corr))
    else:
        entity_writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=corr))
    entity_writer(type(response))(buf, response)
    return frame(buf.getvalue())


def is_api_versions(data: bytes) -> bool:
    return len(data) >= 2 and struct.unpack_from(">h", data, 0)[0] == API_VERSIONS_KEY
