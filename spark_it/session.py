"""How Spark's Kafka connector reaches the JVM, and a SparkSession built with it.

Theory of operation: the Kafka source/sink is not part of the pyspark wheel. It lives in
spark-sql-kafka-0-10 plus its runtime dependencies (spark-token-provider-kafka-0-10, kafka-clients,
commons-pool2), which must be on the JVM class path before the SparkContext starts. Three ways, the
first that applies wins:

- `KAFKACOMPAT_SPARK_JARS=/dir`: every `*.jar` in that directory on `spark.jars` (offline); the four
  artifacts above must all be there.
- `KAFKACOMPAT_SPARK_PACKAGES=1`: `spark.jars.packages` with the connector coordinates matching the
  installed pyspark (Scala binary version read from pyspark's own jars); Spark resolves it and its
  dependencies from Maven Central (network needed).
- Found automatically (what `make test` and CI use): the Spark 4.0.0 connector, token provider and
  commons-pool2 from the shared folder beside the repository (`../shared/spark-kafka/`), plus the
  Kafka-only kafka-clients jar that tools/fetch_java_client.py writes into `<venv>/java/spark/`. Those
  jars are built for Spark 4.0 with Scala 2.13, so they are used only when the installed pyspark is
  4.0.x on Scala 2.13; otherwise the reason says so.

`connector_config()` returns the Spark settings, or None and a one-line reason that says how to enable
the connector. `build_session()` is what the pipelines' `main()` and the tests use; `start_session()`
turns a JVM that does not start (most often: `spark.jars.packages` could not be resolved) into one
`SparkStartError` line saying how to get the connector another way, instead of py4j's traceback.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ENABLE_HINT",
    "REQUIRED_JARS",
    "SparkStartError",
    "build_session",
    "connector_config",
    "connector_coordinates",
    "scala_binary_version",
    "start_session",
]

REQUIRED_JARS = (
    "spark-sql-kafka-0-10",
    "spark-token-provider-kafka-0-10",
    "kafka-clients",
    "commons-pool2",
)

ENABLE_HINT = "or set KAFKACOMPAT_SPARK_JARS=<dir> / KAFKACOMPAT_SPARK_PACKAGES=1 (see spark_it/README.md)"

REPO = Path(__file__).resolve().parents[1]
# The offline connector jars kept beside the repository (see that folder's README), and the Spark and
# Scala versions they were built for.
SHARED_CONNECTOR_DIR = REPO.parent / "shared" / "spark-kafka"
SHARED_CONNECTOR_SPARK = "4.0"
SHARED_CONNECTOR_SCALA = "2.13"

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
    jars, reason = found_connector_jars()
    if jars is None:
        return None, f"Spark Kafka connector not available: {reason}; {ENABLE_HINT}"
    return {"spark.jars": ",".join(str(j) for j in jars)}, f"jars from {SHARED_CONNECTOR_DIR} and the venv"


def fetched_kafka_clients_dirs() -> list[Path]:
    """Where tools/fetch_java_client.py puts the Kafka-only client jar: `<venv>/java/spark`, for the
    running venv and for the repository's `.venv` (the same directory when run from it)."""
    candidates = [Path(sys.prefix) / "java" / "spark", REPO / ".venv" / "java" / "spark"]
    unique: list[Path] = []
    for candidate in candidates:
        if candidate not in unique:
            unique.append(candidate)
    return unique


def found_connector_jars(
    shared_dir: Path | None = None,
    clients_dirs: list[Path] | None = None,
    pyspark_version: str | None = None,
    scala: str | None = None,
) -> tuple[list[Path] | None, str]:
    """(the four connector jars, "") from the shared folder and the venv, else (None, why not)."""
    shared = SHARED_CONNECTOR_DIR if shared_dir is None else shared_dir
    dirs = fetched_kafka_clients_dirs() if clients_dirs is None else clients_dirs
    if not shared.is_dir():
        return None, f"no {shared} (the offline connector jars)"
    shared_jars = sorted(shared.glob("*.jar"))
    jars: list[Path] = []
    for name in REQUIRED_JARS:
        if name == "kafka-clients":
            clients = [j for d in dirs for j in sorted(d.glob("kafka-clients-*.jar"))]
            if not clients:
                return None, (
                    f"no kafka-clients jar in {dirs[0]} (make test runs tools/fetch_java_client.py)"
                )
            jars.append(clients[-1].resolve())
            continue
        match = [j for j in shared_jars if j.name.startswith(name)]
        if not match:
            return None, f"{shared} lacks the {name} jar"
        jars.append(match[-1].resolve())
    if pyspark_version is None:
        import pyspark

        pyspark_version = pyspark.__version__
    if scala is None:
        scala = scala_binary_version()
    if not pyspark_version.startswith(SHARED_CONNECTOR_SPARK + ".") or scala != SHARED_CONNECTOR_SCALA:
        return None, (
            f"the jars in {shared} are for Spark {SHARED_CONNECTOR_SPARK}.x/Scala {SHARED_CONNECTOR_SCALA}, "
            f"installed pyspark is {pyspark_version}/Scala {scala} (pip install 'pyspark>=4.0,<4.1')"
        )
    return jars, ""


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
    return start_session(builder)


class SparkStartError(RuntimeError):
    """The SparkSession could not start (its JVM printed why, above)."""


def start_session(builder: Any) -> SparkSession:
    """`builder.getOrCreate()`, or SparkStartError in one line: with `spark.jars.packages` set, the
    usual cause is that the connector could not be resolved from Maven."""
    try:
        return builder.getOrCreate()
    except Exception as exc:  # py4j's Java gateway, or Spark's own start-up errors
        packages = os.environ.get("KAFKACOMPAT_SPARK_PACKAGES", "").strip() in ("1", "true", "yes")
        cause = "the connector from spark.jars.packages could not be resolved? " if packages else ""
        hint = "set KAFKACOMPAT_SPARK_JARS=<dir> with the connector jars (see spark_it/README.md)"
        raise SparkStartError(
            f"Spark did not start ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            f"{cause}{hint}"
        ) from exc
