"""The broker process of :class:`~kafkalog.testing.runners.ProcessRunner`: it runs a
:class:`~kafkalog.testing.runtime.BrokerRuntime` and answers the calls that come over its pipe,
each in its own task. Its stdout, stderr and logs go to its log file. It stops cleanly when asked
(``exit``) or when the test process is gone (the pipe's end), and dies of SIGKILL for a crash.

Imported by the fork server before any broker is forked, so this module imports the broker."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import sys
from collections.abc import Mapping
from typing import Any

# the runtime imports what a broker needs (the server, its handlers, the cleaner): once, in the
# fork server, rather than in each broker
from kafkalog.testing.runtime import BrokerRuntime


def main(conn: Any, data_dir: str, config: Mapping[str, str], ports: list[int], log_path: str,
         orphan_leaves: Mapping[str, str] | None = None) -> None:
    """``orphan_leaves``: what :class:`~kafkalog.testing.LocalBroker` removes when it closes
    (``workdir``, and the tmpfs ``mount`` inside it): removed here after the clean stop when the
    test process died before it could close the broker (nothing else would remove it)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    orphaned = asyncio.run(_serve(conn, data_dir, config, ports))
    if orphaned and orphan_leaves:
        from kafkalog.testing import disk
        disk.remove_workdir(orphan_leaves["workdir"], orphan_leaves.get("mount"))


def warm_up() -> None:
    """Build the request readers and response writers of each API's highest version (what recent
    clients send), which the broker otherwise builds on first use: done once in the fork server,
    each broker forked from it answers its first requests without that cost."""
    from kio.serial import entity_writer

    from kafkalog.server.handlers.kafka_apis import VERSIONS
    from kafkalog.server.requests.message_schemas import response_schema
    from kafkalog.server.requests.protocol import _readers
    for key, (_lo, hi) in VERSIONS.items():
        _readers(key, hi)
        entity_writer(response_schema(key, hi))


def _picklable(e: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


async def _serve(conn: Any, data_dir: str, config: Mapping[str, str], ports: list[int]) -> bool:
    """Serve until told to exit (False) or until the pipe's end (True: the test process is gone)."""
    runtime = BrokerRuntime()
    try:
        info = await runtime.start(data_dir, config, ports)
    except Exception as e:
        conn.send(("error", 0, _picklable(e)))
        return False
    conn.send(("ok", 0, info))
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Any] = asyncio.Queue()

    def readable() -> None:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = None
        if msg is None:
            loop.remove_reader(conn.fileno())
        inbox.put_nowait(msg)

    loop.add_reader(conn.fileno(), readable)
    tasks: set[asyncio.Task[None]] = set()
    try:
        while True:
            msg = await inbox.get()
            if msg is None:
                return True
            if msg[0] == "exit":
                return False
            _kind, call_id, op, kwargs = msg
            task = loop.create_task(_answer(runtime, conn, call_id, op, kwargs))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        await runtime.stop()
        for task in list(tasks):
            task.cancel()


async def _answer(runtime: BrokerRuntime, conn: Any, call_id: int, op: str, kwargs: Mapping[str, Any]) -> None:
    try:
        value = await runtime.call(op, kwargs)
    except Exception as e:
        reply: tuple[str, int, Any] = ("error", call_id, _picklable(e))
    else:
        reply = ("ok", call_id, value)
    try:
        conn.send(reply)
    except (OSError, ValueError):
        pass
