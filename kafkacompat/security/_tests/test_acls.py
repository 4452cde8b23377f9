"""The authorizer's decisions and the ACL filters, with Kafka's semantics (sans-io)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkacompat.security.acls import (
    AclBinding,
    AclFilter,
    AclStore,
    Authorizer,
    Op,
    Pattern,
    Permission,
    Resource,
    parse_super_users,
    validate,
)

T, G, C, X = Resource.TOPIC, Resource.GROUP, Resource.CLUSTER, Resource.TRANSACTIONAL_ID
ALICE, BOB = "User:alice", "User:bob"
HOST = "127.0.0.1"


def acl(rtype: int, name: str, op: int, principal: str = ALICE, *, pattern: int = Pattern.LITERAL,
        permission: int = Permission.ALLOW, host: str = "*") -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def authorizer(*acls: AclBinding, supers: str = "", allow_if_none: bool = False) -> Authorizer:
    store = AclStore()
    for binding in acls:
        store.add(binding)
    return Authorizer(store, parse_super_users(supers), allow_if_none)


def test_literal_prefixed_and_wildcard_patterns() -> None:
    auth = authorizer(
        acl(T, "orders", Op.READ),
        acl(T, "logs-", Op.WRITE, pattern=Pattern.PREFIXED),
        acl(T, "*", Op.DESCRIBE, BOB),
    )
    assert auth.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "orders2")  # literal is exact
    assert auth.authorize(ALICE, HOST, Op.WRITE, T, "logs-app")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "log")
    assert auth.authorize(BOB, HOST, Op.DESCRIBE, T, "anything")
    assert not auth.authorize(BOB, HOST, Op.READ, T, "orders")


def test_deny_wins_and_all_covers_every_operation() -> None:
    auth = authorizer(
        acl(T, "*", Op.ALL),
        acl(T, "secret", Op.READ, permission=Permission.DENY),
        acl(G, "g", Op.ALL, "User:*", permission=Permission.DENY),
        acl(G, "g", Op.READ),
    )
    assert auth.authorize(ALICE, HOST, Op.WRITE, T, "secret")
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "secret")
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, T, "secret")  # the DENY names READ only
    assert not auth.authorize(ALICE, HOST, Op.READ, G, "g")  # DENY ALL for everyone beats ALLOW READ


def test_implied_operations() -> None:
    auth = authorizer(acl(T, "t", Op.READ), acl(T, "u", Op.ALTER_CONFIGS), acl(T, "v", Op.DELETE))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, T, "t")  # READ implies DESCRIBE
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, T, "u")
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, T, "v")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, T, "t")  # but nothing else
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, T, "u")  # ALTER_CONFIGS implies only DESCRIBE_CONFIGS
    deny = authorizer(acl(T, "t", Op.ALL), acl(T, "t", Op.READ, permission=Permission.DENY))
    assert deny.authorize(ALICE, HOST, Op.DESCRIBE, T, "t")  # a DENY of READ does not deny DESCRIBE


def test_hosts_principals_super_users_and_the_no_acl_default() -> None:
    auth = authorizer(acl(T, "t", Op.READ, host="10.0.0.1"), supers="User:admin; User:ops")
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "t")
    assert auth.authorize(ALICE, "10.0.0.1", Op.READ, T, "t")
    assert auth.authorize("User:admin", HOST, Op.ALTER, C, "kafka-cluster")
    assert auth.authorize("User:ops", HOST, Op.DELETE, T, "t")
    assert not auth.authorize(ALICE, HOST, Op.READ, T, "no-acls")  # allow.everyone.if.no.acl.found=false
    open_auth = authorizer(acl(T, "t", Op.READ), allow_if_none=True)
    assert open_auth.authorize(BOB, HOST, Op.WRITE, T, "no-acls")
    assert not open_auth.authorize(BOB, HOST, Op.READ, T, "t")  # ACLs exist on t: they decide
    wildcard = authorizer(acl(X, "tx", Op.WRITE, "User:*"))
    assert wildcard.authorize(BOB, HOST, Op.WRITE, X, "tx") and wildcard.authorize(
        BOB, HOST, Op.DESCRIBE, X, "tx"
    )


def test_authorized_operations_bits() -> None:
    auth = authorizer(acl(G, "g", Op.READ))
    assert auth.authorized_operations(ALICE, HOST, G, "g") == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert auth.authorized_operations(BOB, HOST, G, "g") == 0


def test_filters() -> None:
    bindings = [
        acl(T, "orders", Op.READ),
        acl(T, "*", Op.DESCRIBE, BOB),
        acl(T, "ord", Op.WRITE, pattern=Pattern.PREFIXED),
        acl(G, "orders", Op.READ),
    ]
    store = AclStore()
    for binding in bindings:
        store.add(binding)

    def names(**fields: object) -> list[tuple[int, str, int]]:
        values = {"resource_type": Resource.ANY, "name": None, "pattern_type": Pattern.ANY, "principal": None,
                  "host": None, "operation": Op.ANY, "permission": Permission.ANY} | fields  # fmt: skip
        return [(b.resource_type, b.name, b.pattern_type) for b in store.matching(AclFilter(**values))]  # type: ignore[arg-type]

    assert len(names()) == 4
    assert names(resource_type=T, name="orders", pattern_type=Pattern.MATCH) == [
        (T, "orders", Pattern.LITERAL), (T, "*", Pattern.LITERAL), (T, "ord", Pattern.PREFIXED),
    ]  # fmt: skip
    assert names(resource_type=T, name="orders", pattern_type=Pattern.LITERAL) == [
        (T, "orders", Pattern.LITERAL)
    ]
    assert names(pattern_type=Pattern.PREFIXED) == [(T, "ord", Pattern.PREFIXED)]
    assert names(principal=BOB) == [(T, "*", Pattern.LITERAL)]
    assert names(resource_type=G) == [(G, "orders", Pattern.LITERAL)]
    assert AclFilter(Resource.UNKNOWN, None, Pattern.ANY, None, None, Op.ANY, Permission.ANY).invalid()


@pytest.mark.parametrize(
    "binding",
    [
        AclBinding(Resource.ANY, "t", Pattern.LITERAL, ALICE, "*", Op.READ, Permission.ALLOW),
        AclBinding(T, "t", Pattern.MATCH, ALICE, "*", Op.READ, Permission.ALLOW),
        AclBinding(T, "t", Pattern.LITERAL, "alice", "*", Op.READ, Permission.ALLOW),
        AclBinding(T, "t", Pattern.LITERAL, ALICE, "*", Op.ANY, Permission.ALLOW),
        AclBinding(T, "t", Pattern.LITERAL, ALICE, "*", Op.READ, Permission.ANY),
        AclBinding(C, "other", Pattern.LITERAL, ALICE, "*", Op.ALTER, Permission.ALLOW),
        AclBinding(G, "g", Pattern.LITERAL, ALICE, "*", Op.WRITE, Permission.ALLOW),
    ],
)
def test_invalid_bindings_are_refused(binding: AclBinding) -> None:
    assert validate(binding) is not None


def test_store_persists(tmp_path: Path) -> None:
    store = AclStore(tmp_path / "acls.json")
    store.add(acl(T, "t", Op.READ))
    store.add(acl(C, "kafka-cluster", Op.ALTER, BOB, permission=Permission.DENY))
    AclStore.write(store.path, store.snapshot())  # type: ignore[arg-type]
    again = AclStore.load(tmp_path / "acls.json")
    assert list(again) == list(store)
    assert validate(acl(C, "kafka-cluster", Op.ALTER)) is None


_NAMES = st.sampled_from(["", "*", "a", "ab", "abc", "abd", "b", "orders", "orders-eu"])
_BINDINGS = st.builds(
    AclBinding,
    st.sampled_from([T, G]),
    _NAMES,
    st.sampled_from([Pattern.LITERAL, Pattern.PREFIXED]),
    st.sampled_from([ALICE, BOB]),
    st.just("*"),
    st.sampled_from([Op.READ, Op.WRITE]),
    st.sampled_from([Permission.ALLOW, Permission.DENY]),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), _BINDINGS), max_size=40), lookups=st.lists(st.tuples(
    st.sampled_from([T, G]), _NAMES), min_size=1, max_size=8))  # fmt: skip
def test_the_indexed_lookup_finds_what_a_walk_of_every_acl_finds(
    steps: list[tuple[bool, AclBinding]], lookups: list[tuple[int, str]]
) -> None:
    """for_resource() reads an index kept by add/remove/replace; a walk of every ACL, in creation order,
    is its definition (the literal name, the wildcard, every prefix of the name)."""
    store = AclStore()
    for adding, binding in steps:
        if adding:
            store.add(binding)
        else:
            store.remove([binding])
    copy = AclStore()
    copy.replace(list(store))
    for resource_type, name in lookups:
        walked = [
            a for a in store
            if a.resource_type == resource_type
            and ((a.pattern_type == Pattern.LITERAL and a.name in (name, "*"))
                 or (a.pattern_type == Pattern.PREFIXED and name.startswith(a.name)))
        ]  # fmt: skip
        assert store.for_resource(resource_type, name) == walked
        assert copy.for_resource(resource_type, name) == walked
