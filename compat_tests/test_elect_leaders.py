"""ElectLeaders (preferred and unclean) from confluent-kafka's AdminClient against the suite's broker.

A single node leads every partition it has and is its only replica, so every election is "not needed";
a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION. (Elections that move leaders are in
test_cluster.py.) Against a real Kafka (`--bootstrap`) the same answers hold for a fresh topic, whose
leader is its preferred replica.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ElectionType, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402


@pytest.mark.parametrize("election", [ElectionType.PREFERRED, ElectionType.UNCLEAN])
def test_elections_on_led_partitions_are_not_needed(
    bootstrap: str, make_topic: Callable[..., str], election: ElectionType
) -> None:
    topic = make_topic(partitions=2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.elect_leaders(election, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    results = future.result(30)
    assert sorted(tp.partition for tp in results) == [0, 1]
    for error in results.values():
        assert error is not None and error.name() == "ELECTION_NOT_NEEDED"


def test_election_of_a_missing_partition(bootstrap: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 5)]).result(30)
    except KafkaException as exc:  # some librdkafka versions raise the partition error
        assert exc.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
        return
    [error] = results.values()
    assert error is not None and error.name() == "UNKNOWN_TOPIC_OR_PART"
