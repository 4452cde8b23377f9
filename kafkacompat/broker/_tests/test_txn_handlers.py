"""Transaction APIs on the wire, including the versions and paths real clients do not exercise
(AddPartitionsToTxn v4+ verification, KIP-588 error mapping, KIP-890 produce verification)."""

from __future__ import annotations

from pathlib import Path

import trio

from kafkacompat.broker._tests.wire_client import (
    RawClient,
    batch,
    create,
    fetch_request,
    produce,
    request,
    start_broker,
)
from kafkacompat.wire.errors import ErrorCode as E

FETCH, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 1, 22, 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


def add_request(version: int, tid: str, pid: int, epoch: int, topics: dict[str, list[int]]) -> object:
    cls = request(ADD_PARTITIONS).__class__
    wanted = [cls.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics.items()]
    if version <= 3:
        return request(
            ADD_PARTITIONS,
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=wanted,
        )
    txn = cls.AddPartitionsToTxnTransaction(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True, topics=wanted
    )
    return request(ADD_PARTITIONS, transactions=[txn])


def v3_errors(response: object) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


async def test_transaction_on_the_wire(nursery: trio.Nursery, tmp_path: Path) -> None:
    broker = await start_broker(nursery, tmp_path, "transaction.state.log.num.partitions=2")
    client = await RawClient.connect(broker.port)
    await create(client, "t", 2)
    init = await client.call(
        INIT_PRODUCER_ID, 4, request(INIT_PRODUCER_ID, transactional_id="tx", transaction_timeout_ms=60000)
    )
    assert (init.error_code, init.producer_epoch) == (E.NONE, 0)
    pid = init.producer_id

    def txn_batch(*values: bytes) -> bytes:
        return batch(*values, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)

    unknown = await client.call(ADD_PARTITIONS, 3, add_request(3, "tx", pid, 0, {"t": [0], "nope": [0]}))
    assert v3_errors(unknown) == {
        ("t", 0): E.OPERATION_NOT_ATTEMPTED,
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    # KIP-890: a transactional batch to a partition not in the transaction is refused
    assert (await produce(client, "t", txn_batch(b"early"))).error_code == E.INVALID_TXN_STATE
    added = await client.call(ADD_PARTITIONS, 3, add_request(3, "tx", pid, 0, {"t": [0]}))
    assert v3_errors(added) == {("t", 0): E.NONE}
    assert (await produce(client, "t", txn_batch(b"a", b"b"))).error_code == E.NONE
    verified = await client.call(ADD_PARTITIONS, 4, add_request(4, "tx", pid, 0, {"t": [0, 1]}))
    [result] = verified.results_by_transaction
    assert {
        (t.name, p.partition_index): p.partition_error_code
        for t in result.topic_results
        for p in t.results_by_partition
    } == {
        ("t", 0): E.NONE,
        ("t", 1): E.INVALID_TXN_STATE,
    }
    # a stale epoch: INVALID_PRODUCER_EPOCH before v2, PRODUCER_FENCED from v2 (KIP-588)
    stale = add_request(1, "tx", pid, 5, {"t": [0]})
    assert set(v3_errors(await client.call(ADD_PARTITIONS, 1, stale)).values()) == {E.INVALID_PRODUCER_EPOCH}
    assert set(v3_errors(await client.call(ADD_PARTITIONS, 2, stale)).values()) == {E.PRODUCER_FENCED}

    committed = fetch_request("t", 0, isolation_level=1)
    uncommitted = fetch_request("t", 0, isolation_level=0)
    part = (await client.call(FETCH, 11, committed)).responses[0].partitions[0]
    assert (part.high_watermark, part.last_stable_offset, len(part.records)) == (2, 0, 0)
    part = (await client.call(FETCH, 11, uncommitted)).responses[0].partitions[0]
    assert part.last_stable_offset == 0 and len(part.records) > 0 and part.aborted_transactions is None

    end = request(END_TXN, transactional_id="tx", producer_id=pid, producer_epoch=0, committed=False)
    assert (await client.call(END_TXN, 3, end)).error_code == E.NONE
    # the abort marker is written after EndTxn is answered (as Kafka's coordinator sends its markers)
    with trio.move_on_after(10):
        while True:
            part = (await client.call(FETCH, 11, committed)).responses[0].partitions[0]
            if part.high_watermark == 3:
                break
            await trio.sleep(0.01)
    assert (part.high_watermark, part.last_stable_offset) == (3, 3)
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(pid, 0)]
    end.committed = True
    assert (await client.call(END_TXN, 3, end)).error_code == E.INVALID_TXN_STATE

    listed = await client.call(
        LIST_TRANSACTIONS,
        1,
        request(
            LIST_TRANSACTIONS,
            state_filters=["CompleteAbort", "Nope"],
            producer_id_filters=[],
            duration_filter=-1,
        ),
    )
    assert listed.unknown_state_filters == ["Nope"]
    assert [(s.transactional_id, s.producer_id, s.transaction_state) for s in listed.transaction_states] == [
        ("tx", pid, "CompleteAbort")
    ]
    described = await client.call(
        DESCRIBE_TRANSACTIONS, 0, request(DESCRIBE_TRANSACTIONS, transactional_ids=["tx", "other"])
    )
    first, second = described.transaction_states
    assert (first.error_code, first.transaction_state, first.transaction_timeout_ms) == (
        E.NONE,
        "CompleteAbort",
        60000,
    )
    assert second.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    bad = request(INIT_PRODUCER_ID, transactional_id="tx2", transaction_timeout_ms=900_001)
    assert (await client.call(INIT_PRODUCER_ID, 4, bad)).error_code == E.INVALID_TRANSACTION_TIMEOUT


async def test_txn_offset_commit_needs_the_group_in_the_transaction(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    broker = await start_broker(
        nursery, tmp_path, "transaction.state.log.num.partitions=2", "offsets.topic.num.partitions=2"
    )
    client = await RawClient.connect(broker.port)
    init = await client.call(
        INIT_PRODUCER_ID, 4, request(INIT_PRODUCER_ID, transactional_id="tx", transaction_timeout_ms=60000)
    )
    pid = init.producer_id
    cls = request(TXN_OFFSET_COMMIT).__class__

    def commit(epoch: int) -> object:
        partition = cls.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata=""
        )
        return request(
            TXN_OFFSET_COMMIT,
            transactional_id="tx",
            group_id="g",
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=[cls.TxnOffsetCommitRequestTopic(name="t", partitions=[partition])],
        )

    async def codes(epoch: int) -> list[int]:
        response = await client.call(TXN_OFFSET_COMMIT, 3, commit(epoch))
        return [p.error_code for t in response.topics for p in t.partitions]

    assert await codes(0) == [E.INVALID_TXN_STATE]  # AddOffsetsToTxn first (KIP-890)
    add = request(ADD_OFFSETS, transactional_id="tx", producer_id=pid, producer_epoch=0, group_id="g")
    assert (await client.call(ADD_OFFSETS, 3, add)).error_code == E.NONE
    assert await codes(0) == [E.NONE]
    assert await codes(7) == [E.INVALID_PRODUCER_EPOCH]


async def test_requests_waiting_for_the_transaction_coordinator_hold_no_request_slot(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Like the metadata and group-coordinator locks (lock_wait.py): a request waiting for the transaction
    coordinator's lock (held meanwhile by a write waiting for its ISR, or a partition's replay) used to
    keep its queued.max.requests slot and never look at its socket, so clients that gave up left waiters
    that took every slot and an unrelated produce waited for the holder. Now it waits without its slot,
    and the waiters of departed clients are dropped (their transactional ids never made)."""
    broker = await start_broker(
        nursery, tmp_path, "queued.max.requests=4", "transaction.state.log.num.partitions=2"
    )
    admin = await RawClient.connect(broker.port)
    assert (await create(admin, "pair")).error_code == E.NONE
    first = request(INIT_PRODUCER_ID, transactional_id="tx", transaction_timeout_ms=60000)
    assert (await admin.call(INIT_PRODUCER_ID, 4, first)).error_code == E.NONE  # the state topic exists
    runtime = broker.state.transactions
    waiters = []
    async with runtime._serialised(None):  # a long holder of every partition, as a write waiting for its ISR
        for index in range(8):  # more than the 4 slots
            waiter = await RawClient.connect(broker.port)
            late = request(INIT_PRODUCER_ID, transactional_id=f"late-{index}", transaction_timeout_ms=60000)
            await waiter.send(INIT_PRODUCER_ID, 4, late)
            waiters.append(waiter)
        await trio.sleep(0.2)
        for waiter in waiters:  # they give up
            await waiter.aclose()
        producer = await RawClient.connect(broker.port)
        with trio.fail_after(30):
            answer = await produce(producer, "pair", batch(b"value"))
        assert answer.error_code == E.NONE
        assert all(lock.locked() for lock in runtime._locks)  # answered while the coordinator was still held
    await trio.sleep(0.5)
    assert sorted(t for t in runtime.core.txns if t.startswith("late-")) == []
    again = request(INIT_PRODUCER_ID, transactional_id="tx", transaction_timeout_ms=60000)
    assert (await admin.call(INIT_PRODUCER_ID, 4, again)).error_code == E.NONE  # and it serves on
    for client in (admin, producer):
        await client.aclose()


async def test_describe_transactions_answers_refused_ids_first_and_the_others_in_order(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """With an authorizer, ids the principal may not DESCRIBE get TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    answered first (as Kafka does), each as often as it was named; the allowed ones follow in order."""
    from kafkacompat.security.acls import AclBinding, Op, Pattern, Permission, Resource

    broker = await start_broker(
        nursery, tmp_path, "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"
    )
    broker.state.authorizer.store.add(
        AclBinding(
            Resource.TRANSACTIONAL_ID,
            "mine",
            Pattern.PREFIXED,
            "User:ANONYMOUS",
            "*",
            Op.WRITE,
            Permission.ALLOW,
        )
    )
    client = await RawClient.connect(broker.port)
    init = request(INIT_PRODUCER_ID, transactional_id="mine-1", transaction_timeout_ms=60000)
    assert (await client.call(INIT_PRODUCER_ID, 4, init)).error_code == E.NONE
    ids = ["other", "mine-1", "mine-2", "other", "theirs"]
    described = await client.call(
        DESCRIBE_TRANSACTIONS, 0, request(DESCRIBE_TRANSACTIONS, transactional_ids=ids)
    )
    assert [(s.transactional_id, s.error_code) for s in described.transaction_states] == [
        ("other", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("other", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("theirs", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("mine-1", E.NONE),
        ("mine-2", E.TRANSACTIONAL_ID_NOT_FOUND),
    ]
    assert described.transaction_states[3].transaction_state == "Empty"
    await client.aclose()
