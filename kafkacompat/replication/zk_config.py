"""Cluster mode's security and broker-config znodes: entity configs, ACLs and their change notifications.

Theory of operation
-------------------
`ZkConfigStore` reads and writes, through the broker's kazoo session (`ZooKeeperStore.client`), what a
Kafka cluster in ZooKeeper mode keeps there besides topics and partitions, in Kafka's layout and JSON
(`zk_data`):

    /config/users/<user>                     {"version":1,"config":{"SCRAM-SHA-256":"salt=..,stored_key=..,
                                               server_key=..,iterations=4096","producer_byte_rate":"1024"}}
    /config/users/<user>/clients/<client>    user + client-id quotas (either side may be <default>)
    /config/clients/<client>                 client-id quotas
    /config/ips/<ip>, /config/ips/<default>  connection_creation_rate of an address (KIP-612)
    /config/brokers/<id>, /config/brokers/<default>   dynamic broker configs
    /config/changes/config_change_NNNNNNNNNN {"version":2,"entity_path":"users/alice"}
    /kafka-acl/<Type>/<name>                 {"version":1,"acls":[{"principal":"User:alice",
                                               "permissionType":"Allow","operation":"Read","host":"*"}]}
    /kafka-acl-extended/prefixed/<Type>/<name>   the same, for PREFIXED patterns
    /kafka-acl-changes/acl_changes_N         "TOPIC:<name>" (literal patterns)
    /kafka-acl-extended-changes/acl_changes_N   {"version":1,"resourceType":"TOPIC","name":..,
                                               "patternType":"PREFIXED"}

Entity names in znode names are sanitized as Kafka's Sanitizer does (URL-encoding; `<default>` kept).

Every write is a compare-and-set on the znode's version, retried from a fresh read on a conflict, so two
brokers changing the same user, entity or ACL resource at once never lose each other's change (Kafka's
AdminZkClient and AclAuthorizer do the same); each successful write leaves the change notification
Kafka's brokers watch for. A user's znode carries both SCRAM credentials and quotas: each writer
changes only its own keys. An ACL resource whose last entry goes is deleted (conditional on its
version), as Kafka's authorizer does. Notifications older than 15 minutes are removed by the writers,
as Kafka's change listeners purge them.

`read_all(watch)` reads the whole of it (every config entity, every ACL resource) and arms `watch` on
the three notification directories; the trio edge (`config_sync`) calls it again when one fires.
Blocking: call from a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from kafkacompat.replication import zk_data as zd

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.protocol.states import WatchedEvent

    from kafkacompat.config import BrokerConfig
    from kafkacompat.security.password_encoder import PasswordCodec

__all__ = ["AclKey", "ConfigSnapshot", "ZkConfigStore", "ZkDynamicConfigStore"]

log = logging.getLogger("kafkacompat.zookeeper")

#: how long change notifications are kept (Kafka's change listeners purge after 15 minutes)
NOTIFICATION_EXPIRY_SECONDS = 15 * 60
NOTIFICATION_DIRS = (zd.CONFIG_CHANGES, zd.ACL_LITERAL_CHANGES, zd.ACL_EXTENDED_CHANGES)
#: (resource type code, name, pattern type code)
AclKey = tuple[int, str, int]
#: (principal, host, operation code, permission code)
AclEntry = tuple[str, str, int, int]


@dataclass(slots=True)
class ConfigSnapshot:
    """One read of the entity configs and ACLs (entity names desanitized)."""

    users: dict[str, dict[str, str]] = field(default_factory=dict)
    clients: dict[str, dict[str, str]] = field(default_factory=dict)
    user_clients: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    brokers: dict[str, dict[str, str]] = field(default_factory=dict)
    ips: dict[str, dict[str, str]] = field(default_factory=dict)
    acls: dict[AclKey, list[AclEntry]] = field(default_factory=dict)


class ZkConfigStore:
    """Kafka's config-entity and ACL znodes over one kazoo client (see module docstring)."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client

    def ensure_paths(self) -> None:
        for path in (
            zd.CONFIG_CHANGES,
            zd.CONFIG_USERS,
            zd.CONFIG_CLIENTS,
            zd.CONFIG_BROKERS,
            zd.CONFIG_IPS,
            zd.ACL_LITERAL,
            zd.ACL_PREFIXED,
            zd.ACL_LITERAL_CHANGES,
            zd.ACL_EXTENDED_CHANGES,
        ):
            self.client.ensure_path(path)

    # --- reading ---------------------------------------------------------------------------------------

    def _children(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> list[str]:
        try:
            return sorted(self.client.get_children(path, watch=watch))
        except NoNodeError:
            return []

    def _config(self, path: str) -> dict[str, str] | None:
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return None
        return zd.decode_entity_config(data)

    def read_entity(self, entity_path: str) -> tuple[dict[str, str], int]:
        """(configs, znode version) of one entity; ({}, -1) when it has no znode."""
        try:
            data, stat = self.client.get(zd.entity_config_path(entity_path))
        except NoNodeError:
            return {}, -1
        return zd.decode_entity_config(data), int(stat.version)

    def read_brokers(self) -> dict[str, dict[str, str]]:
        """Every /config/brokers entity ("<default>" or a broker id) with its configs."""
        entities = {}
        for child in self._children(zd.CONFIG_BROKERS):
            configs = self._config(f"{zd.CONFIG_BROKERS}/{child}")
            if configs is not None:
                entities[zd.desanitize(child)] = configs
        return entities

    def read_all(self, watch: Callable[[WatchedEvent], None] | None = None) -> ConfigSnapshot:
        # watches first: a change made while this reads fires them, and the next read sees it
        for path in NOTIFICATION_DIRS:
            self._children(path, watch)
        snapshot = ConfigSnapshot()
        for child in self._children(zd.CONFIG_USERS):
            user = zd.desanitize(child)
            configs = self._config(f"{zd.CONFIG_USERS}/{child}")
            if configs:
                snapshot.users[user] = configs
            for client in self._children(f"{zd.CONFIG_USERS}/{child}/clients"):
                configs = self._config(f"{zd.CONFIG_USERS}/{child}/clients/{client}")
                if configs:
                    snapshot.user_clients[(user, zd.desanitize(client))] = configs
        for child in self._children(zd.CONFIG_CLIENTS):
            configs = self._config(f"{zd.CONFIG_CLIENTS}/{child}")
            if configs:
                snapshot.clients[zd.desanitize(child)] = configs
        for child in self._children(zd.CONFIG_IPS):
            configs = self._config(f"{zd.CONFIG_IPS}/{child}")
            if configs:
                snapshot.ips[zd.desanitize(child)] = configs
        snapshot.brokers = self.read_brokers()
        for root, pattern in ((zd.ACL_LITERAL, zd.PATTERN_LITERAL), (zd.ACL_PREFIXED, zd.PATTERN_PREFIXED)):
            for directory in self._children(root):
                resource_type = zd.resource_type_code(directory)
                if resource_type is None:
                    continue
                for name in self._children(f"{root}/{directory}"):
                    try:
                        data, _ = self.client.get(f"{root}/{directory}/{name}")
                    except NoNodeError:
                        continue
                    entries = zd.decode_acls(data)
                    if entries:
                        snapshot.acls[(resource_type, name, pattern)] = entries
        return snapshot

    # --- writing ---------------------------------------------------------------------------------------

    def update_entity(
        self, entity_path: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        """Replace one entity's configs with `change(current)` by compare-and-set (retried on a conflict),
        then notify; the configs written. `entity_path` is sanitized (`users/alice%40x`)."""
        path = zd.entity_config_path(entity_path)
        while True:
            current, version = self.read_entity(entity_path)
            wanted = change(dict(current))
            if wanted == current and version >= 0:
                return wanted
            try:
                if version < 0:
                    self.client.create(path, zd.encode_entity_config(wanted), makepath=True)
                else:
                    self.client.set(path, zd.encode_entity_config(wanted), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another writer came first: start again from what it wrote
            self.notify_config_change(entity_path)
            return wanted

    def write_entity(self, entity_path: str, configs: dict[str, str], version: int) -> bool:
        """Write one entity's configs if its znode is still at `version` (-1: absent); False on a conflict."""
        path = zd.entity_config_path(entity_path)
        try:
            if version < 0:
                self.client.create(path, zd.encode_entity_config(configs), makepath=True)
            else:
                self.client.set(path, zd.encode_entity_config(configs), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        self.notify_config_change(entity_path)
        return True

    def notify_config_change(self, entity_path: str) -> None:
        self.client.create(
            f"{zd.CONFIG_CHANGES}/{zd.CONFIG_CHANGE_PREFIX}",
            zd.encode_config_change(entity_path),
            sequence=True,
            makepath=True,
        )
        self._purge(zd.CONFIG_CHANGES)

    def update_acls(self, key: AclKey, change: Callable[[list[AclEntry]], list[AclEntry]]) -> list[AclEntry]:
        """Replace one ACL resource's entries with `change(current)` by compare-and-set, deleting the znode
        when none remain, then notify; the entries written."""
        resource_type, name, pattern = key
        path = zd.acl_resource_path(resource_type, name, pattern)
        while True:
            try:
                data, stat = self.client.get(path)
                current, version = zd.decode_acls(data), int(stat.version)
            except NoNodeError:
                current, version = [], -1
            wanted = change(list(current))
            if wanted == current:
                return wanted
            try:
                if not wanted:
                    self.client.delete(path, version=version)
                elif version < 0:
                    self.client.create(path, zd.encode_acls(wanted), makepath=True)
                else:
                    self.client.set(path, zd.encode_acls(wanted), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue
            change_path, change_data = zd.encode_acl_change(resource_type, name, pattern)
            self.client.create(change_path, change_data, sequence=True, makepath=True)
            self._purge(change_path.rsplit("/", 1)[0])
            return wanted

    def _purge(self, directory: str) -> None:
        """Remove notifications older than Kafka's 15 minutes (best effort: another broker may race)."""
        horizon = (time.time() - NOTIFICATION_EXPIRY_SECONDS) * 1000
        children = self._children(directory)
        for child in children[:-1]:  # the newest always stays
            try:
                stat = self.client.exists(f"{directory}/{child}")
                if stat is not None and stat.ctime < horizon:
                    self.client.delete(f"{directory}/{child}")
                else:
                    break  # sequence order is creation order: the rest are newer
            except NoNodeError:
                continue


class ZkDynamicConfigStore:
    """`dynamic_config.DynamicConfigStore` in cluster mode: the entities are `/config/brokers/<default>`
    and `/config/brokers/<id>`, written one entity at a time by compare-and-set (`read_entity` +
    `write_entity`, which `BrokerState.alter_broker_configs` loops on), each with its change notification.

    Sensitive (password-type) values are kept as Kafka keeps them in ZooKeeper: encrypted with
    `password.encoder.secret` (`security.password_encoder`), per broker only. Without a secret such a
    change is refused (INVALID_REQUEST, Kafka's "Password encoder secret not configured"), never written
    in the clear. Reads decode them (the old secret too); one that decodes with neither is dropped with
    an error in the log, as Kafka ignores it. `for_broker` re-encodes the broker's own entity with the
    new secret when `password.encoder.old.secret` is set, as a Kafka broker does when it starts."""

    def __init__(self, store: ZkConfigStore, passwords: PasswordCodec | None = None) -> None:
        from kafkacompat.security.password_encoder import PasswordCodec

        self.store = store
        self.passwords = passwords if passwords is not None else PasswordCodec(None)

    @classmethod
    def for_broker(cls, store: ZkConfigStore, config: BrokerConfig) -> ZkDynamicConfigStore:
        """The store of a starting broker (blocking): its own entity re-encoded after a secret rotation."""
        from kafkacompat.security.password_encoder import PasswordCodec

        dynamic = cls(store, PasswordCodec.from_config(config))
        entity = str(config.node_id)
        while dynamic.passwords.old is not None:
            raw, version = store.read_entity(cls._path(entity))
            rewritten = dynamic.passwords.reencoded(raw)
            if rewritten is None or store.write_entity(cls._path(entity), rewritten, version):
                if rewritten is not None:
                    log.info("re-encoded broker %s's sensitive configs with password.encoder.secret", entity)
                break
        return dynamic

    @staticmethod
    def _path(entity: str) -> str:
        return f"brokers/{zd.sanitize(entity)}"

    def _decoded(self, entity: str, raw: dict[str, str]) -> dict[str, str]:
        configs, undecodable = self.passwords.decode_configs(raw)
        for name in undecodable:
            log.error(
                "ignoring the dynamic config %s of broker entity %s: it does not decode with "
                "password.encoder.secret (nor password.encoder.old.secret)",
                name,
                entity,
            )
        return configs

    def decode_entities(self, entities: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        return {entity: self._decoded(entity, configs) for entity, configs in entities.items()}

    def load(self) -> dict[str, dict[str, str]]:
        return self.decode_entities(self.store.read_brokers())

    def read_entity(self, entity: str) -> tuple[dict[str, str], int]:
        raw, version = self.store.read_entity(self._path(entity))
        return self._decoded(entity, raw), version

    def _encoded(self, entity: str, configs: Mapping[str, str]) -> dict[str, str]:
        from kafkacompat.wire.errors import ErrorCode, KafkaError

        try:
            return self.passwords.encode_configs(configs, per_broker=entity != zd.DEFAULT_ENTITY)
        except ValueError as exc:
            raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None

    def write_entity(self, entity: str, configs: dict[str, str], version: int) -> bool:
        return self.store.write_entity(self._path(entity), self._encoded(entity, configs), version)

    def write(self, entities: Mapping[str, Mapping[str, str]]) -> None:
        """Unconditional writes of every entity given (the single-node interface; unused in cluster mode,
        where `write_entity` compare-and-sets)."""
        for entity, configs in entities.items():
            self.store.update_entity(self._path(entity), _replace_with(self._encoded(entity, configs)))


def _replace_with(configs: dict[str, str]) -> Callable[[dict[str, str]], dict[str, str]]:
    """An `update_entity` change that writes `configs` whatever the entity held."""
    return lambda _current: configs
