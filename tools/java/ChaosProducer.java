// The Java client's producer in tools/cluster_chaos.py: idempotent, acks=all (kafka-clients' defaults,
// stated anyway), writing numbered records to one partition until its standard input closes.
//
// Usage: ChaosProducer BOOTSTRAP TOPIC PARTITION PREFIX PACE (PACE records, then 10 ms of sleep)
// Values are PREFIX followed by a 10-digit sequence number. Every acknowledgement is printed as
// "ack OFFSET VALUE NANOTIME" (System.nanoTime is CLOCK_MONOTONIC on Linux, the clock of Python's
// time.monotonic, so the caller can place acknowledgements beside its own failover times); every
// delivery failure as "error VALUE MESSAGE". Closing stdin stops sending; the producer is flushed and
// "done SENT" printed last.

import java.io.BufferedOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ChaosProducer {
    private ChaosProducer() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partition = Integer.parseInt(args[2]);
        String prefix = args[3];
        int pace = Integer.parseInt(args[4]);
        PrintStream out = new PrintStream(new BufferedOutputStream(System.out, 1 << 16), false, "UTF-8");
        AtomicBoolean running = new AtomicBoolean(true);
        Thread stdinWatch = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // anything before end of input is ignored
                }
            } catch (java.io.IOException ignored) {
                // a closed pipe ends the run as end of input does
            }
            running.set(false);
        });
        stdinWatch.setDaemon(true);
        stdinWatch.start();

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("enable.idempotence", "true");
        props.put("acks", "all");
        props.put("linger.ms", "2");
        props.put("delivery.timeout.ms", "300000");
        props.put("request.timeout.ms", "30000");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        long sent = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            while (running.get()) {
                String value = prefix + String.format("%010d", sent);
                producer.send(
                        new ProducerRecord<>(topic, partition, null, value.getBytes(StandardCharsets.UTF_8)),
                        (metadata, error) -> {
                            synchronized (out) {
                                if (error == null) {
                                    out.println("ack " + metadata.offset() + " " + value + " " + System.nanoTime());
                                } else {
                                    out.println("error " + value + " " + error.toString().replace('\n', ' '));
                                }
                            }
                        });
                sent++;
                if (sent % pace == 0) {
                    Thread.sleep(10); // the confluent-kafka writer's pace; two cores are shared
                    synchronized (out) {
                        out.flush();
                    }
                }
            }
            producer.flush();
        }
        synchronized (out) {
            out.println("done " + sent);
            out.flush();
        }
    }
}
