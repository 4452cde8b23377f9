"""The Java producer's per-record errors (KIP-467, issue 35): what kafka-clients 3.9.2 reports for each
record of a batch the broker refused with `record_errors`.

compat_tests/java/KafkaCompatProbe.java's `produce-report` sends one batch (one Produce, acks=all, no
retries, not idempotent) of records to partition 0 and prints each record's outcome. The client's rules
(Sender.failBatch, ProducerBatch.completeExceptionally): with record_errors in the partition's answer, a
record named there gets the exception of the partition's error code with the record's message when it is
the only one named, else an InvalidRecordException with it (the record's message, or else the top-level
error_message); every other record of the batch gets a plain KafkaException saying it was part of a batch
with invalid records. Without record_errors every record gets the top-level exception, so these tests
tell a broker that names the records from one that does not. test_hostile_batches.py checks the same
answers on the wire and through librdkafka's delivery reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from compat_tests.test_java_client import JavaProbe, _lines, java  # noqa: F401  (the session fixture)

INVALID_RECORD_EXCEPTION = "org.apache.kafka.common.InvalidRecordException"
INVALID_TIMESTAMP_EXCEPTION = "org.apache.kafka.common.errors.InvalidTimestampException"
BATCH_EXCEPTION = "org.apache.kafka.common.KafkaException"
# the client's own words (Sender.failBatch), typo included
BATCH_MESSAGE = (
    "Failed to append record because it was part of a batch which had one more more invalid records"
)
WITHIN = "The timestamp should be within ["
HOUR_MS = 3_600_000
DAY_MS = 86_400_000


def outcomes(out: list[list[str]]) -> dict[int, tuple[str, ...]]:
    """Record index -> ("ok", offset) or ("error", exception class, message)."""
    found: dict[int, tuple[str, ...]] = {}
    for fields in _lines(out, "record"):
        index, kind, rest = int(fields[0]), fields[1], fields[2:]
        found[index] = ("ok", rest[0]) if kind == "ok" else ("error", rest[0], " ".join(rest[1:]))
    return found


def end_offset(out: list[list[str]]) -> int:
    [[offset]] = _lines(out, "end-offset")
    return int(offset)


def test_keyless_records_on_a_compacted_topic_are_named_to_the_java_producer(
    bootstrap: str,
    make_topic: Callable[..., str],
    java: JavaProbe,  # noqa: F811
) -> None:
    # two records named (LogValidator.validateKey): InvalidRecordException with each record's message
    topic = make_topic(configs={"cleanup.policy": "compact"})
    out = java("produce-report", bootstrap, topic, "k0,-,k2,-")
    keyless = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    batch = ("error", BATCH_EXCEPTION, BATCH_MESSAGE)
    named = ("error", INVALID_RECORD_EXCEPTION, keyless)
    assert outcomes(out) == {0: batch, 1: named, 2: batch, 3: named}, out
    assert end_offset(out) == 0, "a refused batch appended records"


@pytest.mark.parametrize(
    ("stale", "exception"),
    [
        # one record named: the client raises the partition error's own exception with the record's
        # message, InvalidTimestampException (an ApiException, not an InvalidRecordException)
        ([2], INVALID_TIMESTAMP_EXCEPTION),
        # more than one: InvalidRecordException for each, whatever the partition's error code
        ([1, 3], INVALID_RECORD_EXCEPTION),
    ],
    ids=["one", "two"],
)
def test_stale_timestamps_are_named_to_the_java_producer(
    bootstrap: str,
    make_topic: Callable[..., str],
    java: JavaProbe,  # noqa: F811
    stale: list[int],
    exception: str,
) -> None:
    # LogValidator.validateTimestamp (message.timestamp.before.max.ms): INVALID_TIMESTAMP, record_errors.
    # after.max.ms is set as well so that the message's upper bound is the same on every broker (Kafka
    # 4.4's default is an hour; a broker with Long.MAX_VALUE there prints now + Long.MAX_VALUE)
    bounds = {"message.timestamp.before.max.ms": str(HOUR_MS), "message.timestamp.after.max.ms": str(HOUR_MS)}
    topic = make_topic(configs=bounds)
    spec = ",".join(f"r{i}@{2 * DAY_MS}" if i in stale else f"r{i}" for i in range(5))
    started = time.time() * 1000
    out = java("produce-report", bootstrap, topic, spec)
    finished = time.time() * 1000
    results = outcomes(out)
    batch = ("error", BATCH_EXCEPTION, BATCH_MESSAGE)
    others = [i for i in range(5) if i not in stale]
    assert sorted(results) == list(range(5)), out
    assert {i: results[i] for i in others} == dict.fromkeys(others, batch), out
    sent = {int(i): int(ts) for i, ts in _lines(out, "sent")}
    for i in stale:
        kind, raised, message = results[i]
        assert (kind, raised) == ("error", exception), out
        prefix = f"Timestamp {sent[i]} of message with offset {i} is out of range. " + WITHIN
        assert message.startswith(prefix) and message.endswith("]"), message
        lower, upper = (int(bound) for bound in message[len(prefix) : -1].split(", "))
        assert started - HOUR_MS <= lower <= finished - HOUR_MS, message  # the broker's now, less an hour
        assert upper - lower == 2 * HOUR_MS, message
    assert end_offset(out) == 0, "a refused batch appended records"


def test_timestamps_within_range_are_all_acknowledged_to_the_java_producer(
    bootstrap: str,
    make_topic: Callable[..., str],
    java: JavaProbe,  # noqa: F811
) -> None:
    topic = make_topic(configs={"message.timestamp.before.max.ms": str(HOUR_MS)})
    out = java("produce-report", bootstrap, topic, "a,b@60000,c@1800000,d")
    assert outcomes(out) == {i: ("ok", str(i)) for i in range(4)}, out
    assert end_offset(out) == 4
