// The Java Kafka client (kafka-clients) driven from compat_tests/test_java_client.py.
//
// Each command does one thing with the stock client and prints what it saw, one fact per line
// ("word field field ..."), so the Python test can check it against what other clients wrote or read.
// Records are printed with keys and values hex-encoded ("-" for null) so any bytes survive.
// Exit status 0 means the command ran to its end; any client exception propagates (status 1).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaCompatProbe {
    private KafkaCompatProbe() {}

    public static void main(String[] args) throws Exception {
        String command = args[0];
        String bootstrap = args[1];
        switch (command) {
            case "admin" -> admin(bootstrap, args[2]);
            case "produce" -> produce(bootstrap, args[2], args[3], Integer.parseInt(args[4]));
            case "produce-report" -> produceReport(bootstrap, args[2], args[3]);
            case "consume-group" -> consumeGroup(bootstrap, args[2], args[3], Integer.parseInt(args[4]));
            case "offsets" -> offsets(bootstrap, args[2], Long.parseLong(args[3]));
            case "describe-group" -> describeGroup(bootstrap, args[2]);
            case "member" -> member(bootstrap, args[2], args[3], args[4], args[5], args[6]);
            case "broker-configs" -> brokerConfigs(bootstrap, args[2], args[3], args[4]);
            case "txn" -> txn(bootstrap, args[2], args[3], args[4]);
            case "txn-ctp" -> txnConsumeTransformProduce(bootstrap, args[2], args[3], args[4], args[5],
                    Integer.parseInt(args[6]));
            case "txn-fence" -> txnFence(bootstrap, args[2], args[3]);
            case "txn-admin" -> txnAdmin(bootstrap, args[2], args[3]);
            case "client-quotas" -> clientQuotas(bootstrap, args[2], args[3]);
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
    }

    static String hex(byte[] data) {
        if (data == null) return "-";
        if (data.length == 0) return "=";
        StringBuilder out = new StringBuilder();
        for (byte b : data) out.append(String.format("%02x", b));
        return out.toString();
    }

    // Every client starts from these; KAFKACOMPAT_CLIENT_CONFIG names a client properties file (security.protocol,
    // sasl.*, ssl.*, like the --command-config of Kafka's tools) whose settings are added on top.
    static Properties base(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", "kafkacompat-java-probe");
        String extra = System.getenv("KAFKACOMPAT_CLIENT_CONFIG");
        if (extra != null && !extra.isEmpty()) {
            try (java.io.FileInputStream in = new java.io.FileInputStream(extra)) {
                props.load(in);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return props;
    }

    // A byte-array consumer that starts from `reset` where it has no position.
    static Properties consumerProps(String bootstrap, String reset) {
        Properties props = base(bootstrap);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("auto.offset.reset", reset);
        return props;
    }

    // A group member that commits only when told to.
    static Properties memberProps(String bootstrap, String group) {
        Properties props = consumerProps(bootstrap, "earliest");
        props.put("group.id", group);
        props.put("enable.auto.commit", "false");
        return props;
    }

    // Create (and re-create: TopicExistsException), describe cluster/topic/configs, delete.
    static void admin(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                    .configs(Map.of("retention.ms", "3600000")))).all().get();
            System.out.println("created " + topic);
            try {
                admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
                System.out.println("recreated " + topic);
            } catch (ExecutionException e) {
                System.out.println("recreate-error " + e.getCause().getClass().getSimpleName());
            }
            DescribeClusterResult cluster = admin.describeCluster();
            for (Node node : cluster.nodes().get()) {
                System.out.println("node " + node.id() + " " + node.host() + " " + node.port());
            }
            System.out.println("cluster-id " + cluster.clusterId().get());
            System.out.println("controller " + cluster.controller().get().id());
            Set<String> names = admin.listTopics().names().get();
            System.out.println("listed " + names.contains(topic));
            TopicDescription description = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            for (TopicPartitionInfo p : description.partitions()) {
                System.out.println("partition " + p.partition() + " leader " + p.leader().id()
                        + " replicas " + p.replicas().size() + " isr " + p.isr().size());
            }
            System.out.println("topic-id " + (description.topicId() != null && !Uuid.ZERO_UUID.equals(description.topicId())));
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            ConfigEntry retention = config.get("retention.ms");
            System.out.println("config retention.ms " + retention.value() + " " + retention.source());
            ConfigEntry cleanup = config.get("cleanup.policy");
            System.out.println("config cleanup.policy " + cleanup.value() + " " + cleanup.source());
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
            int count = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            System.out.println("partitions-after-increase " + count);
            admin.deleteTopics(List.of(topic)).all().get();
            System.out.println("deleted " + topic);
            try {
                admin.deleteTopics(List.of(topic)).all().get();
                System.out.println("redeleted " + topic);
            } catch (ExecutionException e) {
                System.out.println("redelete-error " + e.getCause().getClass().getSimpleName());
            }
        }
    }

    // Idempotent acks=all producer (the Java client's defaults), keys/null values/headers, one codec.
    static void produce(String bootstrap, String topic, String codec, int count) throws Exception {
        Properties props = base(bootstrap);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.put("compression.type", codec);
        props.put("linger.ms", "5");
        try (Producer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                byte[] key = ("key-" + i).getBytes(StandardCharsets.UTF_8);
                byte[] value = i % 7 == 0 ? null : ("value " + i + " " + "x".repeat(i % 50)).getBytes(StandardCharsets.UTF_8);
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, i % 3, 1_700_000_000_000L + i, key, value);
                record.headers().add("n", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                acks.add(producer.send(record));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata m = acks.get(i).get();
                System.out.println("acked " + i + " " + m.partition() + " " + m.offset());
            }
        }
    }

    // One batch of records described by `spec` (comma-separated, one item per record: KEY[@AGE_MS], KEY "-"
    // for a null key, AGE_MS making the record's CreateTime that many ms before now, else now) sent to
    // partition 0 as a single Produce (linger and batch size large, one request in flight, acks=all, no
    // retries, not idempotent), then flushed. Prints "sent I TIMESTAMP" per record as it is sent, then each
    // record's outcome as the client reports it (KIP-467: with record_errors, the records named get their
    // own exception, the others the batch's):
    //   "record I ok OFFSET" or "record I error CLASS MESSAGE..." (the message runs to the end of the line),
    // then "end-offset N": the partition's latest offset (ListOffsets) after the send.
    static void produceReport(String bootstrap, String topic, String spec) throws Exception {
        Properties props = base(bootstrap);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.put("linger.ms", "600000");
        props.put("batch.size", Integer.toString(1 << 20));
        props.put("max.in.flight.requests.per.connection", "1");
        props.put("acks", "all");
        props.put("retries", "0");
        props.put("enable.idempotence", "false");
        String[] items = spec.split(",");
        List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
        try (Producer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.partitionsFor(topic);  // metadata first, so that every send below joins one batch
            long now = System.currentTimeMillis();
            for (int i = 0; i < items.length; i++) {
                String[] parts = items[i].split("@", 2);
                byte[] key = parts[0].equals("-") ? null : parts[0].getBytes(StandardCharsets.UTF_8);
                long timestamp = parts.length > 1 ? now - Long.parseLong(parts[1]) : now;
                byte[] value = ("v" + i).getBytes(StandardCharsets.UTF_8);
                sent.add(producer.send(new ProducerRecord<>(topic, 0, timestamp, key, value)));
                System.out.println("sent " + i + " " + timestamp);
            }
            producer.flush();
        }
        for (int i = 0; i < sent.size(); i++) {
            try {
                System.out.println("record " + i + " ok " + sent.get(i).get().offset());
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                System.out.println("record " + i + " error " + cause.getClass().getName() + " " + cause.getMessage());
            }
        }
        try (Admin admin = Admin.create(base(bootstrap))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            long end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset();
            System.out.println("end-offset " + end);
        }
    }

    // A subscribed group member: read `count` records, commit them, and print both.
    static void consumeGroup(String bootstrap, String topic, String group, int count) throws Exception {
        Properties props = memberProps(bootstrap, group);
        try (Consumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            int seen = 0;
            long deadline = System.currentTimeMillis() + 30_000;
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    StringBuilder headers = new StringBuilder();
                    for (Header h : r.headers()) headers.append(h.key()).append('=').append(hex(h.value())).append(',');
                    System.out.println("record " + r.partition() + " " + r.offset() + " " + r.timestamp() + " "
                            + hex(r.key()) + " " + hex(r.value()) + " " + (headers.length() == 0 ? "-" : headers));
                    seen++;
                }
            }
            consumer.commitSync();
            Set<TopicPartition> assigned = consumer.assignment();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(assigned).entrySet()) {
                System.out.println("committed " + e.getKey().partition() + " "
                        + (e.getValue() == null ? -1 : e.getValue().offset()));
            }
            System.out.println("generation " + consumer.groupMetadata().generationId());
        }
    }

    // The AdminClient's group calls (describe falls back from ConsumerGroupDescribe to DescribeGroups).
    static void describeGroup(String bootstrap, String group) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap))) {
            boolean listed = admin.listConsumerGroups().all().get().stream().anyMatch(g -> g.groupId().equals(group));
            System.out.println("group-listed " + listed);
            ConsumerGroupDescription description =
                    admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            System.out.println("group-state " + description.state() + " members " + description.members().size()
                    + " protocol " + (description.partitionAssignor().isEmpty() ? "-" : description.partitionAssignor()));
            Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                System.out.println("group-offset " + e.getKey().topic() + " " + e.getKey().partition() + " "
                        + e.getValue().offset());
            }
        }
    }

    static String partitionList(Collection<TopicPartition> partitions) {
        StringBuilder out = new StringBuilder();
        for (TopicPartition tp : partitions) out.append(out.length() == 0 ? "" : ",").append(tp.partition());
        return out.length() == 0 ? "-" : out.toString();
    }

    // One subscribed group member driven over stdin, a command per line, each answered by lines ending
    // in "done" (compat_tests/group_clients.py's Java driver):
    //   poll                -> "event assign|revoke P,Q" (rebalance callbacks), "record P O VALUEHEX",
    //                          then "assignment P,Q" ("-" for none)
    //   commit P:O,P:O      -> commitSync of those next offsets
    //   committed P,Q       -> "committed P O" per partition (-1 for none)
    //   close               -> consumer.close() (a dynamic member leaves the group), then exit
    // End of input halts the JVM at once, like a crash: no LeaveGroup, the session must time out.
    static void member(String bootstrap, String group, String topic, String instanceId, String sessionMs,
                       String heartbeatMs) throws Exception {
        Properties props = memberProps(bootstrap, group);
        props.put("session.timeout.ms", sessionMs);
        props.put("heartbeat.interval.ms", heartbeatMs);
        if (!instanceId.equals("-")) props.put("group.instance.id", instanceId);
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Consumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
        consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                System.out.println("event revoke " + partitionList(partitions));
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                System.out.println("event assign " + partitionList(partitions));
            }
        });
        System.out.println("done");
        System.out.flush();
        while (true) {
            String line = input.readLine();
            if (line == null) Runtime.getRuntime().halt(3);
            String[] words = line.split(" ");
            switch (words[0]) {
                case "poll" -> {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        System.out.println("record " + r.partition() + " " + r.offset() + " " + hex(r.value()));
                    }
                    System.out.println("assignment " + partitionList(consumer.assignment()));
                }
                case "commit" -> {
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (String item : words[1].split(",")) {
                        String[] po = item.split(":");
                        offsets.put(new TopicPartition(topic, Integer.parseInt(po[0])),
                                new OffsetAndMetadata(Long.parseLong(po[1])));
                    }
                    consumer.commitSync(offsets);
                }
                case "committed" -> {
                    Set<TopicPartition> partitions = new HashSet<>();
                    for (String item : words[1].split(",")) partitions.add(new TopicPartition(topic, Integer.parseInt(item)));
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(partitions).entrySet()) {
                        System.out.println("committed " + e.getKey().partition() + " "
                                + (e.getValue() == null ? -1 : e.getValue().offset()));
                    }
                }
                case "close" -> {
                    consumer.close();
                    System.out.println("done");
                    System.out.flush();
                    return;
                }
                default -> throw new IllegalArgumentException("unknown member command " + line);
            }
            System.out.println("done");
            System.out.flush();
        }
    }

    // Offset lookups on partition 0: beginning, end, by timestamp; a seek and one read; then a seek past
    // the end with auto.offset.reset=none, which must raise OffsetOutOfRangeException.
    static void offsets(String bootstrap, String topic, long timestamp) throws Exception {
        Properties props = consumerProps(bootstrap, "none");
        try (Consumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            System.out.println("beginning " + consumer.beginningOffsets(List.of(tp)).get(tp));
            System.out.println("end " + consumer.endOffsets(List.of(tp)).get(tp));
            OffsetAndTimestamp found = consumer.offsetsForTimes(Map.of(tp, timestamp)).get(tp);
            System.out.println("for-time " + (found == null ? "-" : found.offset() + " " + found.timestamp()));
            if (found != null) {
                consumer.seek(tp, found.offset());
                long deadline = System.currentTimeMillis() + 15_000;
                while (System.currentTimeMillis() < deadline) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                    if (!records.isEmpty()) {
                        ConsumerRecord<byte[], byte[]> r = records.iterator().next();
                        System.out.println("first-after-seek " + r.offset() + " " + r.timestamp());
                        break;
                    }
                }
            }
            consumer.seek(tp, 1_000_000L);
            String outcome = "none";
            long until = System.currentTimeMillis() + 10_000;
            while (outcome.equals("none") && System.currentTimeMillis() < until) {
                try {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                    if (!records.isEmpty()) outcome = "records";
                } catch (KafkaException e) {
                    outcome = e.getClass().getSimpleName();
                }
            }
            System.out.println("out-of-range " + outcome);
        }
    }

    static String synonyms(ConfigEntry entry) {
        StringBuilder out = new StringBuilder();
        for (ConfigEntry.ConfigSynonym s : entry.synonyms()) {
            out.append(out.length() == 0 ? "" : ",").append(s.source()).append(":").append(s.name()).append("=").append(s.value());
        }
        return out.length() == 0 ? "-" : out.toString();
    }

    static void printEntry(String word, ConfigEntry entry) {
        System.out.println(word + " " + entry.name() + " " + entry.value() + " " + entry.source() + " "
                + entry.isReadOnly() + " " + synonyms(entry));
    }

    // A dynamic broker config `name`=`value` set cluster-wide (resource name ""), seen by describing the
    // default entity, this broker and a new topic; a static setting refused; then removed again.
    static void brokerConfigs(String bootstrap, String topic, String name, String value) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap))) {
            String node = Integer.toString(admin.describeCluster().nodes().get().iterator().next().id());
            ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, node);
            DescribeConfigsOptions withSynonyms = new DescribeConfigsOptions().includeSynonyms(true);
            AlterConfigOp set = new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(cluster, List.of(set)),
                    new AlterConfigsOptions().validateOnly(true)).all().get();
            Config before = admin.describeConfigs(List.of(cluster)).all().get().get(cluster);
            System.out.println("validate-only-left " + before.entries().size());
            admin.incrementalAlterConfigs(Map.of(cluster, List.of(set))).all().get();
            Config defaults = admin.describeConfigs(List.of(cluster), withSynonyms).all().get().get(cluster);
            for (ConfigEntry entry : defaults.entries()) printEntry("default", entry);
            printEntry("broker", admin.describeConfigs(List.of(broker), withSynonyms).all().get().get(broker).get(name));
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config topicConfig = admin.describeConfigs(List.of(topicResource), withSynonyms).all().get().get(topicResource);
            for (ConfigEntry entry : topicConfig.entries()) {
                if (entry.source() == ConfigEntry.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) printEntry("topic", entry);
            }
            AlterConfigOp staticOnly = new AlterConfigOp(new ConfigEntry("log.retention.hours", "1"), AlterConfigOp.OpType.SET);
            try {
                admin.incrementalAlterConfigs(Map.of(broker, List.of(staticOnly))).all().get();
                System.out.println("refused none");
            } catch (ExecutionException e) {
                System.out.println("refused " + e.getCause().getClass().getSimpleName() + " " + e.getCause().getMessage());
            }
            AlterConfigOp delete = new AlterConfigOp(new ConfigEntry(name, ""), AlterConfigOp.OpType.DELETE);
            admin.incrementalAlterConfigs(Map.of(cluster, List.of(delete))).all().get();
            Config after = admin.describeConfigs(List.of(cluster)).all().get().get(cluster);
            System.out.println("after-delete " + after.entries().size());
            printEntry("broker-after", admin.describeConfigs(List.of(broker), withSynonyms).all().get().get(broker).get(name));
            admin.deleteTopics(List.of(topic)).all().get();
        }
    }

    // --- transactions ----------------------------------------------------------------------------------

    static Properties txnProducerProps(String bootstrap, String transactionalId) {
        Properties props = base(bootstrap);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.put("transactional.id", transactionalId);
        return props;
    }

    // Every record of `topic` (all partitions) up to the end offsets of this isolation level, printed as
    // "<prefix> <partition> <value as text>".
    static void readAll(String bootstrap, String topic, String isolation, String prefix) {
        Properties props = consumerProps(bootstrap, "earliest");
        props.put("isolation.level", isolation);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic)) tps.add(new TopicPartition(topic, info.partition()));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 30000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= consumer.position(tp) >= ends.get(tp);
                if (done) break;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println(prefix + " " + r.partition() + " " + new String(r.value(), StandardCharsets.UTF_8));
                }
            }
            for (TopicPartition tp : tps) System.out.println(prefix + "-end " + tp.partition() + " " + ends.get(tp));
        }
    }

    // A transactional producer: commit 10, abort 5 (sent first), commit 1; then both isolation levels read.
    static void txn(String bootstrap, String topic, String transactionalId, String codec) {
        Properties props = txnProducerProps(bootstrap, transactionalId);
        props.put("compression.type", codec);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, null, ("commit-" + i).getBytes(StandardCharsets.UTF_8)));
            }
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, null, ("abort-" + i).getBytes(StandardCharsets.UTF_8)));
            }
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, null, "commit-last".getBytes(StandardCharsets.UTF_8)));
            producer.commitTransaction();
            System.out.println("produced");
        }
        readAll(bootstrap, topic, "read_committed", "rc");
        readAll(bootstrap, topic, "read_uncommitted", "ru");
    }

    // Consume-transform-produce with sendOffsetsToTransaction until `count` records were processed.
    static void txnConsumeTransformProduce(String bootstrap, String source, String sink, String group,
            String transactionalId, int count) {
        Properties cprops = memberProps(bootstrap, group);
        cprops.put("isolation.level", "read_committed");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cprops);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(txnProducerProps(bootstrap, transactionalId))) {
            producer.initTransactions();
            consumer.subscribe(List.of(source));
            int done = 0;
            long deadline = System.currentTimeMillis() + 60000;
            while (done < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    byte[] out = ("java-" + new String(r.value(), StandardCharsets.UTF_8)).getBytes(StandardCharsets.UTF_8);
                    producer.send(new ProducerRecord<>(sink, 0, null, out));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                done += records.count();
            }
            System.out.println("processed " + done);
            Set<TopicPartition> assigned = consumer.assignment();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : consumer.committed(assigned).entrySet()) {
                System.out.println("committed " + e.getKey().partition() + " " + (e.getValue() == null ? -1 : e.getValue().offset()));
            }
        }
    }

    // A zombie: producer A opens a transaction, producer B with the same transactional id takes over.
    static void txnFence(String bootstrap, String topic, String transactionalId) {
        KafkaProducer<byte[], byte[]> zombie = new KafkaProducer<>(txnProducerProps(bootstrap, transactionalId));
        zombie.initTransactions();
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(topic, 0, null, "zombie".getBytes(StandardCharsets.UTF_8)));
        zombie.flush();
        try (KafkaProducer<byte[], byte[]> successor = new KafkaProducer<>(txnProducerProps(bootstrap, transactionalId))) {
            successor.initTransactions();
            successor.beginTransaction();
            successor.send(new ProducerRecord<>(topic, 0, null, "successor".getBytes(StandardCharsets.UTF_8)));
            successor.commitTransaction();
            System.out.println("successor-committed");
        }
        try {
            zombie.send(new ProducerRecord<>(topic, 0, null, "zombie-2".getBytes(StandardCharsets.UTF_8)));
            zombie.commitTransaction();
            System.out.println("zombie-committed");
        } catch (KafkaException e) {
            System.out.println("fenced " + e.getClass().getSimpleName());
        } finally {
            zombie.close(Duration.ofSeconds(5));
        }
        readAll(bootstrap, topic, "read_committed", "rc");
    }

    // Admin: a transaction left open is listed and described, then aborted through WriteTxnMarkers
    // (Admin.abortTransaction, what kafka-transactions.sh abort does) after finding it with DescribeProducers.
    // Client quotas through the Admin API: set producer_byte_rate and request_percentage of
    // (user, client-id), a consumer_byte_rate on the default client-id; describe the user's entity (strict)
    // and every client-id entity; remove one key; an unknown key refused; finally remove all.
    static void clientQuotas(String bootstrap, String user, String clientId) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap))) {
            Map<String, String> names = new HashMap<>();
            names.put(org.apache.kafka.common.quota.ClientQuotaEntity.USER, user);
            names.put(org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID, clientId);
            var entity = new org.apache.kafka.common.quota.ClientQuotaEntity(names);
            Map<String, String> defaults = new HashMap<>();
            defaults.put(org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID, null);
            var defaultClient = new org.apache.kafka.common.quota.ClientQuotaEntity(defaults);
            admin.alterClientQuotas(List.of(
                new org.apache.kafka.common.quota.ClientQuotaAlteration(entity, List.of(
                    new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                    new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("request_percentage", 50.0))),
                new org.apache.kafka.common.quota.ClientQuotaAlteration(defaultClient, List.of(
                    new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0)))
            )).all().get();
            printQuotas("strict", admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.containsOnly(List.of(
                org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity(org.apache.kafka.common.quota.ClientQuotaEntity.USER, user),
                org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity(org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID, clientId)
            ))).entities().get());
            printQuotas("clients", admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.contains(List.of(
                org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntityType(org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID)
            ))).entities().get());
            admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(entity, List.of(
                new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("request_percentage", null))))).all().get();
            printQuotas("removed", admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.containsOnly(List.of(
                org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity(org.apache.kafka.common.quota.ClientQuotaEntity.USER, user),
                org.apache.kafka.common.quota.ClientQuotaFilterComponent.ofEntity(org.apache.kafka.common.quota.ClientQuotaEntity.CLIENT_ID, clientId)
            ))).entities().get());
            try {
                admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(entity, List.of(
                    new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("no_such_quota", 1.0))))).all().get();
                System.out.println("unknown-key accepted");
            } catch (ExecutionException e) {
                System.out.println("unknown-key " + e.getCause().getClass().getSimpleName());
            }
            admin.alterClientQuotas(List.of(
                new org.apache.kafka.common.quota.ClientQuotaAlteration(entity, List.of(
                    new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("producer_byte_rate", null))),
                new org.apache.kafka.common.quota.ClientQuotaAlteration(defaultClient, List.of(
                    new org.apache.kafka.common.quota.ClientQuotaAlteration.Op("consumer_byte_rate", null)))
            )).all().get();
        }
    }

    static void printQuotas(String label, Map<org.apache.kafka.common.quota.ClientQuotaEntity, Map<String, Double>> found) {
        List<String> lines = new ArrayList<>();
        for (var e : found.entrySet()) {
            var entries = new TreeMap<>(e.getKey().entries());
            StringBuilder line = new StringBuilder(label);
            entries.forEach((k, v) -> line.append(" ").append(k).append("=").append(v == null ? "<default>" : v));
            new TreeMap<>(e.getValue()).forEach((k, v) -> line.append(" ").append(k).append(":").append(v));
            lines.add(line.toString());
        }
        Collections.sort(lines);
        lines.forEach(System.out::println);
        if (lines.isEmpty()) {
            System.out.println(label + " none");
        }
    }

    static void txnAdmin(String bootstrap, String topic, String transactionalId) throws Exception {
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(txnProducerProps(bootstrap, transactionalId));
        producer.initTransactions();
        producer.beginTransaction();
        producer.send(new ProducerRecord<>(topic, 0, null, "hanging".getBytes(StandardCharsets.UTF_8)));
        producer.flush();
        try (Admin admin = Admin.create(base(bootstrap))) {
            for (TransactionListing listing : admin.listTransactions().all().get()) {
                if (listing.transactionalId().equals(transactionalId)) {
                    System.out.println("listed " + listing.transactionalId() + " " + listing.state());
                }
            }
            TransactionDescription d = admin.describeTransactions(List.of(transactionalId)).all().get().get(transactionalId);
            System.out.println("described " + d.state() + " " + d.producerEpoch() + " " + d.topicPartitions().size()
                    + " " + d.transactionTimeoutMs());
            TopicPartition tp = new TopicPartition(topic, 0);
            DescribeProducersResult.PartitionProducerState state = admin.describeProducers(List.of(tp)).partitionResult(tp).get();
            for (ProducerState p : state.activeProducers()) {
                System.out.println("producer " + p.producerId() + " " + p.producerEpoch() + " "
                        + p.currentTransactionStartOffset().orElse(-1L) + " " + p.coordinatorEpoch().orElse(-1));
                if (p.currentTransactionStartOffset().isPresent()) {
                    admin.abortTransaction(new AbortTransactionSpec(tp, p.producerId(), (short) p.producerEpoch(),
                            p.coordinatorEpoch().orElse(0))).all().get();
                    System.out.println("aborted " + p.producerId());
                    readAll(bootstrap, topic, "read_committed", "after-abort");  // the producer is still open
                }
            }
        } finally {
            producer.close(Duration.ofSeconds(1));
        }
        readAll(bootstrap, topic, "read_committed", "rc");
    }
}
