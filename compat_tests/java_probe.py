"""Finding, compiling and running compat_tests/java/KafkaCompatProbe.java (the Java client's harness).

The client jar comes from `tools/fetch_java_client.py` (`make test` runs it into the test venv, writing
`<venv>/java/classpath.txt`, or `unavailable.txt` with the reason it could not); the environment
variable `KAFKACOMPAT_JAVA_CLASSPATH` (a classpath string) overrides where it is looked for. The probe is
compiled once per process, into a temporary directory removed at exit.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE_SOURCE = Path(__file__).resolve().parent / "java" / "KafkaCompatProbe.java"


def _classpath() -> tuple[str | None, str]:
    """(classpath, "") when the client is there, else (None, why not)."""
    explicit = os.environ.get("KAFKACOMPAT_JAVA_CLASSPATH")
    if explicit:
        return explicit, ""
    fetched = Path(sys.prefix) / "java"
    if (fetched / "unavailable.txt").exists():
        return None, "Java Kafka client unavailable: " + (fetched / "unavailable.txt").read_text().strip()
    listing = fetched / "classpath.txt"
    if not listing.exists():
        return None, f"Java Kafka client not fetched: run tools/fetch_java_client.py --dir {fetched}"
    return os.pathsep.join(listing.read_text().split()), ""


def unavailable_reason() -> str | None:
    """Why the Java probe cannot run here (a one-line skip reason), or None when it can."""
    if shutil.which("java") is None or shutil.which("javac") is None:
        return "no JDK (java and javac) on PATH"
    classpath, why = _classpath()
    return None if classpath else why


@functools.cache
def probe_command() -> tuple[str, ...]:
    """The command line that runs the compiled probe; append the probe's own arguments."""
    return java_command(PROBE_SOURCE)


@functools.cache
def java_command(source: Path) -> tuple[str, ...]:
    """Compile one Java source file against the client (once per process) and return the command line
    that runs its class (named as the file); append the program's own arguments. Also used by tools
    (tools/cluster_chaos.py's Java producer)."""
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    classpath, _ = _classpath()
    assert classpath is not None
    classes = tempfile.mkdtemp(prefix="kafkacompat-java-probe-")
    atexit.register(shutil.rmtree, classes, True)
    javac, java = shutil.which("javac"), shutil.which("java")
    assert javac is not None and java is not None
    compiled = subprocess.run(
        [javac, "-d", classes, "-cp", classpath, str(source)], capture_output=True, text=True
    )
    if compiled.returncode != 0:
        raise RuntimeError(f"javac failed: {compiled.stderr}")
    return (java, "-cp", os.pathsep.join([classes, classpath]), source.stem)
