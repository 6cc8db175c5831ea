// One member of a share group (KIP-932): Java's KafkaShareConsumer with explicit acknowledgement.
// Prints "rec <partition> <offset> <deliveryCount> <value>" for each record it gets, and "ack ..."
// for each acknowledgement commitSync confirmed; stdin closed = leave (close) and print "closed".
// Arguments: BOOTSTRAP TOPIC GROUP MODE LIFETIME_MS [key=value ...] (consumer properties). Modes:
//   accept      accept every record
//   release1    release a record at its first delivery, accept it later
//   release     release every record (it goes to the delivery limit, then is archived)
//   reject      reject every record
//   hold        acknowledge nothing, poll no more after the first records (their locks expire)
//   renew       renew the locks of the first records twice (each after a pause), then accept them
import java.io.InputStream;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class KafkalogShareMember {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], mode = args[3];
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        for (int i = 5; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            p.put(kv[0], kv[1]);
        }
        AtomicBoolean stop = new AtomicBoolean();
        Thread watcher = new Thread(() -> {
            try {
                InputStream in = System.in;
                while (in.read() >= 0) { }
            } catch (Exception ignored) { }
            stop.set(true);
        });
        watcher.setDaemon(true);
        watcher.start();
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p, new StringDeserializer(),
                new StringDeserializer())) {
            c.setAcknowledgementCommitCallback((Map<TopicIdPartition, Set<Long>> offsets, Exception e) -> {
                for (Map.Entry<TopicIdPartition, Set<Long>> en : offsets.entrySet()) {
                    for (long o : new TreeSet<>(en.getValue())) {
                        System.out.println("ack " + en.getKey().partition() + " " + o + " "
                                + (e == null ? "ok" : e.getClass().getSimpleName()));
                    }
                }
                System.out.flush();
            });
            c.subscribe(List.of(topic));
            boolean held = false;
            while (!stop.get() && System.currentTimeMillis() < deadline) {
                if (held) {
                    Thread.sleep(100);
                    continue;
                }
                ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : recs) {
                    short count = r.deliveryCount().orElse((short) -1);
                    System.out.println("rec " + r.partition() + " " + r.offset() + " " + count + " " + r.value());
                    switch (mode) {
                        case "accept": c.acknowledge(r, AcknowledgeType.ACCEPT); break;
                        case "release1": c.acknowledge(r, count <= 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT); break;
                        case "release": c.acknowledge(r, AcknowledgeType.RELEASE); break;
                        case "reject": c.acknowledge(r, AcknowledgeType.REJECT); break;
                        case "renew": break;
                        default: break;
                    }
                }
                System.out.flush();
                if (recs.isEmpty()) continue;
                if (mode.equals("hold")) {
                    held = true;
                    continue;
                }
                if (mode.equals("renew")) {
                    long lock = c.acquisitionLockTimeoutMs().orElse(30000);
                    for (int i = 0; i < 2; i++) {
                        Thread.sleep(lock * 2 / 3);
                        for (ConsumerRecord<String, String> r : recs) c.acknowledge(r, AcknowledgeType.RENEW);
                        c.commitSync();
                        System.out.println("renewed " + recs.count());
                        System.out.flush();
                    }
                    for (ConsumerRecord<String, String> r : recs) c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                c.commitSync();
            }
        }
        System.out.println("closed");
        System.out.flush();
    }
}
