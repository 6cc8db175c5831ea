// The Java client's transactional producer, one step of a transactions test per run, printing one
// line per outcome (the test runs the same step against kafkalog serve and Kafka 4.4 and compares
// the lines and the batches the partitions hold). With kafka-clients 4.4 and a broker that finalizes
// transaction.version 2, the producer uses transactions v2 (KIP-890).
// Arguments: MODE BOOTSTRAP TOPIC TRANSACTIONAL_ID [key=value ...] (producer properties). Modes:
//   commit-abort  three transactions on partitions 0-2: committed, aborted, committed with a
//                 consumer group's offsets (sendOffsetsToTransaction)
//   crash         a transaction left open (flushed), then the JVM halts (exit 3): a crashed producer
//   resume        initTransactions after a crash, then a committed transaction
//   zombie        producer A's transaction is fenced by producer B with the same transactional.id
//   timeout       transaction.timeout.ms runs out while the producer waits; commit fails, the
//                 producer aborts and goes on with a committed transaction
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

public class KafkalogTxnV2 {
    static Properties props;

    static KafkaProducer<String, String> producer(String tid) {
        Properties p = new Properties();
        p.putAll(props);
        p.put("transactional.id", tid);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static void send(KafkaProducer<String, String> p, String topic, int partition, String value) throws Exception {
        p.send(new ProducerRecord<>(topic, partition, null, value)).get();
    }

    static String name(Throwable e) {
        Throwable c = e;
        while (c.getCause() != null && (c instanceof java.util.concurrent.ExecutionException
                || (c instanceof org.apache.kafka.common.KafkaException
                    && !(c instanceof org.apache.kafka.common.errors.ApiException)))) c = c.getCause();
        return c.getClass().getSimpleName();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], topic = args[2], tid = args[3];
        props = new Properties();
        props.put("bootstrap.servers", args[1]);
        props.put("linger.ms", "0");
        props.put("delivery.timeout.ms", "30000");
        props.put("request.timeout.ms", "20000");
        props.put("max.block.ms", "30000");
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        switch (mode) {
            case "commit-abort": {
                try (KafkaProducer<String, String> p = producer(tid)) {
                    p.initTransactions();
                    p.beginTransaction();
                    for (int i = 0; i < 3; i++) send(p, topic, i, "committed-" + i);
                    p.commitTransaction();
                    System.out.println("committed");
                    p.beginTransaction();
                    for (int i = 0; i < 3; i++) send(p, topic, i, "aborted-" + i);
                    p.abortTransaction();
                    System.out.println("aborted");
                    p.beginTransaction();
                    send(p, topic, 0, "with-offsets");
                    p.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 1), new OffsetAndMetadata(42)),
                            new ConsumerGroupMetadata(tid + "-group"));
                    p.commitTransaction();
                    System.out.println("committed with offsets");
                }
                break;
            }
            case "crash": {
                KafkaProducer<String, String> p = producer(tid);
                p.initTransactions();
                p.beginTransaction();
                send(p, topic, 0, "crashed-0");
                send(p, topic, 1, "crashed-1");
                System.out.println("sent");
                System.out.flush();
                Runtime.getRuntime().halt(3);
            }
            case "resume": {
                try (KafkaProducer<String, String> p = producer(tid)) {
                    p.initTransactions();
                    p.beginTransaction();
                    send(p, topic, 0, "resumed");
                    p.commitTransaction();
                    System.out.println("resumed");
                }
                break;
            }
            case "zombie": {
                KafkaProducer<String, String> a = producer(tid);
                a.initTransactions();
                a.beginTransaction();
                send(a, topic, 0, "zombie-open");
                try (KafkaProducer<String, String> b = producer(tid)) {
                    b.initTransactions();
                    System.out.println("b initialized");
                    b.beginTransaction();
                    send(b, topic, 0, "fencer");
                    b.commitTransaction();
                    System.out.println("b committed");
                }
                try {
                    a.send(new ProducerRecord<>(topic, 0, null, "zombie-late")).get();
                    a.commitTransaction();
                    System.out.println("zombie committed");
                } catch (Exception e) {
                    System.out.println("zombie fenced " + name(e));
                }
                a.close(Duration.ofSeconds(5));
                break;
            }
            case "timeout": {
                try (KafkaProducer<String, String> p = producer(tid)) {
                    p.initTransactions();
                    p.beginTransaction();
                    send(p, topic, 0, "slow");
                    Thread.sleep(Long.parseLong(props.getProperty("transaction.timeout.ms")) * 3);
                    try {
                        send(p, topic, 0, "slow-late");
                        p.commitTransaction();
                        System.out.println("late commit ok");
                    } catch (Exception e) {
                        System.out.println("late commit failed " + name(e));
                        try {
                            p.abortTransaction();
                            System.out.println("aborted");
                        } catch (Exception e2) {
                            System.out.println("abort failed " + name(e2));
                            break;
                        }
                    }
                    p.beginTransaction();
                    send(p, topic, 0, "after-timeout");
                    p.commitTransaction();
                    System.out.println("committed after timeout");
                }
                break;
            }
            default:
                throw new IllegalArgumentException(mode);
        }
    }
}
