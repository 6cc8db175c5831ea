"""The state every handler shares: the data directory's ``LogManager``, topic IDs, the producer ID
allocator, the group coordinator and offsets store, the transaction coordinator (whose timer aborts
expired transactions), and the fetch waiters woken by appends. It knows no handler: the request
layer (:class:`kafkalog.server.handlers.kafka_apis.KafkaApis`, composed with it by
:class:`kafkalog.server.network.socket_server.Server`) hands each parsed request to its API's
handler with this state, as Kafka's ``KafkaApis`` does over its ``ReplicaManager`` and
coordinators."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC
from kafkalog.coordinator.offsets import OffsetsStore
from kafkalog.coordinator.share_state_records import SHARE_GROUP_STATE_TOPIC
from kafkalog.coordinator.transaction_coordinator import TransactionCoordinator
from kafkalog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from kafkalog.errors import InvalidTopicError, KafkalogError, KafkalogIOError
from kafkalog.log.log import Log
from kafkalog.log.manager import LogManager
from kafkalog.log.naming import TopicPartition, validate_topic
from kafkalog.log.topic_creation import CHUNK
from kafkalog.server import error_codes, heap
from kafkalog.server.config import Listener, ServerConfig
from kafkalog.server.coordinator.classic_group import GroupCoordinator
from kafkalog.server.coordinator.consumer_group import ConsumerGroupCoordinator
from kafkalog.server.coordinator.group import TopicImage
from kafkalog.server.coordinator.producer_id_migration import adopt_legacy_reservation
from kafkalog.server.coordinator.streams_group import StreamsGroupCoordinator
from kafkalog.server.features import FeatureLevels
from kafkalog.server.fetch_session import FetchSessionCache
from kafkalog.server.quota.quota_store import QuotaStore
from kafkalog.server.quota.quotas import ClientQuotas
from kafkalog.server.requests.kio_build import build
from kafkalog.server.requests.message_schemas import response_schema
from kafkalog.server.requests.metadata_entries import MetadataEntries
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import CLUSTER, DESCRIBE, TOPIC, authorized_operations
from kafkalog.server.security.acl_store import AclStore
from kafkalog.server.security.authorizer import AclBinding, StandardAuthorizer, current_session
from kafkalog.server.security.sasl_credentials import ScramCredential
from kafkalog.server.security.scram_store import ScramStore
from kafkalog.server.share_session import ShareSessionCache
from kafkalog.server.topic_ids import TopicIds

if TYPE_CHECKING:
    from kafkalog.server.metrics.broker_metrics import BrokerMetrics
    from kafkalog.server.metrics.client_metrics import ClientMetricsManager

logger = logging.getLogger("kafkalog.server")

#: Kafka's internal topics: never auto-created by a client's request, flagged in Metadata.
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})

#: A CreateTopics request of at most this many partitions is made whole before it is answered
#: (:meth:`Broker.commit_topics`); a larger one once committed (one chunk of the topic creator)
SMALL_REQUEST = CHUNK

#: How often the group coordinator's session and rebalance timeouts are checked.
GROUP_TICK_S = 0.1

#: The name of the listener the connection being served came in on: the network layer sets it in
#: each connection's task, so :attr:`Broker.advertised` (Metadata, FindCoordinator) is the endpoint
#: of the listener the client connected on.
current_listener: ContextVar[str | None] = ContextVar("kafkalog_current_listener", default=None)


class Broker:
    """One node serving one data directory."""

    #: the version ranges ApiVersions advertises: set by the request layer that serves this state
    #: (:data:`kafkalog.server.handlers.kafka_apis.ADVERTISED`)
    api_versions: Mapping[int, tuple[int, int]] = MappingProxyType({})
    #: the group coordinator's clock, started by the first request served (:meth:`start_timers`)
    _group_timer: asyncio.Task[None] | None = None
    #: listener name -> advertised endpoint (:meth:`set_endpoints`)
    _endpoints: Mapping[str, Listener] = MappingProxyType({})
    _default_endpoint: Listener
    #: the I/O failure that took the data directory offline (Kafka's ``LogDirFailureChannel``):
    #: from then on every produce gets KAFKA_STORAGE_ERROR until the broker restarts
    log_dir_failure: KafkalogIOError | None = None
    #: client telemetry (KIP-714) received and re-exported while the metrics endpoint is on
    #: (:mod:`kafkalog.server.metrics.client_metrics`); None: answered as Kafka without a plugin
    client_metrics: ClientMetricsManager | None = None
    #: the figures counted on the request path while metrics are on (:mod:`kafkalog.server.metrics`);
    #: None, the default, counts nothing
    metrics: BrokerMetrics | None = None

    def __init__(self, manager: LogManager, config: ServerConfig, advertised: Listener) -> None:
        self.manager = manager
        self.config = config
        self.advertised = advertised
        self.node_id = config.node_id
        #: ``broker.rack`` (None: no rack)
        self.rack = config.rack
        self.cluster_id = manager.meta_properties.cluster_id or config.values["cluster.id"] or None
        self.topic_ids = TopicIds(manager)
        #: the topics of Metadata answers, kept encoded while each topic's metadata stays
        self.metadata_entries = MetadataEntries()
        #: (the manager's topics stamp, the topic image made then): :meth:`topic_images`
        self._topic_images: tuple[int, Mapping[str, TopicImage]] | None = None
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        self.producer_ids = adopt_legacy_reservation(manager.data_dir)
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        #: requests waiting for committed topics' partitions to be made (:meth:`wait_made`)
        self._made_waiters: list[tuple[dict[str, int], asyncio.Future[None]]] = []
        self._made_loop: asyncio.AbstractEventLoop | None = None
        manager.on_partitions_made = self._partitions_made
        v = config.values
        self.offsets = OffsetsStore(manager,
                                    num_partitions=config.broker.get("offsets.topic.num.partitions"),
                                    leader_epoch=self.leader_epoch)
        self.groups = GroupCoordinator(
            self.offsets.store_group_metadata,
            min_session_timeout_ms=v["group.min.session.timeout.ms"],
            max_session_timeout_ms=v["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=v["group.initial.rebalance.delay.ms"],
            max_size=v["group.max.size"])
        for group in self.offsets.groups():
            value = self.offsets.group_metadata(group)
            if value is not None:
                self.groups.restore(group, value)
        from kafkalog.coordinator.group_config import GroupConfigStore
        #: the per-group configs (the GROUP config resource) of every group protocol
        self.group_configs = GroupConfigStore(self.manager.data_dir, config.share_group, config.group_bounds)
        #: the consumer group protocol's groups (KIP-848), restored from their records
        self.consumer_groups = ConsumerGroupCoordinator(config.consumer_group, self.offsets.store_records,
                                                        self.topic_images, group_configs=self.group_configs)
        self.consumer_groups.describable = self._describable_topics
        for group, records in self.offsets.consumer_group_records().items():
            self.consumer_groups.restore(group, records)
        from kafkalog.server.coordinator.group_migration import GroupMigration
        self.group_migration = GroupMigration(self)
        b = config.broker
        #: the finalized feature levels (UpdateFeatures changes them; ApiVersions advertises them)
        self.features = FeatureLevels(manager.data_dir)
        # loading __transaction_state finishes the decisions a crash left half-written
        self.transactions = TransactionCoordinator(
            manager, self.producer_ids, num_partitions=b.get("transaction.state.log.num.partitions"),
            max_timeout_ms=b.get("transaction.max.timeout.ms"),
            on_complete=self.offsets.complete_transaction, marker_leader_epoch=self.leader_epoch,
            transaction_version=self.features.level("transaction.version"))
        self.transactions.abort_timed_out_transactions()
        self._txn_abort_interval_s = b.get("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        for _tp, log in manager.logs():
            self.lead(log)
        self._init_share_groups(config)
        #: streams groups (KIP-1071), restored from their records
        self.streams_groups = StreamsGroupCoordinator(
            config.streams_group, self.offsets.store_records, self._topic_image, group_configs=self.group_configs,
            other_group_exists=lambda g: g in self.consumer_groups.groups or g in self.groups.groups
            or g in self.share_groups.groups)
        for group, srecords in self.offsets.streams_group_records().items():
            self.streams_groups.restore(group, srecords)
        #: the internal topics being created for streams groups, and those creations
        self.streams_groups_creating: set[str] = set()
        self.streams_groups_tasks: set[asyncio.Task[None]] = set()
        #: ``authorizer.class.name``'s authorizer with the data directory's ACLs (None: no authorizer)
        self.acl_store = AclStore(manager.data_dir)
        self.authorizer = StandardAuthorizer.from_config(config.values, ()) \
            if config.values["authorizer.class.name"] else None
        if self.authorizer is not None:
            self.authorizer.add(self.acl_store.load())
        #: the SCRAM credentials of AlterUserScramCredentials (mechanism -> user -> credential), stored in
        #: the data directory; SASL SCRAM handshakes look them up before sasl.credentials.file's
        self.scram_store = ScramStore(manager.data_dir)
        self.scram_credentials = self.scram_store.load()
        #: the client quotas of AlterClientQuotas, stored in the data directory, and their rates
        self.client_quotas = ClientQuotas(QuotaStore(manager.data_dir), v["quota.window.num"],
                                          v["quota.window.size.seconds"])

    def change_scram_credentials(self, add: Iterable[tuple[str, str, ScramCredential]],
                                 remove: Iterable[tuple[str, str]]) -> None:
        """Apply AlterUserScramCredentials: stored first (a failed write changes nothing), then in force."""
        new = {mech: dict(users) for mech, users in self.scram_credentials.items()}
        for mech, user in remove:
            new[mech].pop(user, None)
        for mech, user, cred in add:
            new.setdefault(mech, {})[user] = cred
        new = {mech: users for mech, users in new.items() if users}
        self.scram_store.save(new)
        self.scram_credentials.clear()
        self.scram_credentials.update(new)

    def change_features(self, levels: Mapping[str, int]) -> None:
        """Apply UpdateFeatures: the levels stored, then advertised and in force (the transaction
        coordinator's transaction.version; the group APIs read theirs at each request)."""
        self.features.change(levels)
        self.transactions.level = self.features.level("transaction.version")

    def change_acls(self, add: Iterable[AclBinding] = (), remove: Iterable[AclBinding] = ()) -> None:
        """Apply CreateAcls/DeleteAcls to the authorizer and store the result before it is answered."""
        assert self.authorizer is not None
        add, remove = list(add), set(remove)
        # stored first: a failed write (KafkalogIOError) leaves the ACLs in force as they were
        self.acl_store.save(sorted((set(self.authorizer.acls()) | set(add)) - remove))
        self.authorizer.add(add)
        self.authorizer.remove(remove)

    def operations(self, resource_type: int, name: str, requested: bool) -> int:
        """The ``authorized_operations`` answer for one resource (:mod:`.acl_operations`)."""
        auth = self.authorizer
        if auth is None or not requested:
            return authorized_operations(resource_type, requested)
        session = current_session.get()
        if resource_type == CLUSTER and not auth.authorize(session, DESCRIBE, CLUSTER, name):
            return 0        # Kafka: the cluster's operations only for who may describe it
        return authorized_operations(resource_type, True,
                                     lambda op: auth.authorize(session, op, resource_type, name))

    def _describable_topics(self, names: Iterable[str]) -> list[str]:
        """The topics of ``names`` the session being served may DESCRIBE (a regex subscription's)."""
        return [n for n in names if self.authorize(DESCRIBE, TOPIC, n)]

    def authorize(self, op: int, resource_type: int, name: str) -> bool:
        """Whether the session being served may do ``op`` on the resource (always, without an authorizer)."""
        auth = self.authorizer
        return auth is None or auth.authorize(current_session.get(), op, resource_type, name)

    def _init_share_groups(self, config: ServerConfig) -> None:
        """Share groups (KIP-932): their configs, the share coordinator's state store
        (``__share_group_state``), the share partitions, share sessions and the groups, restored
        from their records."""
        from kafkalog.coordinator.share_partition_manager import SharePartitionManager
        from kafkalog.coordinator.share_state_store import ShareStateStore
        from kafkalog.server.coordinator.share_group import ShareGroupCoordinator
        share = config.share_group
        self.share_state = ShareStateStore(
            self.manager, num_partitions=config.values["share.coordinator.state.topic.num.partitions"],
            updates_per_snapshot=config.values["share.coordinator.snapshot.update.records.per.snapshot"])
        self.share_partitions = SharePartitionManager(self.manager, self.share_state, self.topic_ids.of,
                                                      self.group_configs.settings)
        self.share_sessions = ShareSessionCache(share.max_share_sessions)
        self._share_waiters: dict[str, set[asyncio.Future[None]]] = {}

        def initialize(group: str, epoch: int, partitions: list[tuple[uuid.UUID, int]]) -> None:
            self.share_state.initialize([(group, t, p, epoch, -1) for t, p in partitions])

        def member_left(group: str, member: str) -> None:
            # Kafka's group coordinator does not touch the share partitions when a member is fenced
            # or leaves: its records stay acquired until their locks expire, its share session is
            # closed by the client (final epoch) or by its connection's close
            self.notify_share(group)

        self.share_groups = ShareGroupCoordinator(
            share, self.group_configs, self.offsets.store_records, self.topic_images, initialize, member_left,
            other_group_exists=lambda g: g in self.consumer_groups.groups or g in self.groups.groups
            or self.offsets.has_group(g) and not self.offsets.is_share_group(g))
        for group, records in self.offsets.share_group_records().items():
            self.share_groups.restore(group, records)

    def group_exists(self, group: str) -> bool:
        """A group of any kind has this id."""
        return (group in self.groups.groups or group in self.consumer_groups.groups
                or group in self.share_groups.groups or group in self.streams_groups.groups
                or self.offsets.has_group(group))

    def delete_share_group(self, group: str) -> int:
        """DeleteGroups of a share group: its records and its share partitions' state."""
        err = self.share_groups.delete(group)
        if err == 0:
            self.share_state.delete([(group, t, p) for (t, p) in self.share_state.partitions_of_group(group)])
            self.share_partitions.forget(group)
            self.offsets.delete_group(group)
            logger.info("deleted share group %s", group)
        return err

    def add_share_waiter(self, group: str, fut: asyncio.Future[None]) -> None:
        self._share_waiters.setdefault(group, set()).add(fut)

    def remove_share_waiter(self, group: str, fut: asyncio.Future[None]) -> None:
        s = self._share_waiters.get(group)
        if s is not None:
            s.discard(fut)
            if not s:
                del self._share_waiters[group]

    def notify_share(self, group: str) -> None:
        """Records of ``group`` became available again (released, lock expired): wake its fetches."""
        for fut in list(self._share_waiters.get(group, ())):
            if not fut.done():
                fut.set_result(None)

    @property
    def advertised(self) -> Listener:
        """The endpoint advertised to the client being served: its listener's (see
        :data:`current_listener`), else the first listener's."""
        name = current_listener.get()
        ep = self._endpoints.get(name) if name is not None else None
        return ep if ep is not None else self._default_endpoint

    @advertised.setter
    def advertised(self, value: Listener) -> None:
        self._default_endpoint = value

    def set_endpoints(self, endpoints: Mapping[str, Listener]) -> None:
        """Every listener's advertised endpoint (the first one becomes the default)."""
        self._endpoints = dict(endpoints)
        if endpoints:
            self._default_endpoint = next(iter(endpoints.values()))

    def _topic_image(self, topic: str) -> TopicImage | None:
        """One topic's id and partition count, None when it does not exist."""
        if not self.manager.has_topic(topic):
            return None
        return TopicImage(self.topic_ids.of(topic), len(self.manager.partitions_of(topic)))

    def topic_images(self) -> Mapping[str, TopicImage]:
        """Every topic with its id and partition count (the consumer groups' view of the metadata):
        the internal topics too, as in Kafka's metadata image (a regex such as ``.*`` subscribes to
        ``__consumer_offsets``). The same mapping while no topic changed (the manager's
        :meth:`~kafkalog.log.manager.LogManager.topics_stamp`): a heartbeat looks it up, not a
        walk over every topic and partition; a changed image is a new mapping."""
        stamp = self.manager.topics_stamp()
        cached = self._topic_images
        if cached is not None and cached[0] == stamp:
            return cached[1]
        images = MappingProxyType({t: TopicImage(self.topic_ids.of(t), len(self.manager.partitions_of(t)))
                                   for t in self.manager.topics()})
        self._topic_images = (stamp, images)
        return images

    # --- logs and topics ----------------------------------------------------------------------

    def log(self, topic: str, partition: int) -> Log | None:
        """The open log of a partition, None when the topic or partition does not exist (or is
        not made yet: :meth:`missing_partition_error`)."""
        return self.manager.find_log(topic, partition)

    @staticmethod
    def leader_epoch(log: Log | None) -> int:
        """The partition's leader epoch, as Metadata, ListOffsets and the batches this node appends
        carry it: this node has led every partition since it was created, so its epoch is the
        latest of the partition's ``leader-epoch-checkpoint`` (a directory Kafka wrote may be past
        0), else 0, a new partition's first epoch in Kafka."""
        return log.current_leader_epoch() if log is not None else 0

    def lead(self, log: Log) -> None:
        """Become the partition's leader as Kafka's ``Partition.makeLeader`` does: its leader epoch
        starts at the log end offset in ``leader-epoch-checkpoint`` unless already recorded (so
        ListOffsets EARLIEST of an empty partition answers epoch 0, as Kafka's does). The entry is
        written without fsync (a new partition had three fsyncs, this one of them): a file lost
        to a power cut is the entry this method writes again when the partition is next loaded,
        and the log's flush fsyncs it with the records it covers."""
        cache = log.leader_epoch_cache
        if cache is not None and cache.latest_epoch() is None:
            try:
                cache.assign(self.leader_epoch(log), log.log_end_offset, sync=False)
            except KafkalogError as e:
                logger.warning("cannot record the leader epoch of %s: %s", log.dir, e)

    def log_dir_failed(self, tp: TopicPartition, error: KafkalogIOError) -> None:
        """Take the data directory offline after a write to ``tp`` failed, logging it once: as in
        Kafka, the state of a log after a failed write is unknown until it is recovered on restart
        (a single-node Kafka halts; this broker keeps serving reads and answers every produce with
        KAFKA_STORAGE_ERROR)."""
        if self.log_dir_failure is None:
            self.log_dir_failure = error
            logger.error("data directory %s is offline: a write to %s failed: %s; every produce now "
                         "gets KAFKA_STORAGE_ERROR, restart the broker once the cause is fixed",
                         self.manager.data_dir, tp, error)

    def create_topic(self, topic: str, partitions: int, configs: Mapping[str, Any]) -> uuid.UUID:
        """Create a topic (validated names, configs and partition count); returns its ID."""
        tid = self.create_topic_partitions(topic, partitions, configs)
        self.consumer_groups.topics_changed([topic])
        return tid

    def create_topic_partitions(self, topic: str, partitions: int, configs: Mapping[str, Any]) -> uuid.UUID:
        """:meth:`create_topic` without telling the consumer groups (the event loop's state): the
        part CreateTopics runs on a worker thread, the topic seen whole once its partitions are
        ready and led."""
        validate_topic(topic)
        if self.log_dir_failure is not None:        # an offline directory takes no new partition
            raise KafkalogIOError(f"cannot create topic {topic}: the data directory is offline "
                                  f"({self.log_dir_failure.message})", file=self.manager.data_dir)
        try:
            self.manager.create_topic(topic, partitions, dict(configs) or None, prepare=self.lead)
        except KafkalogIOError as e:               # (a full disk: no room for its first segment)
            self.log_dir_failed(TopicPartition(topic, 0), e)
            raise
        tid = self.topic_ids.of(topic)
        heap.settle()       # (a worker thread's creations: each topic's objects settled as it is made)
        logger.info("created topic %s with %d partition(s), id %s, configs %s", topic, partitions,
                    tid, dict(configs))
        return tid

    def commit_topics(self, topics: Sequence[tuple[str, int, Mapping[str, Any]]]
                      ) -> list[uuid.UUID | KafkalogError]:
        """Each ``(topic, partitions, configs)`` of a CreateTopics request committed, its id or its
        error, as Kafka's controller answers once the topic's records are committed: the topic
        exists, with every partition led in Metadata, and its partitions' logs are made afterwards
        on a thread (:meth:`LogManager.commit_topics`); one wait on the disk for the request. A
        request of at most :data:`SMALL_REQUEST` partitions is made whole before it is answered
        (:meth:`create_topics_partitions`: one wait on the disk too, and no moment when the topic
        is listed and a partition not made), and so is an internal topic (its coordinator reads
        its logs)."""
        if self.log_dir_failure is not None:        # an offline directory takes no new partition
            err = KafkalogIOError(f"cannot create topics: the data directory is offline "
                                  f"({self.log_dir_failure.message})", file=self.manager.data_dir)
            return [err] * len(topics)
        if sum(n for _t, n, _c in topics) <= SMALL_REQUEST:
            return self.create_topics_partitions(topics)
        out: list[uuid.UUID | KafkalogError | None] = [None] * len(topics)
        committed = []
        for i, (topic, partitions, configs) in enumerate(topics):
            if topic in INTERNAL_TOPICS:
                try:
                    out[i] = self.create_topic_partitions(topic, partitions, configs)
                except KafkalogError as e:
                    out[i] = e
            else:
                committed.append(i)
        ids = self.manager.commit_topics([(topics[i][0], topics[i][1], dict(topics[i][2]) or None)
                                          for i in committed], prepare=self.lead, done=self._made,
                                         leader_epoch=self.leader_epoch(None))
        for i, tid in zip(committed, ids):
            out[i] = tid
            if isinstance(tid, KafkalogIOError):
                self.log_dir_failed(TopicPartition(topics[i][0], 0), tid)
            elif not isinstance(tid, KafkalogError):
                logger.info("committed topic %s with %d partition(s), id %s, configs %s", topics[i][0],
                            topics[i][1], tid, dict(topics[i][2]))
        return [o for o in out if o is not None]     # (each one set)

    def create_topics_partitions(self, topics: Sequence[tuple[str, int, Mapping[str, Any]]]
                                 ) -> list[uuid.UUID | KafkalogError]:
        """:meth:`create_topic_partitions` of each ``(topic, partitions, configs)`` (a CreateTopics
        request's of at most :data:`SMALL_REQUEST` partitions), the id or the error of each; each
        topic's fsyncs in one round. (One round for every topic of a request, 7b65642, was measured
        slower at 10,000 partitions: medians 102.7 s against 55.2 s over 3 alternating pairs.)"""
        out: list[uuid.UUID | KafkalogError] = []
        for topic, partitions, configs in topics:
            try:
                out.append(self.create_topic_partitions(topic, partitions, configs))
            except KafkalogError as e:
                out.append(e)
        return out

    def _made(self, topic: str, error: KafkalogError | None) -> None:
        """A committed topic's partitions are all made (or their creation failed: a disk error
        takes the directory offline, as a failed append does)."""
        if isinstance(error, KafkalogIOError):
            self.log_dir_failed(TopicPartition(topic, 0), error)
        elif error is None:
            heap.settle()       # (the topic's objects settled once it is made)
            logger.info("made the partitions of topic %s", topic)

    def missing_partition_error(self, topic: str, partition: int) -> int:
        """The error of a partition without a log: NOT_LEADER_OR_FOLLOWER while a committed
        topic's partition is being made (Kafka's broker: in the metadata, not a replica yet; the
        client retries), else UNKNOWN_TOPIC_OR_PARTITION."""
        if self.manager.partition_pending(topic, partition):
            return error_codes.NOT_LEADER_OR_FOLLOWER
        return error_codes.UNKNOWN_TOPIC_OR_PARTITION

    def pending_asked(self, asked: Iterable[tuple[str | None, int]]) -> dict[str, int]:
        """Topic -> the highest partition of ``asked`` that is committed and not made yet; empty
        at once (``asked`` not read) when no topic is being made."""
        out: dict[str, int] = {}
        if not self.manager.creating():
            return out
        for topic, p in asked:
            if topic is not None and p > out.get(topic, -1) and self.manager.partition_pending(topic, p):
                out[topic] = p
        return out

    async def wait_made(self, needed: Mapping[str, int], timeout_s: float) -> None:
        """Until the partitions ``needed`` names (topic -> highest partition: a topic's partitions
        are made in order) are made, or ``timeout_s`` passed; the event loop serves others
        meanwhile (woken by the creating thread after each chunk it made)."""
        loop = asyncio.get_running_loop()
        self._made_loop = loop
        entry = (dict(needed), loop.create_future())
        self._made_waiters.append(entry)
        self._wake_made()                   # (made meanwhile)
        try:
            await asyncio.wait_for(asyncio.shield(entry[1]), max(timeout_s, 0.0))
        except TimeoutError:
            pass
        finally:
            self._made_waiters.remove(entry)

    def _partitions_made(self) -> None:
        """(The creating thread, after each chunk.)"""
        loop = self._made_loop
        if loop is not None and self._made_waiters:
            try:
                loop.call_soon_threadsafe(self._wake_made)
            except RuntimeError:            # the loop is closed: nobody waits
                pass

    def _wake_made(self) -> None:
        for needed, fut in self._made_waiters:
            if not fut.done() and not any(self.manager.partition_pending(t, p) for t, p in needed.items()):
                fut.set_result(None)

    def auto_create(self, topic: str) -> bool:
        """Kafka's ``auto.create.topics.enable`` for a topic a client asked for; True if created."""
        if not self.config.auto_create_topics_enable or topic in INTERNAL_TOPICS:
            return False
        try:
            self.create_topic(topic, self.config.num_partitions, {})
        except InvalidTopicError:
            return self.manager.has_topic(topic)
        return True

    # --- fetch waiters ------------------------------------------------------------------------

    def add_waiter(self, tps: Iterable[TopicPartition], fut: asyncio.Future[None]) -> None:
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)

    def remove_waiter(self, tps: Iterable[TopicPartition], fut: asyncio.Future[None]) -> None:
        for tp in tps:
            s = self._waiters.get(tp)
            if s is not None:
                s.discard(fut)
                if not s:
                    del self._waiters[tp]

    def notify_append(self, tp: TopicPartition) -> None:
        """Wake the fetches waiting on ``tp`` (called after every append)."""
        waiters = self._waiters.get(tp)
        if waiters:
            for fut in list(waiters):
                if not fut.done():
                    fut.set_result(None)

    # --- dispatch -----------------------------------------------------------------------------

    async def _run_group_timer(self) -> None:
        loop = asyncio.get_running_loop()
        next_txn_check = loop.time() + self._txn_abort_interval_s
        while True:
            await asyncio.sleep(GROUP_TICK_S)
            try:
                self.groups.tick()
            except Exception:
                logger.exception("group coordinator timer failed")
            try:
                self.consumer_groups.tick()
            except Exception:
                logger.exception("consumer group coordinator timer failed")
            try:
                self.streams_groups.tick()
            except Exception:
                logger.exception("streams group coordinator timer failed")
            try:
                self.share_groups.tick()
                if self.share_partitions.expire_locks():
                    for group in list(self._share_waiters):
                        self.notify_share(group)
            except Exception:
                logger.exception("share group timer failed")
            if loop.time() >= next_txn_check:
                next_txn_check = loop.time() + self._txn_abort_interval_s
                try:
                    aborted = self.transactions.abort_timed_out_transactions()
                except Exception:
                    logger.exception("aborting timed-out transactions failed")
                else:
                    for tid in aborted:
                        logger.info("aborted transaction of transactional id %r: open longer than "
                                    "its transaction.timeout.ms", tid)

    async def stop_timers(self) -> None:
        timer, self._group_timer = self._group_timer, None
        if timer is not None:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)

    def start_timers(self) -> None:
        """Start the group coordinator's clock (once; called with each request served, from the
        event loop)."""
        if self._group_timer is None:
            self._group_timer = asyncio.get_running_loop().create_task(self._run_group_timer())

    def response(self, request: Request, values: Mapping[str, Any]) -> Any:
        """The kio response entity of ``request``'s API and version from plain ``values``."""
        return build(response_schema(request.api_key, request.api_version), values)

