"""A consume-transform-produce worker for the exactly-once test (run as a child process and SIGKILLed).

`python -m compat_tests.eos_worker BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID` reads SOURCE with
read_committed as a static member of GROUP, and for each batch writes `out-<value>` to SINK and commits
the batch's offsets in the same transaction (send_offsets_to_transaction), forever. It prints "ready"
once initialized and "in-txn" each time a transaction's output has been written but not committed.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": transactional_id,  # a restarted worker takes its predecessor's place
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)  # fences (and aborts) the killed predecessor's transaction
    consumer.subscribe([source])
    print("ready", flush=True)
    while True:
        batch = [m for m in consumer.consume(5, 0.2) if not m.error()]
        if not batch:
            continue
        producer.begin_transaction()
        for message in batch:
            producer.produce(sink, value=b"out-" + message.value(), partition=0)
        producer.flush(30)
        print("in-txn", flush=True)  # the output is in the log, the transaction still open
        time.sleep(0.01)  # widen the window in which a kill lands mid-transaction
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)


if __name__ == "__main__":
    main(*sys.argv[1:6])
