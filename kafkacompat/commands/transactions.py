"""`kafkacompat transactions list|describe|abort`: transactions like kafka-transactions.sh.

Theory of operation: each action is a few requests through `kafkacompat.client.KafkaClient`.
`list` sends ListTransactions to every broker and prints the table kafka-transactions.sh prints
(TransactionalId Coordinator ProducerId TransactionState); `describe --transactional-id ID` asks the
id's coordinator (FindCoordinator with key type 1) with DescribeTransactions and prints its row
(CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState TransactionTimeoutMs
CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions). `abort` ends a hanging
transaction in one partition the way kafka-transactions.sh does: with `--start-offset`, DescribeProducers
at the partition's leader finds the producer whose open transaction starts there; or the producer is
named with `--producer-id/--producer-epoch/--coordinator-epoch`; then WriteTxnMarkers writes an ABORT
marker for it into that partition. Failures print "Error: <message>" on stderr and exit with status 1.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from kafkacompat.client import CommandError, KafkaClient, add_bootstrap_argument, error_name
from kafkacompat.commands._runner import print_table, with_client
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.messages import request_class

HELP = "list, describe and abort transactions, like kafka-transactions.sh"

TRANSACTION_KEY_TYPE = 1
COORDINATOR_RETRIES = 20
RETRIABLE_COORDINATOR_ERRORS = (
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["list", "describe", "abort"])
    add_bootstrap_argument(parser)
    parser.add_argument("--transactional-id", help="describe: the transactional id")
    parser.add_argument("--topic", help="abort: the topic of the hanging transaction")
    parser.add_argument("--partition", type=int, help="abort: the partition of the hanging transaction")
    parser.add_argument("--start-offset", type=int, help="abort: first offset of the hanging transaction")
    parser.add_argument("--producer-id", type=int, help="abort: producer id (instead of --start-offset)")
    parser.add_argument("--producer-epoch", type=int, help="abort: producer epoch (with --producer-id)")
    parser.add_argument("--coordinator-epoch", type=int, help="abort: coordinator epoch (with --producer-id)")


def run(args: argparse.Namespace) -> int:
    return with_client(args, lambda client: ACTIONS[args.action](client, args), "Error: ")


def _list(client: KafkaClient, args: argparse.Namespace) -> None:
    cls = request_class(ApiKey.LIST_TRANSACTIONS)
    rows: list[list[Any]] = []
    for broker in client.metadata([]).brokers:
        response = client.send(
            ApiKey.LIST_TRANSACTIONS,
            cls(state_filters=[], producer_id_filters=[], duration_filter=-1),
            node_id=broker.node_id,
        )
        if response.error_code != ErrorCode.NONE:
            raise CommandError(
                f"ListTransactions at broker {broker.node_id}: {error_name(response.error_code)}"
            )
        for state in response.transaction_states:
            rows.append([state.transactional_id, broker.node_id, state.producer_id, state.transaction_state])
    print_table([["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], *sorted(rows)])


def find_coordinator(client: KafkaClient, transactional_id: str) -> int:
    cls = request_class(ApiKey.FIND_COORDINATOR)
    version = min(3, client.version_for(ApiKey.FIND_COORDINATOR))
    for attempt in range(COORDINATOR_RETRIES):
        response = client.send(
            ApiKey.FIND_COORDINATOR, cls(key=transactional_id, key_type=TRANSACTION_KEY_TYPE), version=version
        )
        if response.error_code == ErrorCode.NONE:
            return int(response.node_id)
        if response.error_code not in RETRIABLE_COORDINATOR_ERRORS or attempt == COORDINATOR_RETRIES - 1:
            raise CommandError(
                f"no coordinator for transactional id {transactional_id}: {error_name(response.error_code)}"
            )
        time.sleep(0.25)
    raise AssertionError("unreachable")


def _describe(client: KafkaClient, args: argparse.Namespace) -> None:
    tid = args.transactional_id
    if not tid:
        raise CommandError("describe needs --transactional-id")
    node = find_coordinator(client, tid)
    cls = request_class(ApiKey.DESCRIBE_TRANSACTIONS)
    state = client.send(
        ApiKey.DESCRIBE_TRANSACTIONS, cls(transactional_ids=[tid]), node_id=node
    ).transaction_states[0]
    if state.error_code != ErrorCode.NONE:
        raise CommandError(f"cannot describe transactional id {tid}: {error_name(state.error_code)}")
    start = state.transaction_start_time_ms
    duration = int(time.time() * 1000) - start if start >= 0 else "None"
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
    print_table(
        [
            [
                "CoordinatorId",
                "TransactionalId",
                "ProducerId",
                "ProducerEpoch",
                "TransactionState",
                "TransactionTimeoutMs",
                "CurrentTransactionStartTimeMs",
                "TransactionDurationMs",
                "TopicPartitions",
            ],
            [
                node,
                tid,
                state.producer_id,
                state.producer_epoch,
                state.transaction_state,
                state.transaction_timeout_ms,
                start if start >= 0 else "None",
                duration,
                partitions,
            ],
        ]
    )


def _abort(client: KafkaClient, args: argparse.Namespace) -> None:
    if args.topic is None or args.partition is None:
        raise CommandError("abort needs --topic and --partition")
    leader = client.partition_leaders(args.topic).get(args.partition)
    if leader is None:
        raise CommandError(f"{args.topic}-{args.partition} does not exist")
    if args.start_offset is not None:
        producer_id, epoch, coordinator_epoch = _hanging_producer(client, leader, args)
    elif None not in (args.producer_id, args.producer_epoch, args.coordinator_epoch):
        producer_id, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    else:
        raise CommandError(
            "abort needs --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch"
        )
    cls = request_class(ApiKey.WRITE_TXN_MARKERS)
    marker = cls.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=epoch,
        transaction_result=False,
        topics=[cls.WritableTxnMarkerTopic(name=args.topic, partition_indexes=[args.partition])],
        coordinator_epoch=max(coordinator_epoch, 0),
    )
    response = client.send(ApiKey.WRITE_TXN_MARKERS, cls(markers=[marker]), node_id=leader)
    for result in response.markers:
        for topic in result.topics:
            for partition in topic.partitions:
                if partition.error_code != ErrorCode.NONE:
                    raise CommandError(
                        f"abort of producer {producer_id} in {topic.name}-{partition.partition_index}: "
                        f"{error_name(partition.error_code)}"
                    )
    print(
        f"Aborted the transaction of producer {producer_id} (epoch {epoch}) in {args.topic}-{args.partition}"
    )


def _hanging_producer(client: KafkaClient, leader: int, args: argparse.Namespace) -> tuple[int, int, int]:
    cls = request_class(ApiKey.DESCRIBE_PRODUCERS)
    request = cls(topics=[cls.TopicRequest(name=args.topic, partition_indexes=[args.partition])])
    response = client.send(ApiKey.DESCRIBE_PRODUCERS, request, node_id=leader)
    for topic in response.topics:
        for partition in topic.partitions:
            if partition.error_code != ErrorCode.NONE:
                raise CommandError(
                    f"DescribeProducers {args.topic}-{args.partition}: {error_name(partition.error_code)}"
                )
            for producer in partition.active_producers:
                if producer.current_txn_start_offset == args.start_offset:
                    return producer.producer_id, producer.producer_epoch, producer.coordinator_epoch
    raise CommandError(
        f"no open transaction starts at offset {args.start_offset} of {args.topic}-{args.partition}"
    )


ACTIONS = {"list": _list, "describe": _describe, "abort": _abort}
