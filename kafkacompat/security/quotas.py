"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546): the sans-io core.

Theory of operation
-------------------
`QuotaStore` owns the configured quotas: a map from a quota *entity* to its quota values. An entity is
a (user, client_id) pair where each side is absent (None: the entity does not name it), the default
(`DEFAULT`, Kafka's `<default>`), or a name; the values are Kafka's keys `producer_byte_rate`,
`consumer_byte_rate`, `request_percentage` and `controller_mutation_rate` (the last is stored and
described but never enforced: this broker has no controller mutations to throttle). It persists as
`client-quotas.json` in the first log dir (`snapshot()` + `write()`, atomic), like acls.json; in cluster
mode the quotas live in ZooKeeper's /config/users and /config/clients entities instead and the store is
`replace()`d by each fresh read of them (kafkacompat.replication.config_sync).

`QuotaManager` owns the rate samples. For one quota type and a connection's (user, client-id), it
resolves the quota by Kafka's precedence, first match wins:

    /users/<user>/clients/<client-id>, /users/<user>/clients/<default>, /users/<user>,
    /users/<default>/clients/<client-id>, /users/<default>/clients/<default>, /users/<default>,
    /clients/<client-id>, /clients/<default>

and keys the rate sensor as Kafka keys its metric tags: by the (user, client-id) the matching entity
names (a default counts as naming the actual value), so a /users/alice quota is shared by all of alice's
client ids, while a /clients/<default> quota gives each client id its own. Each sensor is Kafka's
sampled Rate: `quota.window.num` samples of `quota.window.size.seconds`; the rate is the total of the
live samples over the window (never shorter than num-1 full samples). `record()` adds a value and
returns the throttle time in ms: 0 within quota, else (rate - quota) / quota * window, i.e. how long the
client must stay silent for the measured rate to fall back to the quota, bounded by the whole window
(num x size). Request percentage records handler time as percent-seconds (100 = one thread busy).

`ip` entities (KIP-612) stand alone: an address or the default address with one key,
`connection_creation_rate` (new connections per second). `connection_throttle_ms(ip, now)` counts a
new connection from an address against its quota (the address's own entity, else the default one, a
sensor per address) and, over it, takes it back and returns how long the broker waits before closing
that connection, as Kafka's ConnectionQuotas does.

`active` is False while no quota is configured: the connection then checks nothing else.
No trio, no I/O except `write()`: the clock is passed in.
"""

from __future__ import annotations

import enum
import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeAlias

from kafkacompat.log.checkpoints import atomic_write

__all__ = [
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "PRODUCER_BYTE_RATE",
    "QUOTAS_FILE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "QuotaManager",
    "QuotaStore",
    "RateSensor",
]

QUOTAS_FILE = "client-quotas.json"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# Kafka's quota keys: the byte rates are longs, the connection rate an int, the others doubles
QUOTA_KEYS = {
    PRODUCER_BYTE_RATE: int,
    CONSUMER_BYTE_RATE: int,
    REQUEST_PERCENTAGE: float,
    CONTROLLER_MUTATION_RATE: float,
    CONNECTION_CREATION_RATE: int,
}
USER, CLIENT_ID, IP = "user", "client-id", "ip"


class _Default(enum.Enum):
    """Kafka's `<default>` entity name (a null name in DescribeClientQuotas/AlterClientQuotas). An enum
    of one member, so that `value is DEFAULT` narrows a `Name`."""

    DEFAULT = "<default>"

    def __repr__(self) -> str:
        return "<default>"

    __str__ = __repr__


DEFAULT: Final = _Default.DEFAULT
#: one side of an entity: None (not named), DEFAULT, or a name
Name: TypeAlias = str | _Default | None


@dataclass(frozen=True, slots=True)
class Entity:
    user: Name = None
    client_id: Name = None
    ip: Name = None  # only ever alone (KIP-612)

    def to_json(self) -> dict[str, Any]:
        sides: tuple[tuple[str, Name], ...] = ((USER, self.user), (CLIENT_ID, self.client_id))
        if self.ip is not None:
            sides = ((IP, self.ip),)
        return {side: (None if value is None else "<default>" if value is DEFAULT else ["name", value])
                for side, value in sides}  # fmt: skip

    @staticmethod
    def from_json(item: dict[str, Any]) -> Entity:
        def side(value: Any) -> Name:
            return None if value is None else DEFAULT if value == "<default>" else value[1]

        return Entity(side(item.get(USER)), side(item.get(CLIENT_ID)), side(item.get(IP)))


def precedence(user: str, client_id: str) -> tuple[Entity, ...]:
    """Kafka's entity precedence for one connection, most specific first."""
    return (
        Entity(user, client_id),
        Entity(user, DEFAULT),
        Entity(user, None),
        Entity(DEFAULT, client_id),
        Entity(DEFAULT, DEFAULT),
        Entity(DEFAULT, None),
        Entity(None, client_id),
        Entity(None, DEFAULT),
    )


class QuotaStore:
    """The configured client quotas: entity -> {quota key: value} (see the module docstring)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.quotas: dict[Entity, dict[str, float]] = {}
        self.version = 0  # bumped by every change, so QuotaManager re-resolves its cached quotas
        self.enforced = False  # whether any enforced client quota (not controller_mutation_rate) is set
        self.ip_limited = False  # whether any ip entity has a connection_creation_rate

    @classmethod
    def load(cls, path: Path) -> QuotaStore:
        store = cls(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return store
        for item in document.get("quotas", []):
            store.quotas[Entity.from_json(item["entity"])] = dict(item["values"])
        store._changed()
        return store

    def _changed(self) -> None:
        self.version += 1
        self.enforced = any(
            key not in (CONTROLLER_MUTATION_RATE, CONNECTION_CREATION_RATE)
            for values in self.quotas.values()
            for key in values
        )
        self.ip_limited = any(entity.ip is not None for entity in self.quotas)

    def alter(self, entity: Entity, key: str, value: float | None) -> None:
        """Set (value) or remove (None) one quota of one entity."""
        values = self.quotas.setdefault(entity, {})
        if value is None:
            values.pop(key, None)
        else:
            values[key] = QUOTA_KEYS[key](value)
        if not values:
            del self.quotas[entity]
        self._changed()

    def replace(self, quotas: dict[Entity, dict[str, float]]) -> None:
        """Take a whole new quota table (cluster mode: a fresh read of ZooKeeper's /config entities)."""
        if quotas != self.quotas:
            self.quotas = {entity: dict(values) for entity, values in quotas.items() if values}
            self._changed()

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": 1,
            "quotas": [
                {"entity": entity.to_json(), "values": values} for entity, values in self.quotas.items()
            ],
        }

    @staticmethod
    def write(path: Path, snapshot: dict[str, Any]) -> None:
        """Persist a snapshot atomically (blocking: run it in a worker thread)."""
        atomic_write(str(path), json.dumps(snapshot, indent=1).encode())


class RateSensor:
    """Kafka's sampled Rate over `samples` windows of `window` seconds, checked against one quota.

    Owns its samples: a deque of [start time, total], the newest last. A sample is complete once it is
    `window` old; the next record starts a new one. Samples older than the whole window are dropped.
    """

    __slots__ = ("_samples", "samples", "window")

    def __init__(self, samples: int, window: float, now: float) -> None:
        self.samples = samples
        self.window = window
        self._samples: deque[list[float]] = deque([[now, 0.0]], maxlen=samples)

    def _purge(self, now: float) -> None:
        horizon = self.samples * self.window
        kept = self._samples
        while kept and now - kept[0][0] >= horizon:
            kept.popleft()
        if not kept:
            kept.append([now, 0.0])  # as Kafka resets an expired sample to start now

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        newest = self._samples[-1]
        if now - newest[0] >= self.window:
            self._samples.append([now, value])  # maxlen: the oldest sample makes room
        else:
            newest[1] += value

    def window_size(self, now: float) -> float:
        """Kafka's Rate.windowSize: time since the oldest sample, at least samples-1 full windows."""
        self._purge(now)
        elapsed = now - self._samples[0][0]
        full = int(elapsed / self.window)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window
        return elapsed

    def rate(self, now: float) -> float:
        size = self.window_size(now)
        return sum(total for _, total in self._samples) / size

    def throttle_ms(self, quota: float, now: float) -> int:
        """How long to stay silent for the rate to fall back to `quota` (0 within it), bounded."""
        rate = self.rate(now)
        if rate <= quota:
            return 0
        if quota <= 0:
            return int(self.samples * self.window * 1000)
        throttle = (rate - quota) / quota * self.window_size(now) * 1000
        return int(min(throttle, self.samples * self.window * 1000))


class QuotaManager:
    """The rate sensors of all quota types and entities, over a QuotaStore (see the module docstring)."""

    def __init__(self, store: QuotaStore, samples: int = 11, window_seconds: float = 1.0) -> None:
        self.store = store
        self.samples = samples
        self.window = window_seconds
        self._sensors: dict[tuple[str, Name, Name], RateSensor] = {}
        self._resolved: dict[tuple[str, str, str], tuple[float, tuple[str, Name, Name]] | None] = {}
        self._resolved_version = -1

    @property
    def active(self) -> bool:
        """Whether any enforced quota is configured (the connection's one cheap check)."""
        return self.store.enforced

    def resolve(self, key: str, user: str, client_id: str) -> tuple[float, tuple[str, Name, Name]] | None:
        """(quota, sensor key) of this quota type for a connection, or None when unlimited."""
        if self._resolved_version != self.store.version:
            self._resolved.clear()
            self._resolved_version = self.store.version
        cache_key = (key, user, client_id)
        if cache_key in self._resolved:
            return self._resolved[cache_key]
        found = None
        for entity in precedence(user, client_id):
            values = self.store.quotas.get(entity)
            if values is not None and key in values:
                sensor_user = "" if entity.user is None else user
                sensor_client = "" if entity.client_id is None else client_id
                found = (float(values[key]), (key, sensor_user, sensor_client))
                break
        self._resolved[cache_key] = found
        return found

    def record(self, key: str, user: str, client_id: str, value: float, now: float) -> int:
        """Record `value` against the quota of this type and connection; the throttle time in ms."""
        resolved = self.resolve(key, user, client_id)
        if resolved is None:
            return 0
        quota, sensor_key = resolved
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            sensor = self._sensors[sensor_key] = RateSensor(self.samples, self.window, now)
        sensor.record(value, now)
        return sensor.throttle_ms(quota, now)

    def unrecord(self, key: str, user: str, client_id: str, value: float, now: float) -> None:
        """Take back a recorded value (a throttled fetch answered empty, as Kafka's unrecordQuotaSensor)."""
        resolved = self.resolve(key, user, client_id)
        if resolved is not None:
            sensor = self._sensors.get(resolved[1])
            if sensor is not None:
                sensor.record(-value, now)

    def connection_throttle_ms(self, ip: str, now: float) -> int:
        """Count a new connection from `ip`; over its connection_creation_rate, take it back and return
        how long to wait before closing it (0: serve it)."""
        if not self.store.ip_limited:
            return 0
        for entity in (Entity(ip=ip), Entity(ip=DEFAULT)):
            values = self.store.quotas.get(entity)
            if values is not None and CONNECTION_CREATION_RATE in values:
                quota = float(values[CONNECTION_CREATION_RATE])
                break
        else:
            return 0
        key = (CONNECTION_CREATION_RATE, "", ip)
        sensor = self._sensors.get(key)
        if sensor is None:
            sensor = self._sensors[key] = RateSensor(self.samples, self.window, now)
        sensor.record(1.0, now)
        throttle = sensor.throttle_ms(quota, now)
        if throttle > 0:
            sensor.record(-1.0, now)  # a refused connection does not count (Kafka's unrecord)
        return throttle

    def quota_window_bytes(self, key: str, user: str, client_id: str) -> int | None:
        """The most a quota lets through in one whole window (Kafka caps fetch sizes with it), or None."""
        resolved = self.resolve(key, user, client_id)
        if resolved is None:
            return None
        return int(resolved[0] * self.samples * self.window)


def user_of(principal: str) -> str:
    """The quota user of a KafkaPrincipal string ("User:alice" -> "alice")."""
    return principal.partition(":")[2] or principal
