// A small driver of the genuine Java client (kafka-clients 3.9.1 and 4.3.0) against kafkalog serve:
// admin create/describe/delete, an idempotent acks=all producer per codec, assign-and-seek consume
// that must read back exactly what was produced. Prints one line per step; exit code 0 = all good.
// Arguments: BOOTSTRAP PREFIX N [key=value ...]: client properties (security.protocol, ssl.*, sasl.*)
// for every client; kafkalog.codecs=none,gzip limits the codecs, kafkalog.admin=false skips admin.
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

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        int n = Integer.parseInt(args[2]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("request.timeout.ms", "30000");
        String[] codecs = {"none", "gzip", "snappy", "lz4", "zstd"};
        boolean runAdmin = true;
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            if (kv[0].equals("kafkalog.codecs")) codecs = kv[1].split(",");
            else if (kv[0].equals("kafkalog.admin")) runAdmin = Boolean.parseBoolean(kv[1]);
            else common.put(kv[0], kv[1]);
        }
        if (runAdmin) try (Admin admin = Admin.create(common)) {
            String t = prefix + "-admin";
            admin.createTopics(List.of(new NewTopic(t, 3, (short) 1)
                    .configs(Map.of("retention.ms", "7200000")))).all().get();
            TopicDescription d = admin.describeTopics(List.of(t)).allTopicNames().get().get(t);
            check(d.partitions().size() == 3, "3 partitions");
            check(!d.topicId().toString().equals("AAAAAAAAAAAAAAAAAAAAAA"), "real topic id");
            var res = new org.apache.kafka.common.config.ConfigResource(
                    org.apache.kafka.common.config.ConfigResource.Type.TOPIC, t);
            Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
            check("7200000".equals(cfg.get("retention.ms").value()), "retention.ms described");
            admin.deleteTopics(List.of(t)).all().get();
            check(!admin.listTopics().names().get().contains(t), "deleted");
            System.out.println("admin ok");
        }
        for (String codec : codecs) {
            String topic = prefix + "-" + codec;
            try (Admin admin = Admin.create(common)) {
                admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
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
}
