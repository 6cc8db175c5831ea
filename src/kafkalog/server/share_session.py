"""Share sessions (KIP-932), Kafka's ``ShareSessionCache``: keyed by group and member, epoch 0 opens
one, the next requests carry the epoch it answered plus one, -1 closes it; at most
``group.share.max.share.sessions`` of them. The broker keeps the cache
(:attr:`kafkalog.server.broker.Broker.share_sessions`); ShareFetch and ShareAcknowledge
(:mod:`kafkalog.server.handlers.share_fetch`) run in its sessions."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kafkalog.server import error_codes as ec
from kafkalog.server.requests.request_context import current_connection

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "ShareSession", "ShareSessionCache", "ShareSessionError"]

FINAL_EPOCH = -1
INITIAL_EPOCH = 0


class ShareSessionError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or str(code))
        self.code = code
        self.message = message


@dataclass
class ShareSession:
    group: str
    member: str
    epoch: int = 1
    #: (topic id, partition) in the order added
    partitions: list[tuple[uuid.UUID, int]] = field(default_factory=list)
    #: the rotation start of the next fetch (fairness among the partitions)
    next_start: int = 0
    #: the connection that opened the session (:data:`kafkalog.server.requests.request_context.current_connection`)
    connection: object | None = None


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class ShareSessionCache:
    """Kafka's ``ShareSessionCache``: at most ``group.share.max.share.sessions`` sessions."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def context(self, group: str, member: str, epoch: int, add: list[tuple[uuid.UUID, int]],
                forget: list[tuple[uuid.UUID, int]], has_acks: bool) -> ShareSession:
        """The session a ShareFetch of ``epoch`` runs in (Kafka's ``newContext``)."""
        key = (group, member)
        if epoch == FINAL_EPOCH:
            s = self.sessions.get(key)
            if s is None:
                raise ShareSessionError(ec.SHARE_SESSION_NOT_FOUND)
            return s
        if epoch == INITIAL_EPOCH:
            if has_acks:
                raise ShareSessionError(ec.INVALID_REQUEST)
            self.sessions.pop(key, None)
            if len(self.sessions) >= self.max_sessions:
                raise ShareSessionError(ec.SHARE_SESSION_LIMIT_REACHED)
            s = ShareSession(group, member, partitions=list(dict.fromkeys(add)),
                             connection=current_connection.get())
            self.sessions[key] = s
            return s
        s = self.sessions.get(key)
        if s is None:
            raise ShareSessionError(ec.SHARE_SESSION_NOT_FOUND)
        if s.epoch != epoch:
            raise ShareSessionError(ec.INVALID_SHARE_SESSION_EPOCH)
        for tp in add:
            if tp not in s.partitions:
                s.partitions.append(tp)
        s.partitions = [tp for tp in s.partitions if tp not in set(forget)]
        s.epoch = _next_epoch(s.epoch)
        return s

    def acknowledge_update(self, group: str, member: str, epoch: int) -> ShareSession:
        """The session a ShareAcknowledge of ``epoch`` runs in (Kafka's ``acknowledgeSessionUpdate``)."""
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(ec.INVALID_SHARE_SESSION_EPOCH)
        s = self.sessions.get((group, member))
        if s is None:
            raise ShareSessionError(ec.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            return s
        if s.epoch != epoch:
            raise ShareSessionError(ec.INVALID_SHARE_SESSION_EPOCH)
        s.epoch = _next_epoch(s.epoch)
        return s

    def remove(self, group: str, member: str) -> ShareSession | None:
        return self.sessions.pop((group, member), None)

    def opened_on(self, connection: object) -> list[ShareSession]:
        """The sessions the connection opened."""
        return [s for s in self.sessions.values() if s.connection is connection]
