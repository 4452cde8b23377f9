// The Java Admin client against a kafkacompat cluster (compat_tests/test_cluster_security.py).
//
// grant BOOTSTRAP USER PASSWORD TOPIC: creates USER's SCRAM-SHA-512 credential and allows it to write
//   and describe TOPIC, with one Admin client; prints "granted".
// race BOOTSTRAP_A BOOTSTRAP_B USER TOPIC ROUNDS: two Admin clients, each bootstrapped on its own broker,
//   in two threads at once: A sets USER's producer_byte_rate and adds a READ ACL on TOPIC for User:USER-a-i,
//   B sets consumer_byte_rate and adds one for User:USER-b-i, ROUNDS times each; prints "raced".
// Exit status 0 means the command ran to its end; any client exception propagates (status 1).

import java.util.*;
import java.util.concurrent.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.quota.*;
import org.apache.kafka.common.resource.*;

public final class ClusterSecurityProbe {
    private ClusterSecurityProbe() {}

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "grant" -> grant(args[1], args[2], args[3], args[4]);
            case "race" -> race(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]));
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    static Admin admin(String bootstrap) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(props);
    }

    static AclBinding allow(String principal, String topic, AclOperation operation) {
        return new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
            new AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW));
    }

    static void grant(String bootstrap, String user, String password, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user,
                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password))).all().get();
            admin.createAcls(List.of(allow("User:" + user, topic, AclOperation.WRITE),
                allow("User:" + user, topic, AclOperation.DESCRIBE))).all().get();
        }
        System.out.println("granted");
    }

    static void race(String bootstrapA, String bootstrapB, String user, String topic, int rounds)
            throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(2);
        CountDownLatch start = new CountDownLatch(1);
        List<Future<?>> done = new ArrayList<>();
        for (String[] side : new String[][] {{bootstrapA, "a", "producer_byte_rate"},
                                               {bootstrapB, "b", "consumer_byte_rate"}}) {
            done.add(pool.submit(() -> {
                try (Admin admin = admin(side[0])) {
                    ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, user));
                    start.await();
                    for (int i = 0; i < rounds; i++) {
                        admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity,
                            List.of(new ClientQuotaAlteration.Op(side[2], 1024.0 * (i + 1)))))).all().get();
                        admin.createAcls(List.of(allow("User:" + user + "-" + side[1] + "-" + i, topic,
                            AclOperation.READ))).all().get();
                    }
                }
                return null;
            }));
        }
        start.countDown();
        for (Future<?> future : done) {
            future.get();
        }
        pool.shutdown();
        System.out.println("raced");
    }
}
