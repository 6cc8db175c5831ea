// kafkajs against a broker: one scenario per run, a JSON line per step on stdout, exit 0 when
// every step passed (tests/server/test_kafkajs.py). Usage: node kafkajs_driver.js MODE BOOTSTRAP PREFIX
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const [mode, bootstrap, prefix] = process.argv.slice(2)
const kafka = new Kafka({
  clientId: 'kafkalog-test', brokers: [bootstrap], logLevel: logLevel.ERROR,
  retry: { retries: 3, initialRetryTime: 100 }, connectionTimeout: 10000, requestTimeout: 30000,
})
const say = (o) => process.stdout.write(JSON.stringify(o) + '\n')

// the records of `topic` a new member of `groupId` reads (from the committed offsets, else the
// earliest) until `count` arrived; it commits what it read
async function consumeGroup (groupId, topic, count) {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const got = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`consumed ${got.length} of ${count} in 60 s`)), 60000)
    consumer.on(consumer.events.CRASH, (e) => { clearTimeout(timer); reject(e.payload.error) })
    consumer.run({
      autoCommit: true,
      eachMessage: async ({ partition, message }) => {
        got.push({ partition, offset: Number(message.offset), value: message.value.toString() })
        if (got.length >= count) { clearTimeout(timer); resolve() }
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  return got
}

async function resetOffsets () {
  const topic = `${prefix}-reset`
  const groupId = `${prefix}-group`
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true })
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ value: `v${i}` })) })
  await producer.disconnect()
  // the group reads everything and commits the end (10), then is reset to the earliest offset (-2)
  await consumeGroup(groupId, topic, 10)
  say({ step: 'consumed', offsets: await admin.fetchOffsets({ groupId, topics: [topic] }) })
  await admin.resetOffsets({ groupId, topic, earliest: true })
  const after = await admin.fetchOffsets({ groupId, topics: [topic] })
  say({ step: 'reset', offsets: after })
  const got = await consumeGroup(groupId, topic, 10)
  say({ step: 'resumed', offsets: got.map((m) => m.offset), values: got.map((m) => m.value) })
  await admin.disconnect()
}

async function adminConfigsPartitions () {
  const topic = `${prefix}-admin`
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true })
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, messages: [{ value: 'before' }] })
  // committed offsets of partition 0 must survive the new partitions
  await admin.setOffsets({ groupId: `${prefix}-g`, topic, partitions: [{ partition: 0, offset: '1' }] })
  await admin.alterConfigs({
    validateOnly: false,
    resources: [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
  })
  const described = await admin.describeConfigs({
    includeSynonyms: false, resources: [{ type: 2, name: topic, configNames: ['retention.ms'] }],
  })
  say({ step: 'alterConfigs', value: described.resources[0].configEntries[0].configValue })
  const errors = {}
  for (const [name, resources] of [
    ['unknownConfig', [{ type: 2, name: topic, configEntries: [{ name: 'no.such.config', value: '1' }] }]],
    ['invalidValue', [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: 'soon' }] }]],
    ['unknownTopic', [{ type: 2, name: `${prefix}-missing`, configEntries: [{ name: 'retention.ms', value: '1' }] }]],
  ]) {
    try { await admin.alterConfigs({ validateOnly: false, resources }); errors[name] = null } catch (e) { errors[name] = e.type || e.name }
  }
  say({ step: 'alterConfigsErrors', errors })
  await admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] })
  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  say({ step: 'createPartitions', partitions: md.topics[0].partitions.map((p) => p.partitionId).sort() })
  for (const [name, count] of [['fewer', 2], ['same', 3]]) {
    try { await admin.createPartitions({ topicPartitions: [{ topic, count }] }); errors[name] = null } catch (e) { errors[name] = e.type || e.name }
  }
  say({ step: 'createPartitionsErrors', errors })
  await producer.send({ topic, messages: [1, 2].map((p) => ({ partition: p, value: `p${p}` })) })
  await producer.disconnect()
  say({ step: 'offsets', offsets: await admin.fetchTopicOffsets(topic),
        committed: await admin.fetchOffsets({ groupId: `${prefix}-g`, topics: [topic] }) })
  await admin.disconnect()
}

const modes = { reset: resetOffsets, admin: adminConfigsPartitions }
modes[mode]().then(() => process.exit(0), (e) => { say({ error: String(e && e.stack || e) }); process.exit(1) })
