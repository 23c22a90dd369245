"""Build the SparkSession for a merged diffspark configuration (executor.runtime.config.load_conf).

spark.* keys go to Spark; diffspark.* keys are ours and stay out of Spark.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["require_java", "spark_session"]

JAVA_MAJOR = 17
REPO_ROOT = Path(__file__).resolve().parents[2]
_INSTALL_HINT = "install OpenJDK 17 (apt-get install openjdk-17-jdk-headless, or conda install openjdk=17)"
# Task resource requests that local mode cannot satisfy: a task asking for a GPU waits forever.
_RESOURCE_KEY = re.compile(r"spark\.(executor|task|driver)\.resource\.")


def require_java() -> str:
    """Path of the `java` Spark will use (JAVA_HOME first, as spark-class does, then PATH).

    Raises RuntimeError with what to install when there is none, or when it is older than 17.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise RuntimeError(
                f"diffspark needs Java {JAVA_MAJOR}: JAVA_HOME={java_home} has no bin/java; "
                f"fix JAVA_HOME or {_INSTALL_HINT}"
            )
        java = str(java)
    else:
        found = shutil.which("java")
        if found is None:
            raise RuntimeError(
                f"diffspark needs Java {JAVA_MAJOR}: `java` not found on PATH and JAVA_HOME unset; "
                f"{_INSTALL_HINT}"
            )
        java = found
    major = _java_major(java)
    if major is not None and major < JAVA_MAJOR:
        raise RuntimeError(
            f"diffspark needs Java {JAVA_MAJOR} or newer (Spark 4), but {java} is Java {major}; "
            f"{_INSTALL_HINT}"
        )
    return java


def _java_major(java: str) -> int | None:
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0_x" is Java 8


def spark_session(conf: Mapping[str, str]) -> "SparkSession":
    """The SparkSession for `conf` (a load_conf result): the active one if there is one.

    Under spark-submit, keys spark-submit was given (--master, --conf, --properties-file)
    win over the profile's. Without a master anywhere, local[*]. In local mode GPU resource
    requests are dropped, the Python workers use this interpreter and can import this
    repository. Reusing a running session applies only runtime SQL settings.
    """
    require_java()
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    settings = {k: str(v) for k, v in conf.items() if k.startswith("spark.")}
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # started by spark-submit: its JVM is running
        SparkContext._ensure_initialized()
        submitted = SparkConf()  # holds what spark-submit set
        settings = {k: v for k, v in settings.items() if not submitted.contains(k)}
        master = submitted.get("spark.master", settings.get("spark.master", "local[*]"))
    else:
        master = settings.setdefault("spark.master", "local[*]")

    if master.startswith("local"):
        dropped = sorted(k for k in settings if _RESOURCE_KEY.match(k))
        for key in dropped:
            del settings[key]
        if dropped:
            warnings.warn(
                f"local mode does not schedule GPU resources; ignoring {', '.join(dropped)}",
                stacklevel=2,
            )
        # Python workers: this interpreter (not whatever `python3` is on PATH, which may lack
        # pyarrow), able to import this repository from any working directory.
        if SparkContext._active_spark_context is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if SparkContext._gateway is None:  # the JVM (and its workers) start with this env
            _add_to_pythonpath(str(REPO_ROOT))
            # bind to loopback: no "hostname resolves to a loopback address" warning, no port
            # opened on the network
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(conf.get("spark.log.level", "ERROR"))
    _quiet_query_context_loggers()
    return spark


def _add_to_pythonpath(path: str) -> None:
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if path not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([path, *parts])


def _quiet_query_context_loggers() -> None:
    """PySpark 4 logs every captured SQL error, with its stack, at ERROR level before the
    exception reaches the caller, even when the caller expects and handles it. The
    exception keeps its message; only the duplicate log goes."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pragma: no cover - older PySpark
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
