"""ApiVersions (key 18), versions 0-4.

Behaviour: lists every API in the dispatch table (the inter-broker APIs in cluster mode only) with
the version range this broker serves (handler range intersected with the codec's), so nothing
unimplemented is advertised. A broker without feature
flags sends empty SupportedFeatures/FinalizedFeatures and finalized-features epoch -1 (v3+). A request
whose version we do not know is answered in v0 format with UNSUPPORTED_VERSION and the same key list
(KIP-511); the connection builds that answer with `unsupported_version_response()`. From v3 the client
software name and version must be non-empty runs of letters, digits, '-' and '.' that start and end
with a letter or digit (KIP-511), else the answer is INVALID_REQUEST with no keys, as Kafka's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kafkacompat.wire._generated.api_versions_response import ApiVersionsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.api_versions_request import ApiVersionsRequest

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION = 0
MAX_VERSION = 4


# The key list of each mode, built once: it depends only on the dispatch table (fixed for the life of the
# process; dispatch caches its ranges the same way), never on configs, quotas, listener or security.
# Building it per request (49 ApiVersion structs, 27 us) was about a quarter of the broker's CPU samples
# (py-spy) under a flood of pipelined ApiVersions, which took 75-105 us of broker CPU each. A tuple, so
# no response can change what the next one lists; each response is still a fresh object
# (throttle_time_ms is set per response under quotas).
_API_KEYS: dict[bool, tuple[Any, ...]] = {}


def _api_keys(cluster_mode: bool) -> tuple[Any, ...]:
    keys = _API_KEYS.get(cluster_mode)
    if keys is None:
        from kafkacompat.broker.dispatch import supported_versions

        keys = tuple(
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, low, high in supported_versions(cluster_mode)
        )
        _API_KEYS[cluster_mode] = keys
    return keys


_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def unsupported_version_response(cluster_mode: bool = False) -> ApiVersionsResponse:
    # ignore[arg-type]: the shared tuple where the class has a list (the encoder takes any sequence)
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys(cluster_mode))  # type: ignore[arg-type]


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name or "")
        and _SOFTWARE.fullmatch(request.client_software_version or "")
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=[])
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_keys(ctx.broker.cluster_mode))  # type: ignore[arg-type]
