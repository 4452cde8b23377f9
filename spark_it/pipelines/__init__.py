"""PySpark Structured Streaming pipelines over Kafka topics (see spark_it/README.md).

Each module has a pure `transform(source, window=..., watermark=...)` and a `main(argv)`:
`activity` (page-view counts per page and event-time window) and `logs` (log-line counts per service,
level and window). Run one with `python -m spark_it.pipelines.<name> --help`.
"""
