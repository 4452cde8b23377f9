"""The registry of request handlers: one explicit table, api key -> handler module.

Theory of operation
-------------------
`HANDLER_MODULES` below names every API this broker serves, once. `HANDLERS` maps each module's
`API_KEY` to the module; ApiVersions answers are built from the same table (`supported_versions()`),
so nothing unimplemented is ever advertised and nothing advertised lacks a handler. The connection
looks the handler up here (`lookup(api_key, version)`), decodes the body with the generated codec and
calls `await handler.handle(ctx, request)`.

Handler contract (every module in kafkacompat/broker/handlers/ follows it)
-------------------------------------------------------------------------
- The module opens with a docstring stating the versions it serves and a short "behaviour" note
  (what Kafka does that the handler reproduces, and any deliberate difference).
- It defines `API_KEY: ApiKey` (kafkacompat.wire.api_keys), `MIN_VERSION: int`, `MAX_VERSION: int` (the
  advertised range; it must lie inside the codec's valid versions — `supported_versions()` clamps it
  anyway), and
  `async def handle(ctx: RequestContext, request) -> response | None` (`RequestContext` is defined in
  kafkacompat.broker.context, which imports no handler).
- `request` is the decoded generated request object for `ctx.api_version`. The handler returns the
  generated response object (the connection encodes it with the same version and writes the response
  header with the request's correlation id) or None when no response is due (acks=0 produce only).
- Errors that belong in the response go into its error-code fields; a handler never lets a KafkaError
  escape for a per-topic or per-partition problem. A handler that must close the connection without an
  answer, as Kafka does after a failed acks=0 produce, raises `CloseConnection(reason)` (from
  kafkacompat.broker.errors). Any other exception that escapes closes the connection too (logged with
  its traceback), as Kafka closes a connection whose request it cannot process. Handlers never raise
  DecodeError.
- A `records` value that is not bytes-like (a file slice) may carry a `release()` method; the connection
  calls it once the response has been written or abandoned (the fetch handler hands out duplicated file
  descriptors this way).
- The handler reads broker state through `ctx.broker` (a `kafkacompat.broker.state.BrokerState`: config,
  log manager, LocalMetadata, delayed-operation watchers, fetch sessions, clock) and may await (delayed
  produce/fetch); requests of one connection are handled one at a time, so a handler that waits delays
  only its own connection. Blocking file work goes through `trio.to_thread.run_sync`.
- A handler that waits for an event (a fetch short of min_bytes) waits with `await ctx.park(event,
  deadline)`, never with a bare `event.wait()`: the connection's `park` also watches the socket and
  abandons the request (raising `PeerGone`) if the client goes away meanwhile.
- To add an API: write the module, add it to `HANDLER_MODULES`, add its test, and regenerate the README's
  API table (`tools/gen_api_table.py`; `make check-generated` fails until then).
- A module that sets `CLUSTER_ONLY = True` (the controller-to-broker requests: LeaderAndIsr, StopReplica,
  UpdateMetadata, AlterPartition) is served and advertised only in cluster mode; a single node neither
  lists it in ApiVersions nor answers it (the connection is closed, as a Kafka broker does for an API its
  listener does not enable). `lookup`/`supported_versions` take `cluster_mode` for that.
"""

from __future__ import annotations

import types

# Re-exported: some modules still import these from the registry.
from kafkacompat.broker.context import ConnectionInfo, RequestContext, park_until
from kafkacompat.broker.errors import CloseConnection
from kafkacompat.broker.handlers import (
    add_offsets_to_txn,  # transactions
    add_partitions_to_txn,  # transactions
    alter_client_quotas,  # security
    alter_configs,  # admin
    alter_partition,  # cluster mode: the controller
    alter_partition_reassignments,  # admin (cluster mode: the controller)
    alter_user_scram_credentials,  # security
    api_versions,
    controlled_shutdown,  # cluster mode: the controller
    create_acls,  # security
    create_partitions,  # admin
    create_topics,
    delete_acls,  # security
    delete_groups,  # groups
    delete_records,  # admin
    delete_topics,
    describe_acls,  # security
    describe_client_quotas,  # security
    describe_cluster,  # admin
    describe_configs,  # admin
    describe_groups,  # groups
    describe_log_dirs,  # admin
    describe_producers,  # admin
    describe_topic_partitions,  # admin
    describe_transactions,  # transactions
    describe_user_scram_credentials,  # security
    elect_leaders,  # admin (cluster mode: the controller)
    end_txn,  # transactions
    fetch,
    find_coordinator,  # groups
    heartbeat,  # groups
    incremental_alter_configs,  # admin
    init_producer_id,
    join_group,  # groups
    leader_and_isr,  # cluster mode: from the controller
    leave_group,  # groups
    list_groups,  # groups
    list_offsets,
    list_partition_reassignments,  # admin
    list_transactions,  # transactions
    metadata,
    offset_commit,  # groups
    offset_delete,  # groups
    offset_fetch,  # groups
    offset_for_leader_epoch,  # admin
    produce,
    sasl_authenticate,  # security
    sasl_handshake,  # security
    stop_replica,  # cluster mode: from the controller
    sync_group,  # groups
    txn_offset_commit,  # transactions
    update_metadata,  # cluster mode: from the controller
    write_txn_markers,  # transactions
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.messages import API_SPECS

__all__ = [
    "HANDLERS",
    "HANDLER_MODULES",
    "CloseConnection",
    "ConnectionInfo",
    "RequestContext",
    "lookup",
    "park_until",
    "supported_versions",
]

# The one table of served APIs. Order is irrelevant; ApiVersions lists them by key.
HANDLER_MODULES: tuple[types.ModuleType, ...] = (
    api_versions,
    metadata,
    produce,
    fetch,
    list_offsets,
    create_topics,
    delete_topics,
    init_producer_id,
    # admin APIs
    create_partitions,
    delete_records,
    describe_configs,
    alter_configs,
    incremental_alter_configs,
    describe_cluster,
    describe_log_dirs,
    describe_topic_partitions,
    describe_producers,
    elect_leaders,
    controlled_shutdown,
    alter_partition_reassignments,
    list_partition_reassignments,
    offset_for_leader_epoch,
    # inter-broker APIs (cluster mode only)
    leader_and_isr,
    update_metadata,
    stop_replica,
    alter_partition,
    # group coordinator APIs
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    describe_groups,
    list_groups,
    delete_groups,
    offset_delete,
    # transaction coordinator APIs
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    txn_offset_commit,
    write_txn_markers,
    describe_transactions,
    list_transactions,
    # security APIs
    sasl_handshake,
    sasl_authenticate,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    describe_acls,
    create_acls,
    delete_acls,
    describe_client_quotas,
    alter_client_quotas,
)

HANDLERS: dict[int, types.ModuleType] = {}
for _module in HANDLER_MODULES:
    # ApiKey() also refuses a key that no request spec defines
    _key = ApiKey(_module.API_KEY)
    if _key in HANDLERS:
        raise RuntimeError(f"api key {_key} registered twice ({_module.__name__})")
    HANDLERS[_key] = _module


_RANGES: dict[bool, dict[int, tuple[int, int]]] = {}


def cluster_only(module: types.ModuleType) -> bool:
    return bool(getattr(module, "CLUSTER_ONLY", False))


def _ranges(cluster_mode: bool) -> dict[int, tuple[int, int]]:
    ranges = _RANGES.get(cluster_mode)
    if ranges is None:
        ranges = {}
        for key, module in HANDLERS.items():
            spec = API_SPECS.get(key)
            if spec is None or (cluster_only(module) and not cluster_mode):
                continue
            low = max(module.MIN_VERSION, spec.min_version)
            high = min(module.MAX_VERSION, spec.max_version)
            if low <= high:
                ranges[key] = (low, high)
        _RANGES[cluster_mode] = ranges
    return ranges


def supported_versions(cluster_mode: bool = False) -> list[tuple[int, int, int]]:
    """(api_key, min_version, max_version) for every served API, sorted by key (handler range ∩ codec);
    the cluster-only APIs are included only for a broker in cluster mode."""
    return [(key, low, high) for key, (low, high) in sorted(_ranges(cluster_mode).items())]


def lookup(api_key: int, api_version: int, cluster_mode: bool = False) -> types.ModuleType | None:
    """The handler module for this key if it serves this version (in this mode), else None."""
    served = _ranges(cluster_mode).get(api_key)
    if served is None or not served[0] <= api_version <= served[1]:
        return None
    return HANDLERS[api_key]
