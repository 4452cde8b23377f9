"""DescribeUserScramCredentials (key 50), version 0.

Behaviour: lists the SCRAM mechanisms and iteration counts stored for the named users (null: every
user with a credential), never a salt or key. A user named twice gets DUPLICATE_RESOURCE, a user without
credentials RESOURCE_NOT_FOUND, each with Kafka's message; the top-level error stays NONE.
With an authorizer, needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from kafkacompat.broker.authorization import Op, cluster_allowed
from kafkacompat.security.credentials import MECHANISM_IDS
from kafkacompat.wire._generated.describe_user_scram_credentials_response import (
    CredentialInfo,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.describe_user_scram_credentials_request import (
        DescribeUserScramCredentialsRequest,
    )

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    store = ctx.broker.scram_credentials
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return DescribeUserScramCredentialsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, results=[]
        )
    names = store.users() if request.users is None else [user.name for user in request.users]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(
                DescribeUserScramCredentialsResult(
                    user=name,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message=f"Cannot describe SCRAM credentials for the same user twice in a single "
                    f"request: {name}",
                    credential_infos=[],
                )
            )
            continue
        mechanisms = store.mechanisms(name)
        if not mechanisms:
            results.append(
                DescribeUserScramCredentialsResult(
                    user=name,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=f"Attempt to describe a user credential that does not exist: {name}",
                    credential_infos=[],
                )
            )
            continue
        infos = [
            CredentialInfo(mechanism=MECHANISM_IDS[mechanism], iterations=credential.iterations)
            for mechanism, credential in sorted(mechanisms.items())
        ]
        results.append(
            DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=infos
            )
        )
    return DescribeUserScramCredentialsResponse(
        error_code=ErrorCode.NONE, error_message=None, results=results
    )
