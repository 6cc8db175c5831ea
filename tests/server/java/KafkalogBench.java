// The Java client's side of the session test and of benchmarks/broker_bench.py:
//   consume-all BOOTSTRAP TOPIC N   assign every partition from 0, print each value (one a line) until N
//   produce BOOTSTRAP TOPIC N       N 100-byte values to partition 0, idempotent, acks=all, linger.ms=5
//   consume BOOTSTRAP TOPIC N       N records of partition 0 from offset 0
// produce/consume print one JSON line: {"msgs_per_s": ...}. Exit code 0 = all good.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class KafkalogBench {
    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        long n = Long.parseLong(args[3]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("request.timeout.ms", "30000");
        if (mode.equals("produce")) {
            Properties pp = new Properties();
            pp.putAll(common);
            pp.put("enable.idempotence", "true");
            pp.put("acks", "all");
            pp.put("linger.ms", "5");
            byte[] value = "x".repeat(100).getBytes(StandardCharsets.UTF_8);
            AtomicReference<Exception> failed = new AtomicReference<>();
            long t0 = System.nanoTime();
            try (Producer<byte[], byte[]> p = new KafkaProducer<>(pp, new ByteArraySerializer(),
                    new ByteArraySerializer())) {
                for (long i = 0; i < n; i++) {
                    p.send(new ProducerRecord<>(topic, 0, null, value), (md, e) -> {
                        if (e != null) failed.set(e);
                    });
                }
                p.flush();
            }
            if (failed.get() != null) throw failed.get();
            System.out.println("{\"msgs_per_s\": " + n / ((System.nanoTime() - t0) / 1e9) + "}");
            return;
        }
        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("enable.auto.commit", "false");
        cp.put("fetch.max.wait.ms", "100");
        try (Consumer<byte[], byte[]> c = new KafkaConsumer<>(cp, new ByteArrayDeserializer(),
                new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            if (mode.equals("consume-all")) {
                for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
            } else {
                tps.add(new TopicPartition(topic, 0));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            long got = 0;
            long t0 = System.nanoTime();
            long deadline = System.currentTimeMillis() + 600000;
            StringBuilder out = new StringBuilder();
            while (got < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    got++;
                    if (mode.equals("consume-all")) out.append(new String(r.value(), StandardCharsets.UTF_8)).append('\n');
                }
            }
            if (got < n) throw new IllegalStateException("consumed " + got + " of " + n);
            if (mode.equals("consume-all")) System.out.print(out);
            else System.out.println("{\"msgs_per_s\": " + got / ((System.nanoTime() - t0) / 1e9) + "}");
        }
    }
}
