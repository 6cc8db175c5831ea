"""Regular-expression subscriptions of the consumer group protocol, evaluated by the broker as Kafka
evaluates them: RE2 syntax (Kafka compiles them with RE2/J), matched against whole topic names
(``Pattern.matcher(topic).matches()``). The google-re2 binding is the engine, so a pattern RE2 refuses
(backreferences, lookaround) is refused here too, and matching takes linear time."""

from __future__ import annotations

from typing import Any

import re2


class InvalidRegularExpression(ValueError):
    """A subscribed regular expression RE2 cannot compile."""


def compile_regex(pattern: str) -> Any:
    """The compiled pattern; :class:`InvalidRegularExpression` with RE2's reason."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        reason = e.args[0] if e.args else "invalid pattern"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidRegularExpression(str(reason)) from None


def matches(pattern: Any, topic: str) -> bool:
    """Whether the whole topic name matches."""
    return pattern.fullmatch(topic) is not None
