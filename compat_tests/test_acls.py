"""ACLs with real clients: CreateAcls/DescribeAcls/DeleteAcls, and an allowed and a refused principal per
resource type and operation getting exactly Kafka's answers.

The module starts its own broker (`secured_broker`: skipped with --bootstrap) with one SASL_PLAINTEXT
listener (PLAIN users admin, alice, bob), `authorizer.class.name` set to Kafka's StandardAuthorizer and
`super.users=User:admin`. The super user grants alice what each test needs; bob gets nothing, so bob
meets allow.everyone.if.no.acl.found=false everywhere. Every client is confluent-kafka (librdkafka).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkacompat.local_brokers import InProcessBroker

pytestmark = pytest.mark.secured_broker

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def bootstrap_acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    overrides = [
        "group.initial.rebalance.delay.ms=0",
        "offsets.topic.num.partitions=3",
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN",
        f"sasl.jaas.config={JAAS}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
    ]
    broker = InProcessBroker(tmp_path_factory.mktemp("acl-broker") / "data", overrides).start()
    try:
        yield broker.bootstrap
    finally:
        # the cached AdminClients go with their broker: kept, librdkafka reconnects to its stopped port
        # until pytest exits ("Connect to ... refused" lines under later tests)
        admin.cache_clear()
        broker.stop()


def config(bootstrap: str, user: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
        **extra,
    }


@functools.cache
def admin(bootstrap: str, user: str) -> Any:
    """One AdminClient per user, kept (a dropped client would cancel its pending futures)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(config(bootstrap, user))


def grant(bootstrap: str, *bindings: tuple[Any, ...]) -> None:
    """As the super user: ALLOW (or DENY, with a 7th item) each (type, name, pattern, principal, op)."""
    from confluent_kafka.admin import AclBinding, AclPermissionType

    acls = [
        AclBinding(rtype, name, pattern, principal, "*", op, rest[0] if rest else AclPermissionType.ALLOW)
        for rtype, name, pattern, principal, op, *rest in bindings
    ]
    for future in admin(bootstrap, "admin").create_acls(acls).values():
        future.result(10)


def make_topic(bootstrap: str, partitions: int = 1) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"acl-{uuid.uuid4().hex[:10]}"
    admin(bootstrap, "admin").create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def error_code(exc: BaseException) -> int:
    return int(exc.args[0].code())


def produce_one(bootstrap: str, user: str, topic: str, **extra: Any) -> Any:
    """The delivery error (None on success) of one record."""
    from confluent_kafka import KafkaException, Producer

    outcome: list[Any] = []
    producer = Producer(config(bootstrap, user, **{"message.timeout.ms": 10000, **extra}))
    try:
        producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(15)
    except KafkaException as exc:  # a fatal error (idempotence refused) surfaces from flush()
        return exc.args[0]
    finally:
        producer.close()  # as the admins: an unclosed client lives on while anything refers to it
    assert outcome, "no delivery report"
    return outcome[0]


# --- the ACL APIs themselves -------------------------------------------------------------------------


def test_create_describe_delete_acls(bootstrap_acl: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    name = f"lifecycle-{uuid.uuid4().hex[:8]}"
    grant(
        bootstrap_acl,
        (ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:carol", AclOperation.READ),
        (ResourceType.TOPIC, name[:6], ResourcePatternType.PREFIXED, "User:carol", AclOperation.WRITE),
        (ResourceType.GROUP, name, ResourcePatternType.LITERAL, "User:carol", AclOperation.READ,
         AclPermissionType.DENY),
    )  # fmt: skip
    client = admin(bootstrap_acl, "admin")
    any_op, any_permission = AclOperation.ANY, AclPermissionType.ANY
    match_type = ResourcePatternType.MATCH
    match = AclBindingFilter(ResourceType.TOPIC, name, match_type, None, None, any_op, any_permission)
    found = client.describe_acls(match).result(10)
    assert {(b.name, b.resource_pattern_type, b.operation) for b in found} == {
        (name, ResourcePatternType.LITERAL, AclOperation.READ),
        (name[:6], ResourcePatternType.PREFIXED, AclOperation.WRITE),
    }
    everything_of_carol = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol", None, any_op, any_permission
    )
    assert len(client.describe_acls(everything_of_carol).result(10)) == 3
    # a principal without ALTER/DESCRIBE on the cluster may not touch them. DescribeAcls answers
    # CLUSTER_AUTHORIZATION_FAILED, which librdkafka drops: an empty list, against Kafka too
    bob = admin(bootstrap_acl, "bob")
    assert bob.describe_acls(everything_of_carol).result(10) == []
    literal = ResourcePatternType.LITERAL
    allow = AclPermissionType.ALLOW
    bobs = AclBinding(ResourceType.TOPIC, name, literal, "User:bob", "*", AclOperation.ALL, allow)
    with pytest.raises(KafkaException) as refused:
        bob.create_acls([bobs])[bobs].result(10)
    assert error_code(refused.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    deleted = client.delete_acls([everything_of_carol])[everything_of_carol].result(10)
    assert len(deleted) == 3
    assert client.describe_acls(everything_of_carol).result(10) == []


# --- topics ------------------------------------------------------------------------------------------------


def test_topic_write(bootstrap_acl: str) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    topic = make_topic(bootstrap_acl)
    grant(
        bootstrap_acl,
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", AclOperation.WRITE),
    )
    assert produce_one(bootstrap_acl, "alice", topic, **{"enable.idempotence": False}) is None
    refused = produce_one(bootstrap_acl, "bob", topic, **{"enable.idempotence": False})
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_idempotent_producer_needs_write_somewhere(bootstrap_acl: str, ck_closing: Any) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    topic = make_topic(bootstrap_acl)
    grant(
        bootstrap_acl,
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", AclOperation.WRITE),
        # bob may see the topic (so that his producer gets as far as InitProducerId), not write anywhere
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", AclOperation.DESCRIBE),
    )
    assert produce_one(bootstrap_acl, "alice", topic, **{"enable.idempotence": True}) is None
    # InitProducerId without IDEMPOTENT_WRITE or WRITE on any topic: CLUSTER_AUTHORIZATION_FAILED, which
    # librdkafka makes a fatal error
    from confluent_kafka import KafkaException, Producer

    errors: list[Any] = []
    settings = {"enable.idempotence": True, "error_cb": errors.append}
    producer = ck_closing(Producer(config(bootstrap_acl, "bob", **settings)))
    producer.produce(topic, b"v")
    deadline = time.monotonic() + 15
    try:
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
    except KafkaException as exc:  # the fatal error may come out of poll() itself
        errors.append(exc.args[0])
    assert errors and errors[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED and errors[0].fatal()


def test_topic_describe_hides_topics(bootstrap_acl: str) -> None:
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    visible, hidden = make_topic(bootstrap_acl), make_topic(bootstrap_acl)
    grant(bootstrap_acl, (ResourceType.TOPIC, visible, ResourcePatternType.LITERAL, "User:alice",
                          AclOperation.DESCRIBE))  # fmt: skip
    listed = admin(bootstrap_acl, "alice").list_topics(timeout=10).topics
    assert visible in listed and hidden not in listed
    assert not {visible, hidden} & set(admin(bootstrap_acl, "bob").list_topics(timeout=10).topics)
    assert {visible, hidden} <= set(admin(bootstrap_acl, "admin").list_topics(timeout=10).topics)


def test_topic_create_and_delete(bootstrap_acl: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AclOperation, NewTopic, ResourcePatternType, ResourceType

    prefix = f"alice-{uuid.uuid4().hex[:6]}-"
    grant(
        bootstrap_acl,
        (ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, "User:alice", AclOperation.CREATE),
        (ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, "User:alice", AclOperation.DELETE),
    )
    mine = f"{prefix}t"
    admin(bootstrap_acl, "alice").create_topics([NewTopic(mine, 1, 1)])[mine].result(10)
    with pytest.raises(KafkaException) as refused:
        other = f"bob-{uuid.uuid4().hex[:6]}"
        admin(bootstrap_acl, "bob").create_topics([NewTopic(other, 1, 1)])[other].result(10)
    assert error_code(refused.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        admin(bootstrap_acl, "bob").delete_topics([mine])[mine].result(10)
    assert error_code(refused.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin(bootstrap_acl, "alice").delete_topics([mine])[mine].result(10)


def test_topic_configs(bootstrap_acl: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AclOperation, ConfigResource, ResourcePatternType, ResourceType

    topic = make_topic(bootstrap_acl)
    grant(bootstrap_acl, (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                          AclOperation.DESCRIBE_CONFIGS))  # fmt: skip
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin(bootstrap_acl, "alice").describe_configs([resource])[resource].result(10)
    assert "retention.ms" in described
    with pytest.raises(KafkaException) as refused:
        admin(bootstrap_acl, "bob").describe_configs([resource])[resource].result(10)
    assert error_code(refused.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    with pytest.raises(KafkaException) as refused:
        admin(bootstrap_acl, "alice").describe_configs([broker])[broker].result(10)
    assert error_code(refused.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


# --- groups ------------------------------------------------------------------------------------------------


def consume(
    bootstrap: str, user: str, topic: str, group: str, want: int, seconds: float = 15
) -> tuple[int, Any]:
    """(records read, the first error the consumer reported)."""
    from confluent_kafka import Consumer

    consumer = Consumer(config(bootstrap, user, **{"group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    read, error = 0, None
    deadline = time.monotonic() + seconds
    while read < want and error is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            error = message.error()
        else:
            read += 1
    consumer.close()
    return read, error


def topic_with_a_record_and_group(bootstrap: str) -> tuple[str, str]:
    """A new topic holding one record (produced by the admin) and a fresh group id, for the read tests."""
    topic = make_topic(bootstrap)
    assert produce_one(bootstrap, "admin", topic) is None
    return topic, f"g-{uuid.uuid4().hex[:8]}"


def test_topic_read_and_group_read(bootstrap_acl: str) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    topic, group = topic_with_a_record_and_group(bootstrap_acl)
    grant(
        bootstrap_acl,
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", AclOperation.READ),
        (ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", AclOperation.READ),
        (ResourceType.GROUP, f"{group}-bob", ResourcePatternType.LITERAL, "User:bob", AclOperation.READ),
    )
    assert consume(bootstrap_acl, "alice", topic, group, 1) == (1, None)
    # bob may use his group but not read the topic; nor may he join alice's group
    read, error = consume(bootstrap_acl, "bob", topic, f"{group}-bob", 1)
    assert read == 0 and error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    read, error = consume(bootstrap_acl, "bob", topic, group, 1)
    assert read == 0 and error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_deny_wins_over_allow(bootstrap_acl: str) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    topic, group = topic_with_a_record_and_group(bootstrap_acl)
    grant(
        bootstrap_acl,
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", AclOperation.ALL),
        (ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", AclOperation.ALL),
        (ResourceType.TOPIC, topic[:-2], ResourcePatternType.PREFIXED, "User:*", AclOperation.READ,
         AclPermissionType.DENY),
    )  # fmt: skip
    read, error = consume(bootstrap_acl, "alice", topic, group, 1)
    assert read == 0 and error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert (
        produce_one(bootstrap_acl, "alice", topic, **{"enable.idempotence": False}) is None
    )  # WRITE still ALL


def test_group_describe_list_and_delete(bootstrap_acl: str) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    topic, group = topic_with_a_record_and_group(bootstrap_acl)
    grant(
        bootstrap_acl,
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", AclOperation.READ),
        (ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", AclOperation.READ),
        (ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", AclOperation.DELETE),
    )
    assert consume(bootstrap_acl, "alice", topic, group, 1) == (1, None)
    alice, bob = admin(bootstrap_acl, "alice"), admin(bootstrap_acl, "bob")
    described = alice.describe_consumer_groups([group])[group].result(10)
    assert described.group_id == group
    with pytest.raises(KafkaException) as refused:
        bob.describe_consumer_groups([group])[group].result(10)
    assert error_code(refused.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert group in {g.group_id for g in alice.list_consumer_groups().result(10).valid}
    assert group not in {g.group_id for g in bob.list_consumer_groups().result(10).valid}
    with pytest.raises(KafkaException) as refused:
        bob.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert error_code(refused.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        bob.delete_consumer_groups([group])[group].result(10)
    assert error_code(refused.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    alice.delete_consumer_groups([group])[group].result(10)


# --- transactional ids and the cluster ---------------------------------------------------------------------


def test_transactional_id(bootstrap_acl: str, ck_closing: Any) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    topic = make_topic(bootstrap_acl)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    grant(
        bootstrap_acl,
        (ResourceType.TRANSACTIONAL_ID, tid, ResourcePatternType.LITERAL, "User:alice", AclOperation.WRITE),
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", AclOperation.WRITE),
    )
    producer = ck_closing(Producer(config(bootstrap_acl, "alice", **{"transactional.id": tid})))
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(15)
    refused = ck_closing(Producer(config(bootstrap_acl, "bob", **{"transactional.id": tid})))
    with pytest.raises(KafkaException) as caught:
        refused.init_transactions(15)
    assert error_code(caught.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_scram_admin_needs_the_cluster(bootstrap_acl: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    upsertion = UserScramCredentialUpsertion(
        "dora", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw"
    )
    with pytest.raises(KafkaException) as refused:
        admin(bootstrap_acl, "bob").alter_user_scram_credentials([upsertion])["dora"].result(10)
    assert error_code(refused.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    admin(bootstrap_acl, "admin").alter_user_scram_credentials([upsertion])["dora"].result(10)


# --- kafkacompat acls, against the secured broker (--command-config) ------------------------------------


def test_kafkacompat_acls_command(bootstrap_acl: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    from confluent_kafka import KafkaError

    def cli(user: str, *args: str) -> subprocess.CompletedProcess[str]:
        properties = tmp_path / f"{user}.properties"
        properties.write_text(
            f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username={user}\n"
            f"sasl.password={PASSWORDS[user]}\n"
        )
        return subprocess.run(
            [sys.executable, "-m", "kafkacompat", "acls", *args, "--bootstrap-server", bootstrap_acl,
             "--command-config", str(properties)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    topic = make_topic(bootstrap_acl)
    added = cli("admin", "add", "--topic", topic, "--allow-principal", "User:alice", "--operation", "Write",
                "--operation", "Describe")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert produce_one(bootstrap_acl, "alice", topic, **{"enable.idempotence": False}) is None
    listed = cli("admin", "list", "--topic", topic)
    assert listed.returncode == 0, listed.stderr
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in listed.stdout
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in listed.stdout
    refused = cli("bob", "add", "--topic", topic, "--allow-principal", "User:bob", "--operation", "All")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    alice_write = ("--allow-principal", "User:alice", "--operation", "write")
    removed = cli("admin", "remove", "--topic", topic, *alice_write)
    assert removed.returncode == 0 and "Removed 1 ACL(s)" in removed.stdout, removed.stderr
    error = produce_one(bootstrap_acl, "alice", topic, **{"enable.idempotence": False})
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert cli("admin", "remove", "--topic", topic).returncode == 1  # everything needs --force
    assert "Removed 1 ACL(s)" in cli("admin", "remove", "--topic", topic, "--force").stdout


def test_java_client_allowed_and_refused(bootstrap_acl: str, tmp_path: Path) -> None:
    """The Java client: alice's WRITE works, bob's produce fails with TopicAuthorizationException."""
    import os
    import subprocess

    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

    from compat_tests.java_probe import probe_command, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    topic = make_topic(bootstrap_acl, partitions=3)  # the probe writes to partitions 0-2
    grant(
        bootstrap_acl,
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", AclOperation.WRITE),
        (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", AclOperation.DESCRIBE),
    )

    def probe(user: str) -> subprocess.CompletedProcess[str]:
        properties = tmp_path / f"{user}.properties"
        properties.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{PASSWORDS[user]}";\nenable.idempotence=false\n'
            "delivery.timeout.ms=10000\nrequest.timeout.ms=5000\nmax.block.ms=10000\n"
        )
        env = {**os.environ, "KAFKACOMPAT_CLIENT_CONFIG": str(properties)}
        return subprocess.run(
            [*probe_command(), "produce", bootstrap_acl, topic, "none", "3"],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip

    allowed = probe("alice")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert len([line for line in allowed.stdout.splitlines() if line.startswith("acked ")]) == 3
    refused = probe("bob")
    assert refused.returncode != 0
    assert "TopicAuthorizationException" in refused.stderr, refused.stderr[-3000:]
