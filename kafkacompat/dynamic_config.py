"""Dynamic broker configs: the broker settings Kafka lets operators change on a running broker.

Theory of operation
-------------------
Kafka keeps three layers of broker settings, in this order of precedence: the per-broker dynamic configs
(entity `<id>`, DYNAMIC_BROKER_CONFIG), the cluster-wide dynamic defaults (entity `<default>`, the empty
resource name in the admin APIs, DYNAMIC_DEFAULT_BROKER_CONFIG) and the static configs the process was
started with (server.properties and overrides, STATIC_BROKER_CONFIG); below them are the built-in
defaults (DEFAULT_CONFIG). `DynamicBrokerConfigs` owns the two dynamic layers of this node and the
*effective* `BrokerConfig` that results: the static strings, then the default layer, then the per-broker
layer, each key replacing its synonyms (a dynamic `log.retention.ms` hides a static
`log.retention.hours`, as Kafka's `overrideProps` does), parsed and validated like a config file.
The broker reads only the effective config (`BrokerState.config`); a change builds a new one and swaps
it in, never mutating the old.

A change is validated before anything happens (`validate()`): every name must be one Kafka updates
dynamically (`KAFKA_DYNAMIC`, or a known option behind Kafka's `listener.name.<listener>.` prefix; only
re-binding listeners is refused here); per-broker-only names are refused on the cluster-wide entity; each
value must parse; the resulting effective config must load and give a valid topic-default `LogConfig`;
thread counts move at most by half/double, as Kafka's thread pools allow. The broker then runs its own
validators (`BrokerState.config_validators`): the server rebuilds every listener's TLS and SASL settings
from the candidate config, so a key store that does not load refuses the change with nothing changed.
Names Kafka changes at run time that this broker does not act on (Kerberos, tiered storage, metric
reporters, ...) are options of their own, kept and described like the others (config.py marks them
"accepted"). Any refusal is `KafkaError(INVALID_REQUEST)` with Kafka's message, which is what a KRaft broker
answers (Kafka's own note calls INVALID_CONFIG the better code but keeps this one for compatibility).

DescribeConfigs reads `config_synonyms()`: for a name and its synonym group (`broker_config_synonyms`,
e.g. the three `log.retention.*`), every layer in precedence order lists the synonyms set in it, and the
list starts at the first entry of the name itself (Kafka drops what precedes it). Topic configs take
the same list for their broker-level synonym, after the topic override.

Persistence: one JSON file, `kafkacompat-dynamic-broker-configs.json` in the first log dir, holding
`{"version": 1, "brokers": {"<default>": {...}, "<id>": {...}}}`: the entity names and the string maps
Kafka keeps under ZooKeeper's `/config/brokers/<entity>`, so that a cluster-mode store can write the same
maps to those znodes. JSON rather than a properties file because one file holds two scopes and must keep
the entities of other node ids untouched (a log dir moved between nodes). It is rewritten whole
(temporary file, fsync, rename, fsync of the directory) before a change is answered, and replayed at
start-up; a value that no longer validates there (say, after an upgrade) is dropped with a warning, as
Kafka drops invalid persisted dynamic configs, while a file that cannot be read stops the start-up
(ConfigError), as an unreadable topic table does: running on without it would forget the changes.

The storage is behind `DynamicConfigStore`. In cluster mode (ZooKeeper) the entities are Kafka's znodes
`/config/brokers/<default>` and `/config/brokers/<id>` instead of the file
(`replication.zk_config.ZkDynamicConfigStore`): a change is a compare-and-set on its entity's znode
(`read_entity` + `write_entity`, retried by `BrokerState.alter_broker_configs` on a conflict, so changes
sent to two brokers at once do not lose each other), followed by Kafka's `/config/changes` notification;
every broker re-reads the entities when one appears and takes them with `reload()`.

Not dynamic here (refused, see compat_tests/FINDINGS.md): `listeners`, `advertised.listeners` and
`listener.security.protocol.map` (re-binding listeners).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from kafkacompat.config import (
    OPTIONS_BY_NAME,
    PARSERS,
    BrokerConfig,
    ConfigError,
    broker_log_config,
    listener_option_name,
)
from kafkacompat.wire.errors import ErrorCode, KafkaError

__all__ = [
    "DEFAULT_ENTITY",
    "DYNAMIC_HERE",
    "FILE_NAME",
    "KAFKA_DYNAMIC",
    "DynamicBrokerConfigs",
    "DynamicConfigStore",
    "LocalDynamicConfigStore",
    "VersionedDynamicConfigStore",
    "broker_config_synonyms",
    "listener_base_name",
    "masked_configs",
    "update_mode",
]

log = logging.getLogger("kafkacompat.config")

DEFAULT_ENTITY = "<default>"  # Kafka's entity name for the cluster-wide defaults
FILE_NAME = "kafkacompat-dynamic-broker-configs.json"
FILE_VERSION = 1

# DescribeConfigs config sources
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# --- Kafka 3.9's dynamic broker configs, by the part of the broker that reconfigures them ---------------

# The broker settings that are topic-config defaults (the first synonym of each topic config).
DYNAMIC_LOG_CONFIGS = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.jitter.ms",
        "log.index.size.max.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.retention.bytes",
        "log.retention.ms",
        "message.max.bytes",
        "log.index.interval.bytes",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.segment.delete.delay.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleanup.policy",
        "unclean.leader.election.enable",
        "min.insync.replicas",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "log.preallocate",
        "log.message.format.version",
        "log.message.timestamp.type",
        "log.message.timestamp.difference.max.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.message.downconversion.enable",
        "log.local.retention.ms",
        "log.local.retention.bytes",
    }
)
DYNAMIC_CLEANER_CONFIGS = frozenset(
    {
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
        "message.max.bytes",
    }
)
THREAD_POOL_CONFIGS = frozenset(
    {"num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads"}
)
SOCKET_SERVER_CONFIGS = frozenset(
    {
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
        "num.network.threads",
    }
)
PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms", "transaction.partition.verification.enable"})
# Key stores and trust stores: Kafka takes them per listener only (listener.name.<name>.<config>).
LISTENER_ONLY_SECURITY_CONFIGS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)
LISTENER_CONFIGS = frozenset(
    {
        "advertised.listeners",
        "listeners",
        "listener.security.protocol.map",
        "principal.builder.class",
        "ssl.protocol",
        "ssl.provider",
        "ssl.cipher.suites",
        "ssl.enabled.protocols",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.endpoint.identification.algorithm",
        "ssl.secure.random.implementation",
        "ssl.client.auth",
        "ssl.engine.factory.class",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.jaas.config",
        "sasl.enabled.mechanisms",
        "sasl.kerberos.service.name",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "max.connections",
        "max.connection.creation.rate",
        "num.network.threads",
    }
)
# Replication throttles (Kafka's DynamicConfig.Broker adds them to the reconfigurable set).
QUOTA_CONFIGS = frozenset(
    {
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)
# Tiered storage's (Kafka's DynamicRemoteLogConfig)
REMOTE_LOG_CONFIGS = frozenset(
    {
        "remote.log.index.file.cache.total.size.bytes",
        "remote.fetch.max.wait.ms",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.fetch.max.bytes.per.second",
    }
)
KAFKA_DYNAMIC: frozenset[str] = (
    DYNAMIC_LOG_CONFIGS
    | DYNAMIC_CLEANER_CONFIGS
    | THREAD_POOL_CONFIGS
    | SOCKET_SERVER_CONFIGS
    | PRODUCER_STATE_CONFIGS
    | LISTENER_ONLY_SECURITY_CONFIGS
    | LISTENER_CONFIGS
    | QUOTA_CONFIGS
    | REMOTE_LOG_CONFIGS
    | {"metric.reporters"}
)
# Listener settings are per broker; these three are the exceptions Kafka also takes cluster-wide.
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset(
    {"max.connections", "max.connection.creation.rate", "num.network.threads"}
)
PER_BROKER_ONLY: frozenset[str] = (
    LISTENER_ONLY_SECURITY_CONFIGS | LISTENER_CONFIGS
) - _CLUSTER_LEVEL_LISTENER_CONFIGS

# Dynamic in Kafka but refused here, with the reason the refusal gives. Every other name of Kafka's lists
# is taken (those this broker does not act on are kept and described: config.py's _NOT_IMPLEMENTED).
NOT_DYNAMIC_HERE: dict[str, str] = {
    "listeners": "listeners are bound once at start-up here",
    "advertised.listeners": "listeners are bound once at start-up here",
    "listener.security.protocol.map": "listeners are bound once at start-up here",
}

# What this broker changes at run time: Kafka's dynamic names that are options here and not refused above.
DYNAMIC_HERE: frozenset[str] = frozenset(
    name for name in KAFKA_DYNAMIC if name in OPTIONS_BY_NAME and name not in NOT_DYNAMIC_HERE
)

_LISTENER_PREFIX = "listener.name."
_PLAIN = OPTIONS_BY_NAME["log.retention.ms"]  # any option that is not a password

# Broker settings that name one value in different units, most specific first (Kafka's brokerConfigSynonyms).
_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def listener_base_name(name: str) -> str | None:
    """The option a `listener.name.<listener>.[<mechanism>.]<option>` name sets; None for other names
    and for listener-prefixed names of no known option."""
    if not name.startswith(_LISTENER_PREFIX):
        return None
    try:
        return listener_option_name(name)
    except KeyError:
        return None


def broker_config_synonyms(name: str) -> list[str]:
    """The whole synonym group of `name` (`log.flush.interval.ms` falls back to the scheduler interval,
    but not the other way round; a listener-prefixed name falls back to its option), else just `name`."""
    base = listener_base_name(name)
    if base is not None:
        return [name, base]
    return _unit_synonyms(name)


def _unit_synonyms(name: str) -> list[str]:
    """The names of one value in different units (what a dynamic setting hides below it)."""
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    for group in _SYNONYM_GROUPS:
        if name in group:
            return list(group)
    return [name]


def update_mode(name: str) -> str:
    """Kafka's "update mode" of a broker setting here: read-only (static), per-broker (this node's id
    only) or cluster-wide (also the cluster-wide default); "read-only here" where Kafka changes it at run
    time but this broker does not."""
    if name in DYNAMIC_HERE:
        return "per-broker" if name in PER_BROKER_ONLY else "cluster-wide"
    return "read-only here" if name in KAFKA_DYNAMIC else "read-only"


def masked_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """`configs` with the values of password-type settings (key stores, JAAS configs) hidden, for logs."""
    return {
        name: "[hidden]" if OPTIONS_BY_NAME.get(listener_base_name(name) or name, _PLAIN).type == "password"
        else value
        for name, value in configs.items()
    }


def _scala_set(names: Iterable[str]) -> str:
    """How Kafka's messages print a set of names."""
    return f"Set({', '.join(sorted(names))})"


def _refuse(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


def render(value: Any) -> str | None:
    """A typed option value as the string Kafka shows (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


_DEFAULT_STRINGS: dict[str, str] = {
    name: text for name, option in OPTIONS_BY_NAME.items() if (text := render(option.default)) is not None
}


# --- storage -------------------------------------------------------------------------------------------


class DynamicConfigStore(Protocol):
    """Where the dynamic entities live: entity name ("<default>" or a node id) -> {config: value}."""

    def load(self) -> dict[str, dict[str, str]]: ...

    def write(self, entities: Mapping[str, Mapping[str, str]]) -> None: ...


class VersionedDynamicConfigStore(DynamicConfigStore, Protocol):
    """A shared store (cluster mode) written one entity at a time by compare-and-set."""

    def read_entity(self, entity: str) -> tuple[dict[str, str], int]: ...

    def write_entity(self, entity: str, configs: dict[str, str], version: int) -> bool: ...


class LocalDynamicConfigStore:
    """The single-node store: one JSON file in the first log dir (see the module docstring)."""

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.path = os.path.join(os.fspath(log_dir), FILE_NAME)

    def load(self) -> dict[str, dict[str, str]]:
        try:
            with open(self.path, encoding="utf-8") as handle:
                document = json.load(handle)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the dynamic broker configs in {self.path}: {exc}") from None
        brokers = document.get("brokers") if isinstance(document, dict) else None
        if not isinstance(brokers, dict) or document.get("version") != FILE_VERSION:
            raise ConfigError(f"{self.path}: not a version {FILE_VERSION} dynamic broker config file")
        entities: dict[str, dict[str, str]] = {}
        for entity, configs in brokers.items():
            if isinstance(configs, dict):
                entities[str(entity)] = {str(k): str(v) for k, v in configs.items() if v is not None}
        return entities

    def write(self, entities: Mapping[str, Mapping[str, str]]) -> None:
        """Replace the file (blocking: fsyncs; run it in a worker thread)."""
        from kafkacompat.log.checkpoints import atomic_write

        document = {
            "version": FILE_VERSION,
            "brokers": {name: dict(sorted(configs.items())) for name, configs in sorted(entities.items())},
        }
        # owner-only: per-listener key stores, key passwords and JAAS configs may be set inline (Kafka
        # encrypts them in ZooKeeper with password.encoder.secret; a local file relies on its mode)
        atomic_write(self.path, (json.dumps(document, indent=2) + "\n").encode("utf-8"), mode=0o600)


# --- the layers ------------------------------------------------------------------------------------------


class DynamicBrokerConfigs:
    """Owns this node's dynamic config layers (and those of other entities found in the store, kept as
    they are) and the effective `BrokerConfig` they give on top of the static one."""

    def __init__(self, static: BrokerConfig, store: DynamicConfigStore | None = None) -> None:
        self.static = static
        self.store = store
        self.node_entity = str(static.node_id)
        self._entities: dict[str, dict[str, str]] = {}
        self.effective = static
        if store is not None:
            self._replay(store.load())

    def _replay(self, stored: dict[str, dict[str, str]]) -> None:
        """Take the stored entities, dropping (with a warning) what would not validate now."""
        self._entities = {k: dict(v) for k, v in stored.items()}
        for entity in (DEFAULT_ENTITY, self.node_entity):
            configs = self._entities.get(entity, {})
            for name, value in list(configs.items()):
                try:
                    self._check_names(entity, {name: value})
                    self._check_value(name, value)
                except KafkaError as exc:
                    log.warning("ignoring stored dynamic broker config %s=%s: %s", name, value, exc.message)
                    del configs[name]
        try:
            self.effective = self._build(self.entity(DEFAULT_ENTITY), self.entity(self.node_entity))
        except KafkaError as exc:
            log.warning("ignoring the stored dynamic broker configs: %s", exc.message)
            self._entities.pop(DEFAULT_ENTITY, None)
            self._entities.pop(self.node_entity, None)
            self.effective = self.static

    def reload(self, stored: dict[str, dict[str, str]]) -> BrokerConfig:
        """Take the entities as the store now holds them (cluster mode: changed through another broker);
        the new effective config (names or values that no longer validate are dropped, as at start-up)."""
        self._replay(stored)
        return self.effective

    # reading

    def static_strings(self) -> dict[str, str]:
        """The static settings as given, listener-prefixed ones included."""
        return {**self.static.listener_settings, **self.static.given}

    def entity(self, entity: str) -> dict[str, str]:
        """A copy of one entity's dynamic configs ("<default>" or this node's id)."""
        return dict(self._entities.get(entity, {}))

    @property
    def per_broker(self) -> dict[str, str]:
        return self.entity(self.node_entity)

    @property
    def cluster_default(self) -> dict[str, str]:
        return self.entity(DEFAULT_ENTITY)

    def entity_for(self, node_id: int | None) -> str:
        """The entity a BROKER resource names: None (the empty name) is the cluster-wide default."""
        return DEFAULT_ENTITY if node_id is None else str(node_id)

    def config_synonyms(
        self, name: str, names: list[str], *, sensitive: bool = False
    ) -> list[tuple[str, str | None, int]]:
        """(name, value, source) of every synonym set in any layer, highest precedence first, starting at
        `name`'s own first entry (Kafka's order)."""
        layers = (
            (self.per_broker, SOURCE_DYNAMIC_BROKER),
            (self.cluster_default, SOURCE_DYNAMIC_DEFAULT_BROKER),
            ({k: v.strip() for k, v in self.static_strings().items()}, SOURCE_STATIC_BROKER),
            (_DEFAULT_STRINGS, SOURCE_DEFAULT),
        )
        found = [
            (synonym, None if sensitive else layer[synonym], source)
            for layer, source in layers
            for synonym in names
            if synonym in layer
        ]
        while found and found[0][0] != name:
            found.pop(0)
        return found

    # changing

    def _check_names(self, entity: str, configs: Mapping[str, str]) -> None:
        """Kafka's checks of the names, in its order, then the refusals of this broker."""
        names = set(configs)
        prefixed = {n for n in names if listener_base_name(n) is not None}
        static_only = {n for n in names if n in OPTIONS_BY_NAME and n not in KAFKA_DYNAMIC}
        if static_only:
            raise _refuse(f"Cannot update these configs dynamically: {_scala_set(static_only)}")
        security = names & LISTENER_ONLY_SECURITY_CONFIGS
        if security:
            raise _refuse(
                "These security configs can be dynamically updated only per-listener using the listener "
                f"prefix: {_scala_set(security)}"
            )
        per_broker = (names & PER_BROKER_ONLY) | {
            n for n in prefixed if listener_base_name(n) not in _CLUSTER_LEVEL_LISTENER_CONFIGS
        }
        if entity == DEFAULT_ENTITY and per_broker:
            raise _refuse(
                "Cannot update these configs at default cluster level, broker id must be specified: "
                f"{_scala_set(per_broker)}"
            )
        # Kafka would keep names it does not know as custom configs (for plugins); this broker has none
        unknown = names - set(OPTIONS_BY_NAME) - KAFKA_DYNAMIC - prefixed
        if unknown:
            raise _refuse(
                f"Unknown broker configs: {_scala_set(unknown)} (this broker keeps no custom configs)"
            )
        refused = {n: NOT_DYNAMIC_HERE[n] for n in names if n in NOT_DYNAMIC_HERE}
        for name in prefixed:
            if listener_base_name(name) in NOT_DYNAMIC_HERE:
                refused[name] = "listeners are bound once at start-up here"
        if refused:
            reasons = "; ".join(f"{name}: {why}" for name, why in sorted(refused.items()))
            raise _refuse(f"Cannot update these configs dynamically: {_scala_set(refused)} ({reasons})")

    @staticmethod
    def _check_value(name: str, raw: str) -> None:
        option = OPTIONS_BY_NAME[listener_base_name(name) or name]
        text = raw.strip()
        try:
            if text == "" and option.type not in ("string", "password", "list"):
                raise ConfigError("Not a number" if option.type != "boolean" else "empty value")
            value = PARSERS[option.type](raw)
            if option.check is not None:
                option.check(value)
        except ConfigError as exc:
            reason = str(exc)
            if option.type in ("int", "short", "long", "double") and (
                reason.startswith(("expected", "Not a number")) or "does not fit" in reason
            ):
                reason = f"Not a number of type {option.type.upper()}"
            elif option.type == "boolean":
                reason = "Expected value to be either true or false"
            shown = "[hidden]" if option.type == "password" else raw  # never echo a secret
            raise _refuse(f"Invalid value {shown} for configuration {name}: {reason}") from None

    def _build(self, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]) -> BrokerConfig:
        # the static listener.name.* settings too: the effective config must answer for_listener() as the
        # static one does (the inter-broker client reads its listener's JAAS and TLS settings from it)
        props = self.static_strings()
        for layer in (cluster_default, per_broker):
            for name, value in layer.items():
                for synonym in _unit_synonyms(name):
                    props.pop(synonym, None)
                props[name] = value
        try:
            effective = BrokerConfig.from_dict(props, source=self.static.source, warn_unknown=False)
            broker_log_config(effective)
        except ConfigError as exc:
            raise _refuse(f"Invalid dynamic configuration: {exc}") from None
        effective.unknown = dict(self.static.unknown)
        return effective

    def _check_thread_counts(self, effective: BrokerConfig) -> None:
        current = self.effective
        for name in sorted((THREAD_POOL_CONFIGS | {"num.network.threads"}) & set(OPTIONS_BY_NAME)):
            old, new = current[name], effective[name]
            if new == old:
                continue
            failed = f"Dynamic thread count update validation failed for {name}={new}"
            if new <= 0:
                raise _refuse(f"{failed}, value should be at least 1")
            if new < old / 2:
                raise _refuse(f"{failed}, value should be at least half the current value {old}")
            if new > old * 2:
                raise _refuse(f"{failed}, value should not be greater than double the current value {old}")
        old_cleaners, new_cleaners = current["log.cleaner.threads"], effective["log.cleaner.threads"]
        if new_cleaners != old_cleaners:
            if new_cleaners <= 0:
                raise _refuse("Log cleaner threads should be at least 1")
            if new_cleaners > old_cleaners * 2:
                raise _refuse(
                    "Log cleaner threads cannot be increased to more than double the current value "
                    f"{old_cleaners}"
                )

    def validate(self, entity: str, configs: Mapping[str, str]) -> BrokerConfig:
        """The effective config if `entity`'s dynamic configs became `configs`. Raises KafkaError
        (INVALID_REQUEST) as Kafka refuses the change; changes nothing."""
        self._check_names(entity, configs)
        for name, value in configs.items():
            self._check_value(name, value)
        if entity == DEFAULT_ENTITY:
            effective = self._build(configs, self.per_broker)
        else:
            effective = self._build(self.cluster_default, configs)
        self._check_thread_counts(effective)
        return effective

    def entities_with(self, entity: str, configs: Mapping[str, str]) -> dict[str, dict[str, str]]:
        """Every stored entity, with `entity` replaced by `configs` (what to persist)."""
        entities = {k: dict(v) for k, v in self._entities.items()}
        if configs:
            entities[entity] = dict(configs)
        else:
            entities.pop(entity, None)
        return entities

    def replace(self, entity: str, configs: Mapping[str, str], effective: BrokerConfig) -> None:
        """Take a validated (and persisted) change: `effective` is what `validate()` returned."""
        self._entities = self.entities_with(entity, configs)
        self.effective = effective
