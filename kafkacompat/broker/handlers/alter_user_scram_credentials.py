"""AlterUserScramCredentials (key 51), version 0.

Behaviour: upserts and deletes SCRAM credentials, per user, as Kafka's controller validates them: a
user named more than once in the request (in either list) gets DUPLICATE_RESOURCE for all its
alterations; an unknown mechanism UNSUPPORTED_SASL_MECHANISM; an empty user name, an empty salt or
salted password, or iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL; deleting a credential that
does not exist RESOURCE_NOT_FOUND. Only the salted password's stored and server keys are kept (see
kafkacompat.security.credentials); the table is persisted before the answer (in cluster mode: written
to ZooKeeper's /config/users/<user>, as Kafka keeps them, which every broker watches). One result per user.
With an authorizer, needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every user).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.security.credentials import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    ScramCredential,
    ScramCredentialStore,
)
from kafkacompat.wire._generated.alter_user_scram_credentials_response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.alter_user_scram_credentials_request import (
        AlterUserScramCredentialsRequest,
    )

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
MIN_VERSION = 0
MAX_VERSION = 0


def _upsert_error(upsertion: Any) -> tuple[int, str] | None:
    if upsertion.mechanism not in MECHANISM_TYPES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if not upsertion.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if not upsertion.iterations or upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations: minimum is {MIN_ITERATIONS}"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations: maximum is {MAX_ITERATIONS}"
    if not upsertion.salt:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"
    if not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salted password must not be empty"
    return None


def _deletion_error(store: ScramCredentialStore, deletion: Any) -> tuple[int, str] | None:
    mechanism = MECHANISM_TYPES.get(deletion.mechanism)
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if not deletion.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if store.lookup(deletion.name, mechanism) is None:
        return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


async def handle(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    store = ctx.broker.scram_credentials
    deletions = list(request.deletions or [])
    upsertions = list(request.upsertions or [])
    counts = Counter([d.name for d in deletions] + [u.name for u in upsertions])
    if not cluster_allowed(ctx, Op.ALTER):
        return AlterUserScramCredentialsResponse(
            results=[
                AlterUserScramCredentialsResult(user=name, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                for name in counts
            ]
        )
    sync = ctx.broker.config_sync
    if sync is not None:
        await sync.refresh()  # deletions are checked against what ZooKeeper holds now
    outcome: dict[str, tuple[int, str | None]] = {}
    upserted: dict[str, dict[str, ScramCredential]] = {}
    deleted: dict[str, list[str]] = {}
    for name, count in counts.items():
        if count > 1:
            outcome[name] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
    for deletion in deletions:
        if deletion.name in outcome:
            continue
        error = _deletion_error(store, deletion)
        outcome[deletion.name] = error or (ErrorCode.NONE, None)
        if error is None:
            deleted.setdefault(deletion.name, []).append(MECHANISM_TYPES[deletion.mechanism])
    for upsertion in upsertions:
        if upsertion.name in outcome:
            continue
        error = _upsert_error(upsertion)
        outcome[upsertion.name] = error or (ErrorCode.NONE, None)
        if error is None:
            mechanism = MECHANISM_TYPES[upsertion.mechanism]
            credential = ScramCredential.from_salted_password(
                mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password), upsertion.iterations
            )
            upserted.setdefault(upsertion.name, {})[mechanism] = credential
    if sync is not None:
        # cluster mode: /config/users/<user> in ZooKeeper, which every broker watches
        for name in dict.fromkeys([*deleted, *upserted]):
            await sync.alter_scram(name, upserted.get(name, {}), deleted.get(name, []))
        if deleted or upserted:
            await sync.refresh()
    else:
        for name, mechanisms in deleted.items():
            for mechanism in mechanisms:
                store.delete(name, mechanism)
        for name, credentials in upserted.items():
            for mechanism, credential in credentials.items():
                store.upsert(name, mechanism, credential)
    succeeded = any(code == ErrorCode.NONE for code, _ in outcome.values())
    if sync is None and succeeded and store.path is not None:
        # one writer at a time, each with the table as it is when it writes: the last write wins
        async with ctx.broker.scram_write_lock:
            await trio.to_thread.run_sync(ScramCredentialStore.write, store.path, store.snapshot())
    results = [
        AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message)
        for name, (code, message) in outcome.items()
    ]
    return AlterUserScramCredentialsResponse(results=results)
