"""The pure mappings of config_sync: ZooKeeper's config entities <-> the broker's quota, credential and ACL
stores."""

from __future__ import annotations

from kafkacompat.replication.config_sync import acls_of, credentials_of, entity_path, quota_text, quotas_of
from kafkacompat.replication.zk_config import ConfigSnapshot
from kafkacompat.security.acls import AclBinding
from kafkacompat.security.credentials import ScramCredential
from kafkacompat.security.quotas import DEFAULT, Entity


def test_entity_paths_are_kafkas() -> None:
    assert entity_path(Entity("alice", None)) == "users/alice"
    assert entity_path(Entity(DEFAULT, None)) == "users/<default>"
    assert entity_path(Entity(None, "app 1")) == "clients/app%201"
    assert entity_path(Entity("a@b", DEFAULT)) == "users/a%40b/clients/<default>"
    assert entity_path(Entity(ip="10.0.0.1")) == "ips/10.0.0.1"
    assert entity_path(Entity(ip="::1")) == "ips/%3A%3A1"  # Kafka's Sanitizer URL-encodes the colons
    assert entity_path(Entity(ip=DEFAULT)) == "ips/<default>"
    assert quota_text("connection_creation_rate", 25.0) == "25"
    assert quota_text("producer_byte_rate", 1024.0) == "1024"
    assert quota_text("request_percentage", 50) == "50.0"


def test_a_snapshot_becomes_quotas_credentials_and_acls() -> None:
    credential = ScramCredential(b"salt", b"stored", b"server", 4096)
    snapshot = ConfigSnapshot(
        users={
            "alice": {"SCRAM-SHA-512": credential.encode(), "consumer_byte_rate": "10", "other": "x"},
            "<default>": {"producer_byte_rate": "5"},
            "bob": {"SCRAM-SHA-256": "not a credential"},
        },
        clients={"<default>": {"request_percentage": "25.5"}},
        user_clients={("alice", "app"): {"producer_byte_rate": "7"}},
        ips={"10.0.0.1": {"connection_creation_rate": "25"}, "<default>": {"connection_creation_rate": "9"}},
        acls={(2, "orders", 3): [("User:alice", "*", 3, 3)], (3, "g-", 4): [("User:*", "*", 8, 2)]},
    )
    assert quotas_of(snapshot) == {
        Entity("alice", None): {"consumer_byte_rate": 10},
        Entity(DEFAULT, None): {"producer_byte_rate": 5},
        Entity(None, DEFAULT): {"request_percentage": 25.5},
        Entity("alice", "app"): {"producer_byte_rate": 7},
        Entity(ip="10.0.0.1"): {"connection_creation_rate": 25},
        Entity(ip=DEFAULT): {"connection_creation_rate": 9},
    }
    assert credentials_of(snapshot) == {"alice": {"SCRAM-SHA-512": credential}}  # bob's is unreadable
    assert acls_of(snapshot) == [
        AclBinding(2, "orders", 3, "User:alice", "*", 3, 3),
        AclBinding(3, "g-", 4, "User:*", "*", 8, 2),
    ]
