// The Java Admin client against a kafkacompat cluster (compat_tests/test_cluster_security.py).
//
// grant BOOTSTRAP USER PASSWORD TOPIC: creates USER's SCRAM-SHA-512 credential and allows it to write
//   and describe TOPIC, with one Admin client; prints "granted".
// race BOOTSTRAP_A BOOTSTRAP_B USER TOPIC ROUNDS: two Admin clients, each bootstrapped on its own broker,
//   in two threads at once: A sets USER's producer_byte_rate and adds a READ ACL on TOPIC for User:USER-a-i,
//   B sets consumer_byte_rate and adds one for User:USER-b-i, ROUNDS times each; prints "raced".
// decode SECRET STORED: decrypts one stored sensitive broker config with the JDK's own PBKDF2 and AES (the
//   providers Kafka's password encoder uses), reading the parameters from STORED; prints the password's
//   UTF-8 bytes in hex.
// Exit status 0 means the command ran to its end; any client exception propagates (status 1).

import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;

import javax.crypto.Cipher;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.IvParameterSpec;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;

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
            case "decode" -> decode(args[1], args[2]);
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

    static void decode(String secret, String stored) throws Exception {
        Map<String, String> fields = new HashMap<>();
        for (String item : stored.split(",")) {
            int colon = item.indexOf(':');
            fields.put(item.substring(0, colon), item.substring(colon + 1));
        }
        Base64.Decoder base64 = Base64.getDecoder();
        PBEKeySpec spec = new PBEKeySpec(secret.toCharArray(), base64.decode(fields.get("salt")),
            Integer.parseInt(fields.get("iterations")), Integer.parseInt(fields.get("keyLength")));
        byte[] key = SecretKeyFactory.getInstance(fields.get("keyFactoryAlgorithm")).generateSecret(spec).getEncoded();
        String transformation = fields.get("cipherAlgorithm");
        Cipher cipher = Cipher.getInstance(transformation);
        cipher.init(Cipher.DECRYPT_MODE, new SecretKeySpec(key, transformation.split("/")[0]),
            new IvParameterSpec(base64.decode(fields.get("initializationVector"))));
        byte[] plain = cipher.doFinal(base64.decode(fields.get("encryptedPassword")));
        String password = new String(plain, StandardCharsets.UTF_8);
        if (password.length() != Integer.parseInt(fields.get("passwordLength"))) {
            throw new IllegalStateException("passwordLength does not match");
        }
        System.out.println(HexFormat.of().formatHex(plain));
    }
}
