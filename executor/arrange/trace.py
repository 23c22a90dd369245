"""Arrangements and traces (DESIGN.md section 5, "Making arrangements").

`arrange` turns an update stream into an arranged batch: hash-partitioned by the key into the
runner's P partitions, consolidated, sorted by (key, value, time) within partitions and
materialised, so Spark knows its partitioning and ordering and joins between arrangements need
no Exchange and no Sort. A `Trace` is a spine of such batches plus the frontier `since` that
its readers still need to distinguish: merging advances times to `since` and consolidates, so
a collection that keeps inserting and retracting the same records stays small.
`View` is what operators read in a step: the batches before it (`old`) and its new ones
(`delta`), possibly filtered by time for an importing dataflow.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Optional

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, functions as F

from executor.arrange import buckets
from executor.arrange.mirror import Mirror
from executor.arrange.spine import Spine, materialise_sized
from executor.operators.linear.spark import q, record_columns
from executor.time import DIFF


def arrange(df: DataFrame, keys: list[str], time_cols: list[str], partitions: int,
            since: Optional[int] = None, rows: Optional[int] = None,
            backend: str = "numpy", estimate: Optional[int] = None) -> tuple[DataFrame, int]:
    """The arranged (and, given `since`, compacted) form of an update stream, materialised,
    and its record count; `rows`, at most how many updates it is expected to hold (None:
    not known), picks the kernel (on `backend`) or the SQL aggregate (buckets.method). In a
    Spark step the aggregate's batch is deferred (computed by the job that first reads it,
    or at the step's end) and `rows`, else `estimate` (a rougher guess), stands for its size
    where known (spine.materialise_sized)."""
    records = record_columns(df, time_cols)
    values = [c for c in records if c not in keys]
    if since is not None:
        df = df.withColumn(time_cols[0], F.greatest(F.col(q(time_cols[0])), F.lit(since)))
    if buckets.method(df.schema, records + time_cols, rows) == buckets.KERNEL:
        return buckets.arrange(df, keys, records, time_cols, partitions, backend)
    consolidated = (buckets.bucketed(df, keys, partitions).groupBy(*map(q, records + time_cols))
                    .agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0))
    return materialise_sized(consolidated.sortWithinPartitions(
        *map(q, keys + values + time_cols)), estimate if rows is None else rows)


SLACK = 4  # a trace's small batches before a merge (a Spark job)


def batch_spine(merge=None, slack: int = SLACK) -> Spine:
    """A spine of a trace's Spark batches: tiered, as each merge is a Spark job."""
    return Spine(merge, slack=slack, tiered=True)


@dataclass
class Trace:
    """A spine of arranged batches with the frontiers `since` (times below it are advanced
    to it on merge) and `upper` (every update at a time below it is in the trace).

    Steps run on the driver (executor/driver.py) update `mirror`, the trace's copy there, and
    mark the Spark batches `stale`: the mirror then holds every update, and the first reader
    of `batches` replaces them by the mirror, decoded and arranged as one Spark batch. A
    Spark step's append drops the mirror (rebuilt on demand). A durable runner's driver
    steps also leave their own updates in `unsynced` ((rows, a function that decodes them to
    Arrow) per batch), which the state directory writes as the trace's batches after the
    Spark ones (executor/durability/state.py); driver_appended keeps them bounded.
    `totals` holds what the driver's abelian reductions keep per key of this trace
    (executor/operators/reduce/totals.py); a Spark step's append drops them with the mirror.
    `spark_totals` holds the Spark placement's (executor/operators/reduce/spark_totals.py):
    an append carries them, as each says up to which frontier it holds (a step whose
    reduction did not run leaves them behind that frontier), and a driver step's trace
    starts without them (they are rebuilt from the batches when next needed)."""

    keys: list[str]
    time_cols: list[str]
    partitions: int
    spine: Spine = None
    since: int = -1
    upper: int = 0
    holds: dict = field(default_factory=dict)  # reader handle id -> its since
    mirror: Optional[Mirror] = None
    stale: bool = False  # the mirror holds updates the Spark batches lack
    unsynced: tuple = ()  # durable runners only: each driver step's updates since `spine`
    totals: dict = field(default_factory=dict)  # Reduction -> its totals (reduce/totals.py)
    # Reduction -> its totals on the Spark placement (reduce/spark_totals.py)
    spark_totals: dict = field(default_factory=dict)
    mirrorable: bool = True  # False once it held what a mirror cannot (a null): for good
    backend: str = "numpy"  # the array backend of its kernels on the executors (Runner.backend)

    def __post_init__(self):
        if self.spine is None:
            self.spine = batch_spine()

    @property
    def batches(self) -> list[DataFrame]:
        return [b for _, b in self.synced().spine.batches]

    def synced(self) -> "Trace":
        """This trace with the mirror's updates as its Spark batches (one job to arrange)."""
        if self.stale:
            # a mirror over Spark batches (Mirror.over) holds only the driver's steps' updates:
            # they go after those batches, which are still the trace's spine
            kept = self._spine(self.since) if self.mirror.remote else \
                batch_spine(slack=self.spine.slack)
            size = self.mirror.local_size
            if size:
                frame = SparkSession.active().createDataFrame(self.mirror.table())
                batch, size = arrange(frame, self.keys, self.time_cols, self.partitions,
                                      self.since, size, self.backend)
            # in place: the same collection, now also readable by Spark
            self.spine = kept.appended(batch, size) if size else kept
            self.stale, self.unsynced = False, ()
        return self

    def _spine(self, since: int) -> Spine:
        keys, times, parts, backend = self.keys, self.time_cols, self.partitions, self.backend
        spine = batch_spine(lambda df, rows: arrange(df, keys, times, parts, since, rows,
                                                     backend), self.spine.slack)
        spine.batches = list(self.spine.batches)
        return spine

    def _since(self, frontier_since: int) -> int:
        """The owner's own need, further held back by reader handles."""
        return min([frontier_since, *self.holds.values()])

    def next_since(self, frontier_since: int) -> int:
        """The `since` of this trace after an append with the owner's `frontier_since`."""
        return max(self.since, self._since(frontier_since))

    def appended(self, batch: DataFrame, size: int, upper: int, frontier_since: int) -> "Trace":
        """A new trace with `batch` added."""
        since = self._since(frontier_since)
        spine = self.synced()._spine(since)
        return Trace(self.keys, self.time_cols, self.partitions,
                     spine.appended(batch, size) if size else spine,
                     max(self.since, since), upper, self.holds, mirrorable=self.mirrorable,
                     spark_totals=dict(self.spark_totals),
                     backend=self.backend)

    def driver_appended(self, mirror: Mirror, upper: int, since: int,
                        delta: Optional[tuple] = None) -> "Trace":
        """A new trace after a driver step: `mirror` holds the step's updates too; `since`
        from next_since. `delta` ((rows, decode), durable runners only) is kept for the
        state directory until the Spark batches next catch up with the mirror. Kept apart
        one per step, they grew the state's files, its manifest and the driver's memory
        with every step (issue 20); they merge geometrically instead (a Spine: O(log)
        batches), and once they hold more rows than the mirror, the mirror itself,
        compacted and decoded on the driver (no Spark job), replaces them and the stale
        Spark batches: what is stored stays within about twice the collection."""
        stale = self.stale or mirror is not self.mirror
        spine, unsynced = self.spine, _merged(self.unsynced, delta)
        if stale and not mirror.remote and sum(n for n, _ in unsynced) > mirror.size:
            spine = batch_spine(slack=self.spine.slack)  # readers of a stale trace use the mirror
            unsynced = ((mirror.size, mirror.table),) if mirror.size else ()
        return Trace(self.keys, self.time_cols, self.partitions, spine, since, upper,
                     self.holds, mirror, stale=stale, unsynced=unsynced,
                     totals=dict(self.totals), backend=self.backend)

    def stats(self) -> dict:
        """Batches, records and bytes where the trace is stored now: the mirror's runs
        while Spark's batches are stale (nothing is synced to count them), after Spark's
        batches for a mirror over them (`remote_records`: what it left there)."""
        remote = self.mirror.remote if self.mirror is not None else None
        sizes = [s for s, _ in self.spine.counted().batches] if remote or not self.stale \
            else []
        held = sum(_bytes(b) for _, b in self.spine.batches) if sizes else 0
        if self.stale:
            sizes += [s for s, _ in self.mirror.spine.batches]
            held += self.mirror.nbytes
        stored = "spark" if not self.stale else "spark+driver" if remote else "driver"
        return {"keys": list(self.keys), "batches": len(sizes), "records": sum(sizes),
                "batch_records": sizes, "bytes": held, "stored": stored, "since": self.since,
                "upper": self.upper,
                "mirror_records": 0 if self.mirror is None else self.mirror.local_size,
                "remote_records": remote.size if remote else 0,
                "mirror_bytes": 0 if self.mirror is None else self.mirror.nbytes,
                "mirror_columns": 0 if self.mirror is None else len(self.mirror.columns)}


def _merged(held: tuple, delta: Optional[tuple]) -> tuple:
    """Unsynced batches with `delta` appended, merged by the Spine rule: a merge is the
    concatenation of both decodings, done when the state directory writes it."""
    if not delta or not delta[0]:
        return held
    spine = Spine(lambda decode, rows: (decode, rows), slack=4, combine=_concatenated)
    spine.batches = list(held)
    return tuple(spine.appended(delta[1], delta[0]).batches)


def _concatenated(first, second):
    return lambda: pa.concat_tables([first(), second()], promote_options="permissive")


def _bytes(df: DataFrame) -> int:
    """Bytes the block manager holds (memory + disk) for a materialised batch; 0 for a
    batch that is not a checkpoint."""
    try:
        rdd_id = df._jdf.queryExecution().analyzed().rdd().id()
    except Exception:  # noqa: BLE001 - not a LogicalRDD: nothing stored of its own
        return 0
    for info in df.sparkSession.sparkContext._jsc.sc().getRDDStorageInfo():
        if info.id() == rdd_id:
            return int(info.memSize() + info.diskSize())
    return 0


@dataclass
class View:
    """The arranged batches an operator reads in one step: `old` (before the step) and
    `delta` (the step's new updates)."""

    keys: list[str]
    old: list[DataFrame]
    delta: list[DataFrame]

    def delta_frame(self, empty: DataFrame) -> DataFrame:
        return reduce(DataFrame.union, self.delta) if self.delta else empty

    def all(self) -> list[DataFrame]:
        return self.old + self.delta
