// Drives Java kafka-clients for tests/integration/test_client_java.py.
//
//   produce BOOTSTRAP TOPIC PARTITIONS [prop=value ...]   records on stdin, one a line:
//       timestamp \t base64(key) \t base64(value) \t name:base64(value),name:base64(value)
//     creates the topic first when PARTITIONS > 0; prints "sent \t partition \t offset"
//   consume BOOTSTRAP TOPIC PARTITIONS COUNT [OFFSET]    assign every partition, seek to
//     OFFSET (or the beginning), print COUNT records as
//       "got \t partition \t offset \t timestamp \t key \t value \t headers" (same encodings)
//   offsets BOOTSTRAP TOPIC TIMESTAMP...                 prints "earliest|latest \t p \t offset"
//     and "time \t timestamp \t p \t offset" (-1 when no record is at or after it)
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ChronikClient {
    static final Base64.Encoder B64 = Base64.getEncoder();
    static final Base64.Decoder UNB64 = Base64.getDecoder();

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String bootstrap = args[1];
        String topic = args[2];
        switch (mode) {
            case "produce" -> produce(bootstrap, topic, Integer.parseInt(args[3]), args);
            case "consume" -> consume(bootstrap, topic, Integer.parseInt(args[3]),
                    Integer.parseInt(args[4]), args.length > 5 ? Long.parseLong(args[5]) : -1);
            case "offsets" -> offsets(bootstrap, topic, args);
            default -> throw new IllegalArgumentException(mode);
        }
        System.out.flush();
    }

    /** Every client's base settings: the bootstrap, and the client properties file named
     *  by $CHRONIK_CLIENT_CONFIG (security.protocol, sasl.*, ssl.*), if any. */
    static Properties base(String bootstrap) {
        Properties props = new Properties();
        String config = System.getenv("CHRONIK_CLIENT_CONFIG");
        if (config != null && !config.isEmpty()) {
            try (var in = new java.io.FileInputStream(config)) {
                props.load(in);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        props.put("bootstrap.servers", bootstrap);
        return props;
    }

    static void produce(String bootstrap, String topic, int partitions, String[] args)
            throws Exception {
        if (partitions > 0) {
            Properties adminProps = base(bootstrap);
            try (Admin admin = Admin.create(adminProps)) {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
            }
        }
        Properties props = base(bootstrap);
        props.put("linger.ms", "20");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isEmpty()) continue;
                String[] f = line.split("\t", -1);
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(
                        topic, null, Long.parseLong(f[0]), UNB64.decode(f[1]), UNB64.decode(f[2]));
                if (!f[3].isEmpty()) {
                    for (String h : f[3].split(",")) {
                        String[] kv = h.split(":", 2);
                        record.headers().add(kv[0], UNB64.decode(kv[1]));
                    }
                }
                sent.add(producer.send(record));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata m = f.get();
                System.out.println("sent\t" + m.partition() + "\t" + m.offset());
            }
        }
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap) {
        Properties props = base(bootstrap);
        props.put("enable.auto.commit", "false");
        props.put("fetch.max.wait.ms", "200");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(props);
    }

    static void consume(String bootstrap, String topic, int partitions, int count, long offset) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
            consumer.assign(tps);
            if (offset < 0) consumer.seekToBeginning(tps);
            else for (TopicPartition tp : tps) consumer.seek(tp, offset);
            int seen = 0;
            long deadline = System.currentTimeMillis() + 90_000;
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    StringBuilder headers = new StringBuilder();
                    for (Header h : r.headers()) {
                        if (headers.length() > 0) headers.append(',');
                        headers.append(h.key()).append(':').append(B64.encodeToString(h.value()));
                    }
                    System.out.println("got\t" + r.partition() + "\t" + r.offset() + "\t" + r.timestamp()
                            + "\t" + B64.encodeToString(r.key()) + "\t" + B64.encodeToString(r.value())
                            + "\t" + headers);
                    seen++;
                }
            }
        }
    }

    static void offsets(String bootstrap, String topic, String[] args) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap)) {
            List<TopicPartition> tps = new ArrayList<>();
            consumer.partitionsFor(topic).forEach(i -> tps.add(new TopicPartition(topic, i.partition())));
            consumer.beginningOffsets(tps).forEach((tp, o) ->
                    System.out.println("earliest\t" + tp.partition() + "\t" + o));
            consumer.endOffsets(tps).forEach((tp, o) ->
                    System.out.println("latest\t" + tp.partition() + "\t" + o));
            for (int i = 3; i < args.length; i++) {
                long ts = Long.parseLong(args[i]);
                Map<TopicPartition, Long> query = new HashMap<>();
                for (TopicPartition tp : tps) query.put(tp, ts);
                for (Map.Entry<TopicPartition, OffsetAndTimestamp> e : consumer.offsetsForTimes(query).entrySet()) {
                    long o = e.getValue() == null ? -1 : e.getValue().offset();
                    System.out.println("time\t" + ts + "\t" + e.getKey().partition() + "\t" + o);
                }
            }
        }
    }
}
