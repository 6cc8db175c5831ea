// Kafka Streams 4.4's word count with exactly-once v2, the application of tests/ecosystem/test_streams.py:
// lines of INPUT are split into words, re-keyed by word (a repartition topic, which Streams purges
// with DeleteRecords once its records are committed), counted in a persistent state store (its
// changelog topic is compacted) and every new count written to OUTPUT. processing.guarantee is
// exactly_once_v2: each task's input offsets, store updates and output are one transaction.
// Prints one line per state change, flushed ("state RUNNING"), and "closed" after a clean close
// (SIGTERM: the shutdown hook closes the application). A SIGKILL is a crash: the next start
// recovers from the changelog and the committed offsets.
// With application.server set, prints "hosts [PORT, ...]": the endpoints of the instances whose
// tasks it knows (interactive queries), on every change.
// Arguments: BOOTSTRAP APPLICATION_ID STATE_DIR INPUT OUTPUT [key=value ...] (Streams properties).
import java.util.*;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.*;

public class KafkalogWordCount {
    static void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 500);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        for (int i = 5; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            p.put(kv[0], kv[1]);
        }
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, String> lines = b.stream(args[3]);
        KTable<String, Long> counts = lines
            .flatMapValues(v -> Arrays.asList(v.toLowerCase(Locale.ROOT).split("\\W+")))
            .filter((k, w) -> !w.isEmpty())
            .groupBy((k, w) -> w, Grouped.as("words"))
            .count(Materialized.as("counts"));
        counts.toStream().to(args[4], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        CountDownLatch closed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> emit("state " + now));
        streams.setUncaughtExceptionHandler(e -> {
            emit("error " + e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            emit("closed");
            closed.countDown();
        }));
        streams.start();
        if (p.containsKey(StreamsConfig.APPLICATION_SERVER_CONFIG)) {
            // interactive queries: the endpoints of every instance this one knows, printed on change
            Thread hosts = new Thread(() -> {
                String last = "";
                while (true) {
                    try {
                        Thread.sleep(300);
                        List<Integer> ports = new ArrayList<>();
                        for (org.apache.kafka.streams.StreamsMetadata m : streams.metadataForAllStreamsClients())
                            ports.add(m.hostInfo().port());
                        Collections.sort(ports);
                        String now = ports.toString();
                        if (!now.equals(last)) emit("hosts " + now);
                        last = now;
                    } catch (Exception e) {
                        // not running yet, or closing
                    }
                }
            });
            hosts.setDaemon(true);
            hosts.start();
        }
        closed.await();
    }
}
