"""Kafka 4.4's documentation of its topic and broker configuration keys, as its DescribeConfigs
answers them with ``include_documentation`` (Kafka's ``ConfigDef`` doc strings), written by
``python -m tests.kafka44.config_docs`` from a running Kafka 4.4; only the broker keys kafkalog
knows are kept, and not those Kafka documents as their topic key (``log.cleanup.policy``: the text
of ``cleanup.policy``). kafkalog's own keys are documented in :mod:`kafkalog.server.handlers.config_admin`."""

TOPIC_DOCS: dict[str, str] = {
    'cleanup.policy': (
        'This config designates the retention policy to use on log segments. The "delete" policy (which '
        'is the default) will discard old segments when their retention time or size limit has been '
        'reached. The "compact" policy will enable <a '
        'href="https://kafka.apache.org/documentation/#compaction">log compaction</a>, which retains the '
        'latest value for each key. It is also possible to specify both policies in a comma-separated '
        'list (e.g. "delete,compact"). In this case, old segments will be discarded per the retention '
        'time and size configuration, while retained segments will be compacted. An empty list means '
        'infinite retention - no cleanup policies will be applied and log segments will be retained '
        'indefinitely. Note that with remote storage enabled, local retention limits '
        '(log.local.retention.ms and log.local.retention.bytes) are still applied to local segments.'
    ),
    'compression.gzip.level': (
        'The compression level to use if compression.type is set to <code>gzip</code>.'
    ),
    'compression.lz4.level': (
        'The compression level to use if compression.type is set to <code>lz4</code>.'
    ),
    'compression.type': (
        'Specify the final compression type for a given topic. This configuration accepts the standard '
        "compression codecs ('gzip', 'snappy', 'lz4', 'zstd'). It additionally accepts 'uncompressed' "
        "which is equivalent to no compression; and 'producer' which means retain the original "
        'compression codec set by the producer.'
    ),
    'compression.zstd.level': (
        'The compression level to use if compression.type is set to <code>zstd</code>.'
    ),
    'delete.retention.ms': (
        'The amount of time to retain delete tombstone markers for <a '
        'href="https://kafka.apache.org/documentation/#compaction">log compacted</a> topics. This '
        'setting also gives a bound on the time in which a consumer must complete a read if they begin '
        'from offset 0 to ensure that they get a valid snapshot of the final stage (otherwise delete '
        'tombstones may be collected before they complete their scan).'
    ),
    'errors.deadletterqueue.group.enable': (
        'Enable this topic to be used as a dead-letter queue for share groups. When set to '
        '<code>true</code>, share groups can write undeliverable records to this topic. When set to '
        '<code>false</code> (the default), attempts to use this topic as a DLQ will be rejected.'
    ),
    'file.delete.delay.ms': (
        'The time to wait before deleting a file from the filesystem'
    ),
    'flush.messages': (
        'This setting allows specifying an interval at which we will force an fsync of data written to '
        'the log. For example if this was set to 1 we would fsync after every message; if it were 5 we '
        'would fsync after every five messages. In general we recommend you not set this and use '
        "replication for durability and allow the operating system's background flush capabilities as it "
        'is more efficient. This setting can be overridden on a per-topic basis (see <a '
        'href="https://kafka.apache.org/documentation/#topicconfigs">the per-topic configuration '
        'section</a>).'
    ),
    'flush.ms': (
        'This setting allows specifying a time interval at which we will force an fsync of data written '
        'to the log. For example if this was set to 1000 we would fsync after 1000 ms had passed. Note '
        'that this setting depends on the broker-level configuration '
        '<code>log.flush.scheduler.interval.ms</code>, which controls how frequently the flush check '
        'occurs. In general we recommend you not set this and use replication for durability and allow '
        "the operating system's background flush capabilities as it is more efficient."
    ),
    'follower.replication.throttled.replicas': (
        'A list of replicas for which log replication should be throttled on the follower side. The list '
        'should describe a set of replicas in the form '
        "[PartitionId]:[BrokerId],[PartitionId]:[BrokerId]:... or alternatively the wildcard '*' can be "
        'used to throttle all replicas for this topic.'
    ),
    'index.interval.bytes': (
        'This setting controls how frequently Kafka adds entries to its offset index and, conditionally, '
        'to its time index. The default setting ensures that we index a message roughly every 4096 '
        'bytes. More frequent indexing allows reads to jump closer to the exact position in the log but '
        "results in larger index files. You probably don't need to change this.<p> Note: the time index "
        'will be inserted only when the timestamp is greater than the last indexed timestamp.</p>'
    ),
    'leader.replication.throttled.replicas': (
        'A list of replicas for which log replication should be throttled on the leader side. The list '
        'should describe a set of replicas in the form '
        "[PartitionId]:[BrokerId],[PartitionId]:[BrokerId]:... or alternatively the wildcard '*' can be "
        'used to throttle all replicas for this topic.'
    ),
    'local.retention.bytes': (
        'The maximum size of local log segments that can grow for a partition before it deletes the old '
        'segments. Default value is -2, it represents <code>retention.bytes</code> value to be used. The '
        'effective value should always be less than or equal to <code>retention.bytes</code> value.'
    ),
    'local.retention.ms': (
        'The number of milliseconds to keep the local log segment before it gets deleted. Default value '
        'is -2, it represents <code>retention.ms</code> value is to be used. The effective value should '
        'always be less than or equal to <code>retention.ms</code> value.'
    ),
    'max.compaction.lag.ms': (
        'The maximum time a message will remain ineligible for compaction in the log. Only applicable '
        'for logs that are being compacted. Because the active segment is never compacted, for compacted '
        'topics this value also drives active segment rolling: the effective time-based roll threshold '
        'is the smaller of <code>segment.ms</code> and <code>max.compaction.lag.ms</code>. Active '
        'segment rolling moves records out of the active segment, after which '
        '<code>max.compaction.lag.ms</code> makes them eligible for compaction even if '
        '<code>min.cleanable.dirty.ratio</code> is not met. See <a '
        'href="https://kafka.apache.org/documentation/#compaction">log compaction</a>.'
    ),
    'max.decompressed.message.bytes': (
        'The maximum decompressed size, in bytes, of a single record the broker will accept; larger '
        'records are rejected with an <code>InvalidRecordException</code>. It is enforced where the '
        'broker decompresses records: produce validation of compressed batches, log compaction, and '
        'offset lookups by timestamp or max timestamp against the local log or remote storage. Unlike '
        '<code>max.message.bytes</code>, which bounds the compressed batch on the wire, this bounds the '
        'decompressed size of an individual record. Lowering it below the size of already-stored records '
        'makes compaction and timestamp offset lookups of affected partitions fail until it is raised '
        'again. The default imposes no limit beyond the largest record the broker could allocate anyway; '
        'set a smaller value to enforce a per-record cap.'
    ),
    'max.message.bytes': (
        'The largest record batch size allowed by Kafka (after compression if compression is enabled).'
    ),
    'message.timestamp.after.max.ms': (
        'This configuration sets the allowable timestamp difference between the message timestamp and '
        "the broker's timestamp. The message timestamp can be later than or equal to the broker's "
        'timestamp, with the maximum allowable difference determined by the value set in this '
        'configuration. If message.timestamp.type=CreateTime, the message will be rejected if the '
        'difference in timestamps exceeds this specified threshold. This configuration is ignored if '
        'message.timestamp.type=LogAppendTime.'
    ),
    'message.timestamp.before.max.ms': (
        "This configuration sets the allowable timestamp difference between the broker's timestamp and "
        "the message timestamp. The message timestamp can be earlier than or equal to the broker's "
        'timestamp, with the maximum allowable difference determined by the value set in this '
        'configuration. If message.timestamp.type=CreateTime, the message will be rejected if the '
        'difference in timestamps exceeds this specified threshold. This configuration is ignored if '
        'message.timestamp.type=LogAppendTime.'
    ),
    'message.timestamp.type': (
        'Define whether the timestamp in the message is message create time or log append time.'
    ),
    'min.cleanable.dirty.ratio': (
        'This configuration controls how frequently the log compactor will attempt to clean the log '
        '(assuming <a href="https://kafka.apache.org/documentation/#compaction">log compaction</a> is '
        'enabled). By default we will avoid cleaning a log where more than 50% of the log has been '
        'compacted. This ratio bounds the maximum space wasted in the log by duplicates (at 50% at most '
        '50% of the log could be duplicates). A higher ratio will mean fewer, more efficient cleanings '
        'but will mean more wasted space in the log. If the max.compaction.lag.ms or the '
        'min.compaction.lag.ms configurations are also specified, then the log compactor considers the '
        'log to be eligible for compaction as soon as either: (i) the dirty ratio threshold has been met '
        'and the log has had dirty (uncompacted) records for at least the min.compaction.lag.ms '
        'duration, or (ii) if the log has had dirty (uncompacted) records for at most the '
        'max.compaction.lag.ms period.'
    ),
    'min.compaction.lag.ms': (
        'The minimum time a message will remain uncompacted in the log. Only applicable for logs that '
        'are being compacted.'
    ),
    'min.insync.replicas': (
        'Specifies the <i>minimum</i> number of in-sync replicas (including the leader) required for a '
        'write to succeed when a producer sets <code>acks</code> to "all" (or "-1"). In the '
        '<code>acks=all</code> case, every in-sync replica must acknowledge a write for it to be '
        'considered successful. E.g., if a topic has <code>replication.factor</code> of 3 and the ISR '
        'set includes all three replicas, then all three replicas must acknowledge an '
        '<code>acks=all</code> write for it to succeed, even if <code>min.insync.replicas</code> happens '
        'to be less than 3. If <code>acks=all</code> and the current ISR set contains fewer than '
        '<code>min.insync.replicas</code> members, then the producer will raise an exception (either '
        '<code>NotEnoughReplicas</code> or <code>NotEnoughReplicasAfterAppend</code>).<br> Regardless of '
        'the <code>acks</code> setting, the messages will not be visible to the consumers until they are '
        'replicated to all in-sync replicas and the <code>min.insync.replicas</code> condition is '
        'met.<br> When used together, <code>min.insync.replicas</code> and <code>acks</code> allow you '
        'to enforce greater durability guarantees. A typical scenario would be to create a topic with a '
        'replication factor of 3, set <code>min.insync.replicas</code> to 2, and produce with '
        '<code>acks</code> of "all". This ensures that a majority of replicas must persist a write '
        "before it's considered successful by the producer and it's visible to consumers.<p>Note that "
        'when the Eligible Leader Replicas feature is enabled, the semantics of this config changes. '
        'Please refer to <a href="https://kafka.apache.org/documentation/#eligible_leader_replicas">the '
        'ELR section</a> for more info.</p>'
    ),
    'preallocate': (
        'True if we should preallocate the file on disk when creating a new log segment.'
    ),
    'remote.copy.lag.bytes': (
        'Controls one of the two upload eligibility checks (time and size) for copying segments to '
        'remote storage. A non-active segment is upload-eligible when either this size-based check or '
        '<code>remote.copy.lag.ms</code> is satisfied. When set to 0, uploads are immediately eligible '
        'regardless of lag checks. When set to a positive value (bytes), the segment is size-eligible '
        'once bytes of newer local log data after that segment reaches this value. When set to -1, this '
        'value is derived from effective local retention size (<code>local.retention.bytes</code>). If '
        'that effective local retention size is unlimited (-1), this size-based check is not applied. A '
        'positive value should not exceed effective local retention size unless local retention is '
        'unlimited (-1).'
    ),
    'remote.copy.lag.ms': (
        'Controls one of the two upload eligibility checks (time and size) for copying segments to '
        'remote storage. A non-active segment is upload-eligible when either this time-based check or '
        '<code>remote.copy.lag.bytes</code> is satisfied. When set to 0, uploads are immediately '
        'eligible regardless of lag checks. When set to a positive value (ms), the segment is '
        'time-eligible once elapsed time since its latest record reaches this value. When set to -1, '
        'this value is derived from effective local retention time (<code>local.retention.ms</code>). If '
        'that effective local retention time is unlimited (-1), this time-based check is not applied. A '
        'positive value should not exceed effective local retention time unless local retention is '
        'unlimited (-1).'
    ),
    'remote.log.copy.disable': (
        'Determines whether tiered data for a topic should become read only, and no more data uploading '
        'on a topic. Once this config is set to true, the local retention configuration (i.e. '
        'local.retention.ms/bytes) becomes irrelevant, and all data expiration follows the topic-wide '
        'retention configuration(i.e. retention.ms/bytes).'
    ),
    'remote.log.delete.on.disable': (
        'Determines whether tiered data for a topic should be deleted after tiered storage is disabled '
        'on a topic. This configuration should be enabled when trying to set '
        '<code>remote.storage.enable</code> from true to false'
    ),
    'remote.storage.enable': (
        'To enable tiered storage for a topic, set this configuration to true. To disable tiered storage '
        'for a topic that has it enabled, set this configuration to false. When disabling, you must also '
        'set <code>remote.log.delete.on.disable</code> to true.'
    ),
    'retention.bytes': (
        'This configuration controls the maximum size a partition (which consists of log segments) can '
        'grow to before we will discard old log segments to free up space if we are using the "delete" '
        'retention policy. By default there is no size limit only a time limit. Since this limit is '
        'enforced at the partition level, multiply it by the number of partitions to compute the topic '
        'retention in bytes. Additionally, retention.bytes configuration operates independently of '
        '"segment.ms" and "segment.bytes" configurations. Moreover, it triggers the rolling of new '
        'segment if the retention.bytes is configured to zero.'
    ),
    'retention.ms': (
        'This configuration controls the maximum time we will retain a log before we will discard old '
        'log segments to free up space if we are using the "delete" retention policy. This represents an '
        'SLA on how soon consumers must read their data. If set to -1, no time limit is applied. '
        'Additionally, retention.ms configuration operates independently of "segment.ms" and '
        '"segment.bytes" configurations. Moreover, it triggers the rolling of new segment if the '
        'retention.ms condition is satisfied.'
    ),
    'segment.bytes': (
        'This configuration controls the segment file size for the log. Retention and cleaning is always '
        'done a file at a time so a larger segment size means fewer files but less granular control over '
        'retention. The active segment is rolled once it reaches this size.'
    ),
    'segment.index.bytes': (
        'This configuration controls the size of the index that maps offsets to file positions. We '
        'preallocate this index file and shrink it only after log rolls. You generally should not need '
        'to change this setting.'
    ),
    'segment.jitter.ms': (
        'The maximum random jitter subtracted from the scheduled segment roll time to avoid thundering '
        'herds of segment rolling'
    ),
    'segment.ms': (
        'This configuration controls the period of time after which Kafka will force the log to roll '
        "even if the segment file isn't full to ensure that retention can delete or compact old data. "
        'This forces active segment rolling by time, even if the active segment has not reached '
        '<code>segment.bytes</code>. For compacted topics, <code>max.compaction.lag.ms</code> can '
        'trigger active segment rolling sooner: the effective time-based roll threshold is the smaller '
        'of <code>segment.ms</code> and <code>max.compaction.lag.ms</code>.'
    ),
    'unclean.leader.election.enable': (
        'Indicates whether to enable replicas not in the ISR set to be elected as leader as a last '
        'resort, even though doing so may result in data loss.<p>Note: In KRaft mode, when enabling this '
        'config dynamically, it needs to wait for the unclean leader electionthread to trigger election '
        'periodically (default is 5 minutes). Please run <code>kafka-leader-election.sh</code> with '
        '<code>unclean</code> option to trigger the unclean leader election immediately if needed.</p>'
    ),
}

BROKER_DOCS: dict[str, str] = {
    'advertised.listeners': (
        'Specifies the listener addresses that the Kafka brokers will advertise to clients and other '
        'brokers. The config is useful where the actual listener configuration <code>listeners</code> '
        'does not represent the addresses that clients should use to connect, such as in cloud '
        'environments. The addresses are published to and managed by the controller, the brokers pull '
        'these data from the controller as needed. In IaaS environments, this may need to be different '
        'from the interface to which the broker binds. If this is not set, the value for '
        '<code>listeners</code> will be used. Unlike <code>listeners</code>, it is not valid to '
        'advertise the 0.0.0.0 meta-address.\n Also unlike <code>listeners</code>, there can be '
        'duplicated ports in this property, so that one listener can be configured to advertise another '
        "listener's address. This can be useful in some cases where external load balancers are used."
    ),
    'authorizer.class.name': (
        'The fully qualified name of a class that implements '
        '<code>org.apache.kafka.server.authorizer.Authorizer</code> interface, which is used by the '
        'broker for authorization.'
    ),
    'auto.create.topics.enable': (
        'Enable auto creation of topic on the server.'
    ),
    'broker.id': (
        'The broker id for this server. This configuration is deprecated and will be removed in Apache '
        'Kafka 5.0. Please use <code>node.id</code> instead.'
    ),
    'broker.rack': (
        'Rack of the broker. This will be used in rack aware replication assignment for fault '
        'tolerance. Examples: <code>RACK1</code>, <code>us-east-1d</code>'
    ),
    'compression.gzip.level': (
        "The compression level to use if compression.type is set to 'gzip'."
    ),
    'compression.lz4.level': (
        "The compression level to use if compression.type is set to 'lz4'."
    ),
    'compression.zstd.level': (
        "The compression level to use if compression.type is set to 'zstd'."
    ),
    'connection.failed.authentication.delay.ms': (
        'Connection close delay on failed authentication: this is the time (in milliseconds) by which '
        'connection close will be delayed on authentication failure. This must be configured to be less '
        'than connections.max.idle.ms to prevent connection timeout.'
    ),
    'connections.max.idle.ms': (
        'Idle connections timeout: the server socket processor threads close the connections that idle '
        'more than this'
    ),
    'default.replication.factor': (
        'The default replication factor per topic. This configuration affects the following paths:<ul>  '
        '<li>1. Auto topic creation</li>  <li>2. Internal streams topic creation</li>  <li>3. Topic '
        'creation via <code>AdminClient#createTopics</code> when the replication factor is set to '
        '-1</li></ul><p>For (1), the value from the broker configuration is used only when it is '
        'explicitly set. If it is not explicitly configured on the broker, the value from the controller '
        'configuration is used.<br/>For (2) and (3), the value from the controller configuration is '
        'always used.</p>'
    ),
    'delete.topic.enable': (
        'When set to true, topics can be deleted by the admin client. When set to false, deletion '
        'requests will be explicitly rejected by the broker.'
    ),
    'fetch.max.bytes': (
        'The maximum number of bytes we will return for a fetch request. Must be at least 1024.'
    ),
    'group.consumer.assignment.interval.ms': (
        'The interval between assignment updates for a consumer group.'
    ),
    'group.consumer.assignors': (
        'The server side assignors as a list of either names for builtin assignors or full class names '
        'for customer assignors. The first one in the list is considered as the default assignor to be '
        'used in the case where the consumer does not specify an assignor. Changing the default assignor '
        'does not trigger a rebalance for existing groups; the new default takes effect on the next '
        'rebalance. The supported builtin assignors are: uniform, range.'
    ),
    'group.consumer.heartbeat.interval.ms': (
        'The heartbeat interval given to the members of a consumer group.'
    ),
    'group.consumer.max.assignment.interval.ms': (
        'The maximum interval between assignment updates for a consumer group.'
    ),
    'group.consumer.max.heartbeat.interval.ms': (
        'The maximum heartbeat interval for registered consumers.'
    ),
    'group.consumer.max.session.timeout.ms': (
        'The maximum allowed session timeout for registered consumers.'
    ),
    'group.consumer.max.size': (
        'The maximum number of consumers that a single consumer group can accommodate. This value will '
        'only impact groups under the CONSUMER group protocol. To configure the max group size when '
        'using the CLASSIC group protocol use group.max.size instead.'
    ),
    'group.consumer.migration.policy': (
        'The config that enables converting the non-empty classic group using the consumer embedded '
        'protocol to the non-empty consumer group using the consumer group protocol and vice versa; '
        'conversions of empty groups in both directions are always enabled regardless of this policy. '
        'bidirectional: both upgrade from classic group to consumer group and downgrade from consumer '
        'group to classic group are enabled, upgrade: only upgrade from classic group to consumer group '
        'is enabled, downgrade: only downgrade from consumer group to classic group is enabled, '
        'disabled: neither upgrade nor downgrade is enabled. In this mode a member using the classic '
        'protocol is not allowed to join or rejoin a non-empty consumer group; if a group is already '
        'mixed (for example because this policy was changed), its classic-protocol members are rejected '
        'when they next attempt to rejoin.'
    ),
    'group.consumer.min.assignment.interval.ms': (
        'The minimum interval between assignment updates for a consumer group.'
    ),
    'group.consumer.min.heartbeat.interval.ms': (
        'The minimum heartbeat interval for registered consumers.'
    ),
    'group.consumer.min.session.timeout.ms': (
        'The minimum allowed session timeout for registered consumers.'
    ),
    'group.consumer.session.timeout.ms': (
        'The timeout to detect client failures when using the consumer group protocol.'
    ),
    'group.coordinator.rebalance.protocols': (
        'This configuration is deprecated and will be removed in Kafka 5.0. The list of enabled '
        'rebalance protocols. In Kafka 5.0, all protocols will always be enabled and cannot be disabled '
        'via this configuration. Use feature versions (group.version, streams.version, share.version) '
        'managed by kafka-features.sh instead.'
    ),
    'group.initial.rebalance.delay.ms': (
        'The amount of time the group coordinator will wait for more consumers to join a new group '
        'before performing the first rebalance. A longer delay means potentially fewer rebalances, but '
        'increases the time until processing begins.'
    ),
    'group.max.session.timeout.ms': (
        'The maximum allowed session timeout for registered consumers. Longer timeouts give consumers '
        'more time to process messages in between heartbeats at the cost of a longer time to detect '
        'failures.'
    ),
    'group.max.size': (
        'The maximum number of consumers that a single consumer group can accommodate.'
    ),
    'group.min.session.timeout.ms': (
        'The minimum allowed session timeout for registered consumers. Shorter timeouts result in '
        'quicker failure detection at the cost of more frequent consumer heartbeating, which can '
        'overwhelm broker resources.'
    ),
    'group.share.assignment.interval.ms': (
        'The interval between assignment updates for a share group.'
    ),
    'group.share.assignors': (
        'The server-side assignors as a list of either names for built-in assignors or full class names '
        'for custom assignors. The list must contain only a single entry which is used by all groups. '
        'The supported built-in assignors are: simple.'
    ),
    'group.share.delivery.count.limit': (
        'The maximum number of delivery attempts for a record delivered to a share group.'
    ),
    'group.share.heartbeat.interval.ms': (
        'The heartbeat interval given to the members of a share group.'
    ),
    'group.share.max.assignment.interval.ms': (
        'The maximum interval between assignment updates for a share group.'
    ),
    'group.share.max.delivery.count.limit': (
        'The maximum value of a group configuration for the maximum number of delivery attempts for a '
        'record delivered to a share group.'
    ),
    'group.share.max.heartbeat.interval.ms': (
        'The maximum heartbeat interval for share group members.'
    ),
    'group.share.max.partition.max.record.locks': (
        'The maximum value of a group configuration for the record lock limit per share-partition.'
    ),
    'group.share.max.record.lock.duration.ms': (
        'The maximum value of a group configuration for record acquisition lock duration in milliseconds.'
    ),
    'group.share.max.session.timeout.ms': (
        'The maximum allowed session timeout for share group members.'
    ),
    'group.share.max.share.sessions': (
        'The maximum number of share sessions per broker.'
    ),
    'group.share.max.size': (
        'The maximum number of members that a single share group can accommodate.'
    ),
    'group.share.min.assignment.interval.ms': (
        'The minimum interval between assignment updates for a share group.'
    ),
    'group.share.min.delivery.count.limit': (
        'The minimum value of a group configuration for the maximum number of delivery attempts for a '
        'record delivered to a share group.'
    ),
    'group.share.min.heartbeat.interval.ms': (
        'The minimum heartbeat interval for share group members.'
    ),
    'group.share.min.partition.max.record.locks': (
        'The minimum value of a group configuration for the record lock limit per share-partition.'
    ),
    'group.share.min.record.lock.duration.ms': (
        'The minimum value of a group configuration for record acquisition lock duration in milliseconds.'
    ),
    'group.share.min.session.timeout.ms': (
        'The minimum allowed session timeout for share group members.'
    ),
    'group.share.partition.max.record.locks': (
        'Share-group record lock limit per share-partition.'
    ),
    'group.share.record.lock.duration.ms': (
        'The record acquisition lock duration in milliseconds for share groups.'
    ),
    'group.share.session.timeout.ms': (
        'The timeout to detect client failures when using the share group protocol.'
    ),
    'group.streams.assignment.interval.ms': (
        'The interval between assignment updates for a streams group.'
    ),
    'group.streams.heartbeat.interval.ms': (
        'The heartbeat interval given to the members.'
    ),
    'group.streams.initial.rebalance.delay.ms': (
        'The amount of time the group coordinator will wait for more streams clients to join a new group '
        'before performing the first rebalance. A longer delay means potentially fewer rebalances.'
    ),
    'group.streams.max.assignment.interval.ms': (
        'The maximum interval between assignment updates for a streams group.'
    ),
    'group.streams.max.heartbeat.interval.ms': (
        'The maximum allowed value for the group-level configuration of streams.heartbeat.interval.ms'
    ),
    'group.streams.max.session.timeout.ms': (
        'The maximum allowed value for the group-level configuration of streams.session.timeout.ms'
    ),
    'group.streams.max.standby.replicas': (
        'The maximum allowed value for the group-level configuration of streams.num.standby.replicas'
    ),
    'group.streams.max.size': (
        'The maximum number of streams clients that a single streams group can accommodate.'
    ),
    'group.streams.min.assignment.interval.ms': (
        'The minimum interval between assignment updates for a streams group.'
    ),
    'group.streams.min.heartbeat.interval.ms': (
        'The minimum allowed value for the group-level configuration of streams.heartbeat.interval.ms'
    ),
    'group.streams.min.session.timeout.ms': (
        'The minimum allowed value for the group-level configuration of streams.session.timeout.ms'
    ),
    'group.streams.num.standby.replicas': (
        'The number of standby replicas for each task.'
    ),
    'group.streams.rack.aware.assignment.tags': (
        'List of client tag keys used to distribute standby replicas across Kafka Streams instances. When '
        'configured, and the used broker-side assignor supports it, it will make a best-effort to distribute '
        'standby tasks over each client tag dimension.'
    ),
    'group.streams.session.timeout.ms': (
        'The timeout to detect client failures when using the streams group protocol.'
    ),
    'listener.security.protocol.map': (
        'Map between listener names and security protocols. This must be defined for the same security '
        'protocol to be usable in more than one port or IP. For example, internal and external traffic '
        'can be separated even if SSL is required for both. Concretely, the user could define listeners '
        'with names INTERNAL and EXTERNAL and this property as: <code>INTERNAL:SSL,EXTERNAL:SSL</code>. '
        'As shown, key and value are separated by a colon and map entries are separated by commas. Each '
        'listener name should only appear once in the map. Different security (SSL and SASL) settings '
        'can be configured for each listener by adding a normalised prefix (the listener name is '
        'lowercased) to the config name. For example, to set a different keystore for the INTERNAL '
        'listener, a config with name <code>listener.name.internal.ssl.keystore.location</code> would be '
        'set. If the config for the listener name is not set, the config will fallback to the generic '
        'config (i.e. <code>ssl.keystore.location</code>). Note that in KRaft a default mapping from the '
        'listener names defined by <code>controller.listener.names</code> to PLAINTEXT is assumed if no '
        'explicit mapping is provided and no other security protocol is in use.'
    ),
    'listeners': (
        'Listener List - Comma-separated list of URIs we will listen on and the listener names. If the '
        'listener name is not a security protocol, <code>listener.security.protocol.map</code> must also '
        'be set.\n Listener names and port numbers must be unique unless one listener is an IPv4 address '
        'and the other listener is an IPv6 address (for the same port).\n Specify hostname as 0.0.0.0 to '
        'bind to all interfaces.\n Leave hostname empty to bind to default interface.\n Examples of legal '
        'listener lists:\n <code>PLAINTEXT://myhost:9092,SSL://:9091</code>\n '
        '<code>CLIENT://0.0.0.0:9092,REPLICATION://localhost:9093</code>\n '
        '<code>PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092</code>\n'
    ),
    'log.cleaner.backoff.ms': (
        'The amount of time to sleep when there are no logs to clean'
    ),
    'log.cleaner.dedupe.buffer.size': (
        'The total memory used for log deduplication across all cleaner threads'
    ),
    'log.cleaner.delete.retention.ms': (
        'The amount of time to retain tombstone message markers for log compacted topics. This setting '
        'also gives a bound on the time in which a consumer must complete a read if they begin from '
        'offset 0 to ensure that they get a valid snapshot of the final stage (otherwise  tombstones '
        'messages may be collected before a consumer completes their scan).'
    ),
    'log.cleaner.enable': (
        'This configuration has been deprecated and will be removed in Kafka 5.0. Users should not set '
        'it to false to prepare for its future removal. Enable the log cleaner process to run on the '
        'server. Should be enabled if using any topics with a cleanup.policy=compact including the '
        'internal offsets topic. If disabled those topics will not be compacted and continually grow in '
        'size.'
    ),
    'log.cleaner.io.buffer.load.factor': (
        'Log cleaner dedupe buffer load factor. The percentage full the dedupe buffer can become. A '
        'higher value will allow more log to be cleaned at once but will lead to more hash collisions'
    ),
    'log.cleaner.io.buffer.size': (
        'The total memory used for log cleaner I/O buffers across all cleaner threads'
    ),
    'log.cleaner.io.max.bytes.per.second': (
        'The log cleaner will be throttled so that the sum of its read and write i/o will be less than '
        'this value on average'
    ),
    'log.cleaner.max.compaction.lag.ms': (
        'The maximum time a message will remain ineligible for compaction in the log. Only applicable '
        'for logs that are being compacted.'
    ),
    'log.cleaner.min.cleanable.ratio': (
        'The minimum ratio of dirty log to total log for a log to eligible for cleaning. If the '
        'log.cleaner.max.compaction.lag.ms or the log.cleaner.min.compaction.lag.ms configurations are '
        'also specified, then the log compactor considers the log eligible for compaction as soon as '
        'either: (i) the dirty ratio threshold has been met and the log has had dirty (uncompacted) '
        'records for at least the log.cleaner.min.compaction.lag.ms duration, or (ii) if the log has had '
        'dirty (uncompacted) records for at most the log.cleaner.max.compaction.lag.ms period.'
    ),
    'log.cleaner.threads': (
        'The number of background threads to use for log cleaning'
    ),
    'log.dir': (
        'A comma-separated list of the directories where the log data is stored. (supplemental to '
        'log.dirs property)'
    ),
    'log.dirs': (
        'A comma-separated list of the directories where the log data is stored. If not set, the value '
        'in log.dir is used.'
    ),
    'log.flush.interval.messages': (
        'The number of messages accumulated on a log partition before messages are flushed to disk.'
    ),
    'log.flush.interval.ms': (
        'The maximum time in ms that a message in any topic is kept in memory before flushed to disk. If '
        'not set, the value in log.flush.scheduler.interval.ms is used'
    ),
    'log.flush.offset.checkpoint.interval.ms': (
        'The frequency with which we update the persistent record of the last flush which acts as the '
        'log recovery point.'
    ),
    'log.flush.scheduler.interval.ms': (
        'The frequency in ms that the log flusher checks whether any log needs to be flushed to disk'
    ),
    'log.flush.start.offset.checkpoint.interval.ms': (
        'The frequency with which we update the persistent record of log start offset'
    ),
    'log.index.interval.bytes': (
        'The interval with which we add an entry to the offset index.'
    ),
    'log.index.size.max.bytes': (
        'The maximum size in bytes of the offset index'
    ),
    'log.local.retention.bytes': (
        'The maximum size of local log segments that can grow for a partition before it gets eligible '
        'for deletion. Default value is -2, it represents <code>log.retention.bytes</code> value to be '
        'used. The effective value should always be less than or equal to '
        '<code>log.retention.bytes</code> value.'
    ),
    'log.local.retention.ms': (
        'The number of milliseconds to keep the local log segments before it gets eligible for deletion. '
        'Default value is -2, it represents <code>log.retention.ms</code> value is to be used. The '
        'effective value should always be less than or equal to <code>log.retention.ms</code> value.'
    ),
    'log.message.timestamp.after.max.ms': (
        'This configuration sets the allowable timestamp difference between the message timestamp and '
        "the broker's timestamp. The message timestamp can be later than or equal to the broker's "
        'timestamp, with the maximum allowable difference determined by the value set in this '
        'configuration. If log.message.timestamp.type=CreateTime, the message will be rejected if the '
        'difference in timestamps exceeds this specified threshold. This configuration is ignored if '
        'log.message.timestamp.type=LogAppendTime.'
    ),
    'log.message.timestamp.before.max.ms': (
        "This configuration sets the allowable timestamp difference between the broker's timestamp and "
        "the message timestamp. The message timestamp can be earlier than or equal to the broker's "
        'timestamp, with the maximum allowable difference determined by the value set in this '
        'configuration. If log.message.timestamp.type=CreateTime, the message will be rejected if the '
        'difference in timestamps exceeds this specified threshold. This configuration is ignored if '
        'log.message.timestamp.type=LogAppendTime.'
    ),
    'log.message.timestamp.type': (
        'Define whether the timestamp in the message is message create time or log append time. The '
        'value should be either <code>CreateTime</code> or <code>LogAppendTime</code>.'
    ),
    'log.preallocate': (
        'Should pre allocate file when create new segment? If you are using Kafka on Windows, you '
        'probably need to set it to true.'
    ),
    'log.retention.bytes': (
        'The maximum size of the log before deleting it'
    ),
    'log.retention.check.interval.ms': (
        'The frequency in milliseconds that the log cleaner checks whether any log is eligible for '
        'deletion'
    ),
    'log.retention.hours': (
        'The number of hours to keep a log file before deleting it (in hours), tertiary to '
        'log.retention.ms property'
    ),
    'log.retention.minutes': (
        'The number of minutes to keep a log file before deleting it (in minutes), secondary to '
        'log.retention.ms property. If not set, the value in log.retention.hours is used'
    ),
    'log.retention.ms': (
        'The number of milliseconds to keep a log file before deleting it (in milliseconds), If not set, '
        'the value in log.retention.minutes is used. If set to -1, no time limit is applied.'
    ),
    'log.roll.hours': (
        'The maximum time before a new log segment is rolled out (in hours), secondary to log.roll.ms '
        'property'
    ),
    'log.roll.jitter.hours': (
        'The maximum jitter to subtract from logRollTimeMillis (in hours), secondary to '
        'log.roll.jitter.ms property'
    ),
    'log.roll.jitter.ms': (
        'The maximum jitter to subtract from logRollTimeMillis (in milliseconds). If not set, the value '
        'in log.roll.jitter.hours is used'
    ),
    'log.roll.ms': (
        'The maximum time before a new log segment is rolled out (in milliseconds). If not set, the '
        'value in log.roll.hours is used'
    ),
    'log.segment.bytes': (
        'The maximum size of a single log file'
    ),
    'log.segment.delete.delay.ms': (
        'The amount of time to wait before deleting a file from the filesystem. If the value is 0 and '
        'there is no file to delete, the system will wait 1 millisecond. Low value will cause busy '
        'waiting'
    ),
    'max.connections': (
        'The maximum number of connections we allow in the broker at any time. This limit is applied in '
        'addition to any per-ip limits configured using max.connections.per.ip. Listener-level limits '
        'may also be configured by prefixing the config name with the listener prefix, for example, '
        '<code>listener.name.internal.max.connections.per.ip</code>. Broker-wide limit should be '
        'configured based on broker capacity while listener limits should be configured based on '
        'application requirements. New connections are blocked if either the listener or broker limit is '
        'reached. Connections on the inter-broker listener are permitted even if broker-wide limit is '
        'reached. The least recently used connection on another listener will be closed in this case.'
    ),
    'max.incremental.fetch.session.cache.slots': (
        'The maximum number of total incremental fetch sessions that we will maintain. FetchSessionCache '
        'is sharded into 8 shards and the limit is equally divided among all shards. Sessions are '
        'allocated to each shard in round-robin. Only entries within a shard are considered eligible for '
        'eviction.'
    ),
    'message.max.bytes': (
        'The largest record batch size allowed by Kafka (after compression if compression is '
        'enabled).This can be set per topic with the topic level <code>max.message.bytes</code> config.'
    ),
    'node.id': (
        'The node ID associated with the roles this process is playing when <code>process.roles</code> '
        'is non-empty. This is required configuration when running in KRaft mode.'
    ),
    'num.partitions': (
        'The default number of log partitions per topic. This configuration affects the following '
        'paths:<ul>  <li>1. Auto topic creation</li>  <li>2. Internal streams topic creation</li>  '
        '<li>3. Topic creation via <code>AdminClient#createTopics</code> when the number of partition is '
        'set to -1</li></ul><p>For (1), the value from the broker configuration is used only when it is '
        'explicitly set. If it is not explicitly configured on the broker, the value from the controller '
        'configuration is used.<br/>For (2) and (3), the value from the controller configuration is '
        'always used.</p>'
    ),
    'num.recovery.threads.per.data.dir': (
        'The number of threads per data directory to be used for log recovery at startup and flushing at '
        'shutdown'
    ),
    'offset.metadata.max.bytes': (
        'The maximum size for a metadata entry associated with an offset commit.'
    ),
    'offsets.topic.num.partitions': (
        'The number of partitions for the offset commit topic (should not change after deployment).'
    ),
    'offsets.topic.replication.factor': (
        'The replication factor for the offsets topic (set higher to ensure availability). Internal '
        'topic creation will fail until the cluster size meets this replication factor requirement.'
    ),
    'producer.id.expiration.ms': (
        'The time in ms that a topic partition leader will wait before expiring producer IDs. Producer '
        'IDs will not expire while a transaction associated to them is still ongoing. Note that producer '
        "IDs may expire sooner if the last write from the producer ID is deleted due to the topic's "
        'retention settings. Setting this value the same or higher than <code>delivery.timeout.ms</code> '
        'can help prevent expiration during retries and protect against message duplication, but the '
        'default should be reasonable for most use cases.'
    ),
    'queued.max.requests': (
        'The number of queued requests allowed for data-plane, before blocking the network threads'
    ),
    'quota.window.num': (
        'The number of samples to retain in memory for client quotas'
    ),
    'quota.window.size.seconds': (
        'The time span of each sample for client quotas'
    ),
    'replica.high.watermark.checkpoint.interval.ms': (
        'The frequency with which the high watermark is saved out to disk'
    ),
    'replica.selector.class': (
        'The fully qualified class name that implements ReplicaSelector. This is used by the broker to '
        'find the preferred read replica. By default, we use an implementation that returns the leader.'
    ),
    'sasl.enabled.mechanisms': (
        'The list of SASL mechanisms enabled in the Kafka server. The list may contain any mechanism for '
        'which a security provider is available. Only GSSAPI is enabled by default.'
    ),
    'sasl.server.max.receive.size': (
        'The maximum receive size allowed before and during initial SASL authentication. Default receive '
        'size is 512KB. GSSAPI limits requests to 64K, but we allow upto 512KB by default for custom '
        'SASL mechanisms. In practice, PLAIN, SCRAM and OAUTH mechanisms can use much smaller limits.'
    ),
    'share.coordinator.snapshot.update.records.per.snapshot': (
        'The number of update records the share coordinator writes between snapshot records.'
    ),
    'share.coordinator.state.topic.min.isr': (
        'Overridden min.insync.replicas for the share-group state topic.'
    ),
    'share.coordinator.state.topic.num.partitions': (
        'The number of partitions for the share-group state topic (should not change after deployment).'
    ),
    'share.coordinator.state.topic.replication.factor': (
        'Replication factor for the share-group state topic. Topic creation will fail until the cluster '
        'size meets this replication factor requirement.'
    ),
    'socket.request.max.bytes': (
        'The maximum number of bytes in a socket request'
    ),
    'ssl.client.auth': (
        'Configures kafka broker to request client authentication. The following settings are common:  '
        '<ul> <li><code>ssl.client.auth=required</code> If set to required client authentication is '
        'required. <li><code>ssl.client.auth=requested</code> This means client authentication is '
        'optional. unlike required, if this option is set client can choose not to provide '
        'authentication information about itself <li><code>ssl.client.auth=none</code> This means client '
        'authentication is not needed.</ul>'
    ),
    'ssl.enabled.protocols': (
        "The list of protocols enabled for SSL connections. The default is 'TLSv1.2,TLSv1.3'. This means "
        'that clients and servers will prefer TLSv1.3 if both support it and fallback to TLSv1.2 '
        'otherwise (assuming both support at least TLSv1.2). This default should be fine for most use '
        'cases. If this configuration is set to an empty list, Kafka will use the protocols enabled by '
        'default in the underlying SSLEngine, which may include additional protocols depending on the '
        'JVM version. Also see the config documentation for <code>ssl.protocol</code> to understand how '
        'it can impact the TLS version negotiation behavior.'
    ),
    'ssl.key.password': (
        'The password of the private key in the key store file or the PEM key specified in '
        "'ssl.keystore.key'."
    ),
    'ssl.keystore.certificate.chain': (
        "Certificate chain in the format specified by 'ssl.keystore.type'. Default SSL engine factory "
        'supports only PEM format with a list of X.509 certificates'
    ),
    'ssl.keystore.key': (
        "Private key in the format specified by 'ssl.keystore.type'. Default SSL engine factory supports "
        'only PEM format with PKCS#8 keys. If the key is encrypted, key password must be specified using '
        "'ssl.key.password'"
    ),
    'ssl.keystore.location': (
        'The location of the key store file. This is optional for client and can be used for two-way '
        'authentication for client.'
    ),
    'ssl.keystore.password': (
        'The store password for the key store file. This is optional for client and only needed if '
        "'ssl.keystore.location' is configured. Key store password is not supported for PEM format."
    ),
    'ssl.keystore.type': (
        'The file format of the key store file. This is optional for client. The values currently '
        'supported by the default <code>ssl.engine.factory.class</code> are [JKS, PKCS12, PEM].'
    ),
    'ssl.principal.mapping.rules': (
        'A list of rules for mapping from distinguished name from the client certificate to short name. '
        'The rules are evaluated in order and the first rule that matches a principal name is used to '
        'map it to a short name. Any later rules in the list are ignored. By default, distinguished name '
        'of the X.500 certificate will be the principal. For more details on the format please see <a '
        'href="https://kafka.apache.org/documentation/#security_authz"> security authorization and '
        'acls</a>. Note that this configuration is ignored if an extension of KafkaPrincipalBuilder is '
        'provided by the <code>principal.builder.class</code> configuration.'
    ),
    'ssl.truststore.certificates': (
        "Trusted certificates in the format specified by 'ssl.truststore.type'. Default SSL engine "
        'factory supports only PEM format with X.509 certificates.'
    ),
    'ssl.truststore.location': (
        'The location of the trust store file.'
    ),
    'ssl.truststore.password': (
        'The password for the trust store file. If a password is not set, trust store file configured '
        'will still be used, but integrity checking is disabled. Trust store password is not supported '
        'for PEM format.'
    ),
    'ssl.truststore.type': (
        'The file format of the trust store file. The values currently supported by the default '
        '<code>ssl.engine.factory.class</code> are [JKS, PKCS12, PEM].'
    ),
    'transaction.abort.timed.out.transaction.cleanup.interval.ms': (
        'The interval at which to rollback transactions that have timed out'
    ),
    'transaction.max.timeout.ms': (
        'The maximum allowed timeout for transactions. If a client’s requested transaction time exceed '
        'this, then the broker will return an error in InitProducerIdRequest. This prevents a client '
        'from too large of a timeout, which can stall consumers reading from topics included in the '
        'transaction.'
    ),
    'transaction.state.log.min.isr': (
        'The minimum number of replicas that must acknowledge a write to transaction topic in order to '
        'be considered successful.'
    ),
    'transaction.state.log.num.partitions': (
        'The number of partitions for the transaction topic (should not change after deployment).'
    ),
    'transaction.state.log.replication.factor': (
        'The replication factor for the transaction topic (set higher to ensure availability). Internal '
        'topic creation will fail until the cluster size meets this replication factor requirement.'
    ),
    'unclean.leader.election.enable': (
        'Indicates whether to enable replicas not in the ISR set to be elected as leader as a last '
        'resort, even though doing so may result in data loss<p>Note: In KRaft mode, when enabling this '
        'config dynamically, it needs to wait for the unclean leader election thread to trigger election '
        'periodically (default is 5 minutes). Please run <code>kafka-leader-election.sh</code> with '
        '<code>unclean</code> option to trigger the unclean leader election immediately if needed.</p>'
    ),
    'connections.max.reauth.ms': (
        'When explicitly set to a positive number (the default is 0, not a positive number), a session '
        'lifetime that will not exceed the configured value will be communicated to v2.2.0 or later '
        'clients when they authenticate. The broker will disconnect any such connection that is not re-'
        'authenticated within the session lifetime and that is then subsequently used for any purpose '
        'other than re-authentication. Configuration names can optionally be prefixed with listener '
        'prefix and SASL mechanism name in lower-case. For example, '
        'listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms=3600000'
    ),
    'max.connection.creation.rate': (
        'The maximum connection creation rate we allow in the broker at any time. Listener-level limits '
        'may also be configured by prefixing the config name with the listener prefix, for example, '
        '<code>listener.name.internal.max.connection.creation.rate</code>.Broker-wide connection rate '
        'limit should be configured based on broker capacity while listener limits should be configured '
        'based on application requirements. New connections will be throttled if either the listener or '
        'the broker limit is reached, with the exception of inter-broker listener. Connections on the '
        'inter-broker listener will be throttled only when the listener-level rate limit is reached.'
    ),
    'max.connections.per.ip': (
        'The maximum number of connections we allow from each ip address. This can be set to 0 if there '
        'are overrides configured using max.connections.per.ip.overrides property. New connections from '
        'the ip address are dropped if the limit is reached.'
    ),
    'max.connections.per.ip.overrides': (
        'A comma-separated list of per-ip or hostname overrides to the default maximum number of '
        'connections. An example value is "hostName:100,127.0.0.1:200"'
    ),
}
