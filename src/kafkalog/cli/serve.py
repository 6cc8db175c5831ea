"""``kafkalog serve DATA_DIR``: a Kafka-compatible broker over a data directory.

Kafka's broker keys (``--config key=value``, ``--config-file server.properties``; the flags win
over the file): ``listeners``/``advertised.listeners``/``listener.security.protocol.map`` (PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL listeners, several at once), ``ssl.*`` (PEM key stores),
``sasl.enabled.mechanisms`` and ``sasl.credentials.file`` (docs/server.md), ``num.partitions``,
``auto.create.topics.enable``, ``socket.request.max.bytes``, ``max.connections``,
``connections.max.idle.ms``, ``delete.topic.enable`` and every storage key (``log.*``,
``message.max.bytes`` ...). Unknown keys are refused. Binds to 127.0.0.1:9092 unless told
otherwise (``--port 0`` picks a free port; a port in use is refused before the data directory is
opened or created). When listening it prints one JSON line on stdout
(``{"type":"listening","host":...,"port":...,"bootstrapServers":...,"listeners":[...]}``: the first
listener's address, the ``bootstrap.servers`` to give a client, every listener's
``name``/``protocol``/``host``/``port``) and ``ready: bootstrap.servers=HOST:PORT`` in its log on
stderr. SIGTERM or SIGINT stops it cleanly: connections closed, logs flushed, checkpoints and the clean-shutdown marker
written (exit 0). After a write failed (disk full, EIO) the data directory is offline, as Kafka's log
directory failure: every produce gets KAFKA_STORAGE_ERROR, and the stop is not a clean shutdown
(exit 1; the next start recovers the logs).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

import click

from kafkalog.cli import interrupt
from kafkalog.cli.output import EXIT_FINDINGS, emit, format_option, handle_errors, resolve_format, use_format
from kafkalog.cli.paths import new_or_existing_data_dir
from kafkalog.errors import InvalidConfigError, KafkalogError, KafkalogIOError

if TYPE_CHECKING:       # imported when the command runs (its --help stays quick)
    import ssl

    from kafkalog.log.manager import LogManager
    from kafkalog.server.config import Listener, ServerConfig
    from kafkalog.server.security.sasl import SaslConfig

logger = logging.getLogger("kafkalog.server")


def _log_cleaner(manager: LogManager) -> Any:
    """The manager's cleaner (:class:`kafkalog.cleaner.LogCleaner`), imported when it starts."""
    from kafkalog.cleaner import LogCleaner
    return LogCleaner(manager)


def _config_values(config_file: str | None, pairs: tuple[str, ...]) -> dict[str, str]:
    from kafkalog.log.config import parse_properties
    values: dict[str, str] = {}
    if config_file is not None:
        with open(config_file, encoding="utf-8") as f:
            values.update(parse_properties(f.read(), file=config_file))
    for i, pair in enumerate(pairs):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidConfigError(f"--config #{i + 1} {pair!r}: expected key=value")
        values[key.strip()] = value.strip()
    return values


def _security(cfg: ServerConfig, listeners: list[Listener]) -> tuple[dict[str, ssl.SSLContext],
                                                                     SaslConfig | None]:
    """The TLS contexts and SASL users the listeners need (refused before anything is bound)."""
    from kafkalog.server.security.sasl import SaslConfig
    from kafkalog.server.security.tls import listener_contexts
    tls = listener_contexts(cfg.values, {lst.protocol for lst in listeners})
    sasl = SaslConfig.from_values(cfg.values, cfg.oauth_values, [lst.name for lst in listeners if lst.sasl],
                                  cfg.listener_values) \
        if any(lst.sasl for lst in listeners) else None
    if sasl is not None:
        sasl.oauth.load()           # the OAUTHBEARER key sets: a JWKS that cannot be read refuses the start
    return tls, sasl


def _check_ports(listeners: list[Listener]) -> None:
    """Refuse a listener whose port another process holds, before the data directory is opened
    (or created): bound and released here as the server binds it (``SO_REUSEADDR``), so the
    server's own bind, a moment later, gives the same answer."""
    for lst in listeners:
        if lst.port == 0:
            continue
        try:
            family, _t, _p, _c, addr = socket.getaddrinfo(lst.host, lst.port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
            socket.create_server(addr, family=family).close()
        except OSError as e:
            why = os.strerror(e.errno) if e.errno else str(e)
            raise KafkalogError(f"listener {lst.name}://{lst.host}:{lst.port}: cannot bind: {why}") from None


def _metrics_address(cfg: ServerConfig, listeners: list[Listener], port: int | None) -> tuple[str, int] | None:
    """Where the Prometheus endpoint listens: ``--metrics-port`` on the first listener's host, else
    ``metrics.listener``; None: metrics off."""
    from kafkalog.server.metrics.endpoint import parse_metrics_listener
    if port is not None:
        return listeners[0].host, port
    return parse_metrics_listener(cfg.values["metrics.listener"])


async def _run(manager: LogManager, cfg: ServerConfig, listeners: list[Listener],
               tls: dict[str, ssl.SSLContext], sasl: SaslConfig | None, fmt: str,
               metrics_at: tuple[str, int] | None = None, idle: Any = None) -> KafkalogIOError | None:
    """Serve until SIGTERM/SIGINT; returns the I/O failure that took the data directory offline."""
    import asyncio

    from kafkalog.server.broker import Broker
    from kafkalog.server.network.socket_server import Server
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    first = listeners[0]
    server_broker = Broker(manager, cfg, cfg.advertised(first.host, first.port, first.name))
    endpoint = None
    if metrics_at is None:
        server = Server(server_broker, listeners=listeners, tls=tls, sasl=sasl)
    else:       # metrics.listener: the Prometheus endpoint (docs/server.md, Metrics)
        from kafkalog.server.metrics.enable import metered_server
        from kafkalog.server.metrics.endpoint import MetricsEndpoint
        server = metered_server(server_broker, idle, listeners=listeners, tls=tls, sasl=sasl)
        assert server_broker.metrics is not None
        endpoint = MetricsEndpoint(server_broker.metrics.registry)
        endpoint.start(*metrics_at)
        logger.info("metrics: serving Prometheus' format on %s", endpoint.url)
    # the advertised addresses need the bound ports (--port 0)
    try:
        return await _serve(manager, cfg, server_broker, server, stop, fmt, endpoint)
    finally:
        if endpoint is not None:
            endpoint.stop()


async def _serve(manager: LogManager, cfg: ServerConfig, server_broker: Any, server: Any, stop: Any,
                 fmt: str, endpoint: Any) -> KafkalogIOError | None:
    import asyncio

    from kafkalog.server import heap
    bound_host, bound_port = await server.start()
    manager.start_background()
    heap.enable()       # the loaded partitions' objects leave the collector's walks (issue 35)
    loop = asyncio.get_running_loop()
    collectors = [loop.create_task(heap.full_collections()), loop.create_task(heap.young_collections())]
    server_broker.set_endpoints({b.name: cfg.advertised(b.host, b.port, b.name) for b in server.bound})
    for b in server.bound:
        adv = cfg.advertised(b.host, b.port, b.name)
        logger.info("kafkalog broker %d (cluster %s) serving %s on %s://%s:%d (%s), advertised as "
                    "%s:%d", server_broker.node_id, server_broker.cluster_id, manager.data_dir,
                    b.name, b.host, b.port, b.protocol, adv.host, adv.port)
    bootstrap = f"{server_broker.advertised.host}:{server_broker.advertised.port}"
    logger.info("ready: bootstrap.servers=%s", bootstrap)
    if fmt == "text":
        where = ", ".join(f"{b.name}://{b.host}:{b.port}" for b in server.bound)
        print(f"kafkalog serving {manager.data_dir} on {where}: bootstrap.servers={bootstrap} "
              f"(Ctrl-C stops it)")
    else:
        line = {"type": "listening", "host": bound_host, "port": bound_port,
                "advertised": bootstrap, "bootstrapServers": bootstrap,
                "listeners": [{"name": b.name, "protocol": b.protocol, "host": b.host, "port": b.port}
                              for b in server.bound]}
        if endpoint is not None:
            line["metrics"] = endpoint.url
        emit(line)
    sys.stdout.flush()
    await stop.wait()
    for task in collectors:
        task.cancel()
    logger.info("shutting down: closing %d connection(s)", server.connection_count)
    await server.stop()
    return server_broker.log_dir_failure


@click.command("serve")
@click.argument("data_dir", type=click.Path(file_okay=False))
@click.option("--host", default=None, help="Address to bind (default 127.0.0.1, or listeners).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port to bind, 0-65535 (default 9092; 0 = any free).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="A broker configuration key (repeatable).")
@click.option("--config-file", type=click.Path(exists=True, dir_okay=False),
              help="A server.properties file.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port of the first listener's host "
                   "(metrics.listener=http://HOST:PORT; 0 = any free).")
@format_option("The listening line: text for people, json for scripts (default: text on a terminal, "
               "json when stdout is not one).")
@handle_errors()
def serve(data_dir: str, host: str | None, port: int | None, configs: tuple[str, ...],
          config_file: str | None, metrics_port: int | None, fmt: str | None) -> None:
    """Serve DATA_DIR to Kafka clients over Kafka's wire protocol."""
    import asyncio

    from kafkalog.log.manager import LogManager
    from kafkalog.server.config import Listener, ServerConfig
    fmt = use_format(resolve_format(fmt))
    cfg = ServerConfig(_config_values(config_file, configs))
    listeners = cfg.bind_listeners(host, port)
    tls, sasl = _security(cfg, listeners)      # refused before the data directory is touched
    metrics_at = _metrics_address(cfg, listeners, metrics_port)
    _check_ports(listeners + ([Listener(*metrics_at, "metrics.listener")] if metrics_at else []))
    new_or_existing_data_dir(data_dir)      # never a partition or an unrelated directory
    root = logging.getLogger("kafkalog")
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logger.info("opening %s", data_dir)
    # background work (retention, checkpoints, the cleaner) starts once the broker listens
    from kafkalog.server import heap
    with heap.loading():        # (no collection walks the partitions' objects while they are made)
        manager = LogManager(data_dir, cfg.broker, background=False, cleaner_factory=_log_cleaner)
    if manager.created_data_dir:
        logger.info("created the data directory %s (cluster %s)", manager.data_dir,
                    manager.meta_properties.cluster_id)
    logger.info("loaded %d partition(s) of %d topic(s) (%s)", len(manager.partitions()),
                len(manager.topics()), "a new data directory" if manager.created_data_dir
                else "after a clean shutdown" if manager.had_clean_shutdown
                else "after an unclean shutdown: the logs were recovered")
    failure: KafkalogIOError | None = None
    try:
        if metrics_at is None:
            failure = asyncio.run(_run(manager, cfg, listeners, tls, sasl, fmt))
        else:       # the event loop whose idle time the metrics report
            from kafkalog.server.metrics.loop_idle import IdleMeter
            idle = IdleMeter()
            with asyncio.Runner(loop_factory=idle.new_loop) as runner:
                failure = runner.run(_run(manager, cfg, listeners, tls, sasl, fmt, metrics_at, idle))
    finally:
        if failure is None:
            with interrupt.ignored():             # a second signal must not cut the shutdown
                logger.info("closing the logs")
                manager.close()
                logger.info("stopped")
    if failure is not None:
        # as Kafka does for an offline log directory: no flush, no checkpoints, no clean-shutdown
        # marker after a failed write; the next start recovers the logs
        manager.abandon()
        logger.warning("stopped without a clean shutdown (the data directory went offline); the next "
                       "start recovers it")
        sys.exit(EXIT_FINDINGS)
