"""Cluster mode's trio edge for SCRAM credentials, client quotas, ACLs and dynamic broker configs.

Theory of operation
-------------------
In cluster mode these live in ZooKeeper, in Kafka's layout (`zk_config`), not in the log dir. `ConfigSync`
owns the broker's copy of them: the in-memory stores the request path reads (`BrokerHost.
scram_credentials`, `quotas.store`, `authorizer.store`, `dynamic`) are filled from one full read of the
znodes at start-up (`load`, before a listener accepts a client) and replaced by a new full read whenever
a change notification appears under `/config/changes`, `/kafka-acl-changes` or
`/kafka-acl-extended-changes` (watches armed by each read; a kazoo thread only pokes the trio loop,
which re-reads in a worker thread and applies on the trio thread), again whenever the ZooKeeper
connection changes state (a new session has none of the old watches), and every `RESYNC_SECONDS`.
Reading everything instead of the one entity a notification names keeps the copy right whatever was
missed; it costs O(users + ACL resources) reads per change, which is fine
for the clusters this project runs and stays the documented limit.

Admin requests write through here (`alter_scram`, `alter_quotas`, `change_acls`): a compare-and-set of
the entity's or resource's znode with its change notification (`ZkConfigStore`), then a fresh read
applied before the handler answers, so the broker that took the change enforces it at once and every
other broker does as soon as its watch fires. Dynamic broker configs are written by
`BrokerState.alter_broker_configs` through `ZkDynamicConfigStore` (a compare-and-set per entity), which
encrypts their sensitive values with `password.encoder.secret` and decodes them when read, as Kafka does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import trio

from kafkacompat.replication import zk_data as zd
from kafkacompat.replication.zk_config import AclEntry, AclKey, ConfigSnapshot, ZkConfigStore
from kafkacompat.security.acls import AclBinding
from kafkacompat.security.credentials import ScramCredential
from kafkacompat.security.quotas import DEFAULT, QUOTA_KEYS, Entity, Name
from kafkacompat.security.sasl import SCRAM_HASHES

if TYPE_CHECKING:
    from kazoo.protocol.states import WatchedEvent

    from kafkacompat.replication.broker_host import BrokerHost

__all__ = ["ConfigSync", "entity_path"]

log = logging.getLogger("kafkacompat.cluster")

RESYNC_SECONDS = 30.0


def _side(value: Name) -> str:
    return zd.DEFAULT_ENTITY if value is DEFAULT else zd.sanitize(str(value))


def entity_path(entity: Entity) -> str:
    """The sanitized /config path of a quota entity (`users/alice/clients/c1`, `clients/<default>`,
    `ips/10.0.0.1`)."""
    if entity.ip is not None:
        return f"ips/{_side(entity.ip)}"
    if entity.user is not None and entity.client_id is not None:
        return f"users/{_side(entity.user)}/clients/{_side(entity.client_id)}"
    if entity.user is not None:
        return f"users/{_side(entity.user)}"
    return f"clients/{_side(entity.client_id)}"


def _entity_name(text: str) -> Name:
    return DEFAULT if text == zd.DEFAULT_ENTITY else text


def quota_text(key: str, value: float) -> str:
    """A quota value as Kafka's config map holds it (a long for byte rates, a double otherwise)."""
    return str(int(value)) if QUOTA_KEYS[key] is int else repr(float(value))


def quotas_of(snapshot: ConfigSnapshot) -> dict[Entity, dict[str, float]]:
    quotas: dict[Entity, dict[str, float]] = {}

    def take(entity: Entity, configs: dict[str, str]) -> None:
        values = {}
        for key, text in configs.items():
            kind = QUOTA_KEYS.get(key)
            if kind is None:
                continue
            try:
                values[key] = kind(float(text))
            except ValueError:
                log.warning("ignoring the unreadable quota %s=%s of %s", key, text, entity)
        if values:
            quotas[entity] = values

    for user, configs in snapshot.users.items():
        take(Entity(_entity_name(user), None), configs)
    for (user, client), configs in snapshot.user_clients.items():
        take(Entity(_entity_name(user), _entity_name(client)), configs)
    for client, configs in snapshot.clients.items():
        take(Entity(None, _entity_name(client)), configs)
    for ip, configs in snapshot.ips.items():
        take(Entity(ip=_entity_name(ip)), configs)
    return quotas


def credentials_of(snapshot: ConfigSnapshot) -> dict[str, dict[str, ScramCredential]]:
    users: dict[str, dict[str, ScramCredential]] = {}
    for user, configs in snapshot.users.items():
        for mechanism in SCRAM_HASHES:
            text = configs.get(mechanism)
            if text is None:
                continue
            try:
                users.setdefault(user, {})[mechanism] = ScramCredential.decode(text)
            except (KeyError, ValueError):
                log.warning("ignoring the unreadable %s credential of user %s", mechanism, user)
    return users


def acls_of(snapshot: ConfigSnapshot) -> list[AclBinding]:
    return [
        AclBinding(resource_type, name, pattern, principal, host, operation, permission)
        for (resource_type, name, pattern), entries in sorted(snapshot.acls.items())
        for principal, host, operation, permission in entries
    ]


class ConfigSync:
    """The broker's copy of the config entities and ACLs in ZooKeeper (see module docstring)."""

    def __init__(self, broker: BrokerHost, store: ZkConfigStore) -> None:
        self.broker = broker
        self.store = store
        self._poked = trio.Event()
        self._token: trio.lowlevel.TrioToken | None = None

    # --- reading ---------------------------------------------------------------------------------------

    def load(self, snapshot: ConfigSnapshot) -> None:
        """Take a read of the znodes into the broker's stores (trio thread, or before the loop runs).
        Dynamic broker configs are taken by `apply` (they need the broker's lock)."""
        broker = self.broker
        broker.scram_credentials.replace(credentials_of(snapshot))
        broker.quotas.store.replace(quotas_of(snapshot))
        if broker.authorizer is not None:
            broker.authorizer.store.replace(acls_of(snapshot))

    async def apply(self, snapshot: ConfigSnapshot) -> None:
        self.load(snapshot)
        await self.broker.apply_stored_broker_configs(snapshot.brokers)

    async def refresh(self) -> None:
        snapshot = await trio.to_thread.run_sync(self._read)
        await self.apply(snapshot)

    def _read(self) -> ConfigSnapshot:
        """Worker thread: one full read, sensitive broker configs decoded (PBKDF2 is slow on purpose)."""
        snapshot = self.store.read_all(self._watch)
        decode = getattr(self.broker.dynamic.store, "decode_entities", None)
        if decode is not None:
            snapshot.brokers = decode(snapshot.brokers)
        return snapshot

    def _watch(self, _event: WatchedEvent | None) -> None:
        """Kazoo thread: a notification directory changed. Only pokes the trio loop."""
        token = self._token
        if token is not None:
            try:
                token.run_sync_soon(self._poked.set)
            except trio.RunFinishedError:
                pass

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Re-read and apply whenever a change notification appears, until cancelled."""
        self._token = trio.lowlevel.current_trio_token()
        # a new session (the old one expired with its watches) or a reconnection: read again at once
        self.store.client.add_listener(lambda _state: self._watch(None))
        task_status.started()
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # ZooKeeper away: the next poke or tick tries again
                log.warning("reading configs and ACLs from ZooKeeper failed: %r", exc)
            with trio.move_on_after(RESYNC_SECONDS):
                await self._poked.wait()
            self._poked = trio.Event()

    # --- writing (admin requests) ----------------------------------------------------------------------

    async def alter_scram(
        self, user: str, upserts: dict[str, ScramCredential], deletions: Iterable[str]
    ) -> None:
        """Change one user's SCRAM credentials in /config/users/<user>, leaving its quotas alone."""
        removed = list(deletions)

        def change(configs: dict[str, str]) -> dict[str, str]:
            for mechanism in removed:
                configs.pop(mechanism, None)
            for mechanism, credential in upserts.items():
                configs[mechanism] = credential.encode()
            return configs

        await trio.to_thread.run_sync(self.store.update_entity, f"users/{zd.sanitize(user)}", change)

    async def alter_quotas(self, entity: Entity, ops: list[tuple[str, float | None]]) -> None:
        """Set (value) or remove (None) quotas of one entity, leaving its other keys (SCRAM) alone."""

        def change(configs: dict[str, str]) -> dict[str, str]:
            for key, value in ops:
                if value is None:
                    configs.pop(key, None)
                else:
                    configs[key] = quota_text(key, value)
            return configs

        await trio.to_thread.run_sync(self.store.update_entity, entity_path(entity), change)

    async def change_acls(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> None:
        """Add and remove ACL bindings, one compare-and-set per resource."""
        plus: dict[AclKey, list[AclEntry]] = {}
        minus: dict[AclKey, set[AclEntry]] = {}
        for binding in added:
            key = (binding.resource_type, binding.name, binding.pattern_type)
            plus.setdefault(key, []).append(_entry(binding))
        for binding in removed:
            key = (binding.resource_type, binding.name, binding.pattern_type)
            minus.setdefault(key, set()).add(_entry(binding))
        for key in dict.fromkeys([*plus, *minus]):
            adding, dropping = plus.get(key, []), minus.get(key, set())

            def change(
                entries: list[AclEntry], adding: list[AclEntry] = adding, dropping: set[AclEntry] = dropping
            ) -> list[AclEntry]:
                kept = [entry for entry in entries if entry not in dropping]
                return kept + [entry for entry in dict.fromkeys(adding) if entry not in kept]

            await trio.to_thread.run_sync(self.store.update_acls, key, change)


def _entry(binding: AclBinding) -> AclEntry:
    return (binding.principal, binding.host, binding.operation, binding.permission)
