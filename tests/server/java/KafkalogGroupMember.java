// One member of a consumer group, the genuine Java client (kafka-clients 3.9.1, 4.3.0 and 4.4.0) against
// kafkalog serve: subscribes to TOPIC with group.id GROUP, consumes, commits synchronously after every
// non-empty poll and before its partitions are revoked, until its standard input closes (or a line
// "stop" arrives) or LIFETIME_MS pass; then commits what it consumed and closes (LeaveGroup). A line
// "crash" makes it halt right after its next non-empty poll, before committing those records and
// without leaving the group (exit code 3, after printing "crashed"): the group learns of it when
// its session times out. With the argument kafkalog.wait.for.go=true it prints "ready" once its
// consumer is made (the JVM started, the classes loaded) and subscribes only when a line "go" arrives,
// so a test can start it ahead and time its joining.
// Prints one line per event, flushed at once, for the test to parse:
//   "assigned P,P,..."   partitions assigned      "revoked P,P,..."   partitions revoked
//   "rec P O VALUE"      a record consumed         "commit P O"        offset O of P committed
//   "commitfailed P ERR" a commit refused          "lost P,P,..."      partitions lost (no commit)
//   "closed"             the consumer closed cleanly
// Arguments: BOOTSTRAP TOPIC GROUP LIFETIME_MS [key=value ...]: client properties
// (e.g. partition.assignment.strategy).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class KafkalogGroupMember {
    static volatile boolean stop = false;
    static volatile boolean crash = false;
    static final Map<TopicPartition, Long> pending = new HashMap<>();

    static void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String partitions(Collection<TopicPartition> tps) {
        StringBuilder sb = new StringBuilder();
        for (TopicPartition tp : tps) sb.append(sb.length() == 0 ? "" : ",").append(tp.partition());
        return sb.toString();
    }

    /** Commit the consumed positions of ``tps`` synchronously; print what was committed. */
    static void commit(Consumer<byte[], byte[]> c, Collection<TopicPartition> tps) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : tps) {
            Long next = pending.get(tp);
            if (next != null) offsets.put(tp, new OffsetAndMetadata(next));
        }
        if (offsets.isEmpty()) return;
        try {
            c.commitSync(offsets, Duration.ofSeconds(30));
        } catch (WakeupException e) {
            stop = true;
            commit(c, tps);     // the wakeup only asks to stop: commit still
            return;
        } catch (Exception e) {
            for (TopicPartition tp : offsets.keySet())
                emit("commitfailed " + tp.partition() + " " + e.getClass().getSimpleName());
            return;
        }
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet())
            emit("commit " + e.getKey().partition() + " " + e.getValue().offset());
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        long lifetime = Long.parseLong(args[3]);
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", group);
        cp.put("enable.auto.commit", "false");
        cp.put("auto.offset.reset", "earliest");
        cp.put("fetch.max.wait.ms", "200");
        cp.put("request.timeout.ms", "30000");
        boolean waitForGo = false;
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            if (kv[0].equals("kafkalog.wait.for.go")) waitForGo = Boolean.parseBoolean(kv[1]);
            else cp.put(kv[0], kv[1]);
        }
        final java.util.concurrent.CountDownLatch go = new java.util.concurrent.CountDownLatch(1);
        // the classic protocol's timeouts; with group.protocol=consumer (KIP-848) the broker sets them
        // and the client refuses them
        if (!"consumer".equalsIgnoreCase(cp.getProperty("group.protocol", "classic"))) {
            cp.putIfAbsent("session.timeout.ms", "10000");
            cp.putIfAbsent("heartbeat.interval.ms", "500");
        }
        Consumer<byte[], byte[]> c = new KafkaConsumer<>(cp, new ByteArrayDeserializer(),
                new ByteArrayDeserializer());
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null && !line.trim().equals("stop")) {
                    if (line.trim().equals("crash")) crash = true;
                    if (line.trim().equals("go")) go.countDown();
                }
            } catch (Exception e) {
                // EOF or a broken pipe: stop as well
            }
            stop = true;
            go.countDown();
            c.wakeup();
        });
        stdin.setDaemon(true);
        stdin.start();
        if (waitForGo) {
            emit("ready");
            go.await();
        }
        final Consumer<byte[], byte[]> member = c;
        c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                emit("revoked " + partitions(tps));
                commit(member, tps);     // before another member takes them
                for (TopicPartition tp : tps) pending.remove(tp);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                emit("assigned " + partitions(tps));
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> tps) {
                emit("lost " + partitions(tps));
                for (TopicPartition tp : tps) pending.remove(tp);
            }
        });
        long deadline = System.currentTimeMillis() + lifetime;
        while (!stop && System.currentTimeMillis() < deadline) {
            ConsumerRecords<byte[], byte[]> recs;
            try {
                recs = c.poll(Duration.ofMillis(200));
            } catch (WakeupException e) {
                break;
            }
            for (ConsumerRecord<byte[], byte[]> r : recs) {
                emit("rec " + r.partition() + " " + r.offset() + " " + new String(r.value(), StandardCharsets.UTF_8));
                pending.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
            }
            if (crash && !recs.isEmpty()) {
                emit("crashed");
                Runtime.getRuntime().halt(3);
            }
            if (!recs.isEmpty()) commit(c, new ArrayList<>(c.assignment()));
        }
        commit(c, new ArrayList<>(c.assignment()));
        try {
            c.close(Duration.ofSeconds(30));
        } catch (WakeupException e) {
            c.close(Duration.ofSeconds(30));     // a late wakeup: close again
        }
        emit("closed");
    }
}
