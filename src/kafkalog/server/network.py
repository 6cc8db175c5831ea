"""The sockets: one asyncio loop in one process, one task per connection.

Each connection reads frames (:class:`~kafkalog.server.frames.FrameReader`), handles its requests
one at a time in order (Kafka mutes a channel while a request is in flight too) and writes each
response before reading the next request, so a client that never reads its responses stalls only
itself, and one connection buffers at most one request. Limits are Kafka's: ``max.connections``
(further connections are closed at once), ``connections.max.idle.ms`` (a connection with no
progress, reading or writing, for that long is closed), ``socket.request.max.bytes``. A frame that
is refused or does not parse closes its connection; the broker goes on serving the others.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque

from kafkalog.errors import KafkalogError
from kafkalog.log.fetch import FileSlice
from kafkalog.server.api_versions import unsupported_version_response
from kafkalog.server.apis import VERSIONS
from kafkalog.server.broker import Broker, Response
from kafkalog.server.frames import FrameReader
from kafkalog.server.protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    Request,
    UnsupportedVersionError,
    parse_request,
)

logger = logging.getLogger("kafkalog.server")

RECV_BYTES = 256 * 1024
MSG_MORE = getattr(socket, "MSG_MORE", 0)


class Server:
    """Accepts connections for a :class:`Broker` until :meth:`stop`."""

    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        cfg = broker.config
        self.max_request = cfg.socket_request_max_bytes
        self.max_connections = cfg.max_connections
        self.idle_s = cfg.connections_max_idle_ms / 1000.0
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._accept_task: asyncio.Task[None] | None = None

    async def start(self) -> tuple[str, int]:
        """Bind and listen; returns the bound (host, port)."""
        infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        family, _t, _p, _c, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(1024)
        sock.setblocking(False)
        self._sock = sock
        bound = sock.getsockname()
        self.host, self.port = bound[0], bound[1]
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop())
        return self.host, self.port

    async def stop(self) -> None:
        """Stop accepting, close every connection (in-flight requests are abandoned)."""
        if self._accept_task is not None:
            self._accept_task.cancel()
            await asyncio.gather(self._accept_task, return_exceptions=True)
        await self.broker.stop_timers()
        if self._sock is not None:
            self._sock.close()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def connection_count(self) -> int:
        return len(self._tasks)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            try:
                conn, addr = await loop.sock_accept(self._sock)
            except OSError as e:          # EMFILE and friends: back off, keep serving
                logger.warning("accept failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            if len(self._tasks) >= self.max_connections:
                logger.warning("closing connection from %s: max.connections=%d reached", addr,
                               self.max_connections)
                conn.close()
                continue
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._serve(conn, addr))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket, addr: object) -> None:
        loop = asyncio.get_running_loop()
        reader = FrameReader(self.max_request)
        pending: deque[bytes] = deque()
        logger.debug("connection from %s", addr)
        try:
            while True:
                if not pending:
                    data = await asyncio.wait_for(loop.sock_recv(conn, RECV_BYTES), self.idle_s)
                    if not data:
                        return
                    pending.extend(reader.feed(data))
                    continue
                response = await self._process(pending.popleft())
                if response is not None:
                    await self._send(conn, response)
        except (KafkalogError, InvalidRequestError) as e:
            logger.warning("closing connection from %s: %s", addr, e)
        except TimeoutError:
            logger.info("closing connection from %s: idle for connections.max.idle.ms=%d",
                        addr, int(self.idle_s * 1000))
        except (ConnectionError, OSError) as e:
            logger.debug("connection from %s: %s", addr, e)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("closing connection from %s after an unexpected error", addr)
        finally:
            conn.close()

    async def _process(self, frame: bytes) -> Response:
        try:
            request = parse_request(frame, VERSIONS)
        except UnsupportedVersionError as e:
            if e.api_key != API_VERSIONS_KEY:
                raise
            req = Request(e.api_key, e.api_version, e.correlation_id, None, None, False, len(frame))
            return unsupported_version_response(req)
        return await self.broker.handle(request)

    async def _send(self, conn: socket.socket, response: bytes | list[bytes | FileSlice]) -> None:
        if isinstance(response, bytes):
            await self._sendall(conn, response, 0)
            return
        try:
            for i, part in enumerate(response):
                if isinstance(part, FileSlice):
                    await self._sendfile(conn, part)
                    os.close(part.fd)
                    response[i] = b""
                elif part:
                    # a header followed by a slice: MSG_MORE lets the kernel send both as one
                    nxt = response[i + 1] if i + 1 < len(response) else None
                    await self._sendall(conn, part, MSG_MORE if isinstance(nxt, FileSlice) else 0)
        finally:
            for part in response:
                if isinstance(part, FileSlice):
                    os.close(part.fd)

    async def _sendall(self, conn: socket.socket, data: bytes, flags: int) -> None:
        """Send ``data``: straight away when the socket takes it all (the usual case: no task, no
        loop turn), else the rest through the loop within ``connections.max.idle.ms``."""
        try:
            n = conn.send(data, flags)
        except BlockingIOError:
            n = 0
        if n < len(data):
            await asyncio.wait_for(asyncio.get_running_loop().sock_sendall(conn, data[n:]), self.idle_s)

    async def _sendfile(self, conn: socket.socket, sl: FileSlice) -> None:
        """``os.sendfile`` the slice to the non-blocking socket, waiting for writability."""
        loop = asyncio.get_running_loop()
        sent = 0
        fd = conn.fileno()
        while sent < sl.size:
            try:
                n = os.sendfile(fd, sl.fd, sl.position + sent, sl.size - sent)
            except BlockingIOError:
                fut: asyncio.Future[None] = loop.create_future()
                loop.add_writer(fd, _resolve, fut)
                try:
                    await asyncio.wait_for(fut, self.idle_s)
                finally:
                    loop.remove_writer(fd)
                continue
            if n == 0:
                raise ConnectionError(f"{sl.path} ended before the fetched slice was sent")
            sent += n


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
