// Conditional appends (key.versioning.enable) with Java kafka-clients, for
// tests/integration/test_key_versions.py.
//
//   KeyVersions BOOTSTRAP TOPIC [prop=value ...]   sends on stdin, one record a line:
//       key \t value \t expected version (empty: no chronik-expected-version header)
//     an empty line ends a group: its records are sent without waiting (one batch, with
//     linger.ms), then flushed, then each is reported, in order, as
//       "ok \t partition \t offset"  or  "error \t exception class \t message"
//     (the message's line breaks and tabs replaced by spaces).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KeyVersions {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("acks", "all");
        props.put("linger.ms", "50");
        props.put("delivery.timeout.ms", "30000");
        props.put("request.timeout.ms", "20000");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        for (int i = 2; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        String topic = args[1];
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> group = new ArrayList<>();
            String line;
            while (true) {
                line = in.readLine();
                if (line == null || line.isEmpty()) {
                    producer.flush();
                    for (Future<RecordMetadata> f : group) {
                        try {
                            RecordMetadata m = f.get();
                            System.out.println("ok\t" + m.partition() + "\t" + m.offset());
                        } catch (ExecutionException e) {
                            Throwable c = e.getCause();
                            String msg = String.valueOf(c.getMessage()).replaceAll("[\\t\\r\\n]", " ");
                            System.out.println("error\t" + c.getClass().getName() + "\t" + msg);
                        }
                    }
                    group.clear();
                    if (line == null) break;
                    continue;
                }
                String[] f = line.split("\t", -1);
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(
                        topic, f[0].getBytes(StandardCharsets.UTF_8), f[1].getBytes(StandardCharsets.UTF_8));
                if (!f[2].isEmpty()) {
                    record.headers().add("chronik-expected-version", f[2].getBytes(StandardCharsets.UTF_8));
                }
                group.add(producer.send(record));
            }
        }
    }
}
