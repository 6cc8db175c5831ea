"""One broker's life on its event loop: open the data directory, serve it on 127.0.0.1, stop it
cleanly or as a crash, and carry out the test's requests (create a topic, arm and release faults,
wait for a fault to take or hold requests).

The same object runs on the thread of an in-process broker and in the child of a subprocess one
(:mod:`.runners`); each of its operations is a coroutine called by name through :meth:`call`, with
plain arguments, so the two modes share every line of it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkalog.cleaner import LogCleaner
from kafkalog.errors import KafkalogError
from kafkalog.log.manager import LogManager
from kafkalog.server.broker import Broker
from kafkalog.server.config import Listener, ServerConfig
from kafkalog.server.handlers import kafka_apis as _apis  # noqa: F401  (the handlers: imported with the module, not by the first start)
from kafkalog.server.handlers import request_control
from kafkalog.server.handlers.request_control import Control, RequestControl
from kafkalog.server.network.socket_server import Server
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.sasl import SaslConfig
from kafkalog.server.security.tls import listener_contexts
from kafkalog.testing.waiting import WaitTimeout

logger = logging.getLogger("kafkalog.testing")

#: a fault as the test side describes it (:mod:`.faults`): plain values, so it crosses to a child
FaultSpec = Mapping[str, Any]


@dataclass(eq=False)
class _Armed:
    """An armed fault: its control, and for a hold the gate its answers wait behind."""

    control: Control
    gate: asyncio.Event | None = None
    #: answers kept now or before
    held: int = 0
    #: requests it is done with: answered, failed or their connection dropped
    finished: int = 0


class BrokerRuntime:
    """A broker serving one data directory on 127.0.0.1 until :meth:`stop`."""

    def __init__(self) -> None:
        self.manager: LogManager | None = None
        self.broker: Broker | None = None
        self.server: Server | None = None
        self.control: RequestControl | None = None
        self._faults: dict[int, _Armed] = {}
        self._next_fault = 1
        #: set (and replaced) whenever a fault takes a request or holds an answer
        self._changed: asyncio.Event | None = None

    async def call(self, op: str, kwargs: Mapping[str, Any]) -> Any:
        """Run the operation ``op`` (one of :data:`OPS`) with ``kwargs``."""
        if op not in OPS:
            raise ValueError(f"unknown broker operation {op!r}")
        result = getattr(self, op)(**kwargs)      # an operation of OPS, by name (from another process)
        if asyncio.iscoroutine(result):
            result = await result
        return result

    # --- life -----------------------------------------------------------------------------------

    async def start(self, data_dir: str, config: Mapping[str, str], ports: list[int]) -> dict[str, Any]:
        """Open ``data_dir`` and listen: the first listener on 127.0.0.1 (``listeners`` in ``config``
        for more), on ``ports`` (0: a free port) in the listeners' order. Returns the bound
        listeners and the data directory's state."""
        cfg = ServerConfig(dict(config))
        listeners = cfg.bind_listeners("127.0.0.1", ports[0] if ports else 0)
        listeners = [Listener(lst.host, ports[i] if i < len(ports) else lst.port, lst.name, lst.protocol)
                     for i, lst in enumerate(listeners)]
        protocols = {lst.protocol for lst in listeners}
        tls = listener_contexts(cfg.values, protocols)
        sasl = SaslConfig.from_values(cfg.values, cfg.oauth_values, [lst.name for lst in listeners if lst.sasl],
                                      cfg.listener_values) \
            if any(lst.sasl for lst in listeners) else None
        manager = LogManager(data_dir, cfg.broker, cleaner_factory=LogCleaner)
        try:
            first = listeners[0]
            broker = Broker(manager, cfg, cfg.advertised(first.host, first.port, first.name))
            server = Server(broker, listeners=listeners, tls=tls, sasl=sasl)
            await server.start()
        except BaseException:
            manager.close()
            raise
        broker.set_endpoints({b.name: cfg.advertised(b.host, b.port, b.name) for b in server.bound})
        self.manager, self.broker, self.server = manager, broker, server
        self.control = RequestControl(server.apis)
        self._changed = asyncio.Event()
        return {"listeners": [{"name": b.name, "protocol": b.protocol, "host": b.host, "port": b.port}
                              for b in server.bound],
                "cluster_id": broker.cluster_id, "had_clean_shutdown": manager.had_clean_shutdown}

    async def stop(self, crash: bool = False) -> dict[str, Any]:
        """Close every connection, then the data directory: a clean shutdown (flushed, checkpoints,
        ``.kafka_cleanshutdown``), or as a crash (``crash``: nothing flushed or written, the next
        start recovers). After a failed write (the directory went offline) the stop is never clean,
        as ``kafkalog serve``'s. Returns whether it was clean."""
        server, manager, broker = self.server, self.manager, self.broker
        if server is None or manager is None or broker is None:
            return {"clean": False, "running": False}
        self.server = self.manager = self.broker = None
        for armed in self._faults.values():
            if armed.gate is not None:
                armed.gate.set()
        if self.control is not None:
            self.control.clear()
        self._faults.clear()
        await server.stop()
        clean = not crash and broker.log_dir_failure is None
        if clean:
            manager.close()
        else:
            if manager.cleaner is not None:     # a crash stops every thread with the process
                manager.cleaner.shutdown()
            manager.abandon()
        return {"clean": clean, "running": False}

    def state(self) -> dict[str, Any]:
        """Whether it runs, the connections, the offline directory's cause, the armed faults."""
        broker = self.broker
        failure = broker.log_dir_failure if broker is not None else None
        return {"running": broker is not None,
                "connections": self.server.connection_count if self.server is not None else 0,
                "log_dir_failure": None if failure is None else str(failure),
                "faults": {fid: self._counts(a) for fid, a in self._faults.items()}}

    # --- topics ---------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, config: Mapping[str, Any]) -> str:
        """Create ``name`` (Kafka's name rules, partition count and topic configs); returns its id."""
        broker = self._running()
        if broker.manager.has_topic(name):
            raise KafkalogError(f"Topic '{name}' already exists.", file=broker.manager.data_dir)
        return str(broker.create_topic(name, partitions, config))

    # --- faults ---------------------------------------------------------------------------------

    def arm(self, spec: FaultSpec, when: Callable[[Request], bool] | None = None) -> int:
        """Arm the fault ``spec`` (``api_key``, ``action`` fail/delay/drop/hold, ``count``, and the
        action's ``error``/``message``, ``seconds`` or ``after``; ``client_id`` and ``when`` pick the
        requests). Returns its id."""
        broker = self._running()
        assert self.control is not None
        action = spec["action"]
        armed = _Armed(control=None)        # type: ignore[arg-type]  # set below
        if action == "fail":
            intercept = request_control.fail(broker, int(spec["error"]), spec.get("message"))
        elif action == "delay":
            intercept = request_control.delay(float(spec["seconds"]))
        elif action == "drop":
            intercept = request_control.drop(after=bool(spec.get("after", False)))
        elif action == "hold":
            armed.gate = asyncio.Event()
            intercept = request_control.hold(armed.gate, lambda _r: self._held(armed))
        else:
            raise ValueError(f"unknown fault action {action!r}")
        client_id = spec.get("client_id")
        if client_id is not None:
            user_when = when

            def when(request: Request) -> bool:
                return request.client_id == client_id and (user_when is None or user_when(request))
        armed.control = Control(int(spec["api_key"]), self._counted(armed, intercept), spec.get("count"),
                                when, on_take=lambda _r: self._notify())
        self.control.add(armed.control)
        fid = self._next_fault
        self._next_fault += 1
        self._faults[fid] = armed
        return fid

    def _counted(self, armed: _Armed, intercept: request_control.Intercept) -> request_control.Intercept:
        """``intercept``, counting the requests it is done with."""
        def done() -> None:
            armed.finished += 1
            self._notify()

        def counted(request: Request, handle: request_control.Handle) -> Any:
            try:
                result = intercept(request, handle)
            except BaseException:
                done()
                raise
            if not asyncio.iscoroutine(result):
                done()
                return result

            async def finish() -> Any:
                try:
                    return await result
                finally:
                    done()
            return finish()
        return counted

    def disarm(self, fault: int) -> None:
        """Disarm a fault; a hold's answers are released."""
        armed = self._faults.get(fault)
        if armed is None:
            return
        if armed.gate is not None:
            armed.gate.set()
        if self.control is not None:
            self.control.remove(armed.control)

    def release(self, fault: int) -> None:
        """Send the answers a hold keeps, and let the requests it takes later through."""
        armed = self._faults.get(fault)
        if armed is not None and armed.gate is not None:
            armed.gate.set()

    def clear_faults(self) -> None:
        for fid in list(self._faults):
            self.disarm(fid)

    async def wait_fault(self, fault: int, taken: int = 0, held: int = 0, finished: int = 0,
                         timeout: float = 30.0) -> dict[str, int]:
        """Wait until the fault took ``taken`` requests, kept ``held`` answers and is done with
        ``finished`` requests (:class:`WaitTimeout` after ``timeout`` seconds); returns the counts."""
        armed = self._faults.get(fault)
        if armed is None or self._changed is None:
            raise KafkalogError(f"no fault {fault} is armed on this broker (it was stopped or restarted)")

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while armed.control.taken < taken or armed.held < held or armed.finished < finished:
            left = deadline - loop.time()
            if left <= 0 or self._changed is None:
                raise WaitTimeout(f"after {timeout:g} s the fault took {armed.control.taken} request(s) "
                                   f"(waiting for {taken}), kept {armed.held} answer(s) (waiting for "
                                   f"{held}), finished {armed.finished} (waiting for {finished})")
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass
        return self._counts(armed)

    @staticmethod
    def _counts(armed: _Armed) -> dict[str, Any]:
        return {"api_key": armed.control.api_key, "taken": armed.control.taken, "held": armed.held,
                "finished": armed.finished, "done": armed.control.done}

    def _held(self, armed: _Armed) -> None:
        armed.held += 1
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    def _running(self) -> Broker:
        if self.broker is None:
            raise KafkalogError("the broker is not running (start or restart it first)")
        return self.broker


#: the operations :meth:`BrokerRuntime.call` runs
OPS = frozenset({"start", "stop", "state", "create_topic", "arm", "disarm", "release", "clear_faults",
                 "wait_fault"})

__all__ = ["OPS", "BrokerRuntime", "FaultSpec"]
