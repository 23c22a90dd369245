"""Feeding files in steps: the distinct input times split into K consecutive groups, one
step each (`run --steps K`, `triangles --steps K`), and the outputs written at the end.

Inputs the driver may hold are read and checked once on Arrow (Tables: no Spark job, so a
small run costs the JVM's start and little else); others are read once as Spark frames
(Frames), kept while the steps read them.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from executor.apps.launch import CliError, spark_errors
from executor.runtime.errors import InputError
from executor.time import TIME


class Tables:
    """Every input as checked Arrow updates (records, time, diff)."""

    def __init__(self, tables: dict[str, pa.Table]):
        self.tables = tables

    @classmethod
    def read(cls, runner, sources: dict, upto: Optional[int]) -> Optional["Tables"]:
        """The inputs read without Spark, or None where one must be read by Spark (a
        dialect or layout pyarrow does not read as Spark does, or more rows than
        diffspark.host.step_rows)."""
        from executor.arrange.spine import local_rows
        from executor.driver import checked
        from executor.inputs.local import local_table
        limit, raw = runner.step_rows, {}
        for name, source in sources.items():
            table = source if isinstance(source, pa.Table) else \
                local_table(name, source, runner.input_schemas[name])
            if table is None or table.num_rows > limit:
                return None
            raw[name] = table
        tables = {}
        for name, table in raw.items():  # from time 0: a resumed runner repeats its steps
            with spark_errors(lambda e: InputError(name, "-", "cannot be read", e)):
                rows = checked(runner.spark, name, table, runner.input_schemas[name], 0, None)
                rows = rows if isinstance(rows, pa.Table) else local_rows(rows)
            tables[name] = rows if upto is None else rows.filter(pc.less(rows[TIME], upto))
        return cls(tables)

    def times(self, steps: int) -> list[int]:
        """The distinct input times in order (only the last one matters for one step)."""
        times = pa.chunked_array([t[TIME] for t in self.tables.values()], pa.int64())
        if steps == 1:
            last = pc.max(times).as_py()
            return [] if last is None else [last]
        return pc.unique(times).sort().to_pylist()

    def between(self, lower: int, upper: int) -> dict[str, pa.Table]:
        return {name: t.filter(pc.and_(pc.greater_equal(t[TIME], lower), pc.less(t[TIME], upper)))
                for name, t in self.tables.items()}

    def release(self) -> None:
        self.tables = {}


class Frames:
    """Every input as a checked Spark frame, persisted while several steps read it."""

    def __init__(self, frames: dict):
        self.frames = frames

    @classmethod
    def read(cls, runner, sources: dict, upto: Optional[int], steps: int = 2) -> "Frames":
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from executor.inputs.updates import normalise, read_source
        frames = {}
        for name, source in sources.items():
            schema = runner.input_schemas[name]
            with spark_errors(lambda e: InputError(name, "-", "cannot be read", e)):
                # from time 0: a resumed runner (frontier > 0) repeats its committed steps
                df = normalise(name, read_source(runner.spark, name, source, schema), schema,
                               0, None)
                if upto is not None:
                    df = df.where(F.col(TIME) < upto)
                frames[name] = df.persist(StorageLevel.MEMORY_AND_DISK) if steps > 1 else df
        return cls(frames)

    def times(self, steps: int) -> list[int]:
        """The distinct input times in order (only the last one matters for one step)."""
        from functools import reduce

        from pyspark.sql import functions as F
        if not self.frames:
            return []
        with spark_errors(lambda e: CliError(f"reading the input times: {e}")):
            times = reduce(lambda a, b: a.unionByName(b),
                           [df.select(TIME) for df in self.frames.values()])
            if steps == 1:
                last = times.agg(F.max(TIME)).collect()[0][0]
                return [] if last is None else [last]
            return [r[0] for r in times.distinct().orderBy(TIME).collect()]

    def between(self, lower: int, upper: int) -> dict:
        from pyspark.sql import functions as F
        return {name: df.where((F.col(TIME) >= lower) & (F.col(TIME) < upper))
                for name, df in self.frames.items()}

    def release(self) -> None:
        for df in self.frames.values():
            df.unpersist()


def step_bounds(times: list[int], steps: int, upto: Optional[int]) -> list[tuple[int, int]]:
    """(lower, upto) of each step: the distinct times split into `steps` consecutive groups;
    a step's upto is the first time of the next group (the last: its last time + 1, or
    `upto`). No times and no `upto`: no step (close alone emits nothing)."""
    k = max(1, min(steps, len(times)))
    groups = [times[len(times) * i // k: len(times) * (i + 1) // k] for i in range(k)]
    groups = [g for g in groups if g]
    bounds, lower = [], 0
    for i, group in enumerate(groups):
        hi = groups[i + 1][0] if i + 1 < len(groups) else (
            upto if upto is not None else group[-1] + 1)
        bounds.append((lower, hi))
        lower = hi
    if not bounds and upto is not None:
        bounds.append((0, upto))
    return bounds


def write_output(runner, name: str, target: str) -> int:
    """Every change of output `name` as Parquet in the folder `target` (replaced), by
    pyarrow when the driver holds them all (no Spark job), else by Spark's writer; the
    number of changes."""
    table = None if "://" in target else runner.output_arrow(name, collect=False)
    if table is None:
        runner.output(name).write.mode("overwrite").parquet(target)
        return runner.spark.read.parquet(target).count()
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", dir=parent)
    pq.write_table(table, os.path.join(tmp, "part-00000.parquet"))
    open(os.path.join(tmp, "_SUCCESS"), "w").close()  # as Spark's committer marks a folder
    if os.path.isdir(target):
        shutil.rmtree(target)
    elif os.path.exists(target):
        os.remove(target)
    os.rename(tmp, target)
    return table.num_rows
