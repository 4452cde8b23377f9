"""Broker configuration with Kafka's `server.properties` names, types, defaults and validation.

Theory of operation: `BROKER_OPTIONS` is one table of `Option(name, type, default, check)`. Loading
(`BrokerConfig.load(path, overrides)`) reads a Java-properties file, applies `key=value` overrides on
top, parses each known key with its type, validates it and keeps the raw strings of unknown keys so
that they can be reported in one warning line (Kafka logs them too; they are never silently dropped).
`BrokerConfig` is immutable after loading; every part of the broker reads it, nobody writes it (a dynamic
broker config change builds a new one from the `given` strings, see kafkacompat.dynamic_config).

Kafka's precedence rules that matter are kept: `log.retention.ms` > `.minutes` > `.hours`,
`log.roll.ms` > `.hours`, `log.flush.interval.ms` falls back to `log.flush.scheduler.interval.ms`,
`node.id` and `broker.id` name the same thing, `log.dirs` wins over `log.dir`. The broker-wide `log.*`
settings are the defaults of the topic-level storage configs (`topic_defaults()` maps them to the
topic names, e.g. `log.retention.ms` -> `retention.ms`), exactly as Kafka derives a topic's LogConfig.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BROKER_OPTIONS",
    "BrokerConfig",
    "ConfigError",
    "Listener",
    "parse_listeners",
    "parse_properties",
]

log = logging.getLogger("kafkacompat.config")

LONG_MAX = 9_223_372_036_854_775_807
INT_MAX = 2_147_483_647


class ConfigError(ValueError):
    """A configuration value that cannot be parsed or is out of range."""


# --- value types -------------------------------------------------------------------------------------


def _parse_int(raw: str, bits: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"expected an integer, got {raw!r}") from None
    limit = 1 << (bits - 1)
    if not -limit <= value < limit:
        raise ConfigError(f"{value} does not fit in {bits} bits")
    return value


def _parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise ConfigError(f"expected true or false, got {raw!r}")


def _parse_double(raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigError(f"expected a number, got {raw!r}") from None


def _parse_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


PARSERS: dict[str, Callable[[str], Any]] = {
    "int": lambda raw: _parse_int(raw, 32),
    "short": lambda raw: _parse_int(raw, 16),
    "long": lambda raw: _parse_int(raw, 64),
    "double": _parse_double,
    "boolean": _parse_bool,
    "string": lambda raw: raw.strip(),
    "password": lambda raw: raw,
    "list": _parse_list,
}


# --- validators ----------------------------------------------------------------------------------------


def at_least(minimum: float) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < minimum:
            raise ConfigError(f"value must be at least {minimum}")

    return check


def between(low: float, high: float) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not low <= value <= high:
            raise ConfigError(f"value must be between {low} and {high}")

    return check


def finite_at_least(minimum: float) -> Callable[[Any], None]:
    """A finite number of at least `minimum` (NaN and the infinities are refused)."""

    def check(value: Any) -> None:
        if not math.isfinite(value) or value < minimum:
            raise ConfigError(f"value must be a finite number of at least {minimum}")

    return check


def finite_above(minimum: float) -> Callable[[Any], None]:
    """A finite number greater than `minimum` (NaN and the infinities are refused)."""

    def check(value: Any) -> None:
        if not math.isfinite(value) or value <= minimum:
            raise ConfigError(f"value must be a finite number greater than {minimum}")

    return check


def one_of(*choices: str, case_insensitive: bool = False) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        values = value if isinstance(value, list) else [value]
        for item in values:
            probe = item.lower() if case_insensitive else item
            allowed = [c.lower() for c in choices] if case_insensitive else list(choices)
            if probe not in allowed:
                raise ConfigError(f"{item!r} is not one of {', '.join(choices)}")

    return check


def _metrics_listener(value: Any) -> None:
    """`metrics.listener` is empty (off) or http://host:port."""
    if not value:
        return
    if not re.match(r"^http://(\[[^\]]*\]|[^:/\[\]]*):\d{1,5}/?$", value, re.IGNORECASE):
        raise ConfigError(f"{value!r} is not of the form http://host:port")
    if int(value.rstrip("/").rsplit(":", 1)[1]) > 65535:
        raise ConfigError(f"{value!r}: port out of range")


def _key_factory(value: Any) -> None:
    """The PBKDF2 variants the password encoder derives keys with (Java's names)."""
    if value is not None and value not in (
        "PBKDF2WithHmacSHA512",
        "PBKDF2WithHmacSHA256",
        "PBKDF2WithHmacSHA1",
    ):
        raise ConfigError(f"{value!r}: PBKDF2WithHmacSHA512, PBKDF2WithHmacSHA256 or PBKDF2WithHmacSHA1")


def _password_cipher(value: Any) -> None:
    """The AES transformations the password encoder encrypts with (Java's names)."""
    if value.upper() not in ("AES/CBC/PKCS5PADDING", "AES/GCM/NOPADDING"):
        raise ConfigError(f"{value!r}: AES/CBC/PKCS5Padding or AES/GCM/NoPadding")


@dataclass(frozen=True, slots=True)
class Option:
    """One broker setting: its Kafka name, value type, default (None = unset/null), range check, and
    `effect`: whether this broker acts on it (HONOURED) or only accepts and validates it (see below)."""

    name: str
    type: str
    default: Any
    check: Callable[[Any], None] | None = None
    effect: str = "honoured"
    note: str = ""  # what the effect leaves out, e.g. values refused (README's table shows it)

    @property
    def effect_text(self) -> str:
        return f"{self.effect}: {self.note}" if self.note else self.effect


# What a setting does here (README's config table shows it). Every key Kafka's brokers take is accepted
# and validated, so existing server.properties files load; not every one changes anything.
HONOURED = "honoured"
NO_EFFECT_SINGLE_NODE = "accepted (no effect on a single node)"
NOT_IMPLEMENTED = "accepted (not implemented)"


AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_O = Option
BROKER_OPTIONS: tuple[Option, ...] = (
    # identity and listeners
    _O("node.id", "int", None, at_least(0)),
    _O("broker.id", "int", None, at_least(-1)),
    _O("cluster.id", "string", None),
    _O("broker.rack", "string", None),
    _O("listeners", "list", ["PLAINTEXT://:9092"]),
    _O("advertised.listeners", "list", None),
    _O(
        "listener.security.protocol.map",
        "list",
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
    ),
    _O("inter.broker.listener.name", "string", None),
    _O(
        "security.inter.broker.protocol",
        "string",
        "PLAINTEXT",
        one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", case_insensitive=True),
    ),
    _O("controller.listener.names", "list", None),
    _O("process.roles", "list", None),
    _O("controller.quorum.voters", "list", None),
    _O("controller.quorum.bootstrap.servers", "list", None),
    _O("zookeeper.connect", "string", None),
    _O("zookeeper.session.timeout.ms", "int", 18000, at_least(1)),
    _O("zookeeper.connection.timeout.ms", "int", None),
    # network
    _O("socket.request.max.bytes", "int", 104857600, at_least(1)),
    _O("socket.send.buffer.bytes", "int", 102400),
    _O("socket.receive.buffer.bytes", "int", 102400),
    _O("socket.listen.backlog.size", "int", 50, at_least(1)),
    _O("connections.max.idle.ms", "long", 600000),
    _O("max.connections", "int", INT_MAX, at_least(0)),
    _O("max.connections.per.ip", "int", INT_MAX, at_least(0)),
    _O("max.connection.creation.rate", "int", INT_MAX, at_least(0)),
    _O("num.network.threads", "int", 3, at_least(1)),
    _O("num.io.threads", "int", 8, at_least(1)),
    _O("queued.max.requests", "int", 500, at_least(1)),
    _O("queued.max.request.bytes", "long", -1),
    _O("num.recovery.threads.per.data.dir", "int", 1, at_least(1)),
    # topics
    _O("num.partitions", "int", 1, at_least(1)),
    _O("default.replication.factor", "int", 1, at_least(1)),
    _O("auto.create.topics.enable", "boolean", True),
    _O("delete.topic.enable", "boolean", True),
    _O("auto.leader.rebalance.enable", "boolean", True),
    _O("leader.imbalance.check.interval.seconds", "long", 300, at_least(1)),
    _O("leader.imbalance.per.broker.percentage", "int", 10, at_least(0)),
    _O("controlled.shutdown.enable", "boolean", True),
    _O("controlled.shutdown.max.retries", "int", 3),
    _O("controlled.shutdown.retry.backoff.ms", "long", 5000),
    _O("min.insync.replicas", "int", 1, at_least(1)),
    _O("unclean.leader.election.enable", "boolean", False),
    _O("compression.type", "string", "producer", one_of(*COMPRESSION_TYPES)),
    _O("message.max.bytes", "int", 1048588, at_least(0)),
    _O("fetch.max.bytes", "int", 57671680, at_least(1024)),
    _O("max.incremental.fetch.session.cache.slots", "int", 1000, at_least(0)),
    _O("fetch.purgatory.purge.interval.requests", "int", 1000),
    _O("producer.purgatory.purge.interval.requests", "int", 1000),
    # log storage (broker-wide defaults of the topic configs)
    _O("log.dirs", "list", None),
    _O("log.dir", "string", "./data"),
    _O("log.segment.bytes", "int", 1073741824, at_least(14)),
    _O("log.roll.ms", "long", None, at_least(1)),
    _O("log.roll.hours", "int", 168, at_least(1)),
    _O("log.roll.jitter.ms", "long", None, at_least(0)),
    _O("log.roll.jitter.hours", "int", 0, at_least(0)),
    _O("log.retention.ms", "long", None),
    _O("log.retention.minutes", "int", None),
    _O("log.retention.hours", "int", 168),
    _O("log.retention.bytes", "long", -1),
    _O("log.retention.check.interval.ms", "long", 300000, at_least(1)),
    _O("log.index.interval.bytes", "int", 4096, at_least(0)),
    _O("log.index.size.max.bytes", "int", 10485760, at_least(4)),
    _O("log.flush.interval.messages", "long", LONG_MAX, at_least(1)),
    _O("log.flush.interval.ms", "long", None),
    _O("log.flush.scheduler.interval.ms", "long", LONG_MAX),
    _O("log.flush.offset.checkpoint.interval.ms", "int", 60000, at_least(0)),
    _O("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, at_least(0)),
    _O("log.flush.recovery.point.checkpoint.interval.ms", "int", None),
    _O("log.segment.delete.delay.ms", "long", 60000, at_least(0)),
    _O("log.cleanup.policy", "list", ["delete"], one_of("delete", "compact")),
    _O("log.cleaner.enable", "boolean", True),
    _O("log.cleaner.threads", "int", 1, at_least(0)),
    _O("log.cleaner.backoff.ms", "long", 15000, at_least(0)),
    _O("log.cleaner.delete.retention.ms", "long", 86400000, at_least(0)),
    _O("log.cleaner.min.compaction.lag.ms", "long", 0, at_least(0)),
    _O("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, at_least(1)),
    _O("log.cleaner.min.cleanable.ratio", "double", 0.5, between(0, 1)),
    _O("log.cleaner.dedupe.buffer.size", "long", 134217728),
    _O("log.cleaner.io.buffer.size", "int", 524288),
    _O("log.preallocate", "boolean", False),
    _O("log.message.timestamp.type", "string", "CreateTime", one_of("CreateTime", "LogAppendTime")),
    _O("log.message.timestamp.difference.max.ms", "long", LONG_MAX, at_least(0)),
    _O("log.message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0)),
    _O("log.message.timestamp.after.max.ms", "long", LONG_MAX, at_least(0)),
    _O("log.message.downconversion.enable", "boolean", True),
    _O("log.message.format.version", "string", None),
    # producers and transactions
    _O("producer.id.expiration.ms", "int", 86400000, at_least(1)),
    _O("producer.id.expiration.check.interval.ms", "int", 600000, at_least(1)),
    _O("transactional.id.expiration.ms", "int", 604800000, at_least(1)),
    _O("transaction.max.timeout.ms", "int", 900000, at_least(1)),
    _O("transaction.state.log.num.partitions", "int", 50, at_least(1)),
    _O("transaction.state.log.replication.factor", "short", 3, at_least(1)),
    _O("transaction.state.log.min.isr", "int", 2, at_least(1)),
    _O("transaction.state.log.segment.bytes", "int", 104857600, at_least(1)),
    _O("transaction.state.log.load.buffer.size", "int", 5242880, at_least(1)),
    _O("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, at_least(1)),
    _O("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, at_least(1)),
    _O("transaction.partition.verification.enable", "boolean", True),
    # groups and offsets
    _O("offsets.topic.num.partitions", "int", 50, at_least(1)),
    _O("offsets.topic.replication.factor", "short", 3, at_least(1)),
    _O("offsets.topic.segment.bytes", "int", 104857600, at_least(1)),
    _O("offsets.topic.compression.codec", "int", 0),
    _O("offsets.retention.minutes", "int", 10080, at_least(1)),
    _O("offsets.retention.check.interval.ms", "long", 600000, at_least(1)),
    _O("offsets.commit.timeout.ms", "int", 5000, at_least(1)),
    _O("offsets.load.buffer.size", "int", 5242880, at_least(1)),
    _O("group.initial.rebalance.delay.ms", "int", 3000),
    _O("group.min.session.timeout.ms", "int", 6000),
    _O("group.max.session.timeout.ms", "int", 1800000),
    _O("group.max.size", "int", INT_MAX, at_least(1)),
    # replication (cluster mode)
    _O("replica.lag.time.max.ms", "long", 30000),
    _O("replica.fetch.max.bytes", "int", 1048576, at_least(0)),
    _O("replica.fetch.min.bytes", "int", 1),
    _O("replica.fetch.wait.max.ms", "int", 500),
    _O("replica.fetch.backoff.ms", "int", 1000, at_least(0)),
    _O("replica.fetch.response.max.bytes", "int", 10485760, at_least(0)),
    _O("replica.socket.timeout.ms", "int", 30000),
    _O("num.replica.fetchers", "int", 1),
    _O("replica.high.watermark.checkpoint.interval.ms", "long", 5000),
    # observability (kafkacompat's own: Kafka exposes JMX instead)
    _O("metrics.listener", "string", None, _metrics_listener),
    # profiling the event loop (kafkacompat.diagnostics), off when unset: log each task step over this
    # many ms of CPU (0: every step), and the loop's turns and wake-up delays once per window
    _O("loop.lag.threshold.ms", "double", None, finite_at_least(0)),
    _O("loop.probe.window.seconds", "double", None, finite_above(0)),
    # sensitive dynamic broker configs in ZooKeeper (cluster mode): Kafka's password encoder
    _O("password.encoder.secret", "password", None),
    _O("password.encoder.old.secret", "password", None),
    _O("password.encoder.keyfactory.algorithm", "string", None, _key_factory),
    _O("password.encoder.cipher.algorithm", "string", "AES/CBC/PKCS5Padding", _password_cipher),
    _O("password.encoder.key.length", "int", 128, at_least(8)),
    _O("password.encoder.iterations", "int", 4096, at_least(1024)),
    # security: TLS (PEM stores only) and SASL; each may be set per listener as listener.name.<name>.<key>
    _O("ssl.keystore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM", case_insensitive=True)),
    _O("ssl.keystore.location", "string", None),
    _O("ssl.keystore.password", "password", None),
    _O("ssl.keystore.certificate.chain", "password", None),
    _O("ssl.keystore.key", "password", None),
    _O("ssl.key.password", "password", None),
    _O("ssl.truststore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM", case_insensitive=True)),
    _O("ssl.truststore.location", "string", None),
    _O("ssl.truststore.password", "password", None),
    _O("ssl.truststore.certificates", "password", None),
    _O("ssl.client.auth", "string", "none", one_of("none", "requested", "required")),
    _O(
        "ssl.enabled.protocols",
        "list",
        ["TLSv1.2", "TLSv1.3"],
        one_of("TLSv1.2", "TLSv1.3", "TLSv1.1", "TLSv1"),
    ),
    _O("ssl.protocol", "string", "TLSv1.3"),
    _O("ssl.cipher.suites", "list", []),
    _O("ssl.endpoint.identification.algorithm", "string", "https"),
    _O("ssl.principal.mapping.rules", "string", "DEFAULT"),
    # KIP-978: may a keystore replaced at run time change its certificate's subject DN / SANs
    _O("ssl.allow.dn.changes", "boolean", False),
    _O("ssl.allow.san.changes", "boolean", False),
    _O("ssl.keymanager.algorithm", "string", "SunX509"),
    _O("ssl.trustmanager.algorithm", "string", "PKIX"),
    _O("ssl.secure.random.implementation", "string", None),
    _O("ssl.provider", "string", None),
    _O("sasl.enabled.mechanisms", "list", ["GSSAPI"]),
    _O("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI"),
    _O("sasl.jaas.config", "password", None),
    _O("sasl.server.max.receive.size", "int", 524288, at_least(1)),
    _O("connections.max.reauth.ms", "long", 0, at_least(0)),
    _O("connection.failed.authentication.delay.ms", "int", 100, at_least(0)),
    # authorization (kafkacompat.security.acls): Kafka's two ACL authorizers name the built-in one
    _O("authorizer.class.name", "string", "", one_of("", *AUTHORIZER_CLASSES)),
    _O("super.users", "string", None),
    _O("allow.everyone.if.no.acl.found", "boolean", False),
    # client quotas (kafkacompat.security.quotas): the sampled rate window
    _O("quota.window.num", "int", 11, at_least(1)),
    _O("quota.window.size.seconds", "int", 1, at_least(1)),
    # Kafka 3.9's other dynamic broker configs (kafkacompat.dynamic_config): accepted, validated, kept and
    # described like the others so that admin clients and tools setting them work; most change nothing
    # here (_NOT_IMPLEMENTED below says which)
    _O("background.threads", "int", 10, at_least(1)),
    _O("metric.reporters", "list", []),
    _O("log.cleaner.io.buffer.load.factor", "double", 0.9),
    _O("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308),
    _O("compression.gzip.level", "int", -1),
    _O("compression.lz4.level", "int", 9, between(1, 17)),
    _O("compression.zstd.level", "int", 3, between(-131072, 22)),
    _O("log.local.retention.ms", "long", -2, at_least(-2)),
    _O("log.local.retention.bytes", "long", -2, at_least(-2)),
    _O("max.connections.per.ip.overrides", "string", ""),
    _O("principal.builder.class", "string", None),
    _O("ssl.engine.factory.class", "string", None),
    _O("sasl.kerberos.service.name", "string", None),
    _O("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit"),
    _O("sasl.kerberos.ticket.renew.window.factor", "double", 0.8),
    _O("sasl.kerberos.ticket.renew.jitter", "double", 0.05),
    _O("sasl.kerberos.min.time.before.relogin", "long", 60000),
    _O("sasl.kerberos.principal.to.local.rules", "list", ["DEFAULT"]),
    _O("sasl.login.refresh.window.factor", "double", 0.8, between(0.5, 1.0)),
    _O("sasl.login.refresh.window.jitter", "double", 0.05, between(0.0, 0.25)),
    _O("sasl.login.refresh.min.period.seconds", "short", 60, between(0, 900)),
    _O("sasl.login.refresh.buffer.seconds", "short", 300, between(0, 3600)),
    _O("leader.replication.throttled.rate", "long", LONG_MAX, at_least(0)),
    _O("follower.replication.throttled.rate", "long", LONG_MAX, at_least(0)),
    _O("replication.quota.window.num", "int", 11, at_least(1)),
    _O("replication.quota.window.size.seconds", "int", 1, at_least(1)),
    _O("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, at_least(0)),
    _O("remote.log.index.file.cache.total.size.bytes", "long", 1073741824, at_least(1)),
    _O("remote.fetch.max.wait.ms", "int", 500, at_least(1)),
    _O("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX, at_least(1)),
    _O("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX, at_least(1)),
)
# Settings accepted but not acted on; every other option is HONOURED (the replication settings,
# zookeeper.*, the inter-broker listener and security settings and unclean.leader.election.enable act in
# cluster mode, i.e. with zookeeper.connect set, and are read but inert on a single node) (a test checks that
# each honoured one is read outside this module, directly or through a BrokerConfig property or the topic
# config it sets).
_NO_EFFECT_SINGLE_NODE = frozenset(
    {
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "process.roles",
    }
)
_NOT_IMPLEMENTED = frozenset(
    {
        "num.network.threads",  # one trio event loop serves every connection
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "fetch.purgatory.purge.interval.requests",
        "producer.purgatory.purge.interval.requests",
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.size",
        "log.preallocate",
        "log.message.downconversion.enable",
        "log.message.format.version",
        "producer.id.expiration.ms",
        "producer.id.expiration.check.interval.ms",
        "offsets.topic.compression.codec",
        "replica.high.watermark.checkpoint.interval.ms",
        "ssl.truststore.password",  # PEM truststores (the only kind served) have no password
        "ssl.protocol",  # ssl.enabled.protocols decides which TLS versions a listener accepts
        "ssl.principal.mapping.rules",  # only DEFAULT (the full subject DN) is applied
        "ssl.keymanager.algorithm",  # Java security providers: Python's ssl (OpenSSL) does the TLS
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.provider",
        # Kafka's other dynamic names (see BROKER_OPTIONS): kept and described, no effect here
        "background.threads",  # one event loop: no scheduler pool
        "metric.reporters",  # no Java metrics reporters (metrics.listener serves Prometheus instead)
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.max.bytes.per.second",
        "compression.gzip.level",  # the broker recompresses only for compression.type, at codec defaults
        "compression.lz4.level",
        "compression.zstd.level",
        "log.local.retention.ms",  # no tiered storage
        "log.local.retention.bytes",
        "max.connections.per.ip.overrides",
        "principal.builder.class",  # Kafka's default principals only
        "ssl.engine.factory.class",
        "sasl.kerberos.service.name",  # no GSSAPI
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules",
        "sasl.login.refresh.window.factor",  # broker-side logins (refreshing tokens) are not made here
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "replica.alter.log.dirs.io.max.bytes.per.second",  # no AlterReplicaLogDirs
        "remote.log.index.file.cache.total.size.bytes",  # no tiered storage
        "remote.fetch.max.wait.ms",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.fetch.max.bytes.per.second",
    }
)
# Limits of a setting's effect that its users must know (values refused, features missing).
_EFFECT_NOTES = {
    # a single node keeps its dynamic configs in an owner-only file, never in ZooKeeper
    **{
        f"password.encoder.{name}": "cluster mode only: encrypts sensitive dynamic configs in ZooKeeper"
        for name in (
            "secret",
            "old.secret",
            "keyfactory.algorithm",
            "cipher.algorithm",
            "key.length",
            "iterations",
        )
    },
}
BROKER_OPTIONS = tuple(
    dataclasses.replace(
        option,
        note=_EFFECT_NOTES.get(option.name, ""),
        effect=NO_EFFECT_SINGLE_NODE
        if option.name in _NO_EFFECT_SINGLE_NODE
        else NOT_IMPLEMENTED
        if option.name in _NOT_IMPLEMENTED
        else HONOURED,
    )
    for option in BROKER_OPTIONS
)
OPTIONS_BY_NAME: dict[str, Option] = {option.name: option for option in BROKER_OPTIONS}

# broker setting -> topic-level config it provides the default for (Kafka's LogConfig mapping).
# retention.ms, segment.ms, segment.jitter.ms and flush.ms are derived (see BrokerConfig.topic_defaults
# and DERIVED_TOPIC_DEFAULTS).
TOPIC_CONFIG_SOURCES: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
    "preallocate": "log.preallocate",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.downconversion.enable": "log.message.downconversion.enable",
}

# broker setting -> the derived topic-level config it feeds (BrokerConfig.topic_defaults resolves them).
DERIVED_TOPIC_DEFAULTS: dict[str, str] = {
    "log.retention.ms": "retention.ms",
    "log.retention.minutes": "retention.ms",
    "log.retention.hours": "retention.ms",
    "log.roll.ms": "segment.ms",
    "log.roll.hours": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.roll.jitter.hours": "segment.jitter.ms",
    "log.flush.interval.ms": "flush.ms",
    "log.flush.scheduler.interval.ms": "flush.ms",
}


# --- Java properties ---------------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _logical_lines(text: str) -> Iterable[str]:
    """Join continuation lines (an odd number of trailing backslashes) and drop comments/blank lines."""
    pending: str | None = None
    for physical in text.splitlines():
        line = physical.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        if continued:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continued:
            yield pending
            pending = None
    if pending is not None:
        yield pending


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text: `key=value`, `key: value` or `key value`; `#`/`!` comments."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            # exactly one separator, possibly surrounded by whitespace
            rest = rest[1:].lstrip(" \t\f")
        result[_unescape(key)] = _unescape(rest)
    return result


# --- listeners ---------------------------------------------------------------------------------------

_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:\[\]]*):(-?\d+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    """One `NAME://host:port` entry of `listeners` or `advertised.listeners` (host "" = default)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(entries: Iterable[str]) -> list[Listener]:
    listeners: list[Listener] = []
    seen: set[str] = set()
    for entry in entries:
        match = _LISTENER_RE.match(entry.strip())
        if match is None:
            raise ConfigError(f"listener {entry!r} is not of the form NAME://host:port")
        name, host, port = match.group(1).upper(), match.group(2), int(match.group(3))
        if host.startswith("["):
            host = host[1:-1]
        if not 0 <= port <= 65535:
            raise ConfigError(f"listener {entry!r}: port out of range")
        if name in seen:
            raise ConfigError(f"listener name {name} appears twice")
        seen.add(name)
        listeners.append(Listener(name, host, port))
    return listeners


# --- the loaded configuration -----------------------------------------------------------------------


class BrokerConfig:
    """A validated broker configuration. Read-only after `load()`; shared by the whole broker.

    `cfg["name"]` gives the typed value of any option in `BROKER_OPTIONS` (None when unset);
    the properties below resolve Kafka's precedence rules.
    """

    def __init__(
        self,
        values: Mapping[str, Any],
        unknown: Mapping[str, str],
        source: str | None,
        given: Mapping[str, str] | None = None,
        listener_settings: Mapping[str, str] | None = None,
    ) -> None:
        self._values = dict(values)
        self.unknown: dict[str, str] = dict(unknown)
        self.source = source
        # known keys as they were given (file and overrides), as strings: Kafka's "static broker configs",
        # which dynamic broker configs are layered on (kafkacompat.dynamic_config)
        self.given: dict[str, str] = dict(given or {})
        # raw `listener.name.<listener>.<key>` values (typed and checked by for_listener())
        self._listener_settings: dict[str, str] = dict(listener_settings or {})
        for key in self._listener_settings:
            self._listener_raw(key)
        self._validate_cross()

    # loading

    @classmethod
    def load(
        cls, path: str | Path | None = None, overrides: Iterable[str] = (), *, warn_unknown: bool = True
    ) -> BrokerConfig:
        raw: dict[str, str] = {}
        if path is not None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
            raw.update(parse_properties(text))
        for override in overrides:
            key, sep, value = override.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"override {override!r} is not of the form key=value")
            raw[key.strip()] = value.strip()
        return cls.from_dict(raw, source=str(path) if path is not None else None, warn_unknown=warn_unknown)

    @classmethod
    def from_dict(
        cls, raw: Mapping[str, str], *, source: str | None = None, warn_unknown: bool = True
    ) -> BrokerConfig:
        values: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        given: dict[str, str] = {}
        for option in BROKER_OPTIONS:
            values[option.name] = option.default
        listener_settings: dict[str, str] = {}
        for key, text in raw.items():
            option = OPTIONS_BY_NAME.get(key)
            if option is None:
                if key.startswith(LISTENER_PREFIX) and _listener_setting_known(key):
                    listener_settings[key] = text
                else:
                    unknown[key] = text
                continue
            if text.strip() == "" and option.type not in ("string", "password", "list"):
                raise ConfigError(f"{key}: empty value")
            try:
                value = PARSERS[option.type](text)
                if option.check is not None:
                    option.check(value)
            except ConfigError as exc:
                raise ConfigError(f"invalid value for {key}: {exc}") from None
            values[key] = value
            given[key] = text
        config = cls(values, unknown, source, given, listener_settings)
        if unknown and warn_unknown:
            log.warning("unknown configuration keys (ignored): %s", ", ".join(sorted(unknown)))
        return config

    def _validate_cross(self) -> None:
        node_id, broker_id = self._values["node.id"], self._values["broker.id"]
        if node_id is not None and broker_id is not None and broker_id not in (-1, node_id):
            raise ConfigError(f"node.id ({node_id}) and broker.id ({broker_id}) disagree")
        self.listeners  # noqa: B018 - parse now so that errors surface at load time
        self.advertised_listeners  # noqa: B018

    def __getitem__(self, name: str) -> Any:
        if name not in OPTIONS_BY_NAME:
            raise KeyError(name)
        return self._values[name]

    def explicit(self) -> dict[str, Any]:
        """Options whose value differs from the default (passwords, keys and JAAS configs masked)."""
        return {
            o.name: "[hidden]" if o.type == "password" else self._values[o.name]
            for o in BROKER_OPTIONS
            if self._values[o.name] != o.default
        }

    @property
    def listener_settings(self) -> dict[str, str]:
        """The raw `listener.name.<listener>.<key>` settings given (a copy)."""
        return dict(self._listener_settings)

    def for_listener(self, listener: str, name: str) -> Any:
        """A setting as it applies to one listener: `listener.name.<listener>.<name>` wins over `name`.

        Kafka's per-listener overrides (listener names in lower case in the key), used for the ssl.* and
        sasl.* settings; `name` may also carry a mechanism prefix (`plain.sasl.jaas.config`), which falls
        back to the plain option (`sasl.jaas.config`).
        """
        base = name if name in OPTIONS_BY_NAME else name.partition(".")[2]
        for key in dict.fromkeys(f"{LISTENER_PREFIX}{listener.lower()}.{n}" for n in (name, base)):
            if key in self._listener_settings:
                return self._listener_raw(key)
        return self._values[base]

    def _listener_raw(self, key: str) -> Any:
        option = OPTIONS_BY_NAME[_listener_option_name(key)]
        text = self._listener_settings[key]
        try:
            value = PARSERS[option.type](text)
            if option.check is not None:
                option.check(value)
        except ConfigError as exc:
            raise ConfigError(f"invalid value for {key}: {exc}") from None
        return value

    # resolved settings

    @property
    def node_id(self) -> int:
        node_id = self._values["node.id"]
        if node_id is None:
            broker_id = self._values["broker.id"]
            node_id = broker_id if broker_id is not None and broker_id >= 0 else 1
        return node_id

    @property
    def cluster_id(self) -> str | None:
        return self._values["cluster.id"]

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self._values["log.dirs"] or [self._values["log.dir"]]
        return [Path(d) for d in dirs]

    @property
    def listeners(self) -> list[Listener]:
        """Listeners this broker binds (any security protocol); controller listeners are skipped."""
        protocol_map = self.security_protocol_map
        controller_names = {n.upper() for n in self._values["controller.listener.names"] or []}
        result = []
        for listener in parse_listeners(self._values["listeners"]):
            if listener.name in controller_names:
                continue
            protocol = protocol_map.get(listener.name)
            if protocol is None:
                raise ConfigError(f"listener {listener.name} has no entry in listener.security.protocol.map")
            if protocol not in SECURITY_PROTOCOLS:
                raise ConfigError(f"listener {listener.name}: unknown security protocol {protocol}")
            result.append(listener)
        if not result:
            raise ConfigError("no listener configured")
        return result

    @property
    def advertised_listeners(self) -> dict[str, Listener]:
        """Listener name -> endpoint clients are told (host "" = this host's name, port 0 = bound port)."""
        bound = {listener.name: listener for listener in self.listeners}
        configured = self._values["advertised.listeners"]
        advertised = dict(bound)
        if configured:
            for listener in parse_listeners(configured):
                if listener.name in bound:
                    advertised[listener.name] = listener
        for listener in advertised.values():
            if listener.host == "0.0.0.0" or listener.host == "::":
                raise ConfigError(
                    f"advertised listener {listener} uses a non-routable address; set advertised.listeners"
                )
        return advertised

    @property
    def security_protocol_map(self) -> dict[str, str]:
        mapping: dict[str, str] = {}
        for entry in self._values["listener.security.protocol.map"]:
            name, sep, protocol = entry.partition(":")
            if not sep:
                raise ConfigError(f"listener.security.protocol.map entry {entry!r} is not NAME:PROTOCOL")
            mapping[name.strip().upper()] = protocol.strip().upper()
        return mapping

    @property
    def retention_ms(self) -> int:
        """`log.retention.ms` > `log.retention.minutes` > `log.retention.hours`; negative = unlimited."""
        if self._values["log.retention.ms"] is not None:
            value = self._values["log.retention.ms"]
        elif self._values["log.retention.minutes"] is not None:
            value = self._values["log.retention.minutes"] * 60_000
        else:
            value = self._values["log.retention.hours"] * 3_600_000
        return -1 if value < 0 else value

    @property
    def roll_ms(self) -> int:
        if self._values["log.roll.ms"] is not None:
            return self._values["log.roll.ms"]
        return self._values["log.roll.hours"] * 3_600_000

    @property
    def roll_jitter_ms(self) -> int:
        if self._values["log.roll.jitter.ms"] is not None:
            return self._values["log.roll.jitter.ms"]
        return self._values["log.roll.jitter.hours"] * 3_600_000

    @property
    def flush_ms(self) -> int:
        value = self._values["log.flush.interval.ms"]
        return self._values["log.flush.scheduler.interval.ms"] if value is None else value

    @property
    def recovery_point_checkpoint_ms(self) -> int:
        value = self._values["log.flush.recovery.point.checkpoint.interval.ms"]
        return self._values["log.flush.offset.checkpoint.interval.ms"] if value is None else value

    def topic_defaults(self) -> dict[str, str]:
        """Topic-level config name -> default value string, derived from the broker's `log.*` settings."""
        result: dict[str, str] = {}
        for topic_name, broker_name in TOPIC_CONFIG_SOURCES.items():
            result[topic_name] = _to_config_string(self._values[broker_name])
        result["retention.ms"] = str(self.retention_ms)
        result["segment.ms"] = str(self.roll_ms)
        result["segment.jitter.ms"] = str(self.roll_jitter_ms)
        result["flush.ms"] = str(self.flush_ms)
        return result

    def __repr__(self) -> str:
        return f"<BrokerConfig node.id={self.node_id} source={self.source} explicit={self.explicit()}>"


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LISTENER_PREFIX = "listener.name."
# SASL mechanisms whose JAAS config may be set per listener and mechanism (listener.name.<l>.<mech>.sasl.*)
SASL_MECHANISM_PREFIXES = ("plain.", "scram-sha-256.", "scram-sha-512.", "oauthbearer.", "gssapi.")


def _listener_option_name(key: str) -> str:
    """`listener.name.<listener>.[<mechanism>.]<option>` -> <option> (KeyError if not a known one)."""
    rest = key[len(LISTENER_PREFIX) :].partition(".")[2]
    if rest in OPTIONS_BY_NAME:
        return rest
    for prefix in SASL_MECHANISM_PREFIXES:
        if rest.startswith(prefix) and rest[len(prefix) :] in OPTIONS_BY_NAME:
            return rest[len(prefix) :]
    raise KeyError(key)


def listener_option_name(key: str) -> str:
    """The option a `listener.name.<listener>.[<mechanism>.]<option>` key sets (KeyError if none)."""
    return _listener_option_name(key)


def _listener_setting_known(key: str) -> bool:
    try:
        _listener_option_name(key)
    except KeyError:
        return False
    return True


def _to_config_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def broker_log_config(config: BrokerConfig) -> Any:
    """The broker-wide default LogConfig (topic configs derived from `log.*`), as Kafka builds it."""
    from kafkacompat.log.config import LogConfig
    from kafkacompat.wire.errors import KafkaError

    try:
        return LogConfig.from_properties(config.topic_defaults())
    except KafkaError as exc:
        raise ConfigError(f"broker log settings: {exc.message}") from None
