"""The Spark placement: a step's operators as Catalyst plans, run as Spark jobs.

The walk is executor/walk.py's; this module holds each family's Spark form, the glue
between the walk and executor/operators/<family>/spark.py. A node's changes are a lazy
DataFrame; a reduction's, a query's and an iterate's are materialised once, however many
operators read them. A node whose changes are known to be empty without running anything
(an input left alone, and what only depends on such) is marked so its jobs are skipped.
Building a step on empty inputs with `resolving` runs no job and changes no state: the
runner learns every node's schema so.
"""
from __future__ import annotations

from functools import reduce
from typing import Optional

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, functions as F

from executor.arrange import spark as arranged
from executor.arrange.consolidate import consolidate
from executor.arrange.spine import STEP, as_frame, is_computed, materialise
from executor.arrange.trace import View
from executor.lateness import holds_back
from executor.operators.iterate import spark as iterate
from executor.operators.join import spark as join
from executor.operators.linear import spark as linear
from executor.operators.linear.spark import q
from executor.operators.query import buckets as query_buckets, spark as wcoj
from executor.operators.reduce import product as reduce_product, spark as reduce_ops, spark_totals
from executor.operators.reduce.counted import appended as count_appended
from executor.runtime.config import local_query_rows
from executor.runtime.errors import analysis_message
from executor.time import TIME
from executor.walk import Walk
from plans import ir
from plans.errors import PlanError


def arrow_frame(spark, table: pa.Table, schema, read: Optional[set]) -> DataFrame:
    """A step's checked Arrow updates (of the input's `schema`) as a Spark frame, with the
    record columns that no output and no state depends on (`read`: the lower-cased columns
    that some do, None: all; plans.optimizer.prune.input_reads) sent as typed NULLs: Spark
    converts every column of every row from Arrow at each scan, however few its plan reads
    (TPC-H SF 1's 6M lineitems: 7.2 s to count with all 16 columns, 1.8 s with the 4 that
    q03 reads)."""
    records = table.schema.names[:-2]
    unread = [] if read is None else \
        [n for n in records if n.lower() not in read and table.schema.field(n).nullable]
    if not unread:
        return spark.createDataFrame(table)
    df = spark.createDataFrame(table.drop_columns(unread))
    return df.select(*[F.lit(None).cast(schema[n].dataType).alias(n) if n in unread
                       else F.col(q(n)) for n in table.schema.names])


def expected_rows(df: DataFrame) -> Optional[int]:
    """Spark's estimate of a frame's rows without a job: the plan's row count where it knows
    it, else its bytes over 8 a column (fewer rows than a compressed file holds); None where
    it knows neither (a checkpoint's size is unknown)."""
    stats = df._jdf.queryExecution().optimizedPlan().stats()
    if stats.rowCount().isDefined():
        return int(str(stats.rowCount().get()))
    size = int(str(stats.sizeInBytes()))
    return None if size >= 2**62 else size // (8 * max(1, len(df.columns)))


class SparkStep(Walk):
    """One step (or one round of an iterate scope) on Spark."""

    placement = "spark"

    def __init__(self, runner, sources: dict, upto: Optional[int], *, state=None,
                 lower: Optional[int] = None, time_cols: Optional[list] = None, scope=None,
                 resolving: bool = False, given=(), rows: Optional[dict] = None):
        super().__init__(runner, upto, state, lower)
        self.sources = sources  # input name -> its updates this step (a frame)
        self.rows = rows  # input name -> the updates it is expected to hold (None: unknown)
        self.total = None if rows is None else sum(rows.values())  # all the inputs'
        self._expected: dict = {}
        self.time_cols = list(time_cols or [TIME])
        self.scope = scope
        self.resolving = resolving
        self.given = set(given)  # inputs with updates this step
        self.empty: set = set()  # nodes whose changes are known to be empty
        self.consolidated: set = set()  # nodes whose changes come consolidated

    def evaluate(self, node: ir.Node) -> DataFrame:
        kids = self.kids(node)
        if _statically_empty(node, self):
            self.empty.add(node)
        try:
            df = super().evaluate(node)
        except AnalysisException as e:
            columns = [c for k in kids for c in k.columns]
            raise PlanError(f"{node.label()}: {analysis_message(e, columns)}") from None
        if isinstance(node, (ir.Reduce, ir.Query, ir.Iterate)) and not self.resolving \
                and node not in self.empty and not is_computed(df):
            df = materialise(df, STEP)  # computed once, however many operators read it
        return df

    def expected(self, node: ir.Node) -> Optional[int]:
        """At most how many updates `node`'s changes are expected to hold this step, what
        picks a kernel or Spark SQL for its work (buckets.method, query_buckets.method): an
        input's rows, through linear stages, concatenations and arrangements; None where the
        step cannot tell (a join's, a reduction's or a query's output, an iterate's round).
        A step's total sent small arrangements to the kernel because another input was big
        (TPC-H SF 1, q03's first step on Spark: the customers' 30K rows and the joins' 30K
        arranged per bucket because the lineitems held 6M, 8 s each, 38.6 s in all)."""
        if self.rows is None:
            return None
        if node not in self._expected:
            self._expected[node] = self.rows.get(node.name, 0) \
                if isinstance(node, ir.Input) else self.expected_in(node) \
                if isinstance(node, (ir.Linear, ir.Concat, ir.Consolidate, ir.Arrange)) else None
        return self._expected[node]

    def expected_in(self, node: ir.Node) -> Optional[int]:
        """The updates `node`'s children are expected to hold (None: one cannot tell)."""
        sizes = [self.expected(c) for c in node.children()]
        return None if None in sizes else sum(sizes)

    def kids(self, node: ir.Node) -> list[DataFrame]:
        return [self.value(c) for c in node.children()]

    def held(self, key) -> Optional[DataFrame]:
        """A reduction's or query relation's updates held for later times, as a Spark frame
        (a driver step holds them as Arrow)."""
        held = self.state.get(key)
        return None if held is None else as_frame(held)

    def hold(self, node: ir.Node, key, pending: Optional[DataFrame]) -> None:
        """Keep `pending` (updates at or after upto) under `key` until a later step, unless
        the node's changes are known to be empty or can never be late."""
        self.pending[key] = None if node in self.empty or \
            not holds_back(node, self.runner._late) else pending


def _statically_empty(node: ir.Node, step: SparkStep) -> bool:
    """Whether a node's changes this step are known to be empty without running anything:
    its Spark jobs are skipped."""
    if isinstance(node, ir.Input):
        return node.name not in step.given
    if isinstance(node, (ir.Linear, ir.Concat, ir.Consolidate, ir.Arrange, ir.Join,
                         ir.Iterate)):
        return all(c in step.empty for c in node.children())
    if isinstance(node, ir.Reduce):
        return node.input in step.empty and step.state.get(node) is None
    if isinstance(node, ir.Query):
        return all(c in step.empty for c in node.inputs) and \
            all(step.state.get((node, r)) is None for r in node.relations)
    return False


def _concat(step: SparkStep, node: ir.Concat) -> DataFrame:
    kids = step.kids(node)
    first = kids[0].schema.simpleString()
    for k in kids[1:]:
        if k.schema.simpleString() != first:
            raise PlanError(f"Concat: inputs differ ({first} vs {k.schema.simpleString()});"
                            f" rule: concatenated collections have one schema")
    return reduce(DataFrame.unionByName, kids)


def _join(step: SparkStep, node: ir.Join) -> DataFrame:
    left, right = (step.views[c] for c in node.children())
    kids = step.kids(node)
    return join.delta(node, left, right, step.time_cols, kids[0].limit(0), kids[1].limit(0))


def _reduce(step: SparkStep, node: ir.Reduce) -> DataFrame:
    runner, empty = step.runner, step.kids(node)[0].limit(0)
    if step.scope is not None:
        return reduce_product.delta(node, step.views[node.input], step.scope.emitted(node),
                                    step.lower, step.scope.round, step.time_cols, empty,
                                    runner.backend)
    counted = node.input in runner._counted
    # the trace whose commit keeps this reduction's totals (reduce/spark_totals.py)
    trace = step.commits[node.input] if not step.resolving and \
        isinstance(node.input, ir.Arrange) and not counted else None
    if trace is not None and node in step.empty:  # nothing changed: totals hold
        spark_totals.carried(trace, node.reduction, step.upper)
        trace = None
    out, pending, canonical = reduce_ops.delta(
        node, step.views[node.input], step.held(node), step.lower, step.upto, step.time_cols,
        empty, runner.backend, trace, None if step.resolving else runner.node_schemas[node],
        counted)
    if canonical:
        step.consolidated.add(node)
    if not step.resolving:  # materialised with the step's outputs
        step.hold(node, node, pending)
        if counted and node not in step.empty:
            out, step.commits[node.input] = count_appended(out, step.commits[node.input],
                                                           step.upper)
    return out


def _query(step: SparkStep, node: ir.Query) -> DataFrame:
    def index(i: int, columns: tuple) -> View:  # built once per step, shared
        arrangement = ir.Arrange(node.inputs[i], columns)
        step.value(arrangement)
        return step.views[arrangement]

    runner = step.runner
    waiting = {r: step.held((node, r)) for r in node.relations}
    local = None if step.resolving or node in step.empty else \
        (runner.backend, local_query_rows(runner.conf))
    per_bucket = None if step.resolving or \
        query_buckets.method(step.kids(node), step.expected_in(node)) == query_buckets.SQL else \
        (query_buckets.buckets(runner.spark), runner.backend)
    out, waiting = wcoj.delta(node, step.kids(node), index, waiting, step.upto, local,
                              per_bucket)
    if not step.resolving:  # materialised with the step's outputs
        for r, df in waiting.items():
            step.hold(node, (node, r), df)
    return out


SparkStep.forms = {
    ir.Input: lambda step, node: step.sources[node.name],
    ir.Linear: lambda step, node: linear.apply(step.kids(node)[0], node.stages, step.time_cols,
                                               step.runner.backend),
    ir.Concat: _concat,
    ir.Consolidate: lambda step, node: consolidate(step.kids(node)[0], step.time_cols),
    ir.Arrange: lambda step, node: arranged.arrange(step.runner, node, step.kids(node)[0],
                                                    step),
    ir.Imported: lambda step, node: arranged.imported(step.runner, node, step),
    ir.Join: _join,
    ir.Iterate: lambda step, node: iterate.run(step.runner, node, step.kids(node), step),
    ir.Reduce: _reduce,
    ir.Query: _query,
}
