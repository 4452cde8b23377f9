"""ACLs and the authorizer, with Kafka's semantics (AclAuthorizer / StandardAuthorizer), sans-io.

Theory of operation
-------------------
`AclStore` owns the set of `AclBinding`s (resource type, name, pattern type, principal, host,
operation, permission) and persists it as `acls.json` in the first log dir (`snapshot()` + `write()`,
run by the handler in a worker thread before it answers); in cluster mode the set lives in ZooKeeper's
`/kafka-acl` znodes instead and this store is `replace()`d by each fresh read of them
(kafkacompat.replication.config_sync). `Authorizer.authorize(principal, host,
operation, resource_type, name)` decides one access as Kafka does:

- a principal in `super.users` may do everything;
- the ACLs that apply to a resource are the LITERAL ones with its name, the LITERAL wildcard `*`, and the
  PREFIXED ones whose name is a prefix of it; among them, those for the principal (or `User:*`) and the
  host (or `*`);
- any DENY for the operation (or ALL) wins;
- else an ALLOW for the operation, for ALL, or for an operation that implies it (DESCRIBE is implied by
  READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS) allows;
- with no ACL at all on the resource, `allow.everyone.if.no.acl.found` decides (default false).

`AclFilter` is the filter of DescribeAcls/DeleteAcls: ANY matches every value of a field, a null name,
principal or host matches every one, and pattern type MATCH matches the LITERAL name, the LITERAL
wildcard and every PREFIXED pattern that is a prefix of the name. The numeric codes are Kafka's
(ResourceType, PatternType, AclOperation, AclPermissionType).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkacompat.log.checkpoints import atomic_write

__all__ = [
    "ACLS_FILE",
    "AclBinding",
    "AclFilter",
    "AclStore",
    "Authorizer",
    "Op",
    "Pattern",
    "Permission",
    "Resource",
]

ACLS_FILE = "acls.json"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class Resource:
    UNKNOWN, ANY, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = range(8)
    NAMES = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID", 6: "DELEGATION_TOKEN", 7: "USER"}
    CLUSTER_NAME = "kafka-cluster"


class Pattern:
    UNKNOWN, ANY, MATCH, LITERAL, PREFIXED = range(5)


class Op:
    UNKNOWN, ANY, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = range(9)
    CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS = range(
        9, 15
    )


class Permission:
    UNKNOWN, ANY, DENY, ALLOW = range(4)


# operation -> the operations whose ALLOW also allows it (besides itself and ALL)
IMPLIED_BY: dict[int, frozenset[int]] = {
    Op.DESCRIBE: frozenset({Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.ALTER_CONFIGS}),
}

# the operations each resource type has (Kafka's authorized-operations bit sets are built over these)
OPERATIONS: dict[int, tuple[int, ...]] = {
    Resource.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
                     Op.ALTER_CONFIGS),
    Resource.GROUP: (Op.READ, Op.DELETE, Op.DESCRIBE),
    Resource.CLUSTER: (Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                       Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE),
    Resource.TRANSACTIONAL_ID: (Op.WRITE, Op.DESCRIBE),
    Resource.DELEGATION_TOKEN: (Op.DESCRIBE,),
    Resource.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def to_json(self) -> list[Any]:
        return [self.resource_type, self.name, self.pattern_type, self.principal, self.host, self.operation,
                self.permission]  # fmt: skip

    @classmethod
    def from_json(cls, item: list[Any]) -> AclBinding:
        return cls(int(item[0]), str(item[1]), int(item[2]), str(item[3]), str(item[4]), int(item[5]),
                   int(item[6]))  # fmt: skip


def validate(binding: AclBinding) -> str | None:
    """Why Kafka would refuse to create this binding (INVALID_REQUEST's message), or None."""
    if binding.resource_type not in Resource.NAMES:
        return f"Invalid resource type {binding.resource_type}"
    if binding.pattern_type not in (Pattern.LITERAL, Pattern.PREFIXED):
        return f"Invalid pattern type {binding.pattern_type}"
    if binding.operation < Op.ALL or binding.operation > Op.DESCRIBE_TOKENS:
        return f"Invalid operation {binding.operation}"
    if binding.permission not in (Permission.ALLOW, Permission.DENY):
        return f"Invalid permission type {binding.permission}"
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{binding.principal}` (no colon is found)."
    if binding.resource_type == Resource.CLUSTER and binding.name != Resource.CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    if not binding.name:
        return "Resource name should not be empty"
    if binding.operation != Op.ALL and binding.operation not in OPERATIONS[binding.resource_type]:
        return "ACL operation is not valid for the resource type"
    if binding.pattern_type == Pattern.PREFIXED and binding.name == WILDCARD:
        return "PREFIXED patterns cannot be the wildcard"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls/DeleteAcls filter (None = any name, principal or host)."""

    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def invalid(self) -> str | None:
        if self.resource_type == Resource.UNKNOWN or self.pattern_type == Pattern.UNKNOWN:
            return "The filter has an unknown resource or pattern type"
        if self.operation == Op.UNKNOWN or self.permission == Permission.UNKNOWN:
            return "The filter has an unknown operation or permission type"
        return None

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != Resource.ANY and self.resource_type != acl.resource_type:
            return False
        if self.operation != Op.ANY and self.operation != acl.operation:
            return False
        if self.permission != Permission.ANY and self.permission != acl.permission:
            return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.pattern_type == Pattern.MATCH:
            if self.name is None:
                return True
            if acl.pattern_type == Pattern.LITERAL:
                return acl.name in (self.name, WILDCARD)
            return self.name.startswith(acl.name)
        if self.pattern_type != Pattern.ANY and self.pattern_type != acl.pattern_type:
            return False
        return self.name is None or self.name == acl.name


class AclStore:
    """The ACL set of the broker (see the module docstring).

    Every request's authorization asks `for_resource()`, so the set is also indexed by what that looks
    up: a resource type and name (LITERAL ACLs, the wildcard included) and, for PREFIXED ones, the
    lengths of the prefixes present, so a lookup costs a few dict reads however many ACLs there are
    (a walk of every ACL made each request of a broker with 10,000 ACLs pay for all of them). Owned by
    the event loop's tasks; `snapshot()` copies before a worker thread writes it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._acls: dict[AclBinding, int] = {}  # ordered set, with each binding's creation number
        self._created = 0
        #: (resource type, pattern type, name) -> its bindings
        self._by_name: dict[tuple[int, int, str], dict[AclBinding, None]] = {}
        #: resource type -> prefix length -> how many PREFIXED bindings have a prefix that long
        self._prefix_lengths: dict[int, dict[int, int]] = {}

    @classmethod
    def load(cls, path: Path) -> AclStore:
        store = cls(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return store
        for item in document.get("acls", []):
            store.add(AclBinding.from_json(item))
        return store

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(list(self._acls))

    def __len__(self) -> int:
        return len(self._acls)

    def add(self, binding: AclBinding) -> None:
        if binding in self._acls:
            return
        self._acls[binding] = self._created
        self._created += 1
        key = (binding.resource_type, binding.pattern_type, binding.name)
        self._by_name.setdefault(key, {})[binding] = None
        if binding.pattern_type == Pattern.PREFIXED:
            lengths = self._prefix_lengths.setdefault(binding.resource_type, {})
            lengths[len(binding.name)] = lengths.get(len(binding.name), 0) + 1

    def replace(self, bindings: Iterable[AclBinding]) -> None:
        """Take a whole new ACL set (cluster mode: a fresh read of ZooKeeper's /kafka-acl znodes)."""
        self._acls, self._created, self._by_name, self._prefix_lengths = {}, 0, {}, {}
        for binding in bindings:
            self.add(binding)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        for binding in bindings:
            if self._acls.pop(binding, None) is None:
                continue
            key = (binding.resource_type, binding.pattern_type, binding.name)
            same_name = self._by_name[key]
            del same_name[binding]
            if not same_name:
                del self._by_name[key]
            if binding.pattern_type == Pattern.PREFIXED:
                lengths = self._prefix_lengths[binding.resource_type]
                lengths[len(binding.name)] -= 1
                if not lengths[len(binding.name)]:
                    del lengths[len(binding.name)]

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [acl for acl in self._acls if acl_filter.matches(acl)]

    def for_resource(self, resource_type: int, name: str) -> list[AclBinding]:
        """The ACLs that apply to one resource: its literal name, the wildcard, and matching prefixes
        (in creation order)."""
        keys = [(resource_type, Pattern.LITERAL, name)]
        if name != WILDCARD:
            keys.append((resource_type, Pattern.LITERAL, WILDCARD))
        for length in self._prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                keys.append((resource_type, Pattern.PREFIXED, name[:length]))
        found = [acl for key in keys for acl in self._by_name.get(key, ())]
        if len(keys) > 1:
            found.sort(key=self._acls.__getitem__)
        return found

    def snapshot(self) -> dict[str, Any]:
        return {"version": 1, "acls": [acl.to_json() for acl in self._acls]}

    @staticmethod
    def write(path: Path, snapshot: dict[str, Any]) -> None:
        """Persist a snapshot atomically (blocking: run it in a worker thread)."""
        atomic_write(str(path), json.dumps(snapshot, indent=1).encode())


class Authorizer:
    """Kafka's authorization decision over an AclStore (see the module docstring)."""

    def __init__(
        self, store: AclStore, super_users: Iterable[str] = (), allow_if_no_acl: bool = False
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.store.for_resource(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        mine = [
            acl
            for acl in acls
            if acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD)
        ]
        for acl in mine:
            if acl.permission == Permission.DENY and acl.operation in (operation, Op.ALL):
                return False
        implied = IMPLIED_BY.get(operation, frozenset())
        return any(
            acl.permission == Permission.ALLOW
            and (acl.operation in (operation, Op.ALL) or acl.operation in implied)
            for acl in mine
        )

    def authorized_operations(self, principal: str, host: str, resource_type: int, name: str) -> int:
        """Kafka's authorized-operations bit set (bit N = AclOperation N) of one resource."""
        bits = 0
        for operation in OPERATIONS[resource_type]:
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << operation
        return bits


def parse_super_users(text: str | None) -> list[str]:
    """`super.users`: principals separated by semicolons ("User:alice;User:bob")."""
    return [item.strip() for item in (text or "").split(";") if item.strip()]
