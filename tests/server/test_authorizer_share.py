"""Kafka's StandardAuthorizer on the share group APIs and on regular-expression subscriptions, on
``kafkalog serve`` and Apache Kafka 4.4 side by side (issue 38), with the principals and ACLs of
:mod:`tests.server.test_authorizer` (alice: ALL on the "app-" topics, READ on the "app-" groups; bob:
DESCRIBE on every topic; carol; admin, a super user; ANONYMOUS):

* ShareFetch and ShareAcknowledge: READ on the group (else the whole answer's GROUP_AUTHORIZATION_FAILED,
  checked after the group id and before the member id), READ on each topic (its partitions'
  TOPIC_AUTHORIZATION_FAILED, in the fetch and in the acknowledgements);
* DescribeShareGroupOffsets (DESCRIBE on the group and on each topic), AlterShareGroupOffsets (READ on
  the group and each topic), DeleteShareGroupOffsets (DELETE on the group, READ on each topic);
* a ConsumerGroupHeartbeat subscribing with a regular expression is assigned only the matching topics
  its principal may DESCRIBE."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.broker_process import BrokerProcess
from tests.server.test_authorizer import PRINCIPALS, _pair, _run, _setup


@pytest.fixture(scope="module")
def share_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, BrokerProcess]]:
    yield from _pair(tmp_path_factory.mktemp("authz-share"), {})


TOPICS = ("app-data", "other")


def _ids(conn_of: Any) -> dict[str, Any]:
    md = conn_of("admin").request(3, 12, {"topics": [{"name": n, "topic_id": None} for n in TOPICS],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    return {t.name: t.topic_id for t in md.topics}


def _refusals(p: Any, names: dict[Any, str], where: tuple[Any, ...] = ()) -> list[Any]:
    """Every authorization error of an answer (TOPIC_ or GROUP_AUTHORIZATION_FAILED, with its message),
    named by the group, topic and partition it is about; the other codes depend on the share
    coordinator's state (Kafka 4.4 answers NOT_COORDINATOR for a while after a group's first use)."""
    out: list[Any] = []
    if isinstance(p, dict):
        here = where + tuple(names.get(str(p[k]), "<unknown>") if k == "topic_id" else p[k]
                             for k in ("group_id", "topic_name", "topic_id", "partition_index") if k in p)
        for key in ("error_code", "acknowledge_error_code"):
            if p.get(key) in (29, 30):
                out.append((here, key, p[key], p.get("error_message")))
        for v in p.values():
            if isinstance(v, (dict, list)):
                out += _refusals(v, names, here)
    elif isinstance(p, list):
        for x in p:
            out += _refusals(x, names, where)
    return sorted(out, key=repr)


def _codes(p: Any, names: dict[Any, str]) -> Any:
    """A share answer's refusals: the top-level error, and each partition's authorization error (what a
    partition holds otherwise, records or a record state, depends on when its share partition was
    initialized: left out)."""
    out = []
    for t in p["responses"]:
        for x in t["partitions"]:
            for key in ("error_code", "acknowledge_error_code"):
                if x.get(key) in (29, 30):
                    out.append((names.get(str(t["topic_id"]), "<unknown>"), x["partition_index"], key, x[key]))
    return {"error_code": p["error_code"], "error_message": p["error_message"], "refused": sorted(out)}


def _share_session(conn_of: Any) -> None:
    _setup(conn_of)
    ids = _ids(conn_of)
    names = {str(v): k for k, v in ids.items()}
    for user in PRINCIPALS:
        c = conn_of(user)
        who = "authz share " + (user or "ANONYMOUS")
        for group in ("app-sg", "other-sg"):
            member = uuid.uuid4().hex[:22]
            c.call("", 76, 1, {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                               "subscribed_topic_names": ["app-data"]}, record=False, retry=frozenset())
            fetch = {"group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait": 0,
                     "min_bytes": 0, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
                     "topics": [{"topic_id": ids[t], "partitions": [{"partition_index": 0,
                                                                     "acknowledgement_batches": []}]}
                                for t in TOPICS], "forgotten_topics_data": []}
            c.call(f"{who}: ShareFetch v1 {group}", 78, 1, fetch,
                   retry=frozenset(), transform=lambda p: _codes(p, names))
            c.call(f"{who}: ShareFetch v1 {group} no group id", 78, 1, {**fetch, "group_id": None},
                   retry=frozenset(), transform=lambda p: _codes(p, names))
            c.call(f"{who}: ShareFetch v1 {group} no member id", 78, 1, {**fetch, "member_id": ""},
                   retry=frozenset(), transform=lambda p: _codes(p, names))
            c.call(f"{who}: ShareAcknowledge v1 {group}", 79, 1, {
                "group_id": group, "member_id": member, "share_session_epoch": 1,
                "topics": [{"topic_id": ids[t], "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]} for t in TOPICS]},
                   retry=frozenset(), transform=lambda p: _codes(p, names))
            c.call(f"{who}: ShareAcknowledge v1 {group} no member id", 79, 1, {
                "group_id": group, "member_id": "", "share_session_epoch": 1, "topics": []},
                   retry=frozenset(), transform=lambda p: _codes(p, names))
            c.call("", 78, 1, {**fetch, "share_session_epoch": -1, "topics": []}, record=False, retry=frozenset())
            c.call("", 76, 1, {"group_id": group, "member_id": member, "member_epoch": -1, "rack_id": None,
                               "subscribed_topic_names": None}, record=False, retry=frozenset())
            c.call(f"{who}: DescribeShareGroupOffsets v1 {group}", 90, 1, {"groups": [
                {"group_id": group, "topics": [{"topic_name": t, "partitions": [0]} for t in TOPICS]},
                {"group_id": group, "topics": None}]}, retry=frozenset(), transform=lambda p: _refusals(p, names))
            c.call(f"{who}: AlterShareGroupOffsets v0 {group}", 91, 0, {"group_id": group, "topics": [
                {"topic_name": t, "partitions": [{"partition_index": 0, "start_offset": 0}]} for t in TOPICS]},
                   # where the group is allowed, Kafka 4.4's share coordinator answers NOT_COORDINATOR for the
                   # whole request here (a fresh group's state), which hides its answer for each topic
                   retry=frozenset(), transform=lambda p: _refusals(p, names) if p["error_code"] == 30 else
                   "the group allowed")
            c.call(f"{who}: DeleteShareGroupOffsets v0 {group}", 92, 0, {
                "group_id": group, "topics": [{"topic_name": t} for t in TOPICS]},
                   retry=frozenset(), transform=lambda p: _refusals(p, names))


def test_share_apis_by_principal(share_pair: Any) -> None:
    """ShareFetch, ShareAcknowledge and the share group offsets APIs answer each principal as Kafka 4.4
    does: the group's check first, then each topic's."""
    out = dict(_run(share_pair, _share_session))
    # what the comparison covers: alice's refusals of topic "other" and of group "other-sg"
    assert out["authz share alice: DescribeShareGroupOffsets v1 app-sg"] == [
        (("app-sg", "other", "<unknown>", 0), "error_code", 29, "Topic authorization failed.")], out
    assert out["authz share alice: ShareFetch v1 app-sg"]["refused"] == [("other", 0, "error_code", 29)], out
    assert out["authz share alice: ShareFetch v1 other-sg"]["error_code"] == 30, out


def _regex_session(conn_of: Any) -> None:
    _setup(conn_of)
    admin = conn_of("admin")
    md = admin.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
    names = {t.topic_id: t.name for t in md.topics}
    for user in ("alice", "admin"):
        c = conn_of(user)
        group, member = f"app-rx-{user}", uuid.uuid4().hex[:22]
        admin.coordinator_ready(group)              # Kafka creates __consumer_offsets on demand
        hb = {"group_id": group, "member_id": member, "member_epoch": 0, "instance_id": None, "rack_id": None,
              "rebalance_timeout": 10000, "subscribed_topic_names": None, "subscribed_topic_regex": "(app|oth).*",
              "server_assignor": None, "topic_partitions": []}
        r = c.call("", 68, 1, hb, record=False)
        deadline = time.monotonic() + 60
        assigned: list[str] = []
        while time.monotonic() < deadline:
            epoch = int(r.member_epoch)
            if r.assignment is not None:
                assigned = sorted(names.get(t.topic_id, "?") for t in r.assignment.topic_partitions)
                if assigned:
                    break
            time.sleep(0.3)
            r = c.call("", 68, 1, {**hb, "member_epoch": epoch, "topic_partitions": None,
                                   "rebalance_timeout": -1, "subscribed_topic_regex": None}, record=False)
        c.call(f"authz regex {user}: topics assigned for (app|oth).*", 3, 12, {
            "topics": [{"name": n, "topic_id": None} for n in assigned], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False},
               transform=lambda p: sorted(t["name"] for t in p["topics"]))


def test_regex_subscription_only_describable_topics(share_pair: Any) -> None:
    """A consumer group member subscribing with ``(app|oth).*`` is assigned the matching topics its principal
    may DESCRIBE: alice the "app-" topics and not "other", admin (a super user) all of them; Kafka 4.4's
    assignment."""
    out = _run(share_pair, _regex_session)
    answers = {label: p for label, p in out if label.startswith("authz regex")}
    assert answers["authz regex alice: topics assigned for (app|oth).*"] == ["app-conf", "app-data", "app-secret"]
    assert "other" in answers["authz regex admin: topics assigned for (app|oth).*"]
