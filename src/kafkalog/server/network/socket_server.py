"""The sockets: one asyncio loop in one process, one task per connection, one listening socket per
listener (``listeners=PLAINTEXT://...,SSL://...,SASL_PLAINTEXT://...,SASL_SSL://...``).

Each connection reads frames (:class:`~kafkalog.server.requests.frames.FrameReader`), handles its requests
one at a time in order (Kafka mutes a channel while a request is in flight too) and writes each
response before reading the next request, so a client that never reads its responses stalls only
itself, and one connection buffers at most one request and one response
(:mod:`~kafkalog.server.network.channel`). On a plaintext socket the requests are answered in its readable
callback, without waking the connection's task, while each is answered at once and its response
goes out whole (:class:`_InlineAnswers`); the first that waits, or whose response the socket does
not take whole, is left to the task with everything after it, so the order is the same.

Limits are Kafka's: ``max.connections``, ``max.connections.per.ip``, ``max.connection.creation.rate``
and the IP quotas' ``connection_creation_rate`` (:mod:`~kafkalog.server.network.connection_quotas`:
at ``max.connections`` the listener accepts nothing more until a connection closes),
``queued.max.requests`` (no socket is read while that many requests wait for their connection's
task: :mod:`~kafkalog.server.network.request_queue`),
``connections.max.idle.ms`` (a connection with no progress, reading or writing, for that long is
closed; it also bounds a TLS handshake), ``socket.request.max.bytes``
(``sasl.server.max.receive.size`` before a SASL client is authenticated),
``connection.failed.authentication.delay.ms`` (a failed authentication is answered, then the
connection closed after that delay). A frame that is refused or does not parse closes its
connection; the broker goes on serving the others.

TLS listeners use the contexts of :func:`~kafkalog.server.security.tls.listener_contexts`; SASL listeners
authenticate each connection with :class:`~kafkalog.server.security.sasl.SaslAuthenticator` before any other
request is served.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import re
import socket
import ssl
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafkalog.errors import KafkalogError
from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.broker import Broker, current_listener
from kafkalog.server.config import Listener
from kafkalog.server.handlers.api_versions import unsupported_version_response
from kafkalog.server.handlers.error_responses import error_response
from kafkalog.server.handlers.handler import Response
from kafkalog.server.handlers.kafka_apis import APIS, VERSIONS, KafkaApis
from kafkalog.server.handlers.share_fetch import connection_closed
from kafkalog.server.handlers.slices import SliceCounter
from kafkalog.server.network.channel import RECV_BYTES, Channel, PlainChannel, TlsChannel
from kafkalog.server.network.connection_quotas import (
    ConnectionQuotas,
    ConnectionThrottled,
    TooManyConnections,
    normalized,
)
from kafkalog.server.network.request_queue import RequestQueue
from kafkalog.server.requests.frames import FrameReader
from kafkalog.server.requests.protocol import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    Request,
    UnsupportedVersionError,
    encode_response,
    parse_request,
    parses_at_once,
)
from kafkalog.server.requests.request_context import current_connection
from kafkalog.server.security.authorizer import ConnectionSession, current_session
from kafkalog.server.security.principal import ANONYMOUS, SslPrincipalMapper, client_host, tls_principal
from kafkalog.server.security.sasl import (
    ILLEGAL_SASL_STATE,
    SASL_HANDSHAKE_KEY,
    SaslAuthenticator,
    SaslConfig,
    SaslUnexpectedRequest,
)

logger = logging.getLogger("kafkalog.server")

__all__ = ["RECV_BYTES", "Server"]

#: the api key field of a SaslHandshake request (a frame's first two bytes)
_SASL_HANDSHAKE = SASL_HANDSHAKE_KEY.to_bytes(2, "big")

#: a frame of at least this many bytes is parsed on the parsing thread, not in the loop: kio reads
#: a Fetch of 100,000 partitions (3.3 MB) in 45-52 ms, a Produce of one record to each (7.6 MB) in
#: 54 ms, one step that every other client waited for. 512 KiB of the densest request is ~8 ms
LARGE_REQUEST_BYTES = 512 * 1024


def parsed_aside(frame: bytes) -> bool:
    """Whether a request frame is parsed on the parsing thread rather than in the event loop: a
    frame of :data:`LARGE_REQUEST_BYTES` or more, or the first of its API version after the start
    (its readers are made first: kio's classes imported, 9-23 ms; another client waited ~20 ms
    for the first Metadata v12 at 10,000 partitions, Kafka's own worst 10-15 ms)."""
    return len(frame) >= LARGE_REQUEST_BYTES or not parses_at_once(frame, VERSIONS)


class Server:
    """Accepts connections for a :class:`Broker` until :meth:`stop`: on ``host:port`` as one
    PLAINTEXT listener, or on every listener of ``listeners``. Its requests are served by
    :attr:`apis`, the broker's state composed with the APIs' handlers."""

    def __init__(self, broker: Broker, host: str = "127.0.0.1", port: int = 9092, *,
                 listeners: list[Listener] | None = None,
                 tls: Mapping[str, ssl.SSLContext] | None = None,
                 sasl: SaslConfig | None = None, apis: KafkaApis | None = None) -> None:
        self.broker = broker
        #: the handlers serving ``broker`` (the dispatch table; request_control arms it): ``apis``,
        #: else Kafka's APIs (:class:`KafkaApis`) over ``broker``
        self.apis = apis if apis is not None else KafkaApis(broker)
        self.listeners = list(listeners) if listeners else [Listener(host, port)]
        self.host, self.port = self.listeners[0].host, self.listeners[0].port
        tls = dict(tls or {})
        for lst in self.listeners:
            if lst.tls and lst.protocol not in tls:
                raise KafkalogError(f"listener {lst.name} ({lst.protocol}) needs a TLS context")
        if any(lst.sasl for lst in self.listeners) and sasl is None:
            raise KafkalogError("a SASL_PLAINTEXT or SASL_SSL listener needs a SASL configuration")
        self.tls = tls
        self.sasl = sasl
        if sasl is not None:        # the credentials of AlterUserScramCredentials, at the next handshake
            sasl.credentials.manage(broker.scram_credentials)
        cfg = broker.config
        self.max_request = cfg.socket_request_max_bytes
        sasl_max = cfg.values["sasl.server.max.receive.size"]
        self.max_sasl_request = min(self.max_request, sasl_max)
        self.sasl_limit_name = "sasl.server.max.receive.size" if sasl_max <= self.max_request \
            else "socket.request.max.bytes"
        #: max.connections, max.connections.per.ip, the connection creation rates (KIP-612)
        self.connection_quotas = ConnectionQuotas(cfg, broker.client_quotas)
        #: connections over their IP's creation rate, held until their throttle time ends
        self._throttled: dict[socket.socket, asyncio.TimerHandle] = {}
        #: a negative connections.max.idle.ms disables idle expiry, as in Kafka's Selector
        self.idle_s = cfg.connections_max_idle_ms / 1000.0 if cfg.connections_max_idle_ms >= 0 \
            else math.inf
        self.failed_auth_delay_s = cfg.values["connection.failed.authentication.delay.ms"] / 1000.0
        self.principal_mapper = SslPrincipalMapper(cfg.values["ssl.principal.mapping.rules"])
        #: ``queued.max.requests``: requests handed to connection tasks, not yet taken
        self.requests = RequestQueue(cfg.values["queued.max.requests"])
        #: the bound listeners (port 0 resolved), in the order of ``listeners``
        self.bound: list[Listener] = []
        self._socks: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._accept_tasks: list[asyncio.Task[None]] = []
        #: the thread that parses large frames (:data:`LARGE_REQUEST_BYTES`), one at a time: the
        #: loop takes the GIL between two of its switch intervals (5 ms) instead of waiting for a
        #: whole parse; started at the first large frame
        self._parsing: ThreadPoolExecutor | None = None

    async def start(self) -> tuple[str, int]:
        """Bind and listen on every listener; returns the first one's bound (host, port)."""
        loop = asyncio.get_running_loop()
        if self.sasl is not None:           # the OAUTHBEARER key sets, read before any client comes
            await self.sasl.start()
        for lst in self.listeners:
            infos = socket.getaddrinfo(lst.host, lst.port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
            family, _t, _p, _c, addr = infos[0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(addr)
            except OSError as e:
                sock.close()
                raise KafkalogError(f"listener {lst.name}://{lst.host}:{lst.port}: cannot bind: "
                                    f"{e.strerror or e}") from None
            sock.listen(1024)
            sock.setblocking(False)
            self._socks.append(sock)
            bound = sock.getsockname()
            self.bound.append(Listener(bound[0], bound[1], lst.name, lst.protocol))
        for sock, lst in zip(self._socks, self.bound, strict=True):
            self._accept_tasks.append(loop.create_task(self._accept_loop(sock, lst)))
        self.host, self.port = self.bound[0].host, self.bound[0].port
        return self.host, self.port

    async def stop(self) -> None:
        """Stop accepting, close every connection (in-flight requests are abandoned)."""
        for t in self._accept_tasks:
            t.cancel()
        await asyncio.gather(*self._accept_tasks, return_exceptions=True)
        await self.broker.stop_timers()
        if self.sasl is not None:
            await self.sasl.close()
        for sock in self._socks:
            sock.close()
        for conn, timer in list(self._throttled.items()):
            timer.cancel()
            conn.close()
        self._throttled.clear()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._parsing is not None:       # a parse under way ends first: no thread is left
            parsing, self._parsing = self._parsing, None
            await asyncio.to_thread(parsing.shutdown, True, cancel_futures=True)

    @property
    def connection_count(self) -> int:
        return len(self._tasks)

    async def _accept_loop(self, sock: socket.socket, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(sock)
            except OSError as e:          # EMFILE and friends: back off, keep serving
                logger.warning("accept failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            ip = normalized(addr[0]) if conn.family in (socket.AF_INET, socket.AF_INET6) else ""
            try:
                await self.connection_quotas.inc(listener.name, ip)
            except TooManyConnections as e:
                logger.info("%s", e)
                conn.close()
                continue
            except ConnectionThrottled as e:       # held, then closed after the throttle time
                logger.debug("%s", e)
                self._throttled[conn] = loop.call_later(e.ms / 1000.0, self._close_throttled, conn)
                continue
            except BaseException:
                conn.close()
                raise
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._serve(conn, addr, listener))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._served, listener.name, ip))

    def _served(self, listener: str, ip: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.connection_quotas.dec(listener, ip)

    def _close_throttled(self, conn: socket.socket) -> None:
        self._throttled.pop(conn, None)
        conn.close()

    async def _serve(self, conn: socket.socket, addr: object, listener: Listener) -> None:
        current_listener.set(listener.name)      # this task's context: Metadata advertises it
        token = object()
        current_connection.set(token)            # share sessions remember it
        session = ConnectionSession(ANONYMOUS, client_host(addr))
        current_session.set(session)             # the authorizer's principal and host
        channel: Channel | None = None
        logger.debug("connection from %s on %s", addr, listener.name)
        try:
            if listener.tls:
                channel = await TlsChannel.accept(conn, self.tls[listener.protocol], self.idle_s)
                if not listener.sasl:
                    session.principal = tls_principal(channel.peer_certificate, self.principal_mapper)
            else:
                channel = PlainChannel(conn, self.idle_s, self.requests)
            auth = None
            if listener.sasl:
                assert self.sasl is not None
                auth = SaslAuthenticator(self.sasl, listener.name)
            await self._requests(channel, auth)
        except (KafkalogError, InvalidRequestError) as e:
            logger.warning("closing connection from %s on %s: %s", addr, listener.name, e)
        except TimeoutError:
            logger.info("closing connection from %s on %s: idle for connections.max.idle.ms=%d",
                        addr, listener.name, int(self.idle_s * 1000))
        except ssl.SSLError as e:
            logger.warning("closing connection from %s on %s: TLS: %s", addr, listener.name,
                           e.reason or e)
        except (ConnectionError, OSError) as e:
            logger.debug("connection from %s: %s", addr, e)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("closing connection from %s after an unexpected error", addr)
        finally:
            if channel is not None:
                channel.close()
            else:
                conn.close()
            if self.broker.share_sessions.opened_on(token):
                try:
                    connection_closed(self.broker, token)
                except Exception:
                    logger.exception("releasing the share sessions of the connection from %s failed", addr)

    async def _requests(self, channel: Channel, auth: SaslAuthenticator | None) -> None:
        reader = FrameReader(self.max_request) if auth is None else \
            FrameReader(self.max_sasl_request, self.sasl_limit_name)
        #: frames to handle, or requests the readable callback began (:class:`_Begun`), in order
        pending: deque[bytes | _Begun | float] = deque()
        quotas = self.broker.client_quotas
        token = current_connection.get()
        if isinstance(channel, PlainChannel):
            channel.on_data = _InlineAnswers(self, channel, reader, pending, auth)
        try:
            while True:
                if not pending:
                    data = await channel.recv()
                    if data is None:        # the readable callback left work in ``pending``
                        continue
                    if not data:
                        return
                    pending.extend(reader.feed(data))
                    continue
                item = pending.popleft()
                response: Response
                if isinstance(item, float):     # a quota's throttle (:mod:`.quotas`): nothing read meanwhile
                    await asyncio.sleep(item)
                    continue
                if isinstance(item, _Begun):
                    work = item.take()
                    response = work if work is None or isinstance(work, list) else await work
                else:
                    if auth is not None:
                        answer = None
                        if not auth.complete:
                            try:
                                answer = auth.receive(item)
                            except SaslUnexpectedRequest as e:
                                await self._refuse_during_sasl(channel, item, e)
                                return
                        elif auth.session_expiry is not None:       # KIP-368
                            now = time.monotonic()
                            if item[:2] == _SASL_HANDSHAKE and auth.may_reauthenticate(now):
                                reader.max_size = self.max_sasl_request
                                reader.limit_name = self.sasl_limit_name
                                answer = auth.begin_reauthentication(item, now)
                            elif auth.expired(now):
                                logger.info("closing the connection of %s: its SASL session expired",
                                            auth.user)
                                return
                        if answer is not None:
                            if answer:
                                await channel.send(answer)
                            if auth.failed:   # Kafka closes after connection.failed.authentication.delay.ms
                                await asyncio.sleep(self.failed_auth_delay_s)
                                return
                            if auth.complete:
                                session = current_session.get()
                                if session is not None:
                                    session.principal = f"User:{auth.user}"
                                reader.max_size = self.max_request
                                reader.limit_name = "socket.request.max.bytes"
                            continue
                    response = await self._process(item)
                if response is not None:
                    await self._send(channel, response)
                if quotas.mutes:            # throttled: the answer went out, the next request waits
                    mute = quotas.take_mute(token)
                    if mute:
                        await asyncio.sleep(mute)
                if pending:
                    # the other connections are served between two requests of a pipeline (a
                    # producer's thousands in flight would otherwise be answered in one loop step)
                    await asyncio.sleep(0)
        finally:
            quotas.forget(token)
            if isinstance(channel, PlainChannel):
                channel.on_data = None
            for item in pending:
                if type(item) is _Begun:
                    item.discard()

    async def _refuse_during_sasl(self, channel: Channel, frame: bytes, e: SaslUnexpectedRequest) -> None:
        """A request other than SaslAuthenticate while a mechanism's exchange runs: its API's error
        response with ILLEGAL_SASL_STATE (Kafka's ``IllegalSaslStateException``), then closed after
        ``connection.failed.authentication.delay.ms``; one that does not parse is closed unanswered."""
        logger.info("closing a connection: %s", e)
        try:
            request = parse_request(frame, VERSIONS)
            # Kafka names the API by its ApiKeys constant (API_VERSIONS)
            name = re.sub(r"(?<!^)(?=[A-Z])", "_", APIS[request.api_key][0]).upper()
            answer = error_response(self.broker, request, ILLEGAL_SASL_STATE, e.kafka_message(name))
            if not isinstance(answer, (bytes, list)):
                answer = encode_response(request, answer)
        except (InvalidRequestError, KafkalogError, KeyError):
            return
        await self._send(channel, answer)
        await asyncio.sleep(self.failed_auth_delay_s)

    def dispatch(self, frame: bytes) -> Response | Coroutine[Any, Any, Response]:
        """The response of one frame when the broker answers at once, else a coroutine."""
        try:
            request = parse_request(frame, VERSIONS)
        except UnsupportedVersionError as e:
            return _unsupported(e, frame)
        return self.apis.dispatch(request)

    async def _dispatched(self, frame: bytes) -> Response | Coroutine[Any, Any, Response]:
        """This class's :meth:`dispatch` in a connection's task: a frame :func:`parsed_aside` is
        parsed on the parsing thread, then handled in the loop."""
        if not parsed_aside(frame):
            return Server.dispatch(self, frame)
        if self._parsing is None:
            self._parsing = ThreadPoolExecutor(1, thread_name_prefix="kafkalog-request-parse")
        loop = asyncio.get_running_loop()
        try:
            request = await loop.run_in_executor(self._parsing, parse_request, frame, VERSIONS)
        except UnsupportedVersionError as e:
            return _unsupported(e, frame)
        return self.apis.dispatch(request)

    async def _process(self, frame: bytes) -> Response:
        result = await self._dispatched(frame)
        if asyncio.iscoroutine(result):
            return await result
        return result

    async def _send(self, channel: Channel, response: bytes | list[bytes | FileSlice]) -> None:
        if isinstance(response, bytes):
            await channel.send(response)
            return
        # a Fetch of every partition answers with a file slice per partition holding records, each
        # a sendfile and a close: sent while the socket took them, one step held the loop 107-121
        # ms at 100,000 partitions; the other connections are served between two slices
        count = SliceCounter()
        try:
            for i, part in enumerate(response):
                if isinstance(part, FileSlice):
                    await channel.send_file(part)
                    os.close(part.fd)
                    response[i] = b""
                elif part:
                    # a header followed by a slice: MSG_MORE lets the kernel send both as one
                    nxt = response[i + 1] if i + 1 < len(response) else None
                    await channel.send(part, more=isinstance(nxt, FileSlice))
                if count.tick():
                    await asyncio.sleep(0)
        finally:
            for part in response:
                if isinstance(part, FileSlice):
                    os.close(part.fd)


def _unsupported(e: UnsupportedVersionError, frame: bytes) -> Response:
    """ApiVersions' answer to a version it does not support (Kafka's v0 answer with its versions);
    any other API's unsupported version is raised on: the connection is closed."""
    if e.api_key != API_VERSIONS_KEY:
        raise e
    req = Request(e.api_key, e.api_version, e.correlation_id, None, None, False, len(frame))
    return unsupported_version_response(req, VERSIONS)


class _Begun:
    """A request the readable callback began and left to the connection's task: the coroutine
    that finishes it (its handler waits), or the parts of its response the socket did not take.
    It is on the broker's request queue until the task takes it (or the connection ends)."""

    __slots__ = ("_queue", "_work")

    def __init__(self, work: Coroutine[Any, Any, Response] | list[bytes | FileSlice],
                 queue: RequestQueue) -> None:
        self._work: Coroutine[Any, Any, Response] | list[bytes | FileSlice] | None = work
        self._queue = queue
        queue.put()

    def take(self) -> Coroutine[Any, Any, Response] | list[bytes | FileSlice] | None:
        work, self._work = self._work, None
        if work is not None:
            self._queue.take()
        return work

    def discard(self) -> None:
        """The connection ends first: close the coroutine, or the descriptors of the parts."""
        work = self.take()
        if isinstance(work, list):
            for part in work:
                if isinstance(part, FileSlice):
                    os.close(part.fd)
        elif work is not None:
            work.close()


#: requests one readable callback answers at most; the others of the same receive are left to
#: the connection's task
INLINE_ANSWERS = 16


class _InlineAnswers:
    """:attr:`PlainChannel.on_data` of one connection: the requests of the bytes received are
    answered in the readable callback, in order, without waking the connection's task, while each
    is answered at once and its response goes out whole. The first one that waits (a long poll, a
    group join) or whose response the socket does not take whole is left to the task in
    ``pending``, with every frame after it; so is everything before SASL authentication completes,
    and every frame after the first :data:`INLINE_ANSWERS`. Returns True when it left work there."""

    __slots__ = ("auth", "channel", "pending", "reader", "server")

    def __init__(self, server: Server, channel: PlainChannel, reader: FrameReader,
                 pending: deque[bytes | _Begun | float], auth: SaslAuthenticator | None) -> None:
        self.server = server
        self.channel = channel
        self.reader = reader
        self.pending = pending
        self.auth = auth

    def __call__(self, data: bytes) -> bool:
        frames = self.reader.feed(data)
        pending = self.pending
        auth = self.auth
        if pending or (auth is not None and not auth.complete):
            pending.extend(frames)
            return bool(pending)
        # a session that ends (KIP-368): a re-authentication or an expired session is the task's
        expiry = auth.session_expiry if auth is not None else None
        for i, frame in enumerate(frames):
            if expiry is not None and (frame[:2] == _SASL_HANDSHAKE or time.monotonic() > expiry):
                pending.extend(frames[i:])
                return True
            if i == INLINE_ANSWERS or parsed_aside(frame):
                # a large frame, or an API version's first, is parsed aside
                # (:meth:`Server._dispatched`): the task's. The
                # rest to the task, which lets other connections in between two requests: a
                # receive of librdkafka's pipelined Produce requests holds hundreds of them
                # (10,000 partitions: one step of 830 ms answering them here)
                pending.extend(frames[i:])
                return True
            response = self.server.dispatch(frame)
            queue = self.server.requests
            if response is None or isinstance(response, (bytes, list)):
                rest = None if response is None else self.channel.send_now(response)
                if rest is None:
                    mutes = self.server.broker.client_quotas.mutes
                    if not mutes:
                        continue
                    mute = self.server.broker.client_quotas.take_mute(current_connection.get())
                    if not mute:
                        continue
                    pending.append(mute)        # the task stops reading for the throttle time
                else:
                    pending.append(_Begun(rest, queue))
            else:
                pending.append(_Begun(response, queue))
            pending.extend(frames[i + 1:])
            return True
        return False
