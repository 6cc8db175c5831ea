"""Output of the ``kafkalog`` commands: JSON lines, typed errors printed once, exit codes.

Exit codes, the same for every command:

* 0 success;
* 1 damage found (``verify``, ``dump``) or a command-level failure (a partition that could not be
  compacted, a broker whose data directory went offline);
* 2 bad input or usage (a :class:`~kafkalog.errors.KafkalogError`, a path that is not what the
  command needs, click's usage errors);
* 3 records dropped: ``recover`` cut complete batches (``--dry-run``: would cut them);
* 128 + the signal: a command ended by SIGINT (130, Ctrl-C) or SIGTERM (143), as a shell reports
  a process the signal ended (``produce`` and ``consume`` first append, commit and flush what they
  hold; :mod:`kafkalog.cli.interrupt`); ``serve``, which runs until stopped so, exits 0;
* 141 a closed pipe (below).

Output, the same rule for every command: ``--format text`` for people, ``--format json`` for JSON
lines; without ``--format``, text when stdout is a terminal and JSON lines when it is not (a pipe,
a file) (:func:`resolve_format`). ``dump`` and ``offsets``, whose text is Kafka's own tools'
(kafka-dump-log.sh, kafka-get-offsets.sh, which scripts already parse), print that text unless
asked for JSON. An error is printed once, in the command's format: ``Error: ...`` on stderr in
text, one JSON line on stdout (``{"type":"error","error":...}``) in JSON, named by its typed error
(an operating-system error is a ``KafkalogIOError``, as the library raises it). A closed pipe
(``kafkalog dump ... | head``) ends the command quietly with the status of a process killed by
SIGPIPE (141), as Unix tools do.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import sys
from typing import Any, Callable, Optional, Tuple, TypeVar

from kafkalog.errors import KafkalogError, KafkalogIOError

__all__ = ["EXIT_OK", "EXIT_FINDINGS", "EXIT_ERROR", "EXIT_DATA_DROPPED", "EXIT_BROKEN_PIPE", "emit", "error_json",
           "report_error", "handle_errors", "FORMAT_OPTION_HELP", "quiet_broken_pipe", "bytes_json",
           "BYTES_ENCODINGS", "format_option", "resolve_format", "use_format", "text_line"]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_DATA_DROPPED = 3
EXIT_BROKEN_PIPE = 128 + 13

FORMAT_OPTION_HELP = ("Output format: text for people, json for JSON lines (errors too) for scripts "
                      "(default: text on a terminal, json when stdout is not one).")

#: the format :func:`emit` prints in (set by :func:`use_format`; JSON lines unless a command says)
_FORMAT = ["json"]


def resolve_format(fmt: Optional[str]) -> str:
    """``--format`` as given, else the rule of every command: text on a terminal, else json."""
    if fmt is not None:
        return fmt
    try:
        return "text" if sys.stdout.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def format_option(help: str = FORMAT_OPTION_HELP) -> Callable[[F], F]:
    """The ``--format text|json`` option of a command (default: :func:`resolve_format`'s rule)."""
    import click
    return click.option("--format", "fmt", type=click.Choice(["text", "json"]), default=None, help=help)


def use_format(fmt: str) -> str:
    """Make :func:`emit` print in ``fmt`` (``text``: :func:`text_line`); returns ``fmt``."""
    _FORMAT[0] = fmt
    return fmt

F = TypeVar("F", bound=Callable[..., Any])


#: how keys, values and header values appear in JSON lines (``consume``, ``dump --format json``)
BYTES_ENCODINGS = ("text", "base64", "hex")


def bytes_json(b: Optional[bytes], encoding: str = "text") -> Tuple[Optional[str], Optional[str]]:
    """``(string, its encoding)`` of key, value or header bytes in a JSON line: ``text`` is the
    UTF-8 text when the bytes decode (encoding None), else base64 (encoding ``"base64"``, to be
    named in a ``keyEncoding``/``valueEncoding`` field); ``base64`` always base64; ``hex`` the hex
    digits (the form of the oracle's ``.oracle.jsonl`` files)."""
    if b is None:
        return None, None
    if encoding == "hex":
        return bytes(b).hex(), None
    if encoding == "text":
        try:
            return bytes(b).decode("utf-8"), None
        except UnicodeDecodeError:
            pass
    return base64.b64encode(b).decode("ascii"), "base64"


def text_line(obj: dict) -> str:
    """A JSON line's object as a line of text: ``type: key=value, key=value`` (nested values as
    JSON), for the commands whose lines have no other text form (``recover``, ``bootstrap-topics``)."""
    kind = obj.get("type")
    fields = ", ".join(f"{k}={v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(v, default=str)}"
                       for k, v in obj.items() if k != "type")
    return f"{kind}: {fields}" if kind else fields


def emit(obj: Any) -> None:
    """Print one JSON line on stdout (one line of text after ``use_format("text")``)."""
    if _FORMAT[0] == "text" and isinstance(obj, dict):
        sys.stdout.write(text_line(obj) + "\n")
        return
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")


def _typed(e: BaseException) -> BaseException:
    """An ``OSError`` a command let through, as the typed error the library raises for one
    (:class:`~kafkalog.errors.KafkalogIOError` naming the file): one set of error names."""
    if isinstance(e, OSError) and not isinstance(e, KafkalogError):
        typed = KafkalogIOError(e.strerror or str(e), file=e.filename)
        typed.errno = e.errno  # type: ignore[attr-defined]
        return typed
    return e


def error_json(e: BaseException) -> dict:
    """The JSON line of an error: Kafka-style error name, message, file, position (and input line)."""
    e = _typed(e)
    if isinstance(e, KafkalogError):
        return {"type": "error", **e.to_json()}
    return {"type": "error", "error": type(e).__name__, "message": str(e), "file": None,
            "position": None}


def error_text(e: BaseException) -> str:
    return str(_typed(e))


def report_error(e: BaseException, as_json: bool) -> None:
    """Print ``e`` once: a JSON line on stdout in JSON mode, else ``Error: ...`` on stderr."""
    if as_json:
        emit(error_json(e))
        sys.stdout.flush()
    else:
        sys.stderr.write(f"Error: {error_text(e)}\n")
        sys.stderr.flush()


def quiet_broken_pipe() -> None:
    """After EPIPE on stdout: point stdout at /dev/null (so the interpreter's final flush cannot
    complain again) and exit with SIGPIPE's status, printing nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    os._exit(EXIT_BROKEN_PIPE)


def handle_errors(format_param: str = "fmt") -> Callable[[F], F]:
    """Decorator of a command: a KafkalogError or OSError becomes one error (see
    :func:`report_error`) and exit code 2; never a traceback for bad input. The error is in the
    command's format: its ``format_param`` argument (``--format``), else :func:`resolve_format`'s
    rule."""
    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            as_json = resolve_format(kwargs.get(format_param)) == "json"
            try:
                return fn(*args, **kwargs)
            except BrokenPipeError:
                raise
            except (KafkalogError, OSError) as e:
                report_error(e, as_json)
                sys.exit(EXIT_ERROR)
        return wrapper  # type: ignore[return-value]
    return deco
