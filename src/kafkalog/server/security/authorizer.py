"""Kafka's ``StandardAuthorizer``: ACL bindings, ``super.users``, ``allow.everyone.if.no.acl.found``.

An ACL binding is a resource pattern (resource type, name, pattern type LITERAL or PREFIXED; the
LITERAL name ``*`` matches every name) and an entry (principal ``Type:name`` or ``User:*``, host or
``*``, operation, ALLOW or DENY). :meth:`StandardAuthorizer.authorize` decides as Kafka's
``StandardAuthorizerData`` does: a super user is allowed; else the ACLs of the resource (its
literal name, the ``*`` wildcard, every PREFIXED pattern that is a prefix of the name) are matched
against the principal (or ``User:*``), the host (or ``*``) and the operation (ALL matches every
operation; an ALLOW of READ/WRITE/DELETE/ALTER implies DESCRIBE, of ALTER_CONFIGS implies
DESCRIBE_CONFIGS; a DENY only denies its own operation); a matching DENY wins, then a matching
ALLOW; a resource without any ACL answers ``allow.everyone.if.no.acl.found``, one with ACLs none of
which matched is denied.

The ACLs are indexed by (resource type, pattern type, name): a decision looks up the literal
name, ``*`` and each prefix of the name (at most its length in lookups), never every ACL.

The session a request comes in on (:data:`current_session`: principal and client host) is set by the
network layer (:mod:`kafkalog.server.security.principal` builds the principal)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from kafkalog.errors import InvalidConfigError
from kafkalog.server.security.acl_operations import (
    ALTER,
    ALTER_CONFIGS,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    READ,
    WRITE,
)

logger = logging.getLogger("kafkalog.server")

# --- codes of Kafka's enums beyond acl_operations' (AclOperation, ResourceType, PatternType, AclPermissionType)
UNKNOWN, ANY = 0, 1
ALL = 2
MATCH, LITERAL, PREFIXED = 2, 3, 4
DENY, ALLOW = 2, 3

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

#: Kafka's class names ``authorizer.class.name`` accepts (the KRaft authorizer)
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER_CLASSES = frozenset({STANDARD_AUTHORIZER})

_IMPLIES_DESCRIBE = frozenset({DESCRIBE, READ, WRITE, DELETE, ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS})

RESOURCE_TYPE_NAMES = {0: "UNKNOWN", 1: "ANY", 2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID",
                       6: "DELEGATION_TOKEN", 7: "USER"}
PATTERN_TYPE_NAMES = {0: "UNKNOWN", 1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}
OPERATION_NAMES = {0: "UNKNOWN", 1: "ANY", 2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE",
                   7: "ALTER", 8: "DESCRIBE", 9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS",
                   11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE", 13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS",
                   15: "TWO_PHASE_COMMIT"}
PERMISSION_NAMES = {0: "UNKNOWN", 1: "ANY", 2: "DENY", 3: "ALLOW"}


def known(code: int, names: dict[int, str]) -> int:
    """A code of one of Kafka's enums as Kafka's ``fromCode`` reads it: UNKNOWN when not one."""
    return code if code in names else UNKNOWN


class ConnectionSession:
    """Who sent a request: the principal (``User:name``) and the client's address. The principal
    changes once, when SASL authentication completes (the network layer sets it)."""
    __slots__ = ("host", "principal")

    def __init__(self, principal: str, host: str) -> None:
        self.principal = principal
        self.host = host


#: the session of the connection being served (set by the network layer in each connection's task)
current_session: ContextVar[ConnectionSession | None] = ContextVar("kafkalog_current_session", default=None)


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's codes)."""
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True)
class AclBindingFilter:
    """Kafka's ``AclBindingFilter``: None (a null string) and ANY match everything; pattern type
    MATCH matches the patterns that would apply to ``name``."""
    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def is_unknown(self) -> bool:
        return UNKNOWN in (self.resource_type, self.pattern_type, self.operation, self.permission)

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (ANY, MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type in (ANY, b.pattern_type):
                if self.name != b.name:
                    return False
            elif b.pattern_type == LITERAL:
                if self.name != b.name and b.name != WILDCARD:
                    return False
            elif not self.name.startswith(b.name):
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == ANY or self.operation == b.operation)
                and (self.permission == ANY or self.permission == b.permission))


def _result(b: AclBinding, principals: tuple[str, str], host: str, op: int) -> int | None:
    """ALLOW, DENY or None (no match) of one ACL whose resource matches (``findResult``)."""
    if b.principal not in principals:
        return None
    if b.host != WILDCARD and b.host != host:
        return None
    if b.operation != ALL:
        if b.permission == ALLOW:
            if op == DESCRIBE:
                if b.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif op == DESCRIBE_CONFIGS:
                if b.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != b.operation:
                return None
        elif op != b.operation:
            return None
    return b.permission


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by ``;``."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


class StandardAuthorizer:
    """The ACLs and the decisions on them. ``store`` (an :class:`~.acl_store.AclStore`) keeps them
    across restarts; every change is written to it before it is acknowledged."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 acls: Iterable[AclBinding] = ()) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone = allow_everyone_if_no_acl_found
        #: resource type -> (pattern type, name) -> the ACLs of that pattern
        self._index: dict[int, dict[tuple[int, str], set[AclBinding]]] = {}
        for b in acls:
            self._add(b)

    @classmethod
    def from_config(cls, values: dict[str, object], acls: Iterable[AclBinding]) -> StandardAuthorizer | None:
        """The authorizer ``authorizer.class.name`` names (None: the empty default, no authorizer)."""
        name = str(values.get("authorizer.class.name") or "").strip()
        if not name:
            return None
        if name not in AUTHORIZER_CLASSES:
            raise InvalidConfigError(
                f"Invalid value {name!r} for configuration authorizer.class.name: kafkalog serves "
                f"Kafka's {STANDARD_AUTHORIZER} (or none: the empty default)")
        return cls(parse_super_users(str(values.get("super.users") or "")),
                   bool(values.get("allow.everyone.if.no.acl.found")), acls)

    # --- the ACLs ---------------------------------------------------------------------------------

    def _add(self, b: AclBinding) -> bool:
        acls = self._index.setdefault(b.resource_type, {}).setdefault((b.pattern_type, b.name), set())
        if b in acls:
            return False
        acls.add(b)
        return True

    def add(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            self._add(b)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        for b in bindings:
            by_type = self._index.get(b.resource_type)
            if by_type is None:
                continue
            key = (b.pattern_type, b.name)
            acls = by_type.get(key)
            if acls is not None:
                acls.discard(b)
                if not acls:
                    del by_type[key]

    def acls(self, f: AclBindingFilter | None = None) -> Iterator[AclBinding]:
        """Every ACL ``f`` matches (all without a filter), in a stable order."""
        types = self._index if f is None or f.resource_type == ANY else \
            {f.resource_type: self._index.get(f.resource_type, {})}
        for rtype in sorted(types):
            by_type = types[rtype]
            keys: Iterable[tuple[int, str]]
            if f is not None and f.name is not None and f.pattern_type in (LITERAL, PREFIXED):
                keys = [(f.pattern_type, f.name)]
            elif f is not None and f.name is not None and f.pattern_type == ANY:
                keys = [(LITERAL, f.name), (PREFIXED, f.name)]
            elif f is not None and f.name is not None and f.pattern_type == MATCH:
                keys = [(LITERAL, f.name), (LITERAL, WILDCARD),
                        *((PREFIXED, f.name[:i]) for i in range(len(f.name) + 1))]
            else:
                keys = sorted(by_type)
            for key in keys:
                for b in sorted(by_type.get(key, ())):
                    if f is None or f.matches(b):
                        yield b

    def __len__(self) -> int:
        return sum(len(s) for by_type in self._index.values() for s in by_type.values())

    # --- decisions --------------------------------------------------------------------------------

    def authorize(self, session: ConnectionSession | None, op: int, resource_type: int, name: str) -> bool:
        """Whether ``session`` may do ``op`` on the resource (``StandardAuthorizerData.authorize``)."""
        principal, host = (session.principal, session.host) if session is not None else ("User:ANONYMOUS", "")
        if principal in self.super_users:
            return True
        by_type = self._index.get(resource_type)
        if not by_type:
            return self.allow_everyone
        principals = (principal, WILDCARD_PRINCIPAL)
        found = allowed = False
        candidates = [by_type.get((LITERAL, name)), by_type.get((LITERAL, WILDCARD))]
        candidates.extend(by_type.get((PREFIXED, name[:i])) for i in range(1, len(name) + 1))
        for acls in candidates:
            if not acls:
                continue
            found = True
            for b in acls:
                r = _result(b, principals, host, op)
                if r == DENY:
                    return False
                if r == ALLOW:
                    allowed = True
        if allowed:
            return True
        return self.allow_everyone if not found else False

    def authorize_by_resource_type(self, session: ConnectionSession | None, op: int, resource_type: int) -> bool:
        """Kafka's ``Authorizer.authorizeByResourceType``: may the session do ``op`` on some resource
        of the type (an ALLOW not dominated by a DENY)? Used by InitProducerId (WRITE on any topic)."""
        if self.authorize(session, op, resource_type, "hardcode"):
            return True
        principal, host = (session.principal, session.host) if session is not None else ("User:ANONYMOUS", "")
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[int, str]] = []
        wildcard_allow = False
        for (ptype, name), acls in self._index.get(resource_type, {}).items():
            for b in acls:
                if b.host != host and b.host != WILDCARD:
                    continue
                if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                    continue
                if b.operation != op and b.operation != ALL:
                    continue
                if b.permission == DENY:
                    if ptype == LITERAL and name == WILDCARD:
                        return False
                    (deny_literal if ptype == LITERAL else deny_prefixed).add(name)
                elif b.permission == ALLOW:
                    if ptype == LITERAL and name == WILDCARD:
                        wildcard_allow = True
                        continue
                    allow.append((ptype, name))
        if wildcard_allow:
            return True
        for ptype, name in allow:
            if ptype == LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False
