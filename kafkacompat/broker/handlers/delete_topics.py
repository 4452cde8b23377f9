"""DeleteTopics (key 20), versions 0-6.

Behaviour: v0-5 name topics in `topic_names`; v6 lists (name or id) pairs. Unknown name ->
UNKNOWN_TOPIC_OR_PARTITION, unknown id -> UNKNOWN_TOPIC_ID, both name and id given or the same topic
named twice -> INVALID_REQUEST, `delete.topic.enable=false` -> TOPIC_DELETION_DISABLED. A deleted topic
leaves the topic table at once (persisted before the answer); its partition logs are renamed
`<topic>-<p>.<uuid>-delete` and removed by the log manager's delayed delete, as Kafka does, so file
slices of in-flight fetches stay readable meanwhile. Waiting fetches on the topic are woken. In cluster
mode the deletions of a request are asked for together and the answer waits, bounded by `timeout_ms`,
until no live broker lists them (REQUEST_TIMED_OUT for those still listed:
`replication/cluster/topic_admin.py`).
With an authorizer, deleting needs DELETE on the topic (else TOPIC_AUTHORIZATION_FAILED, before existence).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkacompat.broker.authorization import Op, Resource, allowed
from kafkacompat.broker.fairness import Turn
from kafkacompat.wire._generated.delete_topics_response import DeleteTopicsResponse
from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode, KafkaError
from kafkacompat.wire.primitives import ZERO_UUID

if TYPE_CHECKING:
    from kafkacompat.broker.context import RequestContext
    from kafkacompat.wire._generated.delete_topics_request import DeleteTopicsRequest

API_KEY = ApiKey.DELETE_TOPICS
MIN_VERSION = 0
MAX_VERSION = 6

Result = DeleteTopicsResponse.DeletableTopicResult


async def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    broker = ctx.broker
    if ctx.api_version >= 6:
        wanted = [(state.name, state.topic_id) for state in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    seen: dict[Any, int] = {}
    for name, topic_id in wanted:
        key = name if name is not None else topic_id
        seen[key] = seen.get(key, 0) + 1
    results = []
    # cluster mode: the deletions are asked for together and answered once no live broker lists them
    batch = broker.cluster.topics.deletions() if broker.cluster is not None else None
    turn = Turn()  # many topics: other clients run in between (fairness.py)
    for name, topic_id in wanted:
        await turn.spend()
        result = Result(name=name, topic_id=topic_id, error_code=ErrorCode.NONE)
        results.append(result)
        try:
            if name is not None and topic_id != ZERO_UUID:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, "You may not specify both topic name and topic id."
                )
            if seen[name if name is not None else topic_id] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name or id in the request.")
            if name is None:
                topic = broker.metadata.topic_by_id(topic_id)
                if topic is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist.")
                result.name = topic.name
            assert result.name is not None
            if not allowed(ctx, Op.DELETE, Resource.TOPIC, result.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            if name is not None and name not in broker.metadata:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            if not broker.config["delete.topic.enable"]:
                raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
            if batch is not None:
                known = broker.metadata.topic(result.name)
                if known is None:
                    raise KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{result.name}' does not exist."
                    )
                batch.add(known)
                result.topic_id = known.topic_id
                continue
            topic = await broker.delete_topic(result.name)
            result.topic_id = topic.topic_id
        except KafkaError as exc:
            result.error_code = exc.code
            if ctx.api_version >= 5:
                result.error_message = exc.message
    if batch is not None:
        failed = await batch.commit(request.timeout_ms)
        for result in results:
            error = failed.get(result.name or "") if result.error_code == ErrorCode.NONE else None
            if error is not None:
                result.error_code = error.code
                if ctx.api_version >= 5:
                    result.error_message = error.message
    return DeleteTopicsResponse(responses=results)
