"""The generated ApiKey enum names every request spec's apiKey, and the handler registry is keyed by it."""

from __future__ import annotations

import re

import pytest

from kafkacompat.broker import dispatch
from kafkacompat.wire import messages
from kafkacompat.wire._tests.test_messages import HAVE_SPECS, SPEC_DIRS, gen
from kafkacompat.wire.api_keys import ApiKey

needs_specs = pytest.mark.skipif(not HAVE_SPECS, reason="Kafka specs (../shared/kafka-protocol) not present")


def _upper_snake(request_name: str) -> str:
    """"LeaderAndIsrRequest" -> "LEADER_AND_ISR": word by word, as Kafka's ApiKeys enum spells it."""
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|\d|$)|[A-Z][a-z0-9]*", request_name.removesuffix("Request"))
    return "_".join(words).upper()


@needs_specs
def test_enum_matches_every_request_spec() -> None:
    # the spec files are read as the generator reads them (comments stripped, every *.json of the dirs)
    requests = {m.api_key: m.name for m in gen.load_specs(SPEC_DIRS) if m.type == "request"}
    assert requests, "no request specs found"
    assert {member.value: member.name for member in ApiKey} == {
        key: _upper_snake(name) for key, name in requests.items()
    }


def test_kafka_names_for_a_few_keys() -> None:
    assert ApiKey.PRODUCE == 0
    assert ApiKey.FETCH == 1
    assert ApiKey.LEADER_AND_ISR == 4
    assert ApiKey.API_VERSIONS == 18
    assert ApiKey.OFFSET_FOR_LEADER_EPOCH == 23
    assert ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS == 50
    assert ApiKey.ALTER_PARTITION == 56
    assert ApiKey.DESCRIBE_TOPIC_PARTITIONS == 75


def test_every_codec_key_is_a_member_of_the_same_name() -> None:
    for key, spec in messages.API_SPECS.items():
        assert ApiKey(key).name == _upper_snake(spec.name), spec.name


def test_dispatch_table_is_keyed_by_api_key_members() -> None:
    assert dispatch.HANDLERS
    for key, module in dispatch.HANDLERS.items():
        assert isinstance(key, ApiKey), f"{module.__name__}: API_KEY {key!r} is not an ApiKey member"
        assert module.API_KEY == key
    for key, _, _ in dispatch.supported_versions(cluster_mode=True):
        assert isinstance(key, ApiKey)
