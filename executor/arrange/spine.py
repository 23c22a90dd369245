"""A spine: the batches of an append-only collection of updates, merged geometrically.

Like an LSM tree, in one of two ways. By default a new batch merges with the last while the
last is no larger than twice it (sizes in records), once more than `slack` batches are held:
O(log n) batches, each unit re-merged O(log n) times; right where a merge costs what it
moves (the driver's array runs). `tiered` where each merge is a Spark job (a trace's
batches, a reduction's running totals, an output log's Spark frames): batches of about one
size (in records, or in steps where counting would cost a job) gather in a tier, and once a
tier holds `slack` of them they merge into one batch of the next tier, a cascade through
several tiers in one merge, so a step merges once per about slack - 1 appends (the default
rule merged 0.6 times per append of one unit after a big batch: a pair of small batches left
below a bigger one kept the tail merging) and holds O(slack log n / log slack) batches.
Merging cuts lineage (localCheckpoint): without it, plans grow with every step until the
driver runs out of heap. A merge during a Spark step is `deferred`: computed by the first
job that reads it, or at the step's end, after the step's outputs, rather than as a job of
its own in the middle of the step; a tiered merge of computed batches waits for its first
reader even past the step's end (_left_to_readers). (Starting it at once as a background
job, beside the step's own jobs, deadlocked Spark 4.1.1: a job's end checkpoints the marked
RDDs of its lineage under RDDCheckpointData's lock and then an RDD's, while the
DAGScheduler, planning another job over the same lineage, holds that RDD's and waits for
the first.)
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from functools import reduce
from typing import Callable, Iterator, Optional, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from executor.arrange.encoding import arrow_schema

T = TypeVar("T")

# Checkpointed batches are kept serialized (Kryo, spilling to disk): the triangle benchmark's
# 3.3M arranged records take 29.7 MiB instead of 314 MiB as row objects (a row object and a
# byte array each), and a read pays a deserialization. Traces are long-lived and mostly cold
# once the driver serves small steps (executor/driver.py), so their footprint is what counts.
STORAGE = StorageLevel.MEMORY_AND_DISK
# A step's own results (its outputs and held updates, an operator's result that several
# read, a reduction's running totals) are read within the step or by the caller right after,
# and merged into serialized spines later: kept as row objects, they skip Kryo both ways
# (a 10M-update count step: 10.1 -> 8.8 s, its toArrow 0.8 -> 0.5 s).
STEP = StorageLevel.MEMORY_AND_DISK_DESER


def checkpoint(df: DataFrame, eager: bool, storage: StorageLevel = STORAGE) -> DataFrame:
    """`df` computed (now, or by the first job that reads it) and kept, lineage cut."""
    return df.localCheckpoint(eager, storage)


def materialise(df: DataFrame, storage: StorageLevel = STORAGE) -> DataFrame:
    """Compute `df` once and cut its lineage."""
    return checkpoint(df, eager=True, storage=storage)


def detached(df: DataFrame) -> DataFrame:
    """A materialised frame without the size estimate Spark copies into a checkpoint from the
    plan that computed it. Joins estimate their size as the product of their inputs', so in
    a loop that feeds each round's checkpoint into the next round's joins the estimate's
    digits grow exponentially and planning stalls on BigInteger products (an iterate scope,
    seen in a jstack). The frame loses its known partitioning: only for unarranged data."""
    from pyspark.sql.classic.dataframe import DataFrame as Classic

    session = df.sparkSession
    rows = df._jdf.queryExecution().toRdd()
    return Classic(session._jsparkSession.internalCreateDataFrame(rows, df._jdf.schema(), False),
                   session)


def is_computed(df: DataFrame) -> bool:
    """Whether `df` needs no job to be read once: rows held by the driver's plan
    (createDataFrame) or a checkpoint (an operator that materialised its own result), or
    one marked `projected` once a job has computed its checkpoint."""
    plan = df._jdf.queryExecution().analyzed()
    kind = plan.getClass().getSimpleName()
    if kind in ("LocalRelation", "LogicalRDD"):
        return True
    if df not in _projected:
        return False
    while kind in ("Project", "Generate", "Filter"):
        plan = plan.child()
        kind = plan.getClass().getSimpleName()
    return kind == "LogicalRDD" and bool(plan.rdd().isCheckpointed())


# Frames read in one pass from a checkpoint whose job computed every value they hold (a
# reduction's changes from its running totals, casts and the filter included:
# spark_totals.py), so that reading them later can neither fail nor cost more than the
# read. Other projections (an output's map, whose division by zero fails under ANSI) are
# materialised in the step.
_projected: "weakref.WeakSet[DataFrame]" = weakref.WeakSet()


def projected(df: DataFrame) -> DataFrame:
    """Mark `df` as such a projection (is_computed)."""
    _projected.add(df)
    return df


def materialise_with(df: DataFrame, action: Callable[[DataFrame], T],
                     storage: StorageLevel = STORAGE) -> tuple[DataFrame, T]:
    """materialise and run `action` (which reads every row) in the same single job: the
    action is what computes the checkpoint."""
    frame = checkpoint(df, eager=False, storage=storage)
    return frame, action(frame)


def materialise_counted(df: DataFrame, storage: StorageLevel = STORAGE) -> tuple[DataFrame, int]:
    """materialise and count in the same single job."""
    return materialise_with(df, DataFrame.count, storage)


def materialise_all(frames: list[DataFrame], storage: StorageLevel = STORAGE) -> list[DataFrame]:
    """Materialise several frames (a step's outputs), one job after another. Never as
    concurrent jobs: a job's end checkpoints its marked RDDs while holding Spark's global
    checkpoint lock, and the DAGScheduler planning another job over the same lineage takes
    the RDDs' locks in the other order (Spark 4.1.1; a jstack showed the deadlock: b4b9825).
    Running them one at a time cost nothing measurable (a join + sum step of 1,000 changes
    at 1M orders: 2.52 and 2.27 s concurrent, 2.62 and 2.18 s serial). (One job over a
    tagged union of all frames was tried: its tasks each carry every frame's plan, which is
    ruinous for plans with many joins.)"""
    return [materialise(f, storage) for f in frames]


def compute_deferred(later: list[DataFrame]) -> None:
    """Compute those of the `deferred` frames `later` that no job has computed yet, all in
    one job over the union of their rows (within `deferring`, whose property marks every
    lazily checkpointed ancestor of a job's result checkpointed). They are mostly spine
    merges, each a union of checkpointed batches consolidated, so their plans are small; a
    job each cost more than the work (two trace merges of a join + sum step at 1M orders:
    0.50 s as two counts, 0.23-0.27 s as one job)."""
    rows = [f._jdf.queryExecution().toRdd() for f in later if not _checkpointed(f)]
    if rows:
        reduce(lambda a, b: a.union(b), rows).count()


_deferring: ContextVar[Optional[list]] = ContextVar("diffspark_deferred", default=None)


# Spark marks a lazily checkpointed RDD checkpointed after a job that computed it, but not
# one that it computed on the way to another checkpoint, unless this property is set: then
# `_checkpointed` tells every deferred frame that a job of the step has computed.
ALL_MARKED = "spark.checkpoint.checkpointAllMarkedAncestors"


@contextmanager
def deferring() -> Iterator[list[DataFrame]]:
    """The frames `deferred` while inside: a Spark step computes them by its end
    (compute_deferred), so that whatever fails in computing them fails that step."""
    context = SparkSession.active().sparkContext
    before = context.getLocalProperty(ALL_MARKED)
    context.setLocalProperty(ALL_MARKED, "true")
    token = _deferring.set([])
    try:
        yield _deferring.get()
    finally:
        _deferring.reset(token)
        context.setLocalProperty(ALL_MARKED, before)


def deferred(df: DataFrame, storage: StorageLevel = STORAGE) -> DataFrame:
    """`df` computed once and its lineage cut: inside `deferring`, by the first job that
    reads it or else at the step's end; now otherwise."""
    later = _deferring.get()
    if later is None:
        return materialise(df, storage)
    frame = checkpoint(df, eager=False, storage=storage)
    later.append(frame)
    return frame


# Merges a step left to the first job that reads them (_left_to_readers)
_unread: "weakref.WeakSet[DataFrame]" = weakref.WeakSet()


def _left_to_readers(merged, inputs: list) -> None:
    """A Spark step's tiered merge of batches that no merge left waiting is computed by the
    first job that reads it, not by the step's end: the next step's job where it reads the
    spine (a reduction's totals), and none of its own while nothing does (the orders' trace
    of a join whose other side is not changing). A merge over one still waiting is computed
    by the step's end, with it, so at most one level waits and a batch's lineage stays a
    union of computed batches (a join + sum at 1M orders, 24 steps: the steps where both
    traces merge 0.87-1.06 s, against 1.08-1.45 s computing merges by the step's end; every
    16th step, where both levels merge, 1.72 s against 1.29 s). The rows are the same either
    way; only when the job runs moves."""
    later = _deferring.get()
    if later is None or not isinstance(merged, DataFrame) or \
            any(isinstance(b, DataFrame) and b in _unread and not _checkpointed(b)
                for b in inputs):
        return
    for i, frame in enumerate(later):
        if frame is merged:
            del later[i]
            _unread.add(merged)
            return


def materialise_sized(df: DataFrame, rows: Optional[int]) -> tuple[DataFrame, int]:
    """`df` materialised, and its size: inside `deferring` where `rows` estimates it,
    deferred and that Estimate (no job of its own: a step's new batch is computed by the
    operators that read it); else counted (one job)."""
    if rows is None or _deferring.get() is None:
        return materialise_counted(df)
    return deferred(df), Estimate(max(1, rows))  # never 0: only a count says a batch is empty


def _checkpointed(df: DataFrame) -> bool:
    """Whether a lazily checkpointed frame was computed (by a job that read it)."""
    return bool(df._jdf.queryExecution().analyzed().rdd().isCheckpointed())


class Estimate(int):
    """A batch's size in records that was not counted: what the step that made it expected
    (a step's arranged batch is computed by the first job that reads it, so counting it
    would cost a job of its own), at least 1, as a size of 0 tells an empty batch that is
    left out. Good enough to merge by; `Spine.counted` makes it exact where a decision or a
    report needs the true figure."""


def _tier_from(sizes: list[int], slack: int) -> int:
    """Where the batches of `sizes` that merge now begin in a tiered spine (len(sizes) - 1:
    none merge): the newest batch's tier (it and the older batches in a row under `slack`
    times the tier's smallest) merges once it holds `slack` batches, and so on up while the
    merged batch completes its own tier."""
    sizes, first = list(sizes), len(sizes) - 1
    while len(sizes) >= slack:
        run, low = 1, max(1, sizes[-1])
        while run < len(sizes) and sizes[-run - 1] < slack * low:
            low = min(low, max(1, sizes[-run - 1]))
            run += 1
        if run < slack:
            break
        first = min(first, len(sizes) - run)
        sizes[-run:] = [sum(sizes[-run:])]
    return first


class Spine:
    """Batches are DataFrames unless `combine` says how to join two of another kind (the
    driver mirror's array runs, executor/arrange/mirror.py)."""

    def __init__(self, merge: Optional[Callable[[DataFrame, int], tuple[DataFrame, int]]] = None,
                 slack: int = 8, combine: Callable = DataFrame.unionByName, fresh: int = 0,
                 tiered: "bool | Callable[[object], bool]" = False):
        self.batches: list[tuple[int, DataFrame]] = []
        # (union of the batches that merge, their summed size) -> (materialised batch, its
        # size); a trace's merge compacts and consolidates, so the size can shrink
        self.merge = merge or (lambda df, size: (deferred(df), size))
        self.slack = slack
        self.combine = combine
        self.fresh = fresh  # the newest batches, never merged (a merge may rewrite times)
        self.tiered = tiered

    def appended(self, batch: DataFrame, size: int = 1) -> "Spine":
        """A new spine with `batch` added (the old one is left intact: steps commit whole)."""
        out = Spine(self.merge, self.slack, self.combine, self.fresh, self.tiered)
        batches = self.batches + [(size, batch)]
        top = len(batches) - self.fresh
        if not (self.tiered(batch) if callable(self.tiered) else self.tiered):
            while top > self.slack and batches[top - 2][0] <= 2 * batches[top - 1][0]:
                (s1, b1), (s2, b2) = batches[top - 2:top]
                merged, size = self.merge(self.combine(b1, b2), s1 + s2)
                batches[top - 2:top] = [(size, merged)]
                top -= 1
            out.batches = batches
            return out
        first = _tier_from([s for s, _ in batches[:top]], max(2, self.slack))
        if first < top - 1:  # however many tiers cascade: one merge (one Spark job)
            inputs = [b for _, b in batches[first:top]]
            merged, size = self.merge(reduce(self.combine, inputs),
                                      sum(s for s, _ in batches[first:top]))
            _left_to_readers(merged, inputs)
            batches[first:top] = [(size, merged)]
        out.batches = batches
        return out

    def counted(self) -> "Spine":
        """This spine with every Estimate replaced, in place, by its batch's count (a job
        each, once)."""
        self.batches = [(as_frame(b).count() if isinstance(s, Estimate) else s, b)
                        for s, b in self.batches]
        return self

    def union(self) -> Optional[DataFrame]:
        table = self.table()
        if table is not None:  # one local relation: reading it runs no Spark job
            return as_frame(table)
        frames = [as_frame(b) for _, b in self.batches]
        return reduce(DataFrame.unionByName, frames) if frames else None

    def table(self) -> Optional[pa.Table]:
        """Every batch as one Arrow table where all are Arrow tables of one schema (the
        driver's steps), else None (none held, or a Spark frame among them)."""
        tables = [b for _, b in self.batches]
        if not tables or not all(isinstance(b, pa.Table) and b.schema.equals(tables[0].schema)
                                 for b in tables):
            return None
        return pa.concat_tables(tables)


def as_frame(batch) -> DataFrame:
    """A batch as a Spark frame: an Arrow table becomes local rows (no job)."""
    return SparkSession.active().createDataFrame(batch) if isinstance(batch, pa.Table) else batch


def as_table(batch, limit: int) -> Optional[pa.Table]:
    """A batch as Arrow for the driver: a Spark frame's rows (one job), or None when it
    holds more than `limit`."""
    if isinstance(batch, pa.Table):
        return batch
    table = batch.limit(limit + 1).toArrow()
    return table if table.num_rows <= limit else None


def local_rows(df: DataFrame) -> pa.Table:
    """The rows of a local frame as Arrow (no job when Catalyst folds it into the local
    rows)."""
    rows = df.collect()
    columns = list(zip(*rows)) if rows else [()] * len(df.columns)
    arrow = arrow_schema(df.schema)
    return pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, arrow)],
                                schema=arrow)


def _log_combine(a, b):
    """Two batches of an output log: Arrow tables (the driver's steps) concatenate without
    Spark; anything with a Spark frame unions."""
    if isinstance(a, pa.Table) and isinstance(b, pa.Table):
        return pa.concat_tables([a, b])
    return as_frame(a).unionByName(as_frame(b))


def _log_merge(batch, size: int):
    return (batch, size) if isinstance(batch, pa.Table) else (deferred(batch), size)


def summed(table: pa.Table, records: list[str], aggregates: list[tuple[str, str]],
           names: list[str]) -> Optional[pa.Table]:
    """`table` grouped by its record columns as Spark groups them (null a group of its own,
    -0.0 and 0.0 one key, every NaN one key), with `aggregates` named `names`; groups whose
    last aggregate (a summed diff) is 0 dropped. None where a record column is nested
    (Arrow cannot group by it): the caller asks Spark."""
    keys = table.select(records).schema
    if any(pa.types.is_nested(f.type) for f in keys):
        return None
    for f in keys:
        if pa.types.is_floating(f.type):
            x = table.column(f.name)
            x = pc.if_else(pc.equal(x, 0), pa.scalar(0, f.type), x)
            x = pc.if_else(pc.is_nan(x), pa.scalar(float("nan"), f.type), x)
            table = table.set_column(table.schema.get_field_index(f.name), f.name, x)
    out = table.group_by(records, use_threads=False).aggregate(aggregates).rename_columns(
        records + names)
    return out.filter(pc.not_equal(out[names[-1]], 0))


def _log_compact(batch, size: int):
    """A merge that keeps only the present: each record's changes summed at its latest time,
    records whose changes cancel dropped (conf diffspark.output.history=current)."""
    from executor.time import DIFF, TIME
    records = [c for c in (batch.column_names if isinstance(batch, pa.Table) else batch.columns)
               if c not in (TIME, DIFF)]
    table = summed(batch, records, [(TIME, "max"), (DIFF, "sum")], [TIME, DIFF]) \
        if isinstance(batch, pa.Table) else None
    if table is not None:
        return table.select(batch.column_names).cast(batch.schema), size
    from pyspark.sql import functions as F
    frame = as_frame(batch)
    grouped = (frame.groupBy(*[F.col(f"`{c}`") for c in records])
               .agg(F.max(TIME).alias(TIME), F.sum(DIFF).alias(DIFF))
               .where(F.col(DIFF) != 0).select(*[F.col(f"`{c}`") for c in frame.columns]))
    return deferred(grouped), size


def output_log(history: str = "all") -> Spine:
    """An output's log of final changes: Spark frames and Arrow tables, merged geometrically
    as tables (a concatenation), tiered as frames (a Spark job each: one a step otherwise,
    for an output of a few rows); a driver step's tables reach Spark only when the log is
    read. With
    history "current" (executor/runtime/config.py output_history) merges consolidate, so the log
    holds the output's present contents plus the newest step's changes as they were (the
    ones `follow` rewrites after a crash)."""
    if history == "current":
        return Spine(_log_compact, combine=_log_combine, fresh=1, tiered=_is_frame)
    return Spine(_log_merge, combine=_log_combine, tiered=_is_frame)


def _is_frame(batch) -> bool:
    return isinstance(batch, DataFrame)
