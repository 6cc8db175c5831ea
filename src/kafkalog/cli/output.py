"""Output helpers of the ``kafkalog`` commands: JSON lines and typed errors.

Exit codes: 0 success; 1 corruption found (``verify``) or a command-level failure; 2 bad input or
usage (a :class:`~kafkalog.errors.KafkalogError`, an unreadable file, click's usage errors).
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable

import click

from kafkalog.errors import KafkalogError

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


def emit(obj: Any) -> None:
    """Print one JSON line on stdout."""
    click.echo(json.dumps(obj, separators=(",", ":"), default=str))


def error_json(e: BaseException) -> dict:
    if isinstance(e, KafkalogError):
        return {"type": "error", **e.to_json()}
    if isinstance(e, OSError):
        return {"type": "error", "error": type(e).__name__, "message": e.strerror or str(e),
                "file": e.filename, "position": None}
    return {"type": "error", "error": type(e).__name__, "message": str(e), "file": None,
            "position": None}


def handle_errors(json_errors: bool = True) -> Callable:
    """Decorator: a KafkalogError or OSError becomes one JSON error line on stdout (and a plain
    message on stderr) and exit code 2; never a traceback for bad input."""
    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (KafkalogError, OSError) as e:
                if json_errors:
                    emit(error_json(e))
                msg = str(e) if isinstance(e, KafkalogError) else f"{e.filename}: {e.strerror or e}"
                click.echo(f"Error: {msg}", err=True)
                sys.exit(EXIT_ERROR)
        return wrapper
    return deco
