"""``kafkalog top DATA_DIR_OR_BOOTSTRAP``: a live view of a data directory or a running broker,
refreshed every second (``--interval``): per topic its records/s and bytes/s (from the deltas of the
log end offsets and sizes), per group its lag (log end offsets minus committed offsets), and with
``--metrics-url`` the broker's request latencies and log cleaner figures (its Prometheus endpoint,
read with ``prometheus_client``'s parser).

A data directory is read read-only (:mod:`.top_data_dir`: no file written, no lock taken, so it runs
beside the broker serving it); ``HOST:PORT`` is asked over Kafka's protocol (:mod:`.top_broker`:
kafkalog's broker or Kafka's). At a terminal the view is a rich ``Live`` screen and ``q`` quits (exit
0); ``--format json`` (the default when stdout is not a terminal) prints one JSON object per refresh
(:func:`kafkalog.cli.top_view.figures`), ``--iterations N`` stops after N refreshes. A path that is not
a data directory, an unreachable bootstrap server or metrics endpoint is one typed error, exit 2.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from kafkalog.cli.output import emit, format_option, handle_errors, resolve_format
from kafkalog.errors import LogDirError

__all__ = ["top"]


def _source(target: str) -> Any:
    from kafkalog.cli.top_broker import parse_bootstrap
    if not os.path.exists(target) and parse_bootstrap(target) is not None:
        from kafkalog.cli.top_broker import BrokerSource
        return BrokerSource(target)
    from kafkalog.cli.paths import existing_data_dir
    existing_data_dir(target)
    if not os.access(target, os.R_OK | os.X_OK):
        raise LogDirError("cannot read the data directory", file=target)
    from kafkalog.cli.top_data_dir import DataDirSource
    return DataDirSource(target)


class _Keys:
    """``q`` from a terminal's stdin, read without waiting for Enter (cbreak mode, restored on exit)."""

    def __init__(self) -> None:
        self._saved: Any = None
        try:
            self.fd: int | None = sys.stdin.fileno() if sys.stdin.isatty() else None
        except (AttributeError, ValueError, OSError):
            self.fd = None
        if self.fd is not None:
            import termios
            import tty
            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)

    def restore(self) -> None:
        if self._saved is not None and self.fd is not None:
            import termios
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def quit_within(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True once ``q`` was pressed."""
        if self.fd is None:
            time.sleep(max(0.0, seconds))
            return False
        import select
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                data = os.read(self.fd, 64)
                if not data or b"q" in data or b"Q" in data:
                    return True


@click.command("top")
@click.argument("target", metavar="DATA_DIR_OR_BOOTSTRAP")
@click.option("--metrics-url", default=None, metavar="URL",
              help="The broker's Prometheus endpoint (kafkalog serve --metrics-port): adds request latencies "
                   "and the log cleaner.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--iterations", type=click.IntRange(min=1), default=None,
              help="Stop after N refreshes (default: until q or Ctrl-C).")
@format_option()
@handle_errors()
def top(target: str, metrics_url: str | None, interval: float, iterations: int | None, fmt: str | None) -> None:
    """A live view of a data directory or a broker: throughput, lag, latencies.

    DATA_DIR (read-only) or the broker at HOST:PORT: records/s and bytes/s per topic, lag per group,
    and with --metrics-url request latencies and the log cleaner. q quits."""
    from kafkalog.cli.top_view import figures
    fmt = resolve_format(fmt)
    source = _source(target)
    metrics = None
    if metrics_url is not None:
        from kafkalog.cli.top_metrics import MetricsSource
        metrics = MetricsSource(metrics_url)
    try:
        previous = None

        def refresh(first: bool) -> dict[str, Any]:
            nonlocal previous
            sample = source.sample()
            sample.time = time.time()
            extra = None
            if metrics is not None:
                try:
                    extra = metrics.figures(sample.time)
                except Exception as e:      # the first failure is the command's error, later ones shown
                    if first:
                        raise
                    extra = {"metricsError": str(e)}
            fig = figures(sample, previous, extra)
            previous = sample
            return fig

        if fmt == "json":
            n = 0
            while True:
                started = time.monotonic()
                emit(refresh(n == 0))
                sys.stdout.flush()
                n += 1
                if iterations is not None and n >= iterations:
                    return
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
        _live(refresh, target, interval, iterations)
    finally:
        source.close()


def _live(refresh: Any, target: str, interval: float, iterations: int | None) -> None:
    from rich.console import Console
    from rich.live import Live

    from kafkalog.cli.top_view import render
    console = Console()
    fig = refresh(True)
    if not console.is_terminal:         # --format text into a pipe: one screen per refresh
        console.print(render(fig, target))
        for _ in range((iterations or 1) - 1):
            time.sleep(interval)
            console.print(render(refresh(False), target))
        return
    keys = _Keys()
    try:
        with Live(render(fig, target), console=console, auto_refresh=False, screen=False) as live:
            n = 1
            while iterations is None or n < iterations:
                started = time.monotonic()
                if keys.quit_within(max(0.0, interval - (time.monotonic() - started))):
                    return
                live.update(render(refresh(False), target), refresh=True)
                n += 1
    finally:
        keys.restore()
