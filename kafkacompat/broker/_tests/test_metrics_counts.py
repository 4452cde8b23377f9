"""The sans-broker parts of broker/metrics.py: listener parsing, record counts, error-code walking,
latency buckets (the endpoint itself is tested with real clients in compat_tests/test_metrics.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkacompat.broker.metrics import (
    LATENCY_BUCKETS,
    RequestMetrics,
    RequestTimer,
    _error_codes,
    _record_count,
    parse_metrics_listener,
)
from kafkacompat.wire.messages import request_class, response_class
from kafkacompat.wire.records import build_batch


def test_parse_metrics_listener() -> None:
    assert parse_metrics_listener("http://127.0.0.1:9404") == ("127.0.0.1", 9404)
    assert parse_metrics_listener("http://:9404/") == ("", 9404)
    assert parse_metrics_listener("HTTP://[::1]:0") == ("::1", 0)
    for bad in ("127.0.0.1:9404", "https://h:1", "http://h:70000", "http://h"):
        with pytest.raises(ValueError):
            parse_metrics_listener(bad)


def test_record_count_reads_each_batch_header() -> None:
    batches = b"".join(
        build_batch([(b"k", b"v")] * n, base_offset=offset, base_timestamp=1)
        for offset, n in ((0, 3), (3, 1), (4, 7))
    )
    assert _record_count(memoryview(batches), len(batches)) == 11
    assert _record_count(b"", 0) == 0
    assert _record_count(batches[:30], 30) == 0  # a torn header counts nothing


def test_error_codes_walks_nested_responses() -> None:
    groups = response_class(15)  # DescribeGroups: one error code per group
    response = groups(
        groups=[
            groups.DescribedGroup(error_code=0, group_id="a"),
            groups.DescribedGroup(error_code=16, group_id="b"),
        ]
    )
    assert sorted(_error_codes(response)) == [0, 16]
    versions = response_class(18)
    assert list(_error_codes(versions(error_code=35, api_keys=[versions.ApiVersion(api_key=0)]))) == [35]


def test_finish_counts_a_produce_request_and_times_its_parts() -> None:
    produce, answer = request_class(0), response_class(0)
    batch = build_batch([(b"k", b"v" * 10)] * 4, base_timestamp=1)
    request = produce(
        acks=1,
        timeout_ms=100,
        topic_data=[
            produce.TopicProduceData(
                name="t",
                partition_data=[
                    produce.PartitionProduceData(index=0, records=memoryview(batch)),
                    produce.PartitionProduceData(index=1, records=memoryview(batch)),
                ],
            )
        ],
    )
    response = answer(
        responses=[
            answer.TopicProduceResponse(
                name="t",
                partition_responses=[
                    answer.PartitionProduceResponse(index=0, error_code=0),
                    answer.PartitionProduceResponse(index=1, error_code=6),  # NOT_LEADER: not appended
                ],
            )
        ]
    )
    metrics = RequestMetrics(metadata=None)
    timer = RequestTimer(0.0, park=None)  # type: ignore[arg-type]
    timer.received -= 0.003  # arrived 3 ms before handling began
    timer.parked = 0.0
    timer.done_handling()
    metrics.finish(timer, SimpleNamespace(api_key=0, api_version=9), request, response)  # type: ignore[arg-type]
    assert metrics.requests == {("Produce", 9): 1}
    assert metrics.errors == {("Produce", 0): 1, ("Produce", 6): 1}
    assert metrics.bytes_in == {"t": len(batch)}
    assert metrics.messages_in == {"t": 4}
    latencies = metrics.latencies["Produce"]
    assert latencies.sums[1] >= 0.0029  # queue time
    assert latencies.sums[0] >= latencies.sums[1]  # total covers queue
    assert [sum(counts) for counts in latencies.counts] == [1] * 5
    assert len(latencies.counts[0]) == len(LATENCY_BUCKETS) + 1


def test_a_bad_metrics_listener_is_a_config_error() -> None:
    from kafkacompat.config import BrokerConfig, ConfigError

    assert BrokerConfig.load(None, ["metrics.listener=http://127.0.0.1:9404"])["metrics.listener"]
    for bad in ("127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1:99999", "http://host"):
        with pytest.raises(ConfigError):
            BrokerConfig.load(None, [f"metrics.listener={bad}"])
