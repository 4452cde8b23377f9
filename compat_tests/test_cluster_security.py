"""Security and dynamic broker configs in cluster mode: what one broker is told, every broker applies,
because it lives in ZooKeeper in Kafka's layout (checked with kazoo).

One module-scoped cluster of three brokers (`LocalCluster`, ZooKeeper from Debian's package) with three
listeners each: PLAINTEXT for the admin clients (User:ANONYMOUS is a super user there), SASL_PLAINTEXT
(SCRAM) for the users under test, and INTERNAL, a SASL_SSL listener with SCRAM-SHA-512 that is the
inter-broker listener: every replica fetch and controlled shutdown goes through TLS and SCRAM. The
brokers' own SCRAM user is written into `/config/users/broker` with kazoo before they start, as one does
with `kafka-configs --zookeeper` before a SASL cluster's first start. The authorizer is on.

- RF=3 with min.insync.replicas=2 and acks=all produces succeed and the followers' logs hold the same
  bytes as the leader's (replication over SASL_SSL; and, in a second cluster of its own, over an mTLS
  inter-broker listener); a user who may write a topic is refused a replica's requests (CLUSTER_ACTION);
- SCRAM users created with confluent-kafka's admin client (through any broker) authenticate on every
  broker (confluent-kafka SCRAM-SHA-512 clients bootstrapped on one broker each);
- an ACL created with confluent-kafka's admin client is enforced by every broker: a Metadata probe as
  the user on each broker's SASL listener, a confluent-kafka producer that is allowed and one that is
  denied (TOPIC_AUTHORIZATION_FAILED); its deletion too;
- a quota set through broker 1 (`kafkacompat quotas`, which talks to the broker it is given) is
  reported by DescribeClientQuotas on brokers 2 and 3; so is an `ip` connection_creation_rate (KIP-612,
  `/config/ips`);
- dynamic broker configs (a cluster-wide `log.retention.ms` and a per-broker one on broker 2) are
  described by each broker with Kafka's sources, and still are after every broker restarted;
- a listener's inline PEM key and certificate (password-type configs) set on broker 2 are encrypted in
  `/config/brokers/2` with Kafka's password encoder (decoded with `password.encoder.secret`), the
  listener serves the new certificate to a confluent-kafka client trusting only the new CA, before and
  after broker 2 restarts (read back and decoded from ZooKeeper), while broker 1's stays as it was;
- the Java Admin client (kafka-clients, `java/ClusterSecurityProbe.java`) creates a SCRAM user and an ACL
  that brokers 2 and 3 enforce; two Java Admin clients bootstrapped on brokers 1 and 2 racing on one
  user's quotas and one topic's ACLs lose neither's change;
- the znodes hold Kafka's JSON.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import wait_until

pytestmark = [
    pytest.mark.restarts_broker,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for certificates"),
]

confluent_kafka = pytest.importorskip("confluent_kafka")
kazoo_client = pytest.importorskip("kazoo.client")
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kafkacompat.local_brokers import CLUSTER_TEST_OVERRIDES, LocalCluster  # noqa: E402

BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
CHROOT = "/kafkacompat"
ENCODER_SECRET = "encoder-secret"
CONFIG_CHANGES = "/config/changes"
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'



def kafka_scram_credential(password: str, mechanism: str = "SCRAM-SHA-512", iterations: int = 4096) -> str:
    """The /config/users value Kafka's tools write for a password (RFC 5802 keys, base64)."""
    import hmac

    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return (
        f"salt={b64(salt)},stored_key={b64(stored_key)},server_key={b64(server_key)},iterations={iterations}"
    )


class SecuredCluster:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.zk = kazoo_client.KazooClient(hosts=cluster.zookeeper.connect_string + CHROOT)
        self.zk.start(30)
        self.certs: dict[str, Any] = {}

    def znode(self, path: str) -> Any:
        data, _ = self.zk.get(path)
        return json.loads(data)

    def endpoints(self, broker_id: int) -> dict[str, str]:
        registration = self.znode(f"/brokers/ids/{broker_id}")
        return {e.split("://")[0]: e.split("://")[1] for e in registration["endpoints"]}

    def plaintext(self, broker_id: int) -> str:
        return self.endpoints(broker_id)["PLAINTEXT"]

    def sasl(self, broker_id: int) -> str:
        return self.endpoints(broker_id)["SASL_PLAINTEXT"]

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def admin(self, broker_id: int = 1) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.plaintext(broker_id)})


def user_config(bootstrap: str, user: str) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


@pytest.fixture(scope="module")
def secured_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    from kafkacompat.commands.dev_certs import make_dev_certs
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    certs = make_dev_certs(tmp_path_factory.mktemp("certs"))
    overrides = [
        *CLUSTER_TEST_OVERRIDES,
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0,"
        "SSL://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:SASL_SSL,"
        "SSL:SSL",
        # sensitive dynamic configs (the SSL listener's inline PEM key) are kept encrypted with it
        f"password.encoder.secret={ENCODER_SECRET}",
        "inter.broker.listener.name=INTERNAL",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config="
        + SCRAM_JAAS.format(BROKER_USER, BROKER_PASSWORD),
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs['broker-keystore.pem']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs['ca.pem']}",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
        f"super.users=User:{BROKER_USER};User:ANONYMOUS",
        "offsets.topic.replication.factor=3",
    ]
    try:
        cluster = LocalCluster(tmp_path_factory.mktemp("secured-cluster"), 3, overrides, chroot=CHROOT)
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    cluster.zookeeper.start()
    try:
        # the brokers' own SCRAM user, in place before they start (kafka-configs --zookeeper does this)
        zk = kazoo_client.KazooClient(hosts=cluster.zookeeper.connect_string)
        zk.start(30)
        try:
            document = {"version": 1, "config": {"SCRAM-SHA-512": kafka_scram_credential(BROKER_PASSWORD)}}
            zk.create(f"{CHROOT}/config/users/{BROKER_USER}", json.dumps(document).encode(), makepath=True)
        finally:
            zk.stop()
            zk.close()
        for broker in cluster.brokers.values():
            broker.start()
        cluster.wait_until_ready()  # over the PLAINTEXT listener, first in `listeners`
        secured = SecuredCluster(cluster)
        secured.certs = certs
        try:
            yield secured
        finally:
            secured.zk.stop()
            secured.zk.close()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def users(secured_cluster: SecuredCluster) -> dict[str, str]:
    """alice and bob, created once with confluent-kafka's admin client."""
    admin = secured_cluster.admin(1)
    for user, password in USERS.items():
        upsertion = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
        )
        admin.alter_user_scram_credentials([upsertion])[user].result(30)
    return USERS


def create_topic(secured: SecuredCluster, name: str) -> None:
    admin = secured.admin()
    admin.create_topics([NewTopic(name, 1, 3, config={"min.insync.replicas": "2"})])[name].result(30)

    def fully_replicated() -> bool:
        partitions = admin.list_topics(name, timeout=10).topics[name].partitions
        return bool(partitions) and all(p.leader >= 0 and len(p.isrs) == 3 for p in partitions.values())

    wait_until(fully_replicated, 30, "leaders and a full ISR")


def test_replication_runs_over_the_sasl_ssl_inter_broker_listener(secured_cluster: SecuredCluster) -> None:
    registration = secured_cluster.znode("/brokers/ids/1")
    assert registration["listener_security_protocol_map"]["INTERNAL"] == "SASL_SSL"
    replicates(secured_cluster)


def test_replication_runs_over_an_mtls_inter_broker_listener(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """SSL with ssl.client.auth=required: each broker presents its keystore's certificate to the others,
    whose principal (its subject DN) is a super user."""
    from kafkacompat.commands.dev_certs import make_dev_certs
    from kafkacompat.replication.zk_server import ZooKeeperUnavailable

    certs = make_dev_certs(tmp_path_factory.mktemp("mtls-certs"))
    overrides = [
        *CLUSTER_TEST_OVERRIDES,
        "listeners=PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name=INTERNAL",
        "listener.name.internal.ssl.client.auth=required",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs['broker-keystore.pem']}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={certs['ca.pem']}",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
        "super.users=User:ANONYMOUS;User:CN=localhost,O=kafkacompat development",
    ]
    try:
        cluster = LocalCluster(tmp_path_factory.mktemp("mtls-cluster"), 3, overrides, chroot=CHROOT)
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"cluster mode needs ZooKeeper: {exc}")
    with cluster:
        secured = SecuredCluster(cluster)
        secured.certs = certs
        try:
            assert secured.znode("/brokers/ids/2")["listener_security_protocol_map"]["INTERNAL"] == "SSL"
            replicates(secured)
        finally:
            secured.zk.stop()
            secured.zk.close()


def replicates(secured: SecuredCluster) -> None:
    """RF=3, min.insync.replicas=2, acks=all produces succeed and every follower holds the leader's bytes."""
    topic = f"ib-{uuid.uuid4().hex[:8]}"
    create_topic(secured, topic)
    producer = Producer({"bootstrap.servers": secured.bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[Any] = []
    for index in range(200):
        producer.produce(
            topic, f"record-{index:04d}".encode() * 10, on_delivery=lambda e, _m: e and failures.append(e)
        )
    assert producer.flush(60) == 0
    assert failures == []
    leader = secured.admin().list_topics(topic, timeout=10).topics[topic].partitions[0].leader

    def segment(broker_id: int) -> bytes:
        path = secured.cluster.brokers[broker_id].data_dir / f"{topic}-0" / f"{0:020d}.log"
        return path.read_bytes() if path.exists() else b""

    wait_until(
        lambda: all(segment(b) == segment(leader) for b in (1, 2, 3)), 30, "followers with the leader's bytes"
    )
    assert b"record-0199" in segment(leader)


def test_scram_user_created_through_one_broker_authenticates_on_every_broker(
    secured_cluster: SecuredCluster, users: dict[str, str]
) -> None:
    secured = secured_cluster
    for broker_id in (1, 2, 3):
        # a client that knows only this broker: its bootstrap connection authenticates there
        admin = AdminClient(
            {**user_config(secured.sasl(broker_id), "alice"), "client.id": f"scram-{broker_id}"}
        )
        metadata = wait_until(
            lambda a=admin: _list_topics(a), 15, f"SCRAM authentication on broker {broker_id}"
        )
        assert metadata.brokers  # answered after SCRAM authentication, its bootstrap being the only broker
        # and exactly that broker authenticates her (a probe that talks to it alone)
        _metadata_error(secured, broker_id, "alice", "any-topic")
    wrong = AdminClient({**user_config(secured.sasl(2), "alice"), "sasl.password": "not-it"})
    with pytest.raises(confluent_kafka.KafkaException):
        wrong.list_topics(timeout=5)
    data, _ = secured.zk.get("/config/users/alice")
    config = json.loads(data)
    assert config["version"] == 1
    assert re.fullmatch(
        r"salt=[A-Za-z0-9+/=]+,stored_key=[A-Za-z0-9+/=]+,server_key=[A-Za-z0-9+/=]+,iterations=4096",
        config["config"]["SCRAM-SHA-512"],
    )
    changes = [
        json.loads(secured.zk.get(f"/config/changes/{c}")[0])
        for c in secured.zk.get_children("/config/changes")
    ]
    assert {"version": 2, "entity_path": "users/alice"} in changes


def _list_topics(admin: AdminClient) -> Any:
    try:
        return admin.list_topics(timeout=5)
    except confluent_kafka.KafkaException:
        return None


def _metadata_error(
    secured: SecuredCluster, broker_id: int, user: str, topic: str, password: str | None = None
) -> int:
    """The error code broker `broker_id` itself answers `user` for a Metadata request on `topic`."""
    from kafkacompat.client import BrokerConnection
    from kafkacompat.security.client_auth import ClientSecurity
    from kafkacompat.wire.messages import request_class

    host, port = secured.sasl(broker_id).rsplit(":", 1)
    security = ClientSecurity(
        protocol="SASL_PLAINTEXT",
        mechanism="SCRAM-SHA-512",
        username=user,
        password=USERS[user] if password is None else password,
    )
    connection = BrokerConnection(host, int(port), f"probe-{user}", 10, security)
    try:
        cls = request_class(3)
        response = connection.send(
            3, 9, cls(topics=[cls.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
        )
        return int(response.topics[0].error_code)
    finally:
        connection.close()


def _as_replica(secured: SecuredCluster, broker_id: int, user: str, topic: str) -> tuple[int, int, int]:
    """(Fetch, OffsetForLeaderEpoch, ControlledShutdown errors) for `user` posing as broker 3."""
    from kafkacompat.client import BrokerConnection
    from kafkacompat.security.client_auth import ClientSecurity
    from kafkacompat.wire._generated import fetch_request as fr
    from kafkacompat.wire.messages import request_class

    host, port = secured.sasl(broker_id).rsplit(":", 1)
    security = ClientSecurity(
        protocol="SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", username=user, password=USERS[user]
    )
    connection = BrokerConnection(host, int(port), f"probe-{user}", 10, security)
    try:
        fetch = fr.FetchRequest(
            replica_id=3,
            max_wait_ms=0,
            topics=[fr.FetchTopic(topic=topic, partitions=[fr.FetchPartition(partition_max_bytes=1024)])],
        )
        fetched = connection.send(1, 12, fetch)
        epochs = request_class(23)
        epoch = connection.send(
            23,
            4,
            epochs(
                replica_id=3,
                topics=[
                    epochs.OffsetForLeaderTopic(
                        topic=topic, partitions=[epochs.OffsetForLeaderPartition(partition=0, leader_epoch=0)]
                    )
                ],
            ),
        )
        shutdown = connection.send(7, 3, request_class(7)(broker_id=3, broker_epoch=-1))
        return (
            int(fetched.responses[0].partitions[0].error_code),
            int(epoch.topics[0].partitions[0].error_code),
            int(shutdown.error_code),
        )
    finally:
        connection.close()


def test_acl_created_through_one_broker_is_enforced_by_every_broker(
    secured_cluster: SecuredCluster, users: dict[str, str]
) -> None:
    secured = secured_cluster
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    create_topic(secured, topic)
    for broker_id in (1, 2, 3):
        assert _metadata_error(secured, broker_id, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = secured.admin(1)
    binding = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    prefixed = AclBinding(
        ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    for future in admin.create_acls([binding, prefixed]).values():
        future.result(30)
    started = time.monotonic()
    for broker_id in (1, 2, 3):  # WRITE implies DESCRIBE: the topic is visible to alice everywhere
        wait_until(
            lambda b=broker_id: _metadata_error(secured, b, "alice", topic) == 0,
            10,
            f"the ACL on broker {broker_id}",
        )
    assert time.monotonic() - started < 10
    assert _metadata_error(secured, 2, "bob", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    def produce_as(user: str) -> Any:
        producer = Producer(
            {**user_config(secured.sasl(3), user), "acks": "all", "message.timeout.ms": 15000}
        )
        outcome: list[Any] = []
        producer.produce(topic, b"hello", on_delivery=lambda error, _message: outcome.append(error))
        producer.flush(30)
        return outcome[0] if outcome else "no delivery report"

    assert produce_as("alice") is None
    # alice may write the topic but is no broker: fetching as a replica or asking for a controlled
    # shutdown needs CLUSTER_ACTION, as in Kafka
    fetch_error, epoch_error, shutdown_error = _as_replica(secured, 1, "alice", topic)
    assert fetch_error == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert epoch_error == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert shutdown_error == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    denied = produce_as("bob")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    literal = secured.znode(f"/kafka-acl/Topic/{topic}")
    assert literal == {
        "version": 1,
        "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}],
    }
    assert secured.znode("/kafka-acl-extended/prefixed/Group/alice-")["acls"][0]["operation"] == "Read"
    literal_changes = [
        secured.zk.get(f"/kafka-acl-changes/{c}")[0] for c in secured.zk.get_children("/kafka-acl-changes")
    ]
    assert f"TOPIC:{topic}".encode() in literal_changes
    extended = [
        json.loads(secured.zk.get(f"/kafka-acl-extended-changes/{c}")[0])
        for c in secured.zk.get_children("/kafka-acl-extended-changes")
    ]
    assert {"version": 1, "resourceType": "GROUP", "name": "alice-", "patternType": "PREFIXED"} in extended

    # deleted through broker 3: every broker stops allowing it
    acl_filter = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    admin_3 = secured.admin(3)
    deleted = admin_3.delete_acls([acl_filter])[acl_filter].result(30)
    assert len(deleted) == 1
    for broker_id in (1, 2, 3):
        wait_until(
            lambda b=broker_id: (
                _metadata_error(secured, b, "alice", topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
            ),
            10,
            f"the ACL gone on broker {broker_id}",
        )
    assert not secured.zk.exists(f"/kafka-acl/Topic/{topic}")


def _quotas(bootstrap: str, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkacompat", "quotas", command, *args, "--bootstrap-server", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_quota_set_through_one_broker_is_described_by_the_others(
    secured_cluster: SecuredCluster, users: dict[str, str]
) -> None:
    secured = secured_cluster  # `users`: alice's SCRAM credential, which her quotas must keep beside them
    client = f"app {uuid.uuid4().hex[:6]}"  # a space: sanitized in the znode name, as Kafka does
    altered = _quotas(
        secured.plaintext(1), "alter", "--user", "alice", "--client-id", client,
        "--add-config", "producer_byte_rate=1048576,request_percentage=50",
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    assert (
        _quotas(
            secured.plaintext(1), "alter", "--client-defaults", "--add-config", "consumer_byte_rate=2048"
        ).returncode
        == 0
    )
    expected = (
        f"Quota configs for user-principal 'alice', client-id '{client}' are"
        " producer_byte_rate=1048576.0, request_percentage=50.0"
    )
    for broker_id in (2, 3):
        described = wait_until(
            lambda b=broker_id: (
                _quotas(
                    secured.plaintext(b), "describe", "--user", "alice", "--client-id", client
                ).stdout.strip()
                == expected
            ),
            10,
            f"the quota on broker {broker_id}",
        )
        assert described
        listed = _quotas(secured.plaintext(broker_id), "describe").stdout
        assert "Quota configs for the default client-id are consumer_byte_rate=2048.0" in listed
    sanitized = client.replace(" ", "%20")
    assert secured.znode(f"/config/users/alice/clients/{sanitized}") == {
        "version": 1,
        "config": {"producer_byte_rate": "1048576", "request_percentage": "50.0"},
    }
    assert secured.znode("/config/clients/<default>") == {
        "version": 1,
        "config": {"consumer_byte_rate": "2048"},
    }
    # a user's znode keeps its SCRAM credential beside quotas
    assert (
        _quotas(
            secured.plaintext(2), "alter", "--user", "alice", "--add-config", "consumer_byte_rate=4096"
        ).returncode
        == 0
    )
    alice = secured.znode("/config/users/alice")["config"]
    assert alice["consumer_byte_rate"] == "4096" and "SCRAM-SHA-512" in alice


def test_ip_connection_rate_set_through_one_broker_is_described_by_the_others(
    secured_cluster: SecuredCluster,
) -> None:
    """KIP-612 `ip` entities live in /config/ips/<ip> and /config/ips/<default>, as Kafka keeps them."""
    secured = secured_cluster
    address = f"10.{uuid.uuid4().int % 250}.0.7"
    altered = _quotas(
        secured.plaintext(1), "alter", "--ip", address, "--add-config", "connection_creation_rate=25"
    )
    assert altered.returncode == 0, altered.stderr
    defaults = _quotas(
        secured.plaintext(2), "alter", "--ip-defaults", "--add-config", "connection_creation_rate=500"
    )
    assert defaults.returncode == 0, defaults.stderr
    expected = f"Quota configs for ip '{address}' are connection_creation_rate=25.0"
    for broker_id in (2, 3):
        wait_until(
            lambda b=broker_id: (
                _quotas(secured.plaintext(b), "describe", "--ip", address).stdout.strip() == expected
            ),
            10,
            f"the ip quota on broker {broker_id}",
        )
    listed = wait_until(
        lambda: (
            (out := _quotas(secured.plaintext(1), "describe", "--ip-defaults").stdout.strip())
            and "connection_creation_rate=500.0" in out
            and out
        ),
        10,
        "the default ip quota on broker 1",
    )
    assert listed.startswith("Quota configs for the default ip are"), listed
    assert secured.znode(f"/config/ips/{address}") == {
        "version": 1,
        "config": {"connection_creation_rate": "25"},
    }
    assert secured.znode("/config/ips/<default>") == {
        "version": 1,
        "config": {"connection_creation_rate": "500"},
    }
    changes = [
        json.loads(secured.zk.get(f"{CONFIG_CHANGES}/{c}")[0])
        for c in secured.zk.get_children(CONFIG_CHANGES)
    ]
    assert {"version": 2, "entity_path": f"ips/{address}"} in changes
    assert {"version": 2, "entity_path": "ips/<default>"} in changes
    # removed through broker 3: gone everywhere, znode included (Kafka leaves an empty config)
    removed = _quotas(
        secured.plaintext(3), "alter", "--ip", address, "--delete-config", "connection_creation_rate"
    )
    assert removed.returncode == 0, removed.stderr
    wait_until(
        lambda: _quotas(secured.plaintext(1), "describe", "--ip", address).stdout.strip() == "",
        10,
        "the ip quota's removal on broker 1",
    )
    assert secured.znode(f"/config/ips/{address}") == {"version": 1, "config": {}}


def _describe_broker(secured: SecuredCluster, broker_id: int) -> Any:
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    admin = secured.admin(broker_id)
    futures = admin.describe_configs([resource])
    return futures[resource].result(30)["log.retention.ms"]


def _set_broker_config(secured: SecuredCluster, via: int, entity: str, value: str) -> None:
    resource = ConfigResource(
        ResourceType.BROKER,
        entity,
        incremental_configs=[
            ConfigEntry("log.retention.ms", value, incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin = secured.admin(via)
    admin.incremental_alter_configs([resource])[resource].result(30)


def _check_broker_configs(secured: SecuredCluster) -> None:
    for broker_id in (1, 3):
        entry = _describe_broker(secured, broker_id)
        assert (entry.value, entry.source) == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    entry = _describe_broker(secured, 2)
    assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # below it, the cluster-wide default and the built-in one (confluent-kafka keys synonyms by name, so the
    # per-broker entry itself is folded into the default's)
    synonyms = [(s.name, s.value, s.source) for s in entry.synonyms.values()]
    assert synonyms == [
        ("log.retention.ms", "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value),
    ]


def test_dynamic_broker_configs_are_shared_and_survive_a_cluster_restart(
    secured_cluster: SecuredCluster,
) -> None:
    secured = secured_cluster
    # the cluster-wide default through broker 1 (`kafkacompat configs` talks to the broker it is given;
    # confluent-kafka's Python API refuses the empty resource name)
    set_default = subprocess.run(
        [sys.executable, "-m", "kafkacompat", "configs", "alter", "--entity-type", "brokers",
         "--entity-default", "--add-config", "log.retention.ms=7200000",
         "--bootstrap-server", secured.plaintext(1)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert set_default.returncode == 0, set_default.stderr
    _set_broker_config(secured, 2, "2", "3600000")  # broker 2's own
    wait_until(lambda: _try(lambda: _check_broker_configs(secured)), 10, "every broker's view of the configs")
    assert secured.znode("/config/brokers/<default>") == {
        "version": 1,
        "config": {"log.retention.ms": "7200000"},
    }
    assert secured.znode("/config/brokers/2") == {"version": 1, "config": {"log.retention.ms": "3600000"}}
    changes = [
        json.loads(secured.zk.get(f"/config/changes/{c}")[0])
        for c in secured.zk.get_children("/config/changes")
    ]
    assert {"version": 2, "entity_path": "brokers/<default>"} in changes
    assert {"version": 2, "entity_path": "brokers/2"} in changes
    for broker in secured.cluster.brokers.values():
        broker.stop()
    for broker in secured.cluster.brokers.values():
        broker.start()
    wait_until(lambda: len(secured.zk.get_children("/brokers/ids")) == 3, 30, "three registered brokers")
    _check_broker_configs(secured)


def _try(check: Callable[[], None]) -> bool:
    try:
        check()
    except (AssertionError, confluent_kafka.KafkaException):
        return False
    return True


# --- sensitive dynamic broker configs: encrypted with password.encoder.secret ------------------------


def _tls_connects(bootstrap: str, ca: Any, timeout: float = 6) -> bool:
    """Whether a new confluent-kafka client that trusts only `ca` gets metadata over TLS (a refused
    handshake is retried until `timeout`: the checks expecting a refusal wait less)."""
    admin = AdminClient({
        "bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "https",
    })  # fmt: skip
    try:
        admin.list_topics(timeout=timeout)
    except confluent_kafka.KafkaException:
        return False
    return True


def test_inline_pem_key_is_encrypted_in_zookeeper_and_reloads_the_listener(
    secured_cluster: SecuredCluster, tmp_path: Any
) -> None:
    pytest.importorskip("cryptography")
    from kafkacompat.commands.dev_certs import make_dev_certs
    from kafkacompat.security.password_encoder import PasswordEncoder

    secured = secured_cluster
    a, b = secured.certs, make_dev_certs(tmp_path / "ca-b", client_cn="client-b")
    ssl1, ssl2 = secured.endpoints(1)["SSL"], secured.endpoints(2)["SSL"]
    assert _tls_connects(ssl2, a["ca.pem"]) and not _tls_connects(ssl2, b["ca.pem"], 3)
    key, chain = "listener.name.ssl.ssl.keystore.key", "listener.name.ssl.ssl.keystore.certificate.chain"
    resource = ConfigResource(
        ResourceType.BROKER,
        "2",
        incremental_configs=[
            # the static cluster-wide keystore file gives way to the inline one on this listener
            ConfigEntry(
                "listener.name.ssl.ssl.keystore.location", "", incremental_operation=AlterConfigOpType.SET
            ),
            ConfigEntry(chain, b["broker.pem"].read_text(), incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(key, b["broker.key"].read_text(), incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin = secured.admin(2)  # kept: a confluent-kafka future fails once its client is collected
    admin.incremental_alter_configs([resource])[resource].result(30)
    stored = secured.znode("/config/brokers/2")["config"]
    encoder = PasswordEncoder(ENCODER_SECRET)
    for name, path in ((key, b["broker.key"]), (chain, b["broker.pem"])):
        assert "BEGIN" not in stored[name], f"{name} is in ZooKeeper in the clear"
        fields = dict(item.split(":", 1) for item in stored[name].split(","))
        assert fields["cipherAlgorithm"] == "AES/CBC/PKCS5Padding" and fields["iterations"] == "4096"
        assert encoder.decode(stored[name]) == path.read_text()
    # and the JDK's PBKDF2 and AES (what Kafka's encoder runs on) decrypt it too, when a JDK is here
    from compat_tests.java_probe import unavailable_reason

    if unavailable_reason() is None:
        decoded = _java("decode", ENCODER_SECRET, stored[key])
        assert bytes.fromhex(decoded.strip()) == b["broker.key"].read_bytes()
    # the broker reports neither (sensitive values are described as null, as Kafka does)
    described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "2")])
    entry = next(iter(described.values())).result(30)[key]
    assert entry.is_sensitive and entry.value is None
    assert _tls_connects(ssl2, b["ca.pem"]) and not _tls_connects(ssl2, a["ca.pem"], 3)
    assert _tls_connects(ssl1, a["ca.pem"])  # a per-broker config: broker 1 keeps its certificate
    # broker 2 restarted: its listener's keystore comes from ZooKeeper, decoded with the secret
    broker = secured.cluster.brokers[2]
    broker.stop()
    broker.start()
    wait_until(lambda: len(secured.zk.get_children("/brokers/ids")) == 3, 30, "broker 2 registered again")
    ssl2 = secured.endpoints(2)["SSL"]
    assert _tls_connects(ssl2, b["ca.pem"]) and not _tls_connects(ssl2, a["ca.pem"], 3)


# --- the Java Admin client ------------------------------------------------------------------------------

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "ClusterSecurityProbe.java"


def _java(*args: str) -> str:
    from compat_tests.java_probe import java_command, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    ran = subprocess.run([*java_command(JAVA_SOURCE), *args], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran.stdout


def test_java_admin_user_and_acl_are_enforced_by_the_other_brokers(secured_cluster: SecuredCluster) -> None:
    secured = secured_cluster
    user, password = f"carol-{uuid.uuid4().hex[:6]}", "carol-secret"
    topic, other = f"java-acl-{uuid.uuid4().hex[:6]}", f"java-other-{uuid.uuid4().hex[:6]}"
    create_topic(secured, topic)
    create_topic(secured, other)
    assert _java("grant", secured.plaintext(1), user, password, topic).split() == ["granted"]
    for broker_id in (2, 3):
        # the user authenticates (its credential) and may describe the topic (its ACL) on this broker
        wait_until(
            lambda b=broker_id: _try_code(lambda: _metadata_error(secured, b, user, topic, password)) == 0,
            10,
            f"the Java-created user and ACL on broker {broker_id}",
        )
        assert (
            _metadata_error(secured, broker_id, user, other, password)
            == KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
    producer = Producer({
        "bootstrap.servers": secured.sasl(2), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
        "acks": "all",
    })  # fmt: skip
    results: list[Any] = []
    producer.produce(topic, b"from carol", on_delivery=lambda err, _msg: results.append(err))
    producer.produce(other, b"not allowed", on_delivery=lambda err, _msg: results.append(err))
    assert producer.flush(30) == 0
    errors = sorted(str(err.name()) if err is not None else "" for err in results)
    assert errors == ["", "TOPIC_AUTHORIZATION_FAILED"]


def _try_code(probe: Callable[[], int]) -> int | None:
    try:
        return probe()
    except Exception:  # not yet known to that broker: authentication fails until its copy has the user
        return None


def test_two_java_admins_racing_through_two_brokers_lose_no_change(secured_cluster: SecuredCluster) -> None:
    secured = secured_cluster
    user, topic, rounds = f"racer-{uuid.uuid4().hex[:6]}", f"race-{uuid.uuid4().hex[:6]}", 8
    out = _java("race", secured.plaintext(1), secured.plaintext(2), user, topic, str(rounds))
    assert out.split() == ["raced"]
    # ZooKeeper holds both admins' last quota and every ACL entry
    assert secured.znode(f"/config/users/{user}")["config"] == {
        "producer_byte_rate": str(1024 * rounds),
        "consumer_byte_rate": str(1024 * rounds),
    }
    entries = secured.znode(f"/kafka-acl/Topic/{topic}")["acls"]
    expected = {f"User:{user}-{side}-{i}" for side in "ab" for i in range(rounds)}
    assert {entry["principal"] for entry in entries} == expected and len(entries) == 2 * rounds
    # and every broker describes the same
    for broker_id in (1, 2, 3):
        admin = secured.admin(broker_id)
        pattern = AclBindingFilter(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
            AclPermissionType.ANY,
        )  # fmt: skip
        wait_until(
            lambda a=admin, p=pattern: len(a.describe_acls(p).result(30)) == 2 * rounds,
            10,
            f"every racing ACL on broker {broker_id}",
        )
