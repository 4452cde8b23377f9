"""ApiVersions (key 18), versions 0-4.

Behaviour: lists every API in the dispatch table with the version range this broker serves (handler
range intersected with the codec's), so nothing unimplemented is advertised. A broker without feature
flags sends empty SupportedFeatures/FinalizedFeatures and finalized-features epoch -1 (v3+). A request
whose version we do not know is answered in v0 format with UNSUPPORTED_VERSION and the same key list
(KIP-511); the connection builds that answer with `unsupported_version_response()`. The v3+ client
software name/version are accepted without validation (Kafka answers INVALID_REQUEST for malformed
names; no stock client sends such names).
"""

from __future__ import annotations

from typing import Any

from kafkacompat.wire._generated.api_versions_response import ApiVersionsResponse
from kafkacompat.wire.errors import ErrorCode

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


def _api_keys() -> list[Any]:
    from kafkacompat.broker.dispatch import supported_versions

    return [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, low, high in supported_versions()
    ]


def unsupported_version_response() -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=_api_keys())


async def handle(ctx: Any, request: Any) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=_api_keys())
