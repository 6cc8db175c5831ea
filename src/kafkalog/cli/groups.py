"""``kafkalog groups DATA_DIR``: kafka-consumer-groups.sh over a data directory.

The groups are those of the directory's ``__consumer_offsets`` topic, read through the coordinator's
:class:`~kafkalog.coordinator.offsets.OffsetsStore` (committed offsets, and the group metadata a
broker stores after a rebalance: protocol, generation, members and their assignments). One action:

* ``--list``: the group ids, with their state and type (``classic``, ``consumer`` for the groups
  of the consumer group protocol, KIP-848, ``share`` for share groups, KIP-932: ``Stable`` with
  members, else ``Empty``, or ``streams`` for streams groups, KIP-1071, in Kafka's states).
* ``--describe`` (``--group G``... or ``--all-groups``): per partition the committed (current)
  offset, the log end offset, the lag and the member it is assigned to; and per group its state
  (classic: ``Stable`` when the stored metadata has members, else ``Empty``; consumer: Kafka's
  Empty, Assigning, Reconciling or Stable from the group and member epochs; streams: also NotReady
  while its topology's topics are missing), protocol and members (a streams member's tasks).
* ``--reset-offsets`` (``--group G``, ``--topic T[:p,...]``... or ``--all-topics``, and one of
  ``--to-earliest``, ``--to-latest``, ``--to-offset N``, ``--shift-by N``, ``--to-datetime ISO``,
  ``--by-duration PnDTnHnMnS``, ``--to-current``): prints the plan; ``--execute`` commits it
  (``--dry-run``, the default, does not). Refused while the group has members, as Kafka does.
* ``--delete`` (``--group G``...): tombstones for the groups' offsets and metadata.
* ``--delete-offsets`` (``--group G --topic T[:p,...]``...): tombstones for those partitions.

Reading opens the directory read-only (it works while ``kafkalog serve`` or an application holds
it); ``--execute`` and the deletes open it for writing, which a running broker's lock refuses.
Output is JSON lines; ``--format text`` prints Kafka's tables.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from kafkalog.cli.output import emit, format_option, handle_errors, resolve_format
from kafkalog.cli.paths import existing_data_dir
from kafkalog.errors import GroupIdNotFoundError, InvalidTopicError, NonEmptyGroupError

if TYPE_CHECKING:       # the client and the coordinator are imported when the command runs
    from kafkalog.cli.group_reset import ResetSpec
    from kafkalog.client.datalog import DataLog
    from kafkalog.coordinator.consumer_group_view import ConsumerGroupView
    from kafkalog.coordinator.group_metadata import GroupMetadataValue
    from kafkalog.coordinator.offsets import OffsetsStore
from kafkalog.log.naming import TopicPartition

__all__ = ["groups"]

_ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")
_MISSING = "-"


@contextmanager
def _open(data_dir: str, writable: bool) -> Iterator[DataLog]:
    import kafkalog
    if writable:
        with kafkalog.open(data_dir, background=False) as dl:
            yield dl
    else:
        with kafkalog.open(data_dir, read_only=True) as dl:
            yield dl


def _state(meta: GroupMetadataValue | None) -> str:
    return "Stable" if meta is not None and meta.members else "Empty"


def _share_state(store: OffsetsStore, group: str) -> str | None:
    """A share group's state (KIP-932: ``Stable`` with members, else ``Empty``); None for another kind."""
    from kafkalog.coordinator.share_group_records import MEMBER_METADATA as SHARE_MEMBER_METADATA
    records = store.share_group_records().get(group)
    if records is None:
        return None
    return "Stable" if any(k.record_type == SHARE_MEMBER_METADATA for k, _v in records.values()) else "Empty"


def _streams_group(dl: DataLog, store: OffsetsStore, group: str) -> Any:
    """A streams group (KIP-1071) rebuilt from its records as the broker's coordinator rebuilds it
    (its state, epochs, topology and members' tasks); None for another kind."""
    records = store.streams_group_records().get(group)
    if records is None:
        return None
    from kafkalog.server.coordinator.consumer_group import TopicImage
    from kafkalog.server.coordinator.streams_group import StreamsGroupConfig, StreamsGroupCoordinator

    def topic(name: str) -> TopicImage | None:     # (only the partition count is read)
        parts = dl.manager.partitions_of(name) if dl.manager.has_topic(name) else []
        return TopicImage(uuid.UUID(int=0), len(parts)) if parts else None
    coordinator = StreamsGroupCoordinator(StreamsGroupConfig(), lambda _g, _r: None, topic, lambda _g: False)
    coordinator.restore(group, records)
    return coordinator.groups[group]


def _group_type(store: OffsetsStore, group: str) -> str:
    if _share_state(store, group) is not None:
        return "share"
    if group in store.streams_group_records():
        return "streams"
    return "consumer" if store.consumer_group(group) is not None else "classic"


def _group_state(dl: DataLog, store: OffsetsStore, group: str) -> str:
    shared = _share_state(store, group)
    if shared is not None:
        return shared
    streams = _streams_group(dl, store, group)
    if streams is not None:
        return str(streams.state)
    view = store.consumer_group(group)
    return view.state if view is not None else _state(store.group_metadata(group))


def _topic_names(dl: DataLog) -> dict[uuid.UUID, str]:
    """Topic id -> name, from the partitions' ``partition.metadata`` (Kafka's ids: base64url)."""
    out = {}
    for topic in dl.manager.topics():
        parts = dl.manager.partitions_of(topic)
        if not parts:
            continue
        path = os.path.join(dl.manager.data_dir, f"{topic}-{parts[0]}", "partition.metadata")
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.strip() == "topic_id":
                        raw = value.strip()
                        out[uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))] = topic
        except (OSError, ValueError):
            continue
    return out


def _require_group(store: OffsetsStore, group: str) -> None:
    if group not in store.groups():
        raise GroupIdNotFoundError(f"Consumer group '{group}' does not exist.")


def _require_empty(dl: DataLog, store: OffsetsStore, group: str, what: str) -> None:
    state = _group_state(dl, store, group)
    if state != "Empty":
        raise NonEmptyGroupError(what.format(group=group, state=state))


def _partitions(dl: DataLog, topic_args: tuple[str, ...]) -> list[TopicPartition]:
    """``T`` (every partition of T) or ``T:0,2`` (those partitions), each checked to exist."""
    out: list[TopicPartition] = []
    for arg in topic_args:
        topic, sep, plist = arg.partition(":")
        n = dl.partitions(topic)
        if n == 0:
            raise InvalidTopicError(f"Topic '{topic}' does not exist", file=dl.manager.data_dir)
        if not sep:
            out.extend(TopicPartition(topic, p) for p in range(n))
            continue
        try:
            ids = [int(p) for p in plist.split(",")]
        except ValueError:
            raise click.BadParameter(f"expected TOPIC or TOPIC:0,1,.., got {arg!r}",
                                     param_hint="--topic") from None
        for p in ids:
            if not 0 <= p < n:
                raise InvalidTopicError(f"Partition {p} of topic '{topic}' does not exist (it has {n})",
                                        file=dl.manager.data_dir)
            out.append(TopicPartition(topic, p))
    return sorted(set(out))


# --- describe ------------------------------------------------------------------------------------

def _members_json(meta: GroupMetadataValue | None) -> list[dict[str, Any]]:
    from kafkalog.coordinator.group_metadata import consumer_assignment_partitions
    if meta is None:
        return []
    out = []
    for m in meta.members:
        assigned = consumer_assignment_partitions(m.assignment) if meta.protocol_type == "consumer" else []
        out.append({"memberId": m.member_id, "groupInstanceId": m.group_instance_id,
                    "clientId": m.client_id, "host": m.client_host,
                    "sessionTimeoutMs": m.session_timeout, "rebalanceTimeoutMs": m.rebalance_timeout,
                    "assignment": [{"topic": t, "partition": p} for t, p in assigned]})
    return out


def _consumer_members_json(dl: DataLog, view: ConsumerGroupView) -> list[dict[str, Any]]:
    names = _topic_names(dl)
    out = []
    for m in view.members:
        assigned = sorted((names.get(t, str(t)), p) for t, ps in m.assignment.items() for p in ps)
        out.append({"memberId": m.member_id, "groupInstanceId": m.instance_id, "clientId": m.client_id,
                    "host": m.client_host, "memberEpoch": m.member_epoch,
                    "protocol": "classic" if m.classic else "consumer",
                    "sessionTimeoutMs": m.session_timeout_ms, "rebalanceTimeoutMs": m.rebalance_timeout_ms,
                    "assignment": [{"topic": t, "partition": p} for t, p in assigned]})
    return out


def _streams_members_json(dl: DataLog, g: Any) -> list[dict[str, Any]]:
    """A streams group's members: their tasks, and the source partitions of their active tasks."""
    subs = {} if g.topology is None else {s["subtopology_id"]: s for s in g.topology["subtopologies"]}
    out = []
    for m in g.members.values():
        assigned = set()
        for sid, ps in m.active.items():
            s = subs.get(sid)
            for t in [] if s is None else [*s["source_topics"], *(r["name"] for r in s["repartition_source_topics"])]:
                n = len(dl.manager.partitions_of(t)) if dl.manager.has_topic(t) else 0
                assigned |= {(t, p) for p in ps if p < n}
        out.append({"memberId": m.member_id, "groupInstanceId": m.instance_id, "clientId": m.client_id,
                    "host": m.client_host, "memberEpoch": m.member_epoch, "protocol": "streams",
                    "processId": m.process_id,
                    "userEndpoint": None if m.user_endpoint is None else f"{m.user_endpoint[0]}:{m.user_endpoint[1]}",
                    "activeTasks": {s: sorted(ps) for s, ps in sorted(m.active.items())},
                    "standbyTasks": {s: sorted(ps) for s, ps in sorted(m.standby.items())},
                    "rebalanceTimeoutMs": m.rebalance_timeout_ms,
                    "assignment": [{"topic": t, "partition": p} for t, p in sorted(assigned)]})
    return out


def _describe_rows(dl: DataLog, store: OffsetsStore, group: str) -> tuple[dict[str, Any],
                                                                             list[dict[str, Any]]]:
    meta = store.group_metadata(group)
    view = store.consumer_group(group)
    streams = _streams_group(dl, store, group)
    members = (_streams_members_json(dl, streams) if streams is not None else
               _consumer_members_json(dl, view) if view is not None else _members_json(meta))
    owner: dict[TopicPartition, dict[str, Any]] = {}
    for m in members:
        for a in m["assignment"]:
            owner[TopicPartition(a["topic"], a["partition"])] = m
    committed = store.fetch(group)
    ends: dict[str, dict[int, int]] = {}
    rows = []
    for tp in sorted(set(committed) | set(owner)):
        if tp.topic not in ends:
            ends[tp.topic] = dl.end_offsets(tp.topic) if dl.partitions(tp.topic) else {}
        end = ends[tp.topic].get(tp.partition)
        cur = committed.get(tp)
        who = owner.get(tp)
        rows.append({"group": group, "topic": tp.topic, "partition": tp.partition,
                     "currentOffset": None if cur is None else cur.offset, "logEndOffset": end,
                     "lag": None if cur is None or end is None else max(0, end - cur.offset),
                     "consumerId": None if who is None else who["memberId"],
                     "host": None if who is None else who["host"],
                     "clientId": None if who is None else who["clientId"]})
    if streams is not None:
        return {"type": "group", "group": group, "groupType": "streams", "state": streams.state,
                "protocolType": "streams", "protocol": None, "generation": streams.group_epoch,
                "groupEpoch": streams.group_epoch, "assignmentEpoch": streams.assignment_epoch,
                "leader": None, "members": members}, rows
    if view is not None:
        summary = {"type": "group", "group": group, "groupType": "consumer", "state": view.state,
                   "protocolType": "consumer", "protocol": None, "generation": view.group_epoch,
                   "groupEpoch": view.group_epoch, "assignmentEpoch": view.assignment_epoch,
                   "leader": None, "members": members}
        return summary, rows
    summary = {"type": "group", "group": group, "groupType": "classic", "state": _state(meta),
               "protocolType": "consumer" if meta is None else meta.protocol_type,
               "protocol": None if meta is None else meta.protocol,
               "generation": None if meta is None else meta.generation,
               "leader": None if meta is None else meta.leader, "members": members}
    return summary, rows


def _cell(v: Any) -> str:
    return _MISSING if v is None else str(v)


def _table(header: list[str], rows: list[list[Any]]) -> None:
    widths = [max([len(h)] + [len(_cell(r[i])) for r in rows]) for i, h in enumerate(header)]
    for line in [header] + rows:
        click.echo(" ".join(_cell(c).ljust(w) for c, w in zip(line, widths)).rstrip())


_DESCRIBE_COLUMNS = ["group", "topic", "partition", "currentOffset", "logEndOffset", "lag",
                     "consumerId", "host", "clientId"]


def _describe(dl: DataLog, store: OffsetsStore, names: list[str], fmt: str) -> None:
    for i, g in enumerate(names):
        _require_group(store, g)
        summary, rows = _describe_rows(dl, store, g)
        if fmt == "json":
            emit(summary)
            for r in rows:
                emit({"type": "offset", **r})
            continue
        if i:
            click.echo("")
        if not summary["members"]:
            click.echo(f"Consumer group '{g}' has no active members.")
        elif summary["groupType"] in ("consumer", "streams"):
            kind = "Streams" if summary["groupType"] == "streams" else "Consumer"
            click.echo(f"{kind} group '{g}': state {summary['state']}, type {summary['groupType']}, group epoch "
                       f"{summary['groupEpoch']}, assignment epoch {summary['assignmentEpoch']}, "
                       f"{len(summary['members'])} member(s).")
        else:
            click.echo(f"Consumer group '{g}': state {summary['state']}, protocol "
                       f"{summary['protocolType']}/{summary['protocol']}, generation "
                       f"{summary['generation']}, {len(summary['members'])} member(s).")
        click.echo("")
        _table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                "HOST", "CLIENT-ID"], [[r[c] for c in _DESCRIBE_COLUMNS] for r in rows])


# --- reset -----------------------------------------------------------------------------------------

def _reset_spec(to_earliest: bool, to_latest: bool, to_offset: int | None, shift_by: int | None,
                to_datetime: str | None, by_duration: str | None, to_current: bool) -> ResetSpec:
    from kafkalog.cli.group_reset import ResetSpec, now_ms, parse_datetime, parse_duration
    given = [on for on in (to_earliest, to_latest, to_offset is not None, shift_by is not None,
                           to_datetime is not None, by_duration is not None, to_current) if on]
    if len(given) != 1:
        raise click.UsageError("--reset-offsets needs exactly one of --to-earliest, --to-latest, "
                               "--to-offset, --shift-by, --to-datetime, --by-duration, --to-current")
    if to_offset is not None:
        return ResetSpec("offset", to_offset)
    if shift_by is not None:
        return ResetSpec("shift", shift_by)
    if to_datetime is not None:
        return ResetSpec("timestamp", parse_datetime(to_datetime))
    if by_duration is not None:
        return ResetSpec("timestamp", now_ms() - parse_duration(by_duration))
    return ResetSpec("earliest" if to_earliest else "latest" if to_latest else "current")


def _reset(data_dir: str, group: str, topics: tuple[str, ...], all_topics: bool, spec: ResetSpec,
           execute: bool, fmt: str) -> None:
    from kafkalog.cli.group_reset import plan_reset
    with _open(data_dir, writable=execute) as dl:
        store = dl.offsets_store()
        _require_empty(dl, store, group, "Assignments can only be reset if the group '{group}' is "
                                         "inactive, but the current state is {state}.")
        committed = store.fetch(group)
        if all_topics:
            tps = sorted(tp for tp in committed if dl.partitions(tp.topic) > tp.partition)
        else:
            tps = _partitions(dl, topics)
        plan = plan_reset(dl, tps, committed, spec)
        if execute and plan:
            store.commit(group, plan)
    if fmt == "json":
        for tp, off in plan.items():
            emit({"group": group, "topic": tp.topic, "partition": tp.partition, "newOffset": off,
                  "executed": execute})
        return
    _table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
           [[group, tp.topic, tp.partition, off] for tp, off in plan.items()])


# --- delete ----------------------------------------------------------------------------------------

def _delete(data_dir: str, names: list[str], fmt: str) -> None:
    with _open(data_dir, writable=True) as dl:
        store = dl.offsets_store()
        for g in names:
            _require_group(store, g)
            _require_empty(dl, store, g, "Group '{group}' could not be deleted due to: NON_EMPTY_GROUP "
                                         "(its state is {state}).")
        for g in names:
            store.delete_group(g)
    if fmt == "json":
        for g in names:
            emit({"group": g, "deleted": True})
    else:
        click.echo("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in names)
                   + ") was successful.")


def _delete_offsets(data_dir: str, group: str, topics: tuple[str, ...], fmt: str) -> None:
    with _open(data_dir, writable=True) as dl:
        store = dl.offsets_store()
        _require_group(store, group)
        _require_empty(dl, store, group, "Deleting offsets of a consumer group '{group}' is forbidden "
                                         "if the group is not empty.")
        tps = _partitions(dl, topics)
        had = store.fetch(group, tps)
        store.delete_offsets(group, tps)
    if fmt == "json":
        for tp in tps:
            emit({"group": group, "topic": tp.topic, "partition": tp.partition,
                  "deleted": tp in had})
        return
    click.echo(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group}")
    click.echo("")
    _table(["TOPIC", "PARTITION", "STATUS"],
           [[tp.topic, tp.partition, "Successful" if tp in had else "No committed offset"] for tp in tps])


# --- the command -----------------------------------------------------------------------------------

@click.command("groups")
@click.argument("data_dir", type=click.Path())
@click.option("--list", "list_", is_flag=True, help="List the consumer groups.")
@click.option("--describe", is_flag=True,
              help="Committed offset, log end offset and lag per partition, and the group's state, "
                   "protocol and members.")
@click.option("--reset-offsets", is_flag=True,
              help="Reset the group's committed offsets (a plan with --dry-run, the default; "
                   "committed with --execute).")
@click.option("--delete", is_flag=True, help="Delete the groups' offsets and metadata.")
@click.option("--delete-offsets", is_flag=True,
              help="Delete the group's committed offsets of the --topic partitions.")
@click.option("--group", "group_names", multiple=True, metavar="GROUP",
              help="The consumer group (repeat for several with --describe and --delete).")
@click.option("--all-groups", is_flag=True, help="Every group (with --describe or --delete).")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,..]",
              help="A topic, or some of its partitions (repeatable; --reset-offsets, --delete-offsets).")
@click.option("--all-topics", is_flag=True,
              help="Every topic the group has committed offsets for (--reset-offsets).")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offset.")
@click.option("--to-offset", type=int, default=None, metavar="N",
              help="Reset to offset N (clamped into the log's range, as Kafka does).")
@click.option("--shift-by", type=int, default=None, metavar="N",
              help="Move the committed offset by N (negative: back), clamped into the log's range.")
@click.option("--to-datetime", default=None, metavar="YYYY-MM-DDTHH:mm:SS.sss",
              help="Reset to the first offset at or after this time (local time unless a zone is given).")
@click.option("--by-duration", default=None, metavar="PnDTnHnMnS",
              help="Reset to the first offset at or after now minus this ISO-8601 duration.")
@click.option("--to-current", is_flag=True,
              help="Reset to the committed offset (the log end offset where there is none).")
@click.option("--dry-run/--execute", "dry_run", default=True, show_default=True,
              help="Print the reset plan only, or commit it.")
@format_option()
@handle_errors()
def groups(data_dir: str, list_: bool, describe: bool, reset_offsets: bool, delete: bool,
           delete_offsets: bool, group_names: tuple[str, ...], all_groups: bool, topics: tuple[str, ...],
           all_topics: bool, to_earliest: bool, to_latest: bool, to_offset: int | None,
           shift_by: int | None, to_datetime: str | None, by_duration: str | None, to_current: bool,
           dry_run: bool, fmt: str | None) -> None:
    """Consumer groups like kafka-consumer-groups.sh: list, describe (offsets and lag), reset,
    delete."""
    fmt = resolve_format(fmt)
    actions = [a for a, on in zip(_ACTIONS, (list_, describe, reset_offsets, delete, delete_offsets))
               if on]
    if len(actions) != 1:
        raise click.UsageError("give exactly one of --list, --describe, --reset-offsets, --delete, "
                               "--delete-offsets")
    action = actions[0]
    reset_opts = (to_earliest, to_latest, to_offset is not None, shift_by is not None,
                  to_datetime is not None, by_duration is not None, to_current)
    if action != "reset_offsets" and (any(reset_opts) or all_topics or not dry_run):
        raise click.UsageError("--to-*, --shift-by, --by-duration, --all-topics and --execute go with "
                               "--reset-offsets")
    if action == "list" and (group_names or all_groups or topics):
        raise click.UsageError("--list takes no --group, --all-groups or --topic")
    if action in ("describe", "delete") and topics:
        raise click.UsageError(f"--topic does not go with --{action}")
    if action in ("describe", "delete") and bool(group_names) == all_groups:
        raise click.UsageError(f"--{action} needs --group GROUP or --all-groups")
    if action in ("reset_offsets", "delete_offsets") and (len(group_names) != 1 or all_groups):
        raise click.UsageError(f"--{action.replace('_', '-')} needs exactly one --group")
    if action == "reset_offsets" and bool(topics) == all_topics:
        raise click.UsageError("--reset-offsets needs --topic TOPIC[:P,..] or --all-topics")
    if action == "delete_offsets" and not topics:
        raise click.UsageError("--delete-offsets needs --topic TOPIC[:P,..]")
    existing_data_dir(data_dir)
    if action == "reset_offsets":
        spec = _reset_spec(to_earliest, to_latest, to_offset, shift_by, to_datetime, by_duration,
                           to_current)
        _reset(data_dir, group_names[0], topics, all_topics, spec, not dry_run, fmt)
        return
    if action == "delete_offsets":
        _delete_offsets(data_dir, group_names[0], topics, fmt)
        return
    if action == "delete":
        if all_groups:
            with _open(data_dir, writable=False) as dl:
                group_names = tuple(dl.offsets_store().groups())
        _delete(data_dir, list(group_names), fmt)
        return
    with _open(data_dir, writable=False) as dl:
        store = dl.offsets_store()
        if action == "list":
            for g in store.groups():
                if fmt == "json":
                    emit({"group": g, "state": _group_state(dl, store, g), "type": _group_type(store, g)})
                else:
                    click.echo(g)
            return
        _describe(dl, store, list(group_names) if group_names else store.groups(), fmt)
