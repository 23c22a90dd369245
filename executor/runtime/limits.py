"""Resource limits with clear errors instead of JVM stack traces.

`diffspark.limits.output_records` (conf; unset = no limit): the most final output changes one
step may emit, per output. A step above it is refused before it commits (nothing changes),
so a plan that blows up (a join on a skewed key, a missing filter) stops with one line
instead of filling the disk or the driver. Counting costs one job per output, so it only
runs when the limit is set. A driver that ran out of memory gets a hint naming the setting.
The memory the machine has available bounds the steps the driver placement takes
(executor/driver.py `_fits_memory`).
"""
from __future__ import annotations

import pyarrow as pa

from executor.runtime.config import ConfigError
from executor.runtime.errors import StepError

OUTPUT_RECORDS_KEY = "diffspark.limits.output_records"
_OOM = ("OutOfMemoryError", "Java heap space", "GC overhead limit exceeded",
        "Cannot allocate memory")


def output_limit(conf) -> int | None:
    text = conf.get(OUTPUT_RECORDS_KEY)
    if text in (None, ""):
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{OUTPUT_RECORDS_KEY}={text!r}: expected a positive integer")
    return value


def check_outputs(conf, changes: dict, step: int) -> None:
    """Refuse the step if an output's final changes exceed the configured limit."""
    limit = output_limit(conf)
    if limit is None:
        return
    for name, df in changes.items():
        n = df.num_rows if isinstance(df, pa.Table) else df.limit(limit + 1).count()
        if n > limit:
            raise StepError(f"step {step} refused, nothing changed: output '{name}' has more "
                            f"than {limit} changes (rule: {OUTPUT_RECORDS_KEY}={limit})")


def memory_hint(error: BaseException) -> str:
    """A hint to append to a step error caused by memory exhaustion; else ''."""
    if any(s in str(error) for s in _OOM):
        return (" (the Spark driver or an executor ran out of memory: raise "
                "spark.driver.memory, e.g. --conf spark.driver.memory=8g, or feed smaller steps)")
    return ""


def available_memory() -> float:
    """Bytes of memory the machine can still give (Linux's MemAvailable; elsewhere
    unknown: infinite)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")
