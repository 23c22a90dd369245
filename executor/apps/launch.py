"""What every verb of the command line shares to start Spark and to fail in one line: the
`--conf` profile and overrides, the Spark JVM's log file, and Spark's exceptions as one-line
errors (CliError, exit status 2 in cli.main).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from typing import Optional

from executor.runtime.config import load_conf


class CliError(ValueError):
    """A command line that cannot be run: the message is the whole story, one line."""


def conf_from_args(values: list[str]) -> dict[str, str]:
    """`--conf` values: one profile (cpu, gpu, a .conf path; default cpu) and key=value
    overrides, merged by executor.runtime.config.load_conf."""
    profiles = [v for v in values if "=" not in v]
    overrides = [v for v in values if "=" in v]
    if len(profiles) > 1:
        raise CliError(f"--conf: give at most one profile, got {', '.join(profiles)}")
    return load_conf(profiles[0] if profiles else "cpu", overrides)


def describe(e: BaseException) -> str:
    from executor.runtime.errors import first_line
    return f"{type(e).__name__}: {first_line(e)}" if str(e).strip() else type(e).__name__


@contextlib.contextmanager
def spark_errors(wrap):
    """Spark's own exceptions (a corrupt file, a failed write) as one-line diffspark errors;
    diffspark's errors pass unchanged."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    try:
        yield
    except (Py4JJavaError, PySparkException) as e:
        raise wrap(describe(e)) from None


@contextlib.contextmanager
def starting_spark():
    """No Java, or a JVM that did not start (PySparkRuntimeError), as one line."""
    try:
        yield
    except RuntimeError as e:
        raise CliError(f"Spark did not start: {describe(e)}") from None


@contextlib.contextmanager
def spark_log(path: Optional[str]):
    """While a JVM starts, point file descriptor 2 at a log file: the JVM (and the Python
    workers it forks) inherit it, and keep logging there; this process's stderr is restored
    at once. A no-op when the JVM already runs (spark-submit) or with path '-'."""
    from pyspark import SparkContext
    if path == "-" or "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._gateway is not None:
        yield
        return
    if path is None:
        fd, path = tempfile.mkstemp(prefix="diffspark-spark-", suffix=".log")
        os.close(fd)
    try:
        log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        raise CliError(f"--spark-log {path}: cannot write: {e.strerror}") from None
    print(f"spark log: {path}", flush=True)
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log, 2)
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)
        for w in caught:
            print(f"note: {w.message}", flush=True)


def stop(spark) -> None:
    with contextlib.suppress(Exception):
        spark.stop()
