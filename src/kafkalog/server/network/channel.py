"""One connection's byte transport: :class:`PlainChannel` (the socket itself, ``sendfile`` for
record bytes) and :class:`TlsChannel` (Python's ``ssl`` through an asyncio transport; record bytes
are read from the segment file and encrypted, as Kafka does on SSL listeners).

Both bound what a connection can hold: a receive is at most ``RECV_BYTES``, a send waits until the
client has taken the bytes (TLS: until the transport's buffer is under its high-water mark), and a
client that takes nothing for ``connections.max.idle.ms`` makes the send fail with TimeoutError, so
the connection is closed. A client that never reads cannot grow the broker's memory past one
response. A plaintext connection reads nothing while the broker's request queue is full
(``queued.max.requests``, :mod:`~kafkalog.server.network.request_queue`)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any, Protocol

from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.network.request_queue import RequestQueue

RECV_BYTES = 256 * 1024
MSG_MORE = getattr(socket, "MSG_MORE", 0)       # a platform probe: Linux only
#: the chunk of a file slice read and encrypted at a time on a TLS connection
TLS_FILE_CHUNK = 256 * 1024


#: a response as it goes out: bytes, or the parts of one frame with file slices among them
Parts = list[bytes | FileSlice]


class Channel(Protocol):
    async def recv(self) -> bytes | None:
        """The next bytes (empty: the client closed); None from a channel whose readable callback
        answers requests itself (:attr:`PlainChannel.on_data`) when it left work for the caller."""

    async def send(self, data: bytes, more: bool = False) -> None:
        """Send ``data``; ``more``: a file slice follows at once (the kernel may send both as one)."""

    async def send_file(self, sl: FileSlice) -> None: ...

    def close(self) -> None: ...


class PlainChannel:
    """The accepted non-blocking socket.

    The socket stays registered for reading from its first wait on (one request after another
    would otherwise add and remove it with the loop's selector each time, on the path from a
    request's arrival to its answer); a readable event that finds nobody waiting (a client sending
    while its answer is still going out) unregisters it, so the loop never spins on it.

    With :attr:`on_data` set, the readable callback hands the bytes it receives to it, during a
    receive's wait: the connection's requests are answered there, without waking its task, for as
    long as each is answered at once and its response goes out whole (:meth:`send_now`). When
    ``on_data`` returns True (it left work for the task), the waiting receive returns None.

    While ``queue`` is full nothing is read: the socket is unregistered and registered again when
    the queue has room (Kafka's network threads block on a full request queue)."""

    def __init__(self, conn: socket.socket, idle_s: float, queue: RequestQueue | None = None) -> None:
        self.conn = conn
        self.idle_s = idle_s
        self.queue = queue
        self._fd = conn.fileno()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None     # set while registered for reading
        self._reading: asyncio.Future[bytes | None] | None = None
        #: the idle timer, armed by a wait and kept across waits (re-armed lazily when it fires
        #: during a later wait than the one that armed it): no timer created and cancelled per request
        self._idle_timer: asyncio.TimerHandle | None = None
        self._wait_started = 0.0
        #: answers the requests of received bytes in the readable callback; True: the task takes over
        self.on_data: Callable[[bytes], bool] | None = None

    async def recv(self) -> bytes | None:
        """Straight away when bytes are waiting, else from the readable callback (one future, no
        task per receive); TimeoutError once this wait has lasted ``connections.max.idle.ms``."""
        queue = self.queue
        full = queue is not None and queue.full
        if not full:
            try:
                return self.conn.recv(RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                pass
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes | None] = loop.create_future()
        self._reading = fut
        if self._loop is None:
            if full:
                assert queue is not None
                queue.park(self._resume)
            else:
                loop.add_reader(self._fd, self._on_readable)
                self._loop = loop
        self._wait_started = now = loop.time()
        if self._idle_timer is None:
            self._idle_timer = loop.call_at(now + self.idle_s, self._check_idle)
        try:
            return await fut
        finally:
            self._reading = None

    def _check_idle(self) -> None:
        """The idle timer: expire the wait that has lasted ``idle_s``, else re-arm for the end of
        the current wait's ``idle_s`` (nobody waiting: the next wait arms it)."""
        self._idle_timer = None
        fut = self._reading
        if fut is None or fut.done():
            return
        loop = asyncio.get_running_loop()
        due = self._wait_started + self.idle_s
        if loop.time() >= due:
            fut.set_exception(TimeoutError())
        else:
            self._idle_timer = loop.call_at(due, self._check_idle)

    def _on_readable(self) -> None:
        """The bytes for the waiting receive. A readable event can be stale (reported before the
        previous receive took the bytes): the receive here finds nothing and the wait goes on."""
        fut = self._reading
        if fut is None:             # nobody waits: stop watching until the next wait
            self._unwatch()
            return
        if fut.done():              # the waiter has its bytes (or timed out) and has yet to run
            return
        queue = self.queue
        if queue is not None and queue.size >= queue.capacity:     # read nothing until it has room
            self._unwatch()
            queue.park(self._resume)
            return
        try:
            data = self.conn.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            fut.set_exception(e)
            return
        on_data = self.on_data
        if data and on_data is not None:
            try:
                if not on_data(data):
                    # answered here: the connection made progress, its idle clock starts again
                    self._wait_started = fut.get_loop().time()
                    return
            except Exception as e:      # the task raises it, as if it had done the work itself
                fut.set_exception(e)
                return
            fut.set_result(None)
            return
        fut.set_result(data)

    def _unwatch(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._fd)
            self._loop = None

    def _resume(self) -> None:
        """The request queue has room: watch the socket again if a receive is waiting."""
        fut = self._reading
        if self._closed or self._loop is not None or fut is None or fut.done():
            return
        loop = fut.get_loop()
        loop.add_reader(self._fd, self._on_readable)
        self._loop = loop

    async def send(self, data: bytes, more: bool = False) -> None:
        """Straight away when the socket takes it all (the usual case: no task, no loop turn), else
        the rest through the loop within ``connections.max.idle.ms``."""
        try:
            n = self.conn.send(data, MSG_MORE if more else 0)
        except BlockingIOError:
            n = 0
        if n < len(data):
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(loop.sock_sendall(self.conn, data[n:]), self.idle_s)

    def send_now(self, response: bytes | Parts) -> Parts | None:
        """Send ``response`` as far as the socket takes it without waiting: None when all of it
        went (each file slice's descriptor closed once sent), else the parts left, the first one
        starting where the socket stopped (their descriptors still open: the caller sends and
        closes them). On an error every descriptor not yet closed is closed."""
        parts: Parts = [response] if isinstance(response, bytes) else response
        n = len(parts)
        i = 0
        try:
            while i < n:
                part = parts[i]
                if isinstance(part, FileSlice):
                    sent, size = 0, part.size
                    while sent < size:
                        try:
                            k = os.sendfile(self._fd, part.fd, part.position + sent, size - sent)
                        except BlockingIOError:
                            rest = FileSlice(part.path, part.fd, part.position + sent, size - sent)
                            parts[i] = b""
                            return [rest, *parts[i + 1:]]
                        if k == 0:
                            raise ConnectionError(f"{part.path} ended before the fetched slice was sent")
                        sent += k
                    parts[i] = b""
                    os.close(part.fd)
                elif part:
                    more = i + 1 < n and isinstance(parts[i + 1], FileSlice)
                    try:
                        k = self.conn.send(part, MSG_MORE if more else 0)
                    except BlockingIOError:
                        k = 0
                    if k < len(part):
                        return [part[k:], *parts[i + 1:]]
                i += 1
            return None
        except BaseException:
            for part in parts[i:]:
                if isinstance(part, FileSlice):
                    os.close(part.fd)
            raise

    async def send_file(self, sl: FileSlice) -> None:
        """``os.sendfile`` the slice to the non-blocking socket, waiting for writability."""
        sent = 0
        fd = self.conn.fileno()
        while sent < sl.size:
            try:
                n = os.sendfile(fd, sl.fd, sl.position + sent, sl.size - sent)
            except BlockingIOError:
                await _ready(fd, True, self.idle_s)
                continue
            if n == 0:
                raise ConnectionError(f"{sl.path} ended before the fetched slice was sent")
            sent += n

    def close(self) -> None:
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._unwatch()
        self.conn.close()


class TlsChannel:
    """A TLS session over the accepted socket (asyncio's SSL transport)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 idle_s: float) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_s = idle_s

    @classmethod
    async def accept(cls, conn: socket.socket, context: ssl.SSLContext, idle_s: float) -> TlsChannel:
        """The TLS handshake (bounded by ``idle_s``); ``ssl.SSLError`` or ``ConnectionError`` when
        the client does not speak TLS or is refused (``ssl.client.auth``)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=RECV_BYTES, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, conn, ssl=context, ssl_handshake_timeout=idle_s)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        return cls(reader, writer, idle_s)

    @property
    def peer_certificate(self) -> object:
        return self.writer.get_extra_info("peercert")

    async def recv(self) -> bytes:
        return await asyncio.wait_for(self.reader.read(RECV_BYTES), self.idle_s)

    async def send(self, data: bytes, more: bool = False) -> None:
        self.writer.write(data)
        await asyncio.wait_for(self.writer.drain(), self.idle_s)

    async def send_file(self, sl: FileSlice) -> None:
        sent = 0
        while sent < sl.size:
            chunk = os.pread(sl.fd, min(TLS_FILE_CHUNK, sl.size - sent), sl.position + sent)
            if not chunk:
                raise ConnectionError(f"{sl.path} ended before the fetched slice was sent")
            await self.send(chunk)
            sent += len(chunk)

    def close(self) -> None:
        transport = self.writer.transport
        if transport.get_write_buffer_size():     # a client that does not read: drop its bytes
            transport.abort()
        else:
            transport.close()


async def _ready(fd: int, write: bool, idle_s: float) -> None:
    """Wait until ``fd`` is writable (``write``) or readable; TimeoutError after ``idle_s``
    (``connections.max.idle.ms``). A loop timer rather than ``asyncio.wait_for``, which wraps every
    wait in a task of its own."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    if write:
        loop.add_writer(fd, _resolve, fut)
    else:
        loop.add_reader(fd, _resolve, fut)
    timer = loop.call_later(idle_s, _expire, fut)
    try:
        await fut
    finally:
        timer.cancel()
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())
