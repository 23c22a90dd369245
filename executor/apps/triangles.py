"""Triangle counting of an undirected edge list: the `triangles` verb and the flagship demo.

Edges are undirected: (a, b) and (b, a) are one edge, self loops are ignored, and an edge is
present at time t while its accumulated multiplicity (either direction) is positive. So the
dataflow normalises each update to (least, greatest), drops loops, takes `distinct`, and counts
`tri(x) :- u(x, y), u(y, z), u(x, z)` over the oriented edges u (x < y < z): each triangle once,
maintained by the delta-query executor (executor/operators/query/). The head keeps x alone because
only the count is wanted: y and z are summed out as they are bound, so a big step never holds its
triangles listed (9.1M of them in a 1M-edge R-MAT graph's first step).

A static edge list (no time and diff) is counted by the array kernel
(gpu_kernels.wcoj.count_triangles: degree orientation, CSR, batched intersection) on numpy
or cupy: one pass, no per-step machinery. A local Parquet list of integer columns is read by
pyarrow (`static_edges`), which costs less than Spark's read of it costs the kernel's count;
any other file goes through Spark (`read_edges`), which words what it refuses.
"""
from __future__ import annotations

import os
import time as clock
from typing import Optional

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, functions as F

from executor.apps.progress import progress
from executor.apps.steps import step_bounds
from executor.inputs.local import parquet_table
from executor.inputs.updates import probe_file
from executor.runtime.errors import InputError
from executor.time import DIFF, TIME
from plans import Dataflow

NAME = "edges"
TRIANGLES = "tri(x, y, z) :- u(x, y), u(y, z), u(x, z)"
COUNTED = "tri(x) :- u(x, y), u(y, z), u(x, z)"


def triangle_flow() -> Dataflow:
    """The running triangle count of an undirected edge stream (output `triangles`)."""
    flow = Dataflow()
    edges = flow.input(NAME, "src BIGINT, dst BIGINT")
    u = (edges.map("least(src, dst) AS src", "greatest(src, dst) AS dst")
         .filter("src <> dst").distinct())
    flow.output("triangles", flow.query(COUNTED, u=u).count())
    return flow


def read_edges(spark: SparkSession, path: str) -> DataFrame:
    """src, dst (BIGINT) and, when the file has them, time and diff: from Parquet, CSV with
    a header, or a whitespace-separated text file with `#` comments (SNAP)."""
    if not os.path.exists(path):
        raise InputError(NAME, "-", "file not found", path)
    probe = probe_file(NAME, path)
    if probe.endswith(".parquet"):
        df = spark.read.parquet(path)
    elif probe.endswith((".csv", ".csv.gz")):
        df = spark.read.csv(path, header=True, mode="FAILFAST")
    else:
        lines = spark.read.text(path).where(~F.col("value").startswith("#"))
        parts = F.split(F.trim(F.col("value")), r"\s+")
        lines = lines.where(F.trim(F.col("value")) != "")
        df = lines.select(parts.getItem(0).alias("src"), parts.getItem(1).alias("dst"),
                          F.size(parts).alias("__n"))
        bad = df.where(F.col("__n") != 2).limit(1).collect()
        if bad:
            raise InputError(NAME, "-", "each line of a text edge list is 'src dst'",
                             f"found {bad[0]['__n']} fields")
        df = df.drop("__n")
    cols = {c.lower(): c for c in df.columns}
    for need in ("src", "dst"):
        if need not in cols:
            raise InputError(NAME, need, "edge lists have columns src and dst",
                             f"columns are {df.columns}")
    extra = [c for c in (TIME, DIFF) if c in cols]
    out = df.select(*[F.col(cols[c]).alias(c) for c in ("src", "dst", *extra)])
    for c in out.columns:
        cast = F.col(c).try_cast("bigint")
        bad = out.where(F.col(c).isNull() | cast.isNull()).limit(1).collect()
        if bad:
            raise InputError(NAME, c, "values are integers (BIGINT), never null",
                             f"found {bad[0][c]!r}")
        out = out.withColumn(c, cast)
    return out


def static_edges(path: str) -> Optional[pa.Table]:
    """A local Parquet edge list with integer src and dst, never null, and no time or diff,
    as Arrow (src, dst as int64) without Spark; None for anything else (read_edges)."""
    table = parquet_table(NAME, path) if os.path.exists(path) else None
    if table is None:
        return None
    cols = {f.name.lower(): f.name for f in table.schema}
    if TIME in cols or DIFF in cols or not {"src", "dst"} <= set(cols):
        return None
    picked = [table.column(cols[c]) for c in ("src", "dst")]
    if any(not pa.types.is_integer(c.type) or c.null_count for c in picked):
        return None
    try:
        return pa.table({"src": picked[0].cast(pa.int64()), "dst": picked[1].cast(pa.int64())})
    except pa.ArrowInvalid:  # uint64 beyond BIGINT: Spark's cast decides
        return None


def static_count(edges, backend: str = "numpy") -> int:
    """Triangles of the undirected simple graph of `edges` (a DataFrame or an Arrow table
    with src and dst; duplicates, both directions and loops allowed), counted by the array
    kernel."""
    from gpu_kernels import count_triangles, namespace

    xp = namespace(backend)
    table = edges if isinstance(edges, pa.Table) else edges.select("src", "dst").toArrow()
    src = xp.asarray(table.column("src").to_numpy())
    dst = xp.asarray(table.column("dst").to_numpy())
    return count_triangles(xp, src, dst)


def running_counts(changes: list[tuple[int, int, int]], times: list[int]) -> list[int]:
    """The count at each of `times` from the count output's (count, time, diff) changes."""
    changes = sorted(changes, key=lambda c: c[1])
    out, total, i = [], 0, 0
    for t in times:
        while i < len(changes) and changes[i][1] <= t:
            total += changes[i][0] * changes[i][2]
            i += 1
        out.append(total)
    return out


def count_changes(runner) -> list[tuple[int, int, int]]:
    return [(r["count"], r[TIME], r[DIFF]) for r in runner.output("triangles").collect()]


def count_change(result) -> int:
    """The net change of the count in one step, from the step's own output changes."""
    return sum(r["count"] * r[DIFF] for r in result.changes["triangles"].collect())


def change_table(rows: list[tuple[int, int, int, int]]):
    """(src, dst, time, diff) rows as an Arrow table: local rows, which a small step reads
    without a Spark job (executor/driver.py)."""
    import pyarrow as pa

    cols = list(zip(*rows)) if rows else [(), (), (), ()]
    return pa.table({c: pa.array(v, pa.int64()) for c, v in zip(("src", "dst", TIME, DIFF), cols)})


def incremental(spark, conf: dict, edges: DataFrame, steps: int,
                report=print) -> tuple[object, list[int], list[int]]:
    """Feed a timed edge stream to the triangle dataflow in `steps` steps; (runner, distinct
    input times, triangle count at each)."""
    from executor import Runner
    from executor.inputs.updates import normalise

    runner = Runner(triangle_flow(), conf=conf, spark=spark)
    schema = runner.input_schemas[NAME]
    frame = normalise(NAME, edges, schema, 0, None).cache()
    times = [r[0] for r in frame.select(TIME).distinct().orderBy(TIME).collect()]
    for lower, hi in step_bounds(times, steps, None):
        result = runner.step({NAME: frame.where((F.col(TIME) >= lower) & (F.col(TIME) < hi))},
                             upto=hi)
        report(f"step upto={hi} seconds={result.seconds:.2f}")
    runner.close()
    frame.unpersist()
    return runner, times, running_counts(count_changes(runner), times)


# --------------------------------------------------------------------------- flagship demo
def stream_demo(spark, conf: dict, path: str, steps: int, batch: int, seed: int,
                backend: str = "numpy", output: Optional[str] = None) -> None:
    """Load a graph at time 0, then `steps` batches of `batch` random changes (half
    deletions of present edges, half insertions of new ones), each one step of the triangle
    dataflow; print the count, its change, latency and memory per step, and check the final
    count against a static recount by the kernel. `output`: the count's changes go to
    OUTPUT/triangles/ as in the verb's other modes."""
    import numpy as np

    from executor import Runner

    edges = read_edges(spark, path).select("src", "dst")
    table = edges.toArrow()
    a = np.minimum(table.column("src").to_numpy(), table.column("dst").to_numpy())
    b = np.maximum(table.column("src").to_numpy(), table.column("dst").to_numpy())
    present = {(int(x), int(y)) for x, y in zip(a, b) if x != y}
    nodes = int(max(b.max(), a.max())) + 1 if len(a) else 1
    rng = np.random.default_rng(seed)
    started = clock.perf_counter()
    static = static_count(table, backend)
    print(f"graph {os.path.basename(path)}: {len(present):,} edges, {static:,} triangles "
          f"(static kernel count, {clock.perf_counter() - started:.2f} s)", flush=True)

    runner = Runner(triangle_flow(), conf=conf, spark=spark)
    batches = [[(x, y, 0, 1) for x, y in sorted(present)]]
    for t in range(1, steps + 1):
        ordered = sorted(present)
        gone = [ordered[i] for i in rng.choice(len(ordered), batch // 2, replace=False)]
        new = set()
        while len(new) < batch - len(gone):
            x, y = sorted(int(v) for v in rng.integers(0, nodes, 2))
            if x != y and (x, y) not in present:
                new.add((x, y))
        present.difference_update(gone)
        present.update(new)
        batches.append([(x, y, t, -1) for x, y in gone] + [(x, y, t, 1) for x, y in sorted(new)])
    before = 0
    for t, rows in progress(enumerate(batches), "steps", len(batches)):
        result = runner.step({NAME: change_table(rows)}, upto=t + 1)
        now = before + count_change(result)
        what = "load" if t == 0 else f"{len(rows)} changes"
        print(f"time={t} triangles={now} change={now - before:+d} ({what}) "
              f"seconds={result.seconds:.2f} jvm_mib={_jvm_mib(spark)}", flush=True)
        before = now
    final = static_count(pa.table({"src": pa.array([x for x, _ in present], pa.int64()),
                                   "dst": pa.array([y for _, y in present], pa.int64())}),
                         backend)
    if output:
        write_counts(runner.output("triangles"), output)
    status = "OK" if final == before else "MISMATCH"
    print(f"check: static recount of the final graph = {final} ({status})", flush=True)
    if final != before:
        raise RuntimeError(f"incremental count {before} != static recount {final}")


def _jvm_mib(spark) -> int:
    rt = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    return round((rt.totalMemory() - rt.freeMemory()) / 2**20)


def triangles_main(spark, conf: dict, path: str, steps: int, output: Optional[str],
                   backend: str) -> list[str]:
    """The `triangles` verb's lines: `triangles=N`, or `time=T triangles=N` per input time."""
    import sys

    edges = static_edges(path)
    edges = read_edges(spark, path) if edges is None else edges
    if isinstance(edges, pa.Table) or TIME not in edges.columns and DIFF not in edges.columns:
        n = static_count(edges, backend)
        if output:
            write_counts(spark.createDataFrame([(n, 0, 1)],
                                               "count BIGINT, time BIGINT, diff BIGINT"), output)
        return [f"triangles={n}"]
    runner, times, counts = incremental(
        spark, conf, edges, steps, report=lambda m: print(m, file=sys.stderr, flush=True))
    if output:
        write_counts(runner.output("triangles"), output)
    return [f"time={t} triangles={n}" for t, n in zip(times, counts)]


def write_counts(changes: DataFrame, output: str) -> None:
    """The triangle count's changes (count, time, diff) to OUTPUT/triangles/ as Parquet."""
    changes.write.mode("overwrite").parquet(output.rstrip("/") + "/triangles")
