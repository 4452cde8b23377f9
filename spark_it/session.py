"""How Spark's Kafka connector reaches the JVM, and a SparkSession built with it.

Theory of operation: the Kafka source/sink is not part of the pyspark wheel. It lives in
spark-sql-kafka-0-10 plus its runtime dependencies (spark-token-provider-kafka-0-10, kafka-clients,
commons-pool2), which must be on the JVM class path before the SparkContext starts. Two ways, chosen
by environment variable:

- `KAFKACOMPAT_SPARK_PACKAGES=1`: `spark.jars.packages` with the connector coordinates matching the
  installed pyspark (Scala binary version read from pyspark's own jars); Spark resolves it and its
  dependencies from Maven Central (network needed).
- `KAFKACOMPAT_SPARK_JARS=/dir`: every `*.jar` in that directory on `spark.jars` (offline); the four
  artifacts above must all be there.

`connector_config()` returns the Spark settings, or None and a one-line reason that says how to enable
the connector. `build_session()` is what the pipelines' `main()` and the tests use.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ENABLE_HINT",
    "REQUIRED_JARS",
    "build_session",
    "connector_config",
    "connector_coordinates",
    "scala_binary_version",
]

REQUIRED_JARS = (
    "spark-sql-kafka-0-10",
    "spark-token-provider-kafka-0-10",
    "kafka-clients",
    "commons-pool2",
)

ENABLE_HINT = (
    "Spark Kafka connector not available: set KAFKACOMPAT_SPARK_PACKAGES=1 (downloads from Maven) or "
    "KAFKACOMPAT_SPARK_JARS=<dir with spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, "
    "kafka-clients, commons-pool2 jars>"
)

_SCALA_FROM_JAR = re.compile(r"^spark-core_(\d+\.\d+)-")


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def scala_binary_version(jars_dir: Path | None = None) -> str:
    """ "2.13" etc., read from the name of pyspark's bundled spark-core jar."""
    directory = jars_dir if jars_dir is not None else _pyspark_home() / "jars"
    for jar in sorted(directory.glob("spark-core_*.jar")):
        match = _SCALA_FROM_JAR.match(jar.name)
        if match:
            return match.group(1)
    raise RuntimeError(f"no spark-core_<scala>-<version>.jar in {directory}")


def connector_coordinates(spark_version: str | None = None, scala: str | None = None) -> str:
    """Maven coordinates of the connector matching the installed pyspark."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    if scala is None:
        scala = scala_binary_version()
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{spark_version}"


def connector_config(environ: Mapping[str, str] | None = None) -> tuple[dict[str, str] | None, str]:
    """(Spark settings that put the connector on the class path, reason) — settings None if unavailable."""
    env = os.environ if environ is None else environ
    jars_dir = env.get("KAFKACOMPAT_SPARK_JARS", "").strip()
    if jars_dir:
        directory = Path(jars_dir)
        if not directory.is_dir():
            return None, f"KAFKACOMPAT_SPARK_JARS={jars_dir} is not a directory"
        jars = sorted(directory.glob("*.jar"))
        missing = [name for name in REQUIRED_JARS if not any(j.name.startswith(name) for j in jars)]
        if missing:
            return None, f"KAFKACOMPAT_SPARK_JARS={jars_dir} lacks {', '.join(missing)} jar(s)"
        return {"spark.jars": ",".join(str(j.resolve()) for j in jars)}, f"jars from {jars_dir}"
    if env.get("KAFKACOMPAT_SPARK_PACKAGES", "").strip() in ("1", "true", "yes"):
        coordinates = connector_coordinates()
        return {"spark.jars.packages": coordinates}, f"packages {coordinates}"
    return None, ENABLE_HINT


def build_session(
    app_name: str,
    *,
    master: str | None = None,
    with_connector: bool = True,
    extra: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession in UTC with the connector when available (see module docstring).

    `master` None keeps whatever spark-submit chose (spark-submit's default is local[*]).
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    # Event-time windows are reported in UTC regardless of the machine's zone.
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    if with_connector:
        config, _reason = connector_config()
        for key, value in (config or {}).items():
            builder = builder.config(key, value)
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
