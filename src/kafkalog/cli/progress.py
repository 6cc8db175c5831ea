"""A progress bar for multi-segment work: rich on a terminal, nothing otherwise.

Shown only when stderr is a TTY and stdout is a TTY (so JSON lines piped to a script never mix with
it) and ``--no-progress`` was not given. It draws on stderr.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator, Optional, Protocol


class ProgressBar(Protocol):
    """What ``progress_bar`` yields."""

    def advance(self, n: int = 1, description: Optional[str] = None) -> None: ...

    def update_total(self, total: int) -> None: ...


class _NoProgress:
    def advance(self, n: int = 1, description: Optional[str] = None) -> None:
        pass

    def update_total(self, total: int) -> None:
        pass


class _RichProgress:
    def __init__(self, progress, task) -> None:
        self._p = progress
        self._t = task

    def advance(self, n: int = 1, description: Optional[str] = None) -> None:
        if description is not None:
            self._p.update(self._t, advance=n, description=description)
        else:
            self._p.advance(self._t, n)

    def update_total(self, total: int) -> None:
        self._p.update(self._t, total=total)


def progress_enabled(no_progress: bool = False) -> bool:
    """True when a progress bar should be drawn."""
    if no_progress:
        return False
    try:
        return sys.stderr.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress_bar(total: int, description: str, *, enabled: bool) -> Iterator[ProgressBar]:
    """``with progress_bar(n, "verifying", enabled=...) as bar: bar.advance()``."""
    if not enabled or total <= 1:
        yield _NoProgress()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as p:
        yield _RichProgress(p, p.add_task(description, total=total))
