#!/usr/bin/env python3
"""Codec benchmark: our generated codecs next to kafka-python 3.x's protocol classes, same run.

Three messages: a Produce v9 request and a Fetch v12 response with 16 partitions of 64 KiB records
each, and a Metadata v12 response with 1,000 partitions (10 topics x 100, 3 replicas). For each we
time decode and encode (best of several rounds, each round many iterations) and print µs per
message and the ratio kafka-python / ours. Both sides get the same bytes; both sides encode to
bytes-like output (ours: the chunk list with the records copied in; kafka-python: bytes).

Usage: tools/bench_codec.py [--rounds N] [--min-time SECONDS]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafkacompat.wire import messages
from kafkacompat.wire.api_keys import ApiKey

RECORDS = bytes(range(256)) * 256  # 64 KiB
PARTITIONS = 16


def our_produce() -> Any:
    cls = messages.API_SPECS[ApiKey.PRODUCE].request_class
    return cls(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            cls.TopicProduceData(
                name="bench-topic",
                partition_data=[
                    cls.PartitionProduceData(index=i, records=RECORDS) for i in range(PARTITIONS)
                ],
            )
        ],
    )


def our_fetch() -> Any:
    cls = messages.API_SPECS[ApiKey.FETCH].response_class
    return cls(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            cls.FetchableTopicResponse(
                topic="bench-topic",
                partitions=[
                    cls.PartitionData(
                        partition_index=i,
                        error_code=0,
                        high_watermark=1_000_000 + i,
                        last_stable_offset=1_000_000 + i,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=RECORDS,
                    )
                    for i in range(PARTITIONS)
                ],
            )
        ],
    )


def our_metadata() -> Any:
    cls = messages.API_SPECS[ApiKey.METADATA].response_class
    brokers = [cls.MetadataResponseBroker(node_id=i, host=f"broker-{i}.example", port=9092, rack=None)
               for i in range(3)]
    topics = []
    for t in range(10):
        parts = [
            cls.MetadataResponsePartition(
                error_code=0,
                partition_index=p,
                leader_id=p % 3,
                leader_epoch=5,
                replica_nodes=[p % 3, (p + 1) % 3, (p + 2) % 3],
                isr_nodes=[p % 3, (p + 1) % 3, (p + 2) % 3],
                offline_replicas=[],
            )
            for p in range(100)
        ]
        topics.append(
            cls.MetadataResponseTopic(
                error_code=0,
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                is_internal=False,
                partitions=parts,
                topic_authorized_operations=-2147483648,
            )
        )
    return cls(
        throttle_time_ms=0, brokers=brokers, cluster_id="bench-cluster", controller_id=0, topics=topics
    )


def best_us(fn: Callable[[], Any], rounds: int, min_time: float) -> float:
    """Best per-call CPU time in µs over `rounds` rounds of at least `min_time` seconds each.

    CPU time of this process (not wall time), so that other work on a shared machine inflates the
    figures less; the best round is the one least disturbed.
    """
    clock = time.process_time
    n = 1
    while True:
        t0 = clock()
        for _ in range(n):
            fn()
        dt = clock() - t0
        if dt >= min_time:
            break
        n *= 2
    best = dt / n
    for _ in range(rounds - 1):
        t0 = clock()
        for _ in range(n):
            fn()
        best = min(best, (clock() - t0) / n)
    return best * 1e6


def _encode_response_bytes(api_key: int, version: int, obj: Any) -> bytes:
    return b"".join(messages.encode_response(api_key, version, obj))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    args = ap.parse_args(argv)

    try:
        from kafka.protocol.consumer.fetch import FetchResponse as KpFetchResponse
        from kafka.protocol.metadata.metadata import MetadataResponse as KpMetadataResponse
        from kafka.protocol.producer.produce import ProduceRequest as KpProduceRequest
    except ImportError:
        KpProduceRequest = KpFetchResponse = KpMetadataResponse = None

    cases = [
        ("Produce v9 request (16 x 64 KiB)", ApiKey.PRODUCE, 9, "request", our_produce(), KpProduceRequest),
        ("Fetch v12 response (16 x 64 KiB)", ApiKey.FETCH, 12, "response", our_fetch(), KpFetchResponse),
        (
            "Metadata v12 response (1,000 partitions)",
            ApiKey.METADATA,
            12,
            "response",
            our_metadata(),
            KpMetadataResponse,
        ),
    ]
    print(f"{'message':42} {'op':7} {'ours µs':>10} {'kafka-python µs':>16} {'ratio':>7}")
    for title, key, version, kind, obj, kp_cls in cases:
        if kind == "request":
            wire = messages.encode_request(key, version, obj)

            def ours_enc(obj: Any = obj, key: int = key, version: int = version) -> Any:
                return messages.encode_request(key, version, obj)

            def ours_dec(wire: bytes = wire, key: int = key, version: int = version) -> Any:
                return messages.decode_request(key, version, memoryview(wire))
        else:
            wire = _encode_response_bytes(key, version, obj)

            def ours_enc(obj: Any = obj, key: int = key, version: int = version) -> Any:
                return messages.encode_response(key, version, obj)

            def ours_dec(wire: bytes = wire, key: int = key, version: int = version) -> Any:
                return messages.decode_response(key, version, memoryview(wire))

        ours = {"decode": best_us(ours_dec, args.rounds, args.min_time),
                "encode": best_us(ours_enc, args.rounds, args.min_time)}
        theirs: dict[str, float | None] = {"decode": None, "encode": None}
        if kp_cls is not None:
            kp_obj = kp_cls.decode(wire, version=version)
            kp_obj._header = None  # decode() bypasses __init__; encode() expects the attribute
            if bytes(kp_obj.encode(version=version)) != wire:
                print(f"  warning: kafka-python re-encodes {title} differently", file=sys.stderr)

            def kp_dec(wire: bytes = wire, kp_cls: Any = kp_cls, version: int = version) -> Any:
                return kp_cls.decode(wire, version=version)

            def kp_enc(kp_obj: Any = kp_obj, version: int = version) -> Any:
                return kp_obj.encode(version=version)

            theirs = {"decode": best_us(kp_dec, args.rounds, args.min_time),
                      "encode": best_us(kp_enc, args.rounds, args.min_time)}
        ours["decode+encode"] = ours["decode"] + ours["encode"]
        if theirs["decode"] is not None and theirs["encode"] is not None:
            theirs["decode+encode"] = theirs["decode"] + theirs["encode"]
        else:
            theirs["decode+encode"] = None
        for op in ("decode", "encode", "decode+encode"):
            t = theirs[op]
            ratio = f"{t / ours[op]:6.1f}x" if t else "   n/a"
            t_text = f"{t:16.1f}" if t else f"{'n/a':>16}"
            print(f"{title if op == 'decode' else '':42} {op:7} {ours[op]:10.1f} {t_text} {ratio:>7}")
    # The broker's real Fetch path: records are log file slices passed through as chunks (sendfile).
    fetch = our_fetch()
    for topic in fetch.responses:
        for part in topic.partitions:
            part.records = _SliceStandIn(len(RECORDS))

    def sliced_enc(fetch: Any = fetch) -> Any:
        return messages.encode_response(ApiKey.FETCH, 12, fetch)

    us = best_us(sliced_enc, args.rounds, args.min_time)
    print(f"{'Fetch v12 response, records as file slices':42} {'encode':7} {us:10.1f} {'(broker path)':>16}")
    return 0


class _SliceStandIn:
    """What the broker puts in `records` for a fetch: an object with `.size`, sent with sendfile."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


if __name__ == "__main__":
    sys.exit(main())
