// The Java client's Admin asking a cluster about one topic's replicas (compat_tests/test_cluster.py).
//
// Usage: ReplicaStateProbe BOOTSTRAP TOPIC BROKER_ID...
// Prints one fact per line:
//   "logdir BROKER PARTITION SIZE OFFSET_LAG FUTURE" for every replica of TOPIC each broker reports
//     through DescribeLogDirs (Admin.describeLogDirs, one request per broker);
//   "logdir-error BROKER DIR ERROR" for a log dir a broker reports with an error;
//   "partition PARTITION LEADER REPLICAS ISR" (comma-separated ids) from Admin.describeTopics, which
//     kafka-clients 3.9 sends as DescribeTopicPartitions.

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public final class ReplicaStateProbe {
    private ReplicaStateProbe() {}

    static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        String topic = args[1];
        List<Integer> brokers = new ArrayList<>();
        for (int i = 2; i < args.length; i++) brokers.add(Integer.parseInt(args[i]));
        try (Admin admin = Admin.create(props)) {
            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(brokers).allDescriptions().get();
            for (int broker : brokers) {
                for (Map.Entry<String, LogDirDescription> dir : dirs.get(broker).entrySet()) {
                    LogDirDescription description = dir.getValue();
                    if (description.error() != null) {
                        System.out.println("logdir-error " + broker + " " + dir.getKey() + " " + description.error());
                        continue;
                    }
                    for (Map.Entry<TopicPartition, ReplicaInfo> replica : description.replicaInfos().entrySet()) {
                        if (!replica.getKey().topic().equals(topic)) continue;
                        ReplicaInfo info = replica.getValue();
                        System.out.println("logdir " + broker + " " + replica.getKey().partition() + " " + info.size()
                                + " " + info.offsetLag() + " " + info.isFuture());
                    }
                }
            }
            TopicDescription described = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            for (TopicPartitionInfo partition : described.partitions()) {
                Node leader = partition.leader();
                System.out.println("partition " + partition.partition() + " " + (leader == null ? -1 : leader.id())
                        + " " + ids(partition.replicas()) + " " + ids(partition.isr()));
            }
        }
    }
}
