// A small driver of the genuine Java client (kafka-clients 3.9.1 and 4.3.0) against kafkalog serve:
// admin create/describe/delete, an idempotent acks=all producer per codec, assign-and-seek consume
// that must read back exactly what was produced; with the argument "txn": transactions
// (committed and aborted transactional produce read back with read_committed, exactly-once
// consume-transform-produce with sendOffsetsToTransaction, an aborted transaction's offsets discarded,
// a second producer with the same transactional.id fencing the first); with "reauth": a producer sending
// for N seconds, its re-authentications counted (KIP-368). Prints one line per step;
// exit code 0 = all good.
// Arguments: BOOTSTRAP PREFIX N [txn] [key=value ...]: client properties (security.protocol, ssl.*,
// sasl.*) for every client; kafkalog.codecs=none,gzip limits the codecs, kafkalog.admin=false skips admin.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.*;

public class KafkalogDriver {
    static void check(boolean ok, String what) {
        if (!ok) throw new IllegalStateException("check failed: " + what);
    }

    // "reauth": one producer sending to PREFIX for N seconds (one record every 20 ms, each acknowledged);
    // prints "sent S acked A reauthentications R" (the client's successful-reauthentication-total)
    static void reauthenticatingProducer(Properties common, String topic, int seconds) throws Exception {
        Properties p = new Properties();
        p.putAll(common);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "5");
        int sent = 0, acked = 0;
        double reauths = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> pending = new ArrayList<>();
            long end = System.nanoTime() + seconds * 1_000_000_000L;
            while (System.nanoTime() < end) {
                pending.add(producer.send(new ProducerRecord<>(topic, "k" + sent, "v" + sent)));
                sent++;
                Thread.sleep(20);
            }
            producer.flush();
            for (Future<RecordMetadata> f : pending) {
                f.get();
                acked++;
            }
            for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> e
                    : producer.metrics().entrySet())
                if (e.getKey().name().equals("successful-reauthentication-total")
                        && e.getKey().group().equals("producer-metrics"))
                    reauths += ((Number) e.getValue().metricValue()).doubleValue();
        }
        System.out.println("sent " + sent + " acked " + acked + " reauthentications " + (long) reauths);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        int n = Integer.parseInt(args[2]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("request.timeout.ms", "30000");
        String[] codecs = {"none", "gzip", "snappy", "lz4", "zstd"};
        boolean runAdmin = true;
        String mode = null;
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            if (kv.length == 1) mode = kv[0];
            else if (kv[0].equals("kafkalog.codecs")) codecs = kv[1].split(",");
            else if (kv[0].equals("kafkalog.admin")) runAdmin = Boolean.parseBoolean(kv[1]);
            else common.put(kv[0], kv[1]);
        }
        if ("txn".equals(mode)) {
            transactions(common, prefix, n);
            return;
        }
        if ("reauth".equals(mode)) {
            reauthenticatingProducer(common, prefix, n);
            return;
        }
        if (runAdmin) try (Admin admin = Admin.create(common)) {
            String t = prefix + "-admin";
            admin.createTopics(List.of(new NewTopic(t, 3, (short) 1)
                    .configs(Map.of("retention.ms", "7200000")))).all().get();
            TopicDescription d = awaitTopic(admin, t);
            check(d.partitions().size() == 3, "3 partitions");
            check(!d.topicId().toString().equals("AAAAAAAAAAAAAAAAAAAAAA"), "real topic id");
            var res = new org.apache.kafka.common.config.ConfigResource(
                    org.apache.kafka.common.config.ConfigResource.Type.TOPIC, t);
            Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            check("7200000".equals(cfg.get("retention.ms").value()), "retention.ms described");
            admin.deleteTopics(List.of(t)).all().get();
            // topic deletion is eventually visible on Kafka (its metadata cache catches up with the
            // controller): wait for it, as Kafka's own tests do (TestUtils.waitForCondition)
            long deadline = System.currentTimeMillis() + 30_000;
            while (admin.listTopics().names().get().contains(t) && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            check(!admin.listTopics().names().get().contains(t), "deleted");
            System.out.println("admin ok");
        }
        for (String codec : codecs) {
            String topic = prefix + "-" + codec;
            try (Admin admin = Admin.create(common)) {
                admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
                awaitTopic(admin, topic);
            }
            Properties pp = new Properties();
            pp.putAll(common);
            pp.put("enable.idempotence", "true");
            pp.put("acks", "all");
            pp.put("compression.type", codec);
            pp.put("linger.ms", "5");
            Map<String, String> sent = new TreeMap<>();
            try (Producer<byte[], byte[]> p = new KafkaProducer<>(pp, new ByteArraySerializer(),
                    new ByteArraySerializer())) {
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                List<String> values = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    String v = "value-" + i + "-" + "x".repeat(i % 40);
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, i % 2,
                            ("k" + i).getBytes(StandardCharsets.UTF_8), v.getBytes(StandardCharsets.UTF_8));
                    r.headers().add("i", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                    fs.add(p.send(r));
                    values.add(v);
                }
                for (int i = 0; i < n; i++) {
                    RecordMetadata md = fs.get(i).get();
                    sent.put(md.partition() + "/" + md.offset(), "k" + i + "=" + values.get(i) + "|" + i);
                }
            }
            Properties cp = new Properties();
            cp.putAll(common);
            cp.put("enable.auto.commit", "false");
            cp.put("fetch.max.wait.ms", "200");
            Map<String, String> got = new TreeMap<>();
            try (Consumer<byte[], byte[]> c = new KafkaConsumer<>(cp, new ByteArrayDeserializer(),
                    new ByteArrayDeserializer())) {
                List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
                c.assign(tps);
                c.seek(tps.get(0), 0);
                c.seek(tps.get(1), 0);
                long deadline = System.currentTimeMillis() + 60000;
                while (got.size() < n && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                        Header h = r.headers().lastHeader("i");
                        got.put(r.partition() + "/" + r.offset(), new String(r.key(), StandardCharsets.UTF_8)
                                + "=" + new String(r.value(), StandardCharsets.UTF_8) + "|"
                                + new String(h.value(), StandardCharsets.UTF_8));
                    }
                }
                Map<TopicPartition, Long> ends = c.endOffsets(tps);
                check(ends.get(tps.get(0)) + ends.get(tps.get(1)) == n, "end offsets");
            }
            check(got.equals(sent), "consumed == produced for " + codec + " (" + got.size() + " of " + sent.size() + ")");
            System.out.println("codec " + codec + " ok " + n);
        }
    }

    static Producer<String, String> txnProducer(Properties common, String tid) {
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("transactional.id", tid);
        pp.put("linger.ms", "5");
        return new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer());
    }

    static Consumer<String, String> consumer(Properties common, String group, String isolation) {
        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("enable.auto.commit", "false");
        cp.put("fetch.max.wait.ms", "200");
        cp.put("auto.offset.reset", "earliest");
        cp.put("isolation.level", isolation);
        if (group != null) cp.put("group.id", group);
        return new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer());
    }

    /** Every value of ``topic`` (2 partitions) up to its end offsets. */
    static List<String> readAll(Properties common, String topic, String isolation) {
        List<String> out = new ArrayList<>();
        try (Consumer<String, String> c = consumer(common, null, isolation)) {
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 60000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) out.add(r.value());
                boolean done = true;
                for (TopicPartition tp : tps) done &= c.position(tp) >= ends.get(tp);
                if (done) break;
            }
        }
        Collections.sort(out);
        return out;
    }

    static void transactions(Properties common, String prefix, int n) throws Exception {
        String in = prefix + "-in", out = prefix + "-out";
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(in, 2, (short) 1), new NewTopic(out, 2, (short) 1)))
                    .all().get();
        }
        List<String> committed = new ArrayList<>();
        try (Producer<String, String> p = txnProducer(common, prefix + "-src")) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(in, i % 2, "k" + i, "c" + i));
                committed.add("c" + i);
            }
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(in, i % 2, "k" + i, "a" + i));
            p.flush();
            p.abortTransaction();
        }
        Collections.sort(committed);
        check(readAll(common, in, "read_committed").equals(committed), "read_committed sees the committed only");
        check(readAll(common, in, "read_uncommitted").size() == 2 * n, "read_uncommitted sees both");
        System.out.println("txn ok " + n);

        // exactly-once consume-transform-produce
        String group = prefix + "-eos";
        int done = 0;
        Map<TopicPartition, Long> sentOffsets = new HashMap<>();
        try (Consumer<String, String> c = consumer(common, group, "read_committed");
             Producer<String, String> p = txnProducer(common, prefix + "-eos")) {
            p.initTransactions();
            c.subscribe(List.of(in));
            long deadline = System.currentTimeMillis() + 90000;
            while (done < n && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(300));
                if (recs.isEmpty()) continue;
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    p.send(new ProducerRecord<>(out, r.partition(), r.key(), "T" + r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    done++;
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
                for (var e : offsets.entrySet()) sentOffsets.put(e.getKey(), e.getValue().offset());
            }
            // one more transaction that aborts: neither its output nor its offsets count
            p.beginTransaction();
            p.send(new ProducerRecord<>(out, 0, "x", "junk"));
            p.sendOffsetsToTransaction(Map.of(new TopicPartition(in, 0), new OffsetAndMetadata(0)),
                    c.groupMetadata());
            p.flush();
            p.abortTransaction();
        }
        check(done == n, "consumed " + done + " of " + n);
        List<String> transformed = new ArrayList<>();
        for (String v : committed) transformed.add("T" + v);
        Collections.sort(transformed);
        check(readAll(common, out, "read_committed").equals(transformed), "output == transformed input");
        try (Admin admin = Admin.create(common)) {
            Map<TopicPartition, OffsetAndMetadata> got =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            check(sentOffsets.size() == 2, "offsets of both partitions sent");
            for (TopicPartition tp : sentOffsets.keySet())
                check(got.get(tp) != null && got.get(tp).offset() == sentOffsets.get(tp),
                        "committed offset of " + tp + " " + got.get(tp) + " == " + sentOffsets.get(tp)
                        + " (the aborted transaction's offsets are discarded)");
        }
        System.out.println("eos ok " + done);

        // a second producer with the same transactional.id fences the first
        try (Producer<String, String> a = txnProducer(common, prefix + "-fence");
             Producer<String, String> b = txnProducer(common, prefix + "-fence")) {
            a.initTransactions();
            a.beginTransaction();
            a.send(new ProducerRecord<>(out, 0, "f", "fenced-open")).get();
            b.initTransactions();
            boolean fenced = false;
            try {
                a.send(new ProducerRecord<>(out, 1, "f", "fenced")).get();
                a.commitTransaction();
            } catch (Exception e) {
                Throwable t = e instanceof java.util.concurrent.ExecutionException ? e.getCause() : e;
                fenced = t instanceof org.apache.kafka.common.errors.ProducerFencedException
                        || t instanceof org.apache.kafka.common.errors.InvalidProducerEpochException
                        || (t != null && t.getCause() instanceof org.apache.kafka.common.errors.ProducerFencedException);
                System.out.println("fenced by " + t);
            }
            check(fenced, "the first producer is fenced");
            b.beginTransaction();
            b.send(new ProducerRecord<>(out, 0, "f", "fencer"));
            b.commitTransaction();
        }
        List<String> all = readAll(common, out, "read_committed");
        check(all.contains("fencer") && !all.contains("fenced") && !all.contains("fenced-open"),
                "only the fencer's transaction is visible");
        System.out.println("fence ok");
    }

    /** A topic just created, once the broker describes it: on Kafka the broker's metadata cache
     *  catches up with the controller (on a loaded machine describeTopics can still answer
     *  UNKNOWN_TOPIC_OR_PARTITION, and a producer can reach a partition before its log exists), so
     *  wait for it, as Kafka's own tests do (waitForTopicCreated). */
    static TopicDescription awaitTopic(Admin admin, String t) throws Exception {
        long visibleBy = System.currentTimeMillis() + 30_000;
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(t)).allTopicNames().get().get(t);
                if (d.partitions().stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty())
                        || System.currentTimeMillis() > visibleBy) return d;
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException)
                        || System.currentTimeMillis() > visibleBy) throw e;
            }
            Thread.sleep(100);
        }
    }
}
