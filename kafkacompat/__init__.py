"""kafkacompat: a Kafka-wire-compatible broker on trio, storing data in Kafka's on-disk format."""

__version__ = "0.1.0"
