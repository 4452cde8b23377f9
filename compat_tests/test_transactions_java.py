"""Transactions with the Java client (kafka-clients 3.9.2, through compat_tests/java/KafkaCompatProbe.java):
commit/abort with every codec, sendOffsetsToTransaction, fencing, and the Admin transaction calls
(listTransactions, describeTransactions, describeProducers, abortTransaction through WriteTxnMarkers)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from compat_tests.test_java_client import JavaProbe, _lines, java  # noqa: F401  (the session fixture)
from compat_tests.test_transactions import CODECS, read_to_end, values


def _tid(name: str) -> str:
    return f"compat-java-{name}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("codec", CODECS)
def test_java_commit_and_abort(bootstrap: str, make_topic: Any, java: JavaProbe, codec: str) -> None:  # noqa: F811
    topic = make_topic(partitions=2)
    out = java("txn", bootstrap, topic, _tid(codec), codec)
    assert _lines(out, "produced") == [[]]
    committed = sorted([f"commit-{i}" for i in range(10)] + ["commit-last"])
    aborted = [f"abort-{i}" for i in range(5)]
    assert sorted(value for _, value in _lines(out, "rc")) == committed
    assert sorted(value for _, value in _lines(out, "ru")) == sorted(committed + aborted)
    # 6 + 3 records and 3 markers in partition 0, 5 + 2 and 2 in partition 1: the LSO is the log end
    assert _lines(out, "rc-end") == [["0", "12"], ["1", "9"]]
    assert _lines(out, "ru-end") == [["0", "12"], ["1", "9"]]
    # librdkafka reads what the Java client committed, and nothing it aborted
    assert values(read_to_end(bootstrap, topic, 2, "read_committed")) == sorted(c.encode() for c in committed)


def test_java_send_offsets_to_transaction(bootstrap: str, make_topic: Any, java: JavaProbe) -> None:  # noqa: F811
    from confluent_kafka import Producer

    source, sink = make_topic(partitions=2), make_topic(partitions=1)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        plain.produce(source, value=b"%d" % i, partition=i % 2)
    assert plain.flush(30) == 0
    group = f"java-eos-{uuid.uuid4().hex[:6]}"
    out = java("txn-ctp", bootstrap, source, sink, group, _tid("ctp"), "20")
    assert _lines(out, "processed") == [["20"]]
    assert sorted(_lines(out, "committed")) == [["0", "10"], ["1", "10"]]
    assert values(read_to_end(bootstrap, sink, 1, "read_committed")) == sorted(
        b"java-%d" % i for i in range(20)
    )


def test_java_zombie_is_fenced(bootstrap: str, make_topic: Any, java: JavaProbe) -> None:  # noqa: F811
    topic = make_topic(partitions=1)
    out = java("txn-fence", bootstrap, topic, _tid("fence"))
    assert _lines(out, "successor-committed") == [[]]
    [[exception]] = _lines(out, "fenced")
    assert exception in ("ProducerFencedException", "InvalidProducerEpochException")
    assert [value for _, value in _lines(out, "rc")] == ["successor"]


def test_java_admin_lists_describes_and_aborts(bootstrap: str, make_topic: Any, java: JavaProbe) -> None:  # noqa: F811
    topic = make_topic(partitions=1)
    tid = _tid("admin")
    out = java("txn-admin", bootstrap, topic, tid)
    assert _lines(out, "listed") == [[tid, "Ongoing"]]
    [[state, epoch, partitions, timeout]] = _lines(out, "described")
    assert (state, epoch, partitions, timeout) == ("Ongoing", "0", "1", "60000")
    [[_, _, start, _]] = _lines(out, "producer")
    assert start == "0"  # the open transaction starts at offset 0
    assert len(_lines(out, "aborted")) == 1
    # the marker abortTransaction wrote moved the LSO past the hanging record at once
    assert _lines(out, "after-abort") == [] and _lines(out, "after-abort-end") == [["0", "2"]]
    # the record, the ABORT marker abortTransaction wrote, and the one of the producer's own abort when
    # it closes (the Java producer aborts an open transaction on close)
    assert _lines(out, "rc") == [] and _lines(out, "rc-end") == [["0", "3"]]
