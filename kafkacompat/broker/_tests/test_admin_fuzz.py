"""Random requests of every served version to the admin handlers: always a response that encodes in
that version, never an exception (the handler contract's "errors go into the response")."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.broker._tests.test_admin_harness import AdminHarness
from kafkacompat.broker.admin_support import logger_names as all_logger_names
from kafkacompat.broker.handlers import (
    alter_configs,
    create_partitions,
    delete_records,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    incremental_alter_configs,
    offset_for_leader_epoch,
)
from kafkacompat.wire.messages import API_SPECS

test_messages = pytest.importorskip("kafkacompat.wire._tests.test_messages")
if not test_messages.HAVE_SPECS:
    pytest.skip("Kafka specs (../shared/kafka-protocol) not present", allow_module_level=True)

MODULES = [
    create_partitions,
    delete_records,
    describe_configs,
    alter_configs,
    incremental_alter_configs,
    describe_cluster,
    describe_log_dirs,
    describe_topic_partitions,
    describe_producers,
    offset_for_leader_epoch,
]
NAME_FIELDS = ("name", "topic", "resource_name", "topic_name")


def steer(obj: object, data: st.DataObject) -> None:
    """Point some random names at the existing topic "t" or broker "1" and some resource types at
    TOPIC/BROKER, so that random numbers, configs and offsets reach the real code paths too."""
    for attr in getattr(obj, "__slots__", ()):
        value = getattr(obj, attr)
        if attr in NAME_FIELDS and isinstance(value, str):
            setattr(obj, attr, data.draw(st.sampled_from([value, "t", "1"])))
        elif attr == "resource_type" and isinstance(value, int):
            setattr(obj, attr, data.draw(st.sampled_from([value, 2, 4])))
        elif isinstance(value, list):
            for item in value:
                steer(item, data)
        elif hasattr(value, "__slots__"):
            steer(value, data)


CASES = [(m, v) for m in MODULES for v in range(m.MIN_VERSION, m.MAX_VERSION + 1)]


@pytest.mark.parametrize(
    ("module", "version"), CASES, ids=[f"{m.__name__.rsplit('.', 1)[1]}-v{v}" for m, v in CASES]
)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_random_requests_get_answers(module, version: int, data: st.DataObject) -> None:
    spec = API_SPECS[module.API_KEY]
    request = data.draw(test_messages.message_strategy(spec.request_module, version))
    steer(request, data)
    loggers = [logging.getLogger(name) for name in ("", *all_logger_names())]
    levels = [logger.level for logger in loggers]  # random BROKER_LOGGER changes are undone
    with tempfile.TemporaryDirectory() as tmp:
        harness = AdminHarness(Path(tmp) / "data")
        try:
            await harness.state.create_topic("t", 2, {"retention.ms": "100000"})
            harness.append("t", 0, 3)
            fields = {name: getattr(request, name) for name in request.__slots__ if name != "unknown_tags"}
            response = await harness.call(module, version, **fields)
            assert response is not None
        finally:
            harness.close()
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
