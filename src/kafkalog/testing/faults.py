"""Faults as a test arms them: Kafka's API and error names, and the handles a test keeps
(:class:`Fault`, :class:`Hold`) to wait for a fault to take its requests, release what a hold
keeps, or disarm it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalog.errors import InvalidConfigError, KafkalogError
from kafkalog.server.handlers.kafka_apis import APIS
from kafkalog.server.requests.kio_build import ErrorCode
from kafkalog.server.requests.protocol import Request

if TYPE_CHECKING:
    from kafkalog.testing.runners import Runner

#: a wait's call may take this much longer than the wait itself before it counts as stuck
CALL_MARGIN_S = 30.0
_API_KEYS = {name.lower(): key for key, (name, _lo, _hi, _h) in APIS.items()}


def api_key(api: str | int) -> int:
    """The key of an API named as Kafka names it (``"Produce"``, ``"FindCoordinator"``, any case),
    or its number."""
    if isinstance(api, int) and not isinstance(api, bool):
        if api not in APIS:
            raise InvalidConfigError(f"API key {api} is not served by kafkalog (served: {sorted(APIS)})")
        return api
    key = _API_KEYS.get(str(api).replace("_", "").lower())
    if key is None:
        names = ", ".join(name for name, _lo, _hi, _h in APIS.values())
        raise InvalidConfigError(f"unknown API {api!r}: expected one of {names}")
    return key


def api_name(key: int) -> str:
    return APIS[key][0]


def error_code(error: str | int) -> int:
    """The code of a Kafka error named as Kafka's ``Errors`` names it
    (``"NOT_LEADER_OR_FOLLOWER"``, any case), or its number (any Kafka error but NONE)."""
    try:
        code = ErrorCode(error) if isinstance(error, int) else ErrorCode[str(error).lower()]
    except (KeyError, ValueError):
        raise InvalidConfigError(f"unknown Kafka error {error!r}: expected a name of Kafka's Errors "
                                 f"(NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT ...) or its code") from None
    if code == ErrorCode.none:
        raise InvalidConfigError("a failing request needs an error other than NONE")
    return int(code)


def error_name(code: int) -> str:
    return ErrorCode(code).name.upper()


def fault_spec(api: str | int, action: str, count: int | None, client_id: str | None,
               **values: Any) -> dict[str, Any]:
    """A fault as the broker's runtime arms it (plain values)."""
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise InvalidConfigError(f"count must be a positive number of requests, or None for every "
                                 f"request until the fault is cancelled, not {count!r}")
    return {"api_key": api_key(api), "action": action, "count": count, "client_id": client_id, **values}


class Fault:
    """A fault armed on a running broker; disarmed after its ``count`` requests, by :meth:`cancel`,
    at the end of a ``with`` block, or when the broker stops."""

    def __init__(self, runner: Runner, fault_id: int, spec: dict[str, Any]) -> None:
        self._runner = runner
        self.id = fault_id
        self.spec = spec
        self.api = api_name(spec["api_key"])

    def _call(self, op: str, kwargs: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        if not self._runner.running:
            raise KafkalogError(f"{self!r} is gone: the broker was stopped or restarted since it was armed")
        return self._runner.call(op, kwargs, timeout)

    def _state(self) -> dict[str, Any]:
        state: dict[str, Any] | None = self._call("state")["faults"].get(self.id)
        if state is None:
            raise KafkalogError(f"{self!r} is gone: the broker was stopped or restarted since it was armed")
        return state

    @property
    def taken(self) -> int:
        """How many requests it took so far."""
        return int(self._state()["taken"])

    @property
    def done(self) -> bool:
        """True once it took its ``count`` requests or was cancelled."""
        return bool(self._state()["done"])

    def wait(self, taken: int = 1, timeout: float = 30.0) -> Fault:
        """Wait until it took ``taken`` requests in all (``TimeoutError`` after ``timeout`` s, naming
        the fault)."""
        self._call("wait_fault", {"fault": self.id, "taken": taken, "timeout": timeout},
                          timeout=timeout + CALL_MARGIN_S)
        return self

    @property
    def finished(self) -> int:
        """How many of the requests it took it is done with (answered, failed, or dropped)."""
        return int(self._state()["finished"])

    def wait_finished(self, finished: int = 1, timeout: float = 30.0) -> Fault:
        """Wait until it is done with ``finished`` requests in all: a delayed request handled and
        answered, a dropped one's connection closed, a held answer sent (after :meth:`Hold.release`)."""
        self._call("wait_fault", {"fault": self.id, "finished": finished, "timeout": timeout},
                          timeout=timeout + CALL_MARGIN_S)
        return self

    def cancel(self) -> None:
        """Disarm it (a hold sends what it keeps)."""
        self._call("disarm", {"fault": self.id})

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.cancel()
        except Exception:       # the broker was stopped in the block: nothing is armed any more
            pass

    def __repr__(self) -> str:
        s = self.spec
        what = {"fail": f"fail with {error_name(s['error'])}" if 'error' in s else "fail",
                "delay": f"delay {s.get('seconds')} s", "drop": "drop the connection" + (
                    " after handling" if s.get("after") else ""), "hold": "hold the answer"}[s["action"]]
        n = "every" if s["count"] is None else f"the next {s['count']}"
        return f"<Fault {self.id}: {what} of {n} {self.api} request(s)>"


class Hold(Fault):
    """A fault that keeps the answers of the requests it takes (each handled: its effect is there)
    until :meth:`release`."""

    def wait_held(self, held: int = 1, timeout: float = 30.0) -> Hold:
        """Wait until it keeps ``held`` answers in all."""
        self._call("wait_fault", {"fault": self.id, "held": held, "timeout": timeout},
                          timeout=timeout + CALL_MARGIN_S)
        return self

    @property
    def held(self) -> int:
        return int(self._state()["held"])

    def release(self) -> None:
        """Send the answers it keeps; the requests it takes from now on are answered at once."""
        self._call("release", {"fault": self.id})


#: a predicate over the parsed request (in-process brokers only)
When = Callable[[Request], bool]

__all__ = ["Fault", "Hold", "When", "api_key", "api_name", "error_code", "error_name", "fault_spec"]
