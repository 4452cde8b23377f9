"""Spark Structured Streaming on kafkacompat: pipelines, their Kafka connector options and tests.

Theory of operation: `spark_it.kafka_options` builds the option dictionaries and JSON offset
specifications Spark's Kafka connector (spark-sql-kafka-0-10) reads, without touching Spark;
`spark_it.session` decides how the connector jars reach the JVM and builds a SparkSession;
`spark_it.pipelines` holds the pipelines, each a pure DataFrame transformation (Kafka-shaped rows in,
sink-ready key/value rows out) plus a `main()` that wires it between a Kafka source and a Kafka sink.
"""
