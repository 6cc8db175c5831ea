"""Control over the requests a broker serves, for tests (franz-go kfake's ``ControlKey``): fail,
delay, drop or hold the next requests of an API, the same mechanism for every fault.

A :class:`Control` is armed for one API key: the next ``count`` requests of that API (every one
until it is removed when ``count`` is None; only those ``when`` accepts) go to its ``intercept``
instead of straight to the API's handler. ``intercept(request, handle)`` answers the request
itself (a kio response entity, frame bytes or parts, None for no answer), or awaits ``handle()``
(the API's own handler, its result in the handler's form) and returns that, or raises
:class:`ConnectionDropped` to close the connection without an answer; it may be a coroutine.
Controls of one API are tried in the order they were armed; the first that accepts a request
takes it.

Nothing is on the request path while no control is armed: arming one installs a wrapper as the
API's entry of the broker's handler table (:meth:`KafkaApis.set_handler`), and the API's own handler
goes back when its last control is gone. Every method runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.broker import Broker
from kafkalog.server.handlers.error_responses import error_response
from kafkalog.server.handlers.handler import Handler
from kafkalog.server.handlers.kafka_apis import KafkaApis
from kafkalog.server.requests.protocol import Request

#: runs the API's own handler: an awaitable of its result (kio entity, frame bytes or parts, None)
Handle = Callable[[], Awaitable[Any]]
Intercept = Callable[[Request, Handle], Any]


class ConnectionDropped(ConnectionError):
    """Raised by a control: the connection of the request is closed without an answer (the network
    layer closes a connection on a ConnectionError, quietly)."""


@dataclass(eq=False)
class Control:
    """One armed control of one API (see the module's docstring)."""

    api_key: int
    intercept: Intercept
    #: requests still to take; None: every request until removed
    count: int | None = None
    when: Callable[[Request], bool] | None = None
    #: requests taken so far
    taken: int = 0
    #: called with each request taken (before ``intercept``)
    on_take: Callable[[Request], None] | None = None
    #: set once the control took its last request or was removed
    done: bool = field(default=False)


class RequestControl:
    """The armed controls of one broker's :class:`KafkaApis`."""

    def __init__(self, apis: KafkaApis) -> None:
        self.apis = apis
        self._controls: dict[int, list[Control]] = {}

    def add(self, control: Control) -> Control:
        """Arm ``control``: the next requests of its API go through it."""
        if control.api_key not in self.apis.api_keys():
            raise ValueError(f"API key {control.api_key} is not served by this broker")
        if control.count is not None and control.count < 1:
            raise ValueError(f"count must be at least 1 (or None for every request), not {control.count}")
        controls = self._controls.setdefault(control.api_key, [])
        if not controls:
            self.apis.set_handler(control.api_key, self._controlled(control.api_key))
        controls.append(control)
        return control

    def remove(self, control: Control) -> None:
        """Disarm ``control`` (nothing if it is already done)."""
        control.done = True
        controls = self._controls.get(control.api_key)
        if controls is None or control not in controls:
            return
        controls.remove(control)
        if not controls:
            del self._controls[control.api_key]
            self.apis.set_handler(control.api_key, None)

    def clear(self) -> None:
        """Disarm every control: every API is served by its own handler again."""
        for controls in list(self._controls.values()):
            for c in list(controls):
                self.remove(c)

    def armed(self) -> list[Control]:
        return [c for controls in self._controls.values() for c in controls]

    def _controlled(self, api_key: int) -> Handler:
        own = self.apis.handler(api_key)

        def controlled(broker: Broker, request: Request) -> Any:
            for c in self._controls.get(api_key, ()):
                if c.when is not None and not c.when(request):
                    continue
                c.taken += 1
                if c.count is not None and c.taken >= c.count:
                    self.remove(c)
                if c.on_take is not None:
                    c.on_take(request)
                return c.intercept(request, lambda: _handled(own, broker, request))
            return own(broker, request)

        return controlled


async def _handled(handler: Handler, broker: Broker, request: Request) -> Any:
    result = handler(broker, request)
    if asyncio.iscoroutine(result):
        result = await result
    return result


def discard(result: Any) -> None:
    """Close the file descriptors of a response that will not be sent (a Fetch's file slices)."""
    if isinstance(result, list):
        for part in result:
            if isinstance(part, FileSlice):
                os.close(part.fd)


# --- the faults -----------------------------------------------------------------------------------

def fail(broker: Broker, code: int, message: str | None = None) -> Intercept:
    """Answer with Kafka's error response for ``code`` (:mod:`.error_responses`); the request is not
    handled."""
    def intercept(request: Request, handle: Handle) -> Any:
        return error_response(broker, request, code, message)
    return intercept


def delay(seconds: float) -> Intercept:
    """Handle the request ``seconds`` later (requests after it on its connection wait too, as a
    Kafka channel is muted while a request is in flight)."""
    async def intercept(request: Request, handle: Handle) -> Any:
        await asyncio.sleep(seconds)
        return await handle()
    return intercept


def drop(after: bool = False) -> Intercept:
    """Close the connection without an answer: before the request is handled, or ``after`` it was
    (its effect stays: the client cannot know it happened)."""
    if not after:
        def before(request: Request, handle: Handle) -> Any:
            raise ConnectionDropped(f"connection dropped before {request.describe()} (a test's fault)")
        return before

    async def intercept(request: Request, handle: Handle) -> Any:
        discard(await handle())
        raise ConnectionDropped(f"connection dropped after {request.describe()} (a test's fault)")
    return intercept


def hold(gate: asyncio.Event, on_held: Callable[[Request], None] | None = None) -> Intercept:
    """Handle the request, then keep its answer until ``gate`` is set (``on_held`` is called once
    the answer is ready and held)."""
    async def intercept(request: Request, handle: Handle) -> Any:
        result = await handle()
        if on_held is not None:
            on_held(request)
        try:
            await gate.wait()
        except BaseException:
            discard(result)
            raise
        return result
    return intercept


__all__ = ["Control", "ConnectionDropped", "Handle", "Intercept", "RequestControl", "delay", "discard",
           "drop", "fail", "hold"]
