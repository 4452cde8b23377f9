"""Kafka's ZooKeeper layout: znode paths and their JSON documents (pure, no client).

Theory of operation: one function pair per znode kind, encoding to and decoding from the bytes Kafka's
ZooKeeper mode (`kafka.zk.ZkData`) stores, so a tree written by kafkacompat reads like one written by
Kafka (zkCli.sh, Kafka's own tools) and the other way round:

    /cluster/id                               {"version":"1","id":"<cluster id>"}
    /controller                  (ephemeral)  {"version":1,"brokerid":N,"timestamp":"<ms>"}
    /controller_epoch                         "<epoch>" (a bare integer)
    /brokers/ids/N               (ephemeral)  {"version":5,"host":..,"port":..,"endpoints":["NAME://h:p"],
                                               "listener_security_protocol_map":{..},"rack":..,
                                               "jmx_port":-1,"timestamp":"<ms>","features":{}}
    /brokers/topics/T                         {"version":3,"partitions":{"0":[1,2,3]},"topic_id":"<uuid>",
                                               "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/T/partitions/P/state      {"version":1,"leader":N,"leader_epoch":E,"isr":[..],
                                               "controller_epoch":C}
    /config/topics/T                          {"version":1,"config":{"name":"value"}}
    /admin/delete_topics/T                    (empty: a deletion request)
    /isr_change_notification/isr_change_NNN   {"version":1,"partitions":[{"topic":T,"partition":P}]}
    /latest_producer_id_block                 {"version":1,"broker":N,"block_start":"S","block_end":"E"}
    /config/{users,clients,brokers}/<entity>  {"version":1,"config":{..}} (users/<u>/clients/<c> too;
                                               names sanitized as Kafka's Sanitizer, `<default>` kept)
    /config/changes/config_change_NNNNNNNNNN  {"version":2,"entity_path":"users/alice"}
    /kafka-acl/<Type>/<name>                  {"version":1,"acls":[{"principal":..,"permissionType":"Allow",
                                               "operation":"Read","host":"*"}]}
    /kafka-acl-extended/prefixed/<Type>/<name>   the same for PREFIXED patterns
    /kafka-acl-changes/acl_changes_N          "TOPIC:<name>"
    /kafka-acl-extended-changes/acl_changes_N {"version":1,"resourceType":"TOPIC","name":..,
                                               "patternType":"PREFIXED"}

Topic ids are written as Kafka prints a Uuid: URL-safe base64 of the 16 bytes without padding.
Decoders accept the older versions Kafka accepts (brokers without "endpoints", no "rack", no "topic_id").
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from kafkacompat.replication.partition_state import LeaderAndIsr

__all__ = [
    "ADMIN_DELETE_TOPICS",
    "BROKER_IDS",
    "CLUSTER_ID",
    "CONFIG_TOPICS",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "ISR_CHANGE_NOTIFICATION",
    "PERSISTENT_PATHS",
    "PRODUCER_ID_BLOCK",
    "TOPICS",
    "BrokerRegistration",
    "TopicAssignment",
    "broker_path",
    "decode_broker",
    "decode_cluster_id",
    "decode_config_change",
    "decode_controller",
    "decode_controller_epoch",
    "decode_partition_state",
    "decode_producer_id_block",
    "decode_topic",
    "decode_topic_config",
    "encode_broker",
    "encode_cluster_id",
    "encode_controller",
    "encode_controller_epoch",
    "encode_isr_change",
    "encode_partition_state",
    "encode_producer_id_block",
    "encode_topic",
    "encode_topic_config",
    "partition_state_path",
    "topic_config_path",
    "topic_id_from_string",
    "topic_id_to_string",
    "topic_path",
]

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
#: the persistent paths Kafka creates at start-up (KafkaZkClient.createTopLevelPaths)
PERSISTENT_PATHS = (
    "/consumers",
    BROKER_IDS,
    TOPICS,
    "/config/changes",
    "/admin/delete_topics",
    "/brokers/seqid",
    ISR_CHANGE_NOTIFICATION,
    "/latest_producer_id_block",
    "/log_dir_event_notification",
    CONFIG_TOPICS,
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
)


def _dump(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def _load(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_string(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


# --- /cluster/id, /controller, /controller_epoch -----------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_load(data)["id"])


def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    document = _load(data)
    if isinstance(document, int):  # version 0 stored a bare id
        return document
    return int(document["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode("ascii"))


# --- /brokers/ids/N ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: its id, rack and advertised endpoints (listener name -> (host, port))."""

    broker_id: int
    endpoints: dict[str, tuple[str, int]]
    security_protocols: dict[str, str] = field(default_factory=dict)
    rack: str | None = None

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        return self.endpoints.get(listener.upper())


def encode_broker(registration: BrokerRegistration) -> bytes:
    protocols = {
        name: registration.security_protocols.get(name, "PLAINTEXT") for name in registration.endpoints
    }
    endpoints = [f"{name}://{host}:{port}" for name, (host, port) in registration.endpoints.items()]
    # Kafka fills the legacy host/port with the PLAINTEXT endpoint, or -1/null without one.
    plain = next(
        (registration.endpoints[n] for n, p in protocols.items() if p == "PLAINTEXT"),
        None,
    )
    document: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": protocols,
        "endpoints": endpoints,
        "jmx_port": -1,
        "port": plain[1] if plain else -1,
        "host": plain[0] if plain else None,
        "version": 5,
        "timestamp": _now_ms(),
    }
    if registration.rack is not None:
        document["rack"] = registration.rack
    return _dump(document)


def decode_broker(broker_id: int, data: bytes) -> BrokerRegistration:
    document = _load(data)
    protocols = {
        str(k).upper(): str(v) for k, v in (document.get("listener_security_protocol_map") or {}).items()
    }
    endpoints: dict[str, tuple[str, int]] = {}
    for entry in document.get("endpoints") or []:
        name, _, address = str(entry).partition("://")
        host, _, port = address.rpartition(":")
        endpoints[name.upper()] = (host.strip("[]"), int(port))
    if not endpoints and document.get("host") is not None:
        endpoints["PLAINTEXT"] = (str(document["host"]), int(document["port"]))
    return BrokerRegistration(broker_id, endpoints, protocols, document.get("rack"))


# --- topics ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """/brokers/topics/T: replica lists per partition, the topic id and any reassignment in progress."""

    topic: str
    topic_id: uuid.UUID | None
    partitions: dict[int, list[int]]
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)


def encode_topic(assignment: TopicAssignment) -> bytes:
    document: dict[str, Any] = {
        "partitions": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(assignment.adding.items())},
        "removing_replicas": {str(p): list(r) for p, r in sorted(assignment.removing.items())},
        "version": 3,
    }
    if assignment.topic_id is not None:
        document["topic_id"] = topic_id_to_string(assignment.topic_id)
    return _dump(document)


def decode_topic(topic: str, data: bytes) -> TopicAssignment:
    document = _load(data)

    def replica_map(key: str) -> dict[int, list[int]]:
        return {int(p): [int(r) for r in replicas] for p, replicas in (document.get(key) or {}).items()}

    raw_id = document.get("topic_id")
    return TopicAssignment(
        topic,
        topic_id_from_string(raw_id) if raw_id else None,
        replica_map("partitions"),
        replica_map("adding_replicas"),
        replica_map("removing_replicas"),
    )


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    return _dump(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(data: bytes, zk_version: int) -> LeaderAndIsr:
    document = _load(data)
    return LeaderAndIsr(
        int(document["leader"]),
        int(document["leader_epoch"]),
        tuple(int(r) for r in document["isr"]),
        int(document["controller_epoch"]),
        zk_version,
    )


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(configs.items()))})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {str(k): str(v) for k, v in (_load(data).get("config") or {}).items()}


def encode_isr_change(partitions: list[tuple[str, int]]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return _dump({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})


def decode_producer_id_block(data: bytes) -> tuple[int, int, int]:
    """(broker, block_start, block_end) — block_end inclusive, as Kafka stores it."""
    document = _load(data)
    return int(document["broker"]), int(document["block_start"]), int(document["block_end"])


# --- entity configs (/config/<type>/<name>) and their change notifications ----------------------------

CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_BROKERS = "/config/brokers"
CONFIG_IPS = "/config/ips"
DEFAULT_ENTITY = "<default>"


def sanitize(name: str) -> str:
    """An entity name as Kafka's Sanitizer writes it in a znode name: URL-encoded (UTF-8), with a space as
    %20 and `*` as %2A; `<default>` is not a name but the default entity and stays as it is."""
    if name == DEFAULT_ENTITY:
        return name
    return quote(name, safe="._-").replace("~", "%7E")


def desanitize(text: str) -> str:
    return text if text == DEFAULT_ENTITY else unquote(text)


def entity_config_path(entity_path: str) -> str:
    """`users/alice`, `users/alice/clients/c1`, `clients/<default>`, `ips/10.0.0.1`, `brokers/1` -> its
    znode."""
    return f"/config/{entity_path}"


def encode_entity_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(configs.items()))})


def decode_entity_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    document = _load(data)
    if not isinstance(document, dict):
        return {}
    return {str(k): str(v) for k, v in (document.get("config") or {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str | None:
    """The entity path a change notification names (`topics/T`, `users/alice/clients/c1`): version 2's
    `entity_path`, or version 1's `entity_type`/`entity_name`; None when it names none."""
    try:
        document = _load(data)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    path = document.get("entity_path")
    if isinstance(path, str):
        return path
    kind, name = document.get("entity_type"), document.get("entity_name")
    if isinstance(kind, str) and isinstance(name, str):
        return f"{kind}/{name}"
    return None


# --- ACLs (/kafka-acl, /kafka-acl-extended/prefixed) and their change notifications -----------------

ACL_LITERAL = "/kafka-acl"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_PREFIXED = "/kafka-acl-extended/prefixed"
ACL_LITERAL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
#: resource type code -> the directory name Kafka uses (SecurityUtils.resourceTypeName)
ACL_RESOURCE_DIRS = {
    2: "Topic",
    3: "Group",
    4: "Cluster",
    5: "TransactionalId",
    6: "DelegationToken",
    7: "User",
}
#: resource type code -> the enum name Kafka writes in change notifications
ACL_RESOURCE_ENUMS = {
    2: "TOPIC",
    3: "GROUP",
    4: "CLUSTER",
    5: "TRANSACTIONAL_ID",
    6: "DELEGATION_TOKEN",
    7: "USER",
}
#: operation code -> Kafka's name in the ACL JSON (SecurityUtils.operationName)
ACL_OPERATIONS = {
    2: "All",
    3: "Read",
    4: "Write",
    5: "Create",
    6: "Delete",
    7: "Alter",
    8: "Describe",
    9: "ClusterAction",
    10: "DescribeConfigs",
    11: "AlterConfigs",
    12: "IdempotentWrite",
    13: "CreateTokens",
    14: "DescribeTokens",
}
ACL_PERMISSIONS = {2: "Deny", 3: "Allow"}
PATTERN_LITERAL, PATTERN_PREFIXED = 3, 4


def _camel_key(text: str) -> str:
    return text.replace("_", "").lower()


def acl_resource_path(resource_type: int, name: str, pattern_type: int) -> str:
    root = ACL_LITERAL if pattern_type == PATTERN_LITERAL else ACL_PREFIXED
    return f"{root}/{ACL_RESOURCE_DIRS[resource_type]}/{name}"


def encode_acls(entries: list[tuple[str, str, int, int]]) -> bytes:
    """(principal, host, operation, permission) entries of one resource, as Kafka's ResourceZNode."""
    return _dump(
        {
            "version": 1,
            "acls": [
                {
                    "principal": principal,
                    "permissionType": ACL_PERMISSIONS[permission],
                    "operation": ACL_OPERATIONS[operation],
                    "host": host,
                }
                for principal, host, operation, permission in entries
            ],
        }
    )


_OPERATION_CODES = {_camel_key(name): code for code, name in ACL_OPERATIONS.items()}
_PERMISSION_CODES = {name.lower(): code for code, name in ACL_PERMISSIONS.items()}
_RESOURCE_CODES = {
    **{_camel_key(name): code for code, name in ACL_RESOURCE_DIRS.items()},
    **{_camel_key(name): code for code, name in ACL_RESOURCE_ENUMS.items()},
}


def resource_type_code(text: str) -> int | None:
    """A resource type directory or enum name (any case, as Kafka's fromString) -> its code."""
    return _RESOURCE_CODES.get(_camel_key(text))


def decode_acls(data: bytes | None) -> list[tuple[str, str, int, int]]:
    """The entries of a resource znode; entries with unknown names are skipped."""
    if not data:
        return []
    entries = []
    for item in (_load(data) or {}).get("acls") or []:
        operation = _OPERATION_CODES.get(_camel_key(str(item.get("operation", ""))))
        permission = _PERMISSION_CODES.get(str(item.get("permissionType", "")).lower())
        if operation is None or permission is None:
            continue
        entries.append((str(item["principal"]), str(item.get("host", "*")), operation, permission))
    return entries


def encode_acl_change(resource_type: int, name: str, pattern_type: int) -> tuple[str, bytes]:
    """(sequential node prefix path, data) of the change notification for one ACL resource."""
    if pattern_type == PATTERN_LITERAL:
        data = f"{ACL_RESOURCE_ENUMS[resource_type]}:{name}".encode()
        return f"{ACL_LITERAL_CHANGES}/{ACL_CHANGE_PREFIX}", data
    document = {
        "version": 1,
        "resourceType": ACL_RESOURCE_ENUMS[resource_type],
        "name": name,
        "patternType": "PREFIXED",
    }
    return f"{ACL_EXTENDED_CHANGES}/{ACL_CHANGE_PREFIX}", _dump(document)
