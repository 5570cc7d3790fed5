"""The one place a SparkSession is built.

Local mode (``local[*]``) by default, sized for a small machine; set
``LACUNA_SPARK_MASTER`` (or pass ``master=``) to run the same pipeline on a
cluster. PySpark is imported lazily.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import PipelineError
from engine.stream.quiet import quiet_py4j

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

MASTER_ENV = "LACUNA_SPARK_MASTER"
# set by spark-submit for the Python driver it starts (PySpark connects to its JVM)
SUBMITTED_ENV = "PYSPARK_GATEWAY_PORT"
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
MIN_JAVA = 17  # Spark 4 runs on Java 17 and 21


@dataclass(frozen=True)
class SparkSettings:
    """What the session is built with. ``master=None`` reads ``LACUNA_SPARK_MASTER``."""

    master: str | None = None
    app_name: str = "lacuna"
    driver_memory: str = "2g"
    shuffle_partitions: int = 4
    ui_enabled: bool = False

    def resolved_master(self, environ: Mapping[str, str] = os.environ) -> str | None:
        """``master``, else ``LACUNA_SPARK_MASTER``, else None under ``spark-submit`` (its
        ``--master`` decides: PySpark's builder would override it), else ``local[*]``."""
        given = self.master or environ.get(MASTER_ENV)
        if given:
            return given
        return None if SUBMITTED_ENV in environ else "local[*]"


def java_problem() -> str | None:
    """Why no usable JVM is present, or ``None`` when ``java -version`` works."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        return "no Java found: install Java 17 or 21 (e.g. apt-get install openjdk-17-jre-headless)"
    try:
        done = subprocess.run([java, "-version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return f"Java at {java} does not run: {err}"
    major = java_major(done.stderr.decode(errors="replace") + done.stdout.decode(errors="replace"))
    if major is None or major < MIN_JAVA:
        found = "an unknown version" if major is None else f"Java {major}"
        return (
            f"Spark 4 needs Java {MIN_JAVA} or newer, but {java} is {found}: install "
            "openjdk-17-jre-headless (or 21) and put it first on PATH or in JAVA_HOME"
        )
    return None


def java_major(version_output: str) -> int | None:
    """The major version in ``java -version`` output (``1.8.0`` is 8), or None."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def get_spark(settings: SparkSettings | None = None) -> SparkSession:
    """Return the process-wide SparkSession, creating it on first use."""
    settings = settings or SparkSettings()
    problem = java_problem()
    if problem:
        raise PipelineError(problem)
    master = settings.resolved_master()
    if master is not None and master.startswith("local"):
        # Keep a local driver on loopback: never bind a public interface by accident.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    _point_workers_at_this_python()
    quiet_py4j()
    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder
    if master is not None:  # under spark-submit without one: its --master stands
        builder = builder.master(master)
    builder = (
        builder.appName(settings.app_name)
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.ui.enabled", str(settings.ui_enabled).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config(
            "spark.driver.extraJavaOptions",
            f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}",
        )
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    try:
        spark = builder.getOrCreate()
    except Exception as err:  # py4j / JVM start-up failures have many types
        where = master or "spark-submit's master"
        raise PipelineError(f"Spark could not start on {where}: {err}") from err
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _point_workers_at_this_python() -> None:
    """Python workers (``mapInPandas``) must run this interpreter and import ``engine``.

    Only effective before the JVM starts, which is why it lives here. On a
    cluster the executors need the same packages and this checkout installed.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
