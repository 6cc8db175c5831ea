"""Every length and count of a request checked against its frame before kio reads it.

kio's native reader trusts a request's lengths and counts: it allocates an array's room before it
reads the elements, so one count field of a hostile frame made the broker ask for 200 GB and abort
(issue 23). :func:`check_request_bounds` walks the request header and body first, with the
program compiled once per (API key, version) from kio's own classes
(:mod:`kafkalog.server.requests.bounds_program`), and refuses what Kafka 4.4's generated readers refuse
(``MessageDataGenerator``, ``MessageUtil``, ``ByteBufferAccessor``), in their order and words:

* an array (``[int32]`` or compact) with more elements than bytes left, or more than
  ``MAX_ARRAY_LENGTH`` (1,000,000);
* a tagged-field section with more fields than bytes left, more than ``MAX_TAGGED_FIELD_COUNT``
  (10,000), or a count that is negative as Kafka reads it (2^31 or more);
* a string, bytes or records field longer than the bytes left, a string longer than 0x7fff;
  an unknown tagged field longer than the bytes left;
* null in a field that is not nullable; a negative length other than -1;
* an unsigned varint of more than 5 bytes; a field past the end of the frame;
* and, kafkalog's own bound, more than ``MAX_TOTAL_ELEMENTS`` (1,000,000) array elements in all
  the arrays of the request (Kafka's limit is per array): what kio builds of a request is about 55
  bytes per element, 28 bytes per byte of a frame of small structs, so a request decodes to at most
  ~60 MB whatever its frame (``socket.request.max.bytes`` is 100 MiB).

Nothing is allocated in proportion to a length or count before it is checked, so what kio then
allocates is bounded by the frame, itself bounded by ``socket.request.max.bytes``. The walk is the
compiled kernel ``_bounds`` or its pure-Python twin ``_bounds_py`` (chosen with every other kernel:
:mod:`kafkalog._kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkalog._kernels import load_kernel
from kafkalog.server.requests.bounds_program import BoundsProgram, bounds_program

#: the module in use (``kafkalog.server.requests._bounds`` or ``kafkalog.server.requests._bounds_py``)
implementation_module = load_kernel("kafkalog.server.requests._bounds")
IMPLEMENTATION: str = implementation_module.IMPLEMENTATION
walk = implementation_module.walk

MAX_ARRAY_LENGTH: int = implementation_module.MAX_ARRAY_LENGTH
MAX_TAGGED_FIELD_COUNT: int = implementation_module.MAX_TAGGED_FIELD_COUNT
MAX_TOTAL_ELEMENTS: int = implementation_module.MAX_TOTAL_ELEMENTS

_m = implementation_module
#: violation status -> Kafka's message ({name}, {value}, {available} filled in)
MESSAGES = {
    _m.V_UNDERFLOW: "buffer underflow: {value} byte(s) needed, {available} left",
    _m.V_VARINT_TOO_LONG: "Varint is too long, the most significant bit in the 5th byte is set",
    _m.V_NULL: "non-nullable field {name} was serialized as null",
    _m.V_STRING_LENGTH: "string field {name} had invalid length {value}",
    _m.V_NEGATIVE_LENGTH: "field {name} had invalid negative length {value}",
    _m.V_BYTES_REMAINING: "Error reading byte array of {value} byte(s): only {available} byte(s) "
                          "available",
    _m.V_ARRAY_REMAINING: "Tried to allocate a collection of size {value}, but there are only "
                          "{available} bytes remaining.",
    _m.V_ARRAY_MAX: "Tried to read a collection of size {value}, which exceeds the maximum "
                    f"allowed size of {MAX_ARRAY_LENGTH}.",
    _m.V_TAGS_NEGATIVE: "Invalid negative number of tagged fields {value}",
    _m.V_TAGS_REMAINING: "Tried to read {value} tagged fields, but there are only {available} "
                         "bytes remaining.",
    _m.V_TAGS_MAX: "Tried to read {value} tagged fields, which exceeds the maximum allowed count "
                   f"of {MAX_TAGGED_FIELD_COUNT}.",
    _m.V_ELEMENTS_MAX: "Tried to read {value} collection elements in this request, which exceeds "
                       f"the maximum allowed total of {MAX_TOTAL_ELEMENTS}.",
}


@dataclass(frozen=True, slots=True)
class BoundsViolation:
    """The first length or count of a request its frame cannot hold or Kafka refuses."""

    api_name: str
    api_version: int
    message: str
    #: the byte of the frame (after its size field) where the length or count starts
    position: int


def check_request_bounds(data: bytes, api_key: int, api_version: int) -> BoundsViolation | None:
    """None when every length and count of the request ``data`` (a frame without its size field)
    fits, else the first that does not."""
    program = bounds_program(api_key, api_version)
    result = walk(program.code, data)
    if type(result) is int:
        return None
    return violation(program, result)


def violation(program: BoundsProgram, result: tuple[int, int, int, int, int]) -> BoundsViolation:
    status, name, value, available, position = result
    field = program.names[name] if name >= 0 else ""
    text = MESSAGES[status].format(name=field, value=value, available=available)
    return BoundsViolation(program.api_name, program.api_version, text, position)
