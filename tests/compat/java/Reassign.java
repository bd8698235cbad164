// Drives Java kafka-clients' Admin partition reassignment for
// tests/integration/test_cluster_reassignment.py.
//
//   alter BOOTSTRAP TOPIC:PARTITION=REPLICAS ...   REPLICAS: broker ids joined by commas, or
//     "cancel"; prints "result \t topic \t partition \t ok|<exception class>"
//   list BOOTSTRAP                                 prints "ongoing \t topic \t partition \t
//     replicas \t adding \t removing" for every reassignment in progress, then "listed"
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;

public class Reassign {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[1]);
        try (Admin admin = Admin.create(props)) {
            switch (args[0]) {
                case "alter" -> alter(admin, args);
                case "list" -> list(admin);
                default -> throw new IllegalArgumentException(args[0]);
            }
        }
        System.out.flush();
    }

    static void alter(Admin admin, String[] args) throws Exception {
        Map<TopicPartition, Optional<NewPartitionReassignment>> wanted = new HashMap<>();
        for (int i = 2; i < args.length; i++) {
            String[] parts = args[i].split("=");
            int colon = parts[0].lastIndexOf(':');
            TopicPartition tp = new TopicPartition(parts[0].substring(0, colon),
                    Integer.parseInt(parts[0].substring(colon + 1)));
            if (parts[1].equals("cancel")) {
                wanted.put(tp, Optional.empty());
            } else {
                List<Integer> replicas = new ArrayList<>();
                for (String id : parts[1].split(",")) {
                    replicas.add(Integer.parseInt(id));
                }
                wanted.put(tp, Optional.of(new NewPartitionReassignment(replicas)));
            }
        }
        Map<TopicPartition, KafkaFuture<Void>> results =
                admin.alterPartitionReassignments(wanted).values();
        for (Map.Entry<TopicPartition, KafkaFuture<Void>> e : results.entrySet()) {
            String outcome;
            try {
                e.getValue().get();
                outcome = "ok";
            } catch (ExecutionException exc) {
                outcome = exc.getCause().getClass().getSimpleName();
            }
            System.out.println("result\t" + e.getKey().topic() + "\t" + e.getKey().partition()
                    + "\t" + outcome);
        }
    }

    static String joined(List<Integer> ids) {
        return ids.stream().map(String::valueOf).collect(Collectors.joining(","));
    }

    static void list(Admin admin) throws Exception {
        Map<TopicPartition, PartitionReassignment> ongoing =
                admin.listPartitionReassignments().reassignments().get();
        for (Map.Entry<TopicPartition, PartitionReassignment> e : ongoing.entrySet()) {
            PartitionReassignment r = e.getValue();
            System.out.println("ongoing\t" + e.getKey().topic() + "\t" + e.getKey().partition()
                    + "\t" + joined(r.replicas()) + "\t" + joined(r.addingReplicas()) + "\t"
                    + joined(r.removingReplicas()));
        }
        System.out.println("listed");
    }
}
