"""The driver placement: a whole step in this process on array kernels, no Spark job.

Each Spark job costs 0.1-1 s whatever its size (DESIGN.md section 11), so a step of a thousand
updates through a dozen operators costs seconds on Spark. When a step's updates are few (local
tables; Parquet files pyarrow reads as Spark would; other frames and files fetched in one job)
and every operator of the plan has a driver form, the runner runs the step here.

This module is the driver's placement of the step's graph walk (executor/walk.py): `DriverStep`
evaluates each node once by its family's driver form, in executor/operators/<family>/driver.py
(linear chains, joins, the reduce family, conjunctive queries, iterate's rounds) and
executor/arrange/driver.py (arrangements and imported traces, read through the traces' mirrors).
Record columns of every type are int64 codes (executor/arrange/encoding.py). A pyarrow Table
that already has the input's types is checked on Arrow; any other input goes through
updates.normalise (a projection Catalyst folds into the local rows). An iterate's round is a
walk of this same evaluator over the body. Outputs come back as Arrow; under durable state the
step's new frames are committed as Arrow tables (executor/durability/state.py), with no Spark
job.

Updates that stages move to times at or after `upto` are held (DESIGN.md section 4): an
output's, a reduction's and a query's relation's, each as one Arrow table (or, after a step
on Spark, a Spark frame: executor/arrange/spine.py `as_frame` and `as_table` let either
placement read the other's), released when the frontier passes them.

Spark stays the reference and the state: traces receive the driver's updates when Spark next
reads them. A step runs on Spark instead when it is big, when an iterate's input holds updates
for later times, or when a value has no code (`Unsupported`, raised before anything is
committed). Tests run every operator both ways.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import DecimalType, StructType

from executor.arrange import buckets, driver as arrange
from executor.arrange.changes import Changes, Coded, Unsupported, updates_schema
from executor.arrange.encoding import arrow_schema, per_schema
from executor.arrange.spine import as_table, local_rows
from executor.durability.state import arrow_digest
from executor.inputs.local import local_table
from executor.inputs.updates import CsvSource, normalise, read_source
from executor.operators.iterate import driver as iterate
from executor.operators.join import driver as join
from executor.operators.linear import driver as linear
from executor.operators.query import buckets as query_buckets, driver as query
from executor.operators.reduce import (driver as reduce_driver, product as reduce_product, top_k,
                                       totals)
from executor.runtime import limits
from executor.runtime.config import (HOST_LOOKUP_ROWS_KEY, HOST_MIRROR_ROWS_KEY, HOST_STEP_ROWS_KEY,
                                     host_lookup_rows, host_mirror_rows, host_step_rows)
from executor.time import DIFF, INFINITY, ITERATION, TIME
from executor.walk import Walk
from gpu_kernels import consolidate, namespace
from plans import ir


def supports(runner) -> bool:
    """Whether the runner's plan can ever step on the driver placement."""
    if runner.step_rows == 0:
        return False
    return all(isinstance(node, (*DriverStep.forms, ir.Variable))
               for node in _every_node(runner.plan.values()))


def describe(runner, last: Optional[str]) -> str:
    """The placement rule for this runner's steps, as `Runner.explain` shows it, and where
    the last step ran (`last`: StepResult.placement, None before the first step)."""
    if runner._on_driver:
        rule = (f"driver: a step whose inputs hold at most {runner.step_rows:,} "
                f"rows each ({HOST_STEP_ROWS_KEY}), whose arrangements hold at most "
                f"{host_mirror_rows(runner.conf):,} records ({HOST_MIRROR_ROWS_KEY}) and whose "
                "values all have codes; spark: any other step, an iterate whose inputs hold "
                "updates for later times\ntraces: an arrangement of more than "
                f"{host_lookup_rows(runner.conf):,} records ({HOST_LOOKUP_ROWS_KEY}) stays in "
                "its Spark batches: a driver step reads the keys it touches, one Spark job "
                "per lookup")
    elif runner.step_rows == 0:
        rule = f"spark: every step ({HOST_STEP_ROWS_KEY}=0)"
    else:
        rule = "spark: every step (an operator of the plan has no driver form)"
    return "\n".join([rule, buckets.rule(), query_buckets.rule(),
                      "last step: " + (last or "none yet")])


def _every_node(roots) -> list[ir.Node]:
    """The plan's nodes, iterate bodies included."""
    out = []
    for node in ir.topological(roots):
        if isinstance(node, ir.Iterate):
            out += _every_node([node.body])
        out.append(node)
    return out


class DriverStep(Walk):
    """One step's operators on the driver (or one round of an iterate scope: a shallow
    copy of the step's walk); `held`: the updates held for later times before the step."""

    placement = "driver"

    def __init__(self, runner, sources: dict[str, DataFrame], upto: int, held: dict):
        super().__init__(runner, upto)
        self.sources, self.held = sources, held
        self.xp = namespace(runner.backend)
        self._none = self.xp.zeros(0, dtype=self.xp.int64)
        self.encoder = runner.encoder
        self.spark = runner.spark

    # ------------------------------------------------------------------ values
    def changes(self, node: ir.Node) -> Changes:
        value = self.value(node)
        if isinstance(value, DataFrame):  # collected once, however many operators read it
            value = self.memo[node] = self.encoded(local_rows(value), value.schema)
        return value

    def encoded(self, table: pa.Table, schema: StructType) -> Changes:
        """Updates as Arrow (records, time, diff; columns by position) as Changes with
        Spark `schema`."""
        xp = self.xp
        n = table.num_columns
        t, d = (xp.asarray(table.column(i).to_numpy().astype(np.int64)) for i in (n - 2, n - 1))
        return Changes(schema, Coded(table, schema, self.encoder, xp), t, d, arrow=table)

    def due(self, key, changes: Changes) -> Changes:
        """`changes` with the updates held under `key`: those before upto, returned, and the
        rest, held again (self.pending) until the frontier passes them."""
        xp = self.xp
        before = self.held.get(key)
        if before is not None:
            changes = self.concat([self.encoded(before, changes.schema), changes])
        later = changes.t >= self.upto
        if not bool(xp.any(later)):  # the common case: nothing waits, nothing is copied
            self.pending[key] = None
            return changes
        self.pending[key] = self.consolidated(changes.take(xp, xp.nonzero(later)[0])).table(
            xp, self.encoder)
        return changes.take(xp, xp.nonzero(xp.logical_not(later))[0])

    def unsupported(self, node: ir.Node) -> Exception:
        return Unsupported(node.label())

    def empty(self, schema: StructType) -> Changes:
        """No updates with `schema` (records, time, [iteration,] diff). Most operators of a
        step that touches a few inputs make one: one empty array serves every column."""
        fields = schema.fields
        k = 2 if len(fields) > 2 and fields[-2].name == ITERATION else 1
        none = self._none
        return Changes(schema, [none] * (len(fields) - 1 - k), none, none, [none] * (k - 1),
                       canonical=True)

    def concat(self, parts: list[Changes]) -> Changes:
        xp = self.xp
        return Changes.of(parts[0].schema,
                          [xp.concat([p.col(n) for p in parts]) for n in parts[0].names],
                          [xp.concat(ts) for ts in zip(*(p.times for p in parts))],
                          xp.concat([p.d for p in parts]))

    def consolidated(self, c: Changes) -> Changes:
        if c.canonical:
            return c
        keys, d = consolidate(self.xp, [*c.cols, *c.times], c.d)
        n = len(c.cols)
        return Changes.of(c.schema, keys[:n], keys[n:], d, canonical=True)

    def delta(self, changes: Changes) -> Optional[tuple]:
        """(rows, a function decoding `changes` to Arrow) for a durable runner's state
        directory to write as this step's trace batch; None without durable state."""
        if self.runner._store is None:
            return None
        xp, encoder = self.xp, self.encoder
        return changes.size, lambda: changes.table(xp, encoder)

    # ------------------------------------------------------------------ the step
    def outputs(self) -> dict[str, Changes]:
        """Each output's changes before upto (the rest held)."""
        return {name: self.consolidated(self.due(name, self.changes(node)))
                for name, node in self.runner.plan.items()}


def _input(step: DriverStep, node: ir.Input):
    source = step.sources.get(node.name)
    schema = step.runner._empty[node.name].schema
    if source is None:
        return step.empty(schema)
    return step.encoded(source, schema) if isinstance(source, pa.Table) else source


def _reduce(step: DriverStep, node: ir.Reduce) -> Changes:
    """Abelian reductions keep running totals per key (operators/reduce/totals.py); the
    others re-evaluate the keys the step touches (operators/reduce/driver.py). Only updates
    before upto are reduced; the rest wait (`due`), though the trace already holds them."""
    step.value(node.input)
    view = step.views[node.input]
    if step.scope is not None:
        return step.consolidated(reduce_product.delta_in_scope(step, node, view))
    ready = step.due(node, view.batch)
    family = totals if totals.applies(node, view) else \
        top_k if top_k.applies(node) else reduce_driver
    return step.consolidated(family.delta(step, node, view, ready))


DriverStep.forms = {
    ir.Input: _input,
    ir.Linear: lambda step, node: linear.apply(step, node) if step.scope is None else
    linear.inner(step, node),
    ir.Concat: lambda step, node: step.concat([step.changes(c) for c in node.children()]),
    ir.Consolidate: lambda step, node: step.consolidated(step.changes(node.input)),
    ir.Arrange: arrange.arrange,
    ir.Imported: arrange.imported,
    ir.Join: join.delta,
    ir.Iterate: iterate.run,
    ir.Reduce: _reduce,
    ir.Query: query.delta,  # never inside a scope: the builder refuses it there
}


@dataclass
class Done:
    """A step the driver ran: each output's changes as Arrow tables and its updates held for
    later times, the state to commit (traces; reductions' and queries' held updates), the
    holds on imported traces, and (durable runners) each input's content hash."""

    tables: dict
    pending: dict
    commits: dict
    holds: list
    digests: dict
    seconds: dict  # each operator's own seconds (_Clock)


def step(runner, updates: dict, upto: Optional[int]) -> Optional[Done]:
    """The step run on the driver, or None when it must run on Spark. upto None (close)
    releases everything held. Input errors raise InputError before anything changes."""
    limit = runner.step_rows
    sources = {}
    for name, source in updates.items():
        schema = runner.input_schemas[name]
        if isinstance(source, (str, os.PathLike, CsvSource)):  # files pyarrow reads as Spark
            table = local_table(name, source, schema)
            source = source if table is None else table
        if isinstance(source, pa.Table) and source.num_rows > limit:
            return None
        # a Spark frame comes through the JVM driver's heap and its bound on results: at
        # most step_rows as set, else the cluster's default even in local mode
        rows = source if isinstance(source, pa.Table) else \
            _local(read_source(runner.spark, name, source, schema), host_step_rows(runner.conf))
        if rows is None:
            return None
        sources[name] = checked(runner.spark, name, rows, schema, runner.frontier, upto)
    if not _fits_memory(sources.values()):
        return None
    held = _held(runner)
    if held is None:
        return None
    walk = DriverStep(runner, sources, INFINITY if upto is None else upto, held)
    try:
        outs = walk.outputs()
    except Unsupported:
        return None
    arrow = {name: arrow_schema(runner.schemas[name]) for name in outs}
    tables = {name: c.table(walk.xp, walk.encoder).cast(arrow[name]) if c.size
              else arrow[name].empty_table() for name, c in outs.items()}
    pending = {name: None if walk.pending[name] is None else walk.pending[name].cast(arrow[name])
               for name in outs}
    state = {key: table for key, table in walk.pending.items() if key not in outs}
    digests = {} if runner._store is None else {  # of the rows as given, not as coded
        name: arrow_digest(s if isinstance(s, pa.Table) else local_rows(s))
        for name, s in sources.items()}
    return Done(tables, pending, walk.commits | state, walk.holds, digests, walk.clock.seconds)


# A driver step's peak memory over its inputs' Arrow bytes, with room to spare: a 6M-row
# TPC-H load (1.3 GB of input) peaked 3.3 GB above where it started
WORKING_SET = 4
_ANY_MACHINE = 256 << 20  # bytes any driver that runs Spark can spare


def _fits_memory(tables) -> bool:
    """Whether a step's inputs, WORKING_SET times over, fit the memory the machine has
    available: a bigger step runs on Spark, which spills to disk where the driver could
    only fail."""
    tables = [t for t in tables if isinstance(t, pa.Table)]
    # the buffers' total bounds the bytes from above and costs nothing; the exact count
    # walks every chunk (ms on a table of many small chunks), asked only when the bound fails
    bound = WORKING_SET * sum(t.get_total_buffer_size() for t in tables)
    if bound <= _ANY_MACHINE:  # a small step does not read /proc/meminfo (~0.2 ms)
        return True
    available = limits.available_memory()
    return bound <= available or WORKING_SET * sum(t.nbytes for t in tables) <= available


def _held(runner) -> Optional[dict]:
    """The updates held for later times (outputs', reductions', queries') as Arrow; a
    Spark step's frames are read once (a job each), None when one holds more than the
    driver's state may (diffspark.host.mirror_rows)."""
    limit = host_mirror_rows(runner.conf)
    held = {}
    for key in [*runner._pending, *runner._holding]:
        value = runner._pending[key] if isinstance(key, str) else runner._state.get(key)
        if value is None:
            continue
        held[key] = as_table(value, limit)
        if held[key] is None:
            return None
    return held


def checked(spark, name: str, rows, schema: StructType, frontier: int,
            upto: Optional[int]):
    """An input's rows (Arrow or a local frame) as (records, time, diff) after every rule of
    updates.normalise: on Arrow where they already have the input's types, else through
    Spark's rules over the local rows (Catalyst on the driver, no job), which word any
    refusal."""
    ready = arrow_ready(rows, schema, frontier, upto)
    if ready is not None:
        return ready
    if isinstance(rows, pa.Table):
        rows = read_source(spark, name, rows, schema)
    return normalise(name, rows, schema, frontier, upto, local=True)


def arrow_ready(table, schema: StructType, frontier: int,
                upto: Optional[int]) -> Optional[pa.Table]:
    """A step's updates of an input given as a pyarrow Table that already has the input's
    Arrow types and breaks no rule, as (records, time, diff) without Spark (`upto` None:
    no upper bound); None for anything else, which updates.normalise converts, or words the
    refusal of what breaks a rule. Every path that takes updates asks this first."""
    if not isinstance(table, pa.Table):
        return None
    rules = _rules(schema)
    upto = INFINITY if upto is None else upto
    given = {name.lower(): i for i, name in enumerate(table.column_names)}
    if len(given) != table.num_columns or given.keys() - rules.names:
        return None
    # every kernel reads a column as one array: a column of many small chunks (a refresh
    # put together from slices) would be concatenated at each reading (and checked chunk by
    # chunk), so it is once here; big chunks (a file's row groups) stay, as a copy of a whole
    # load would cost its size
    cols = table.columns  # a wrapper per column each time it is asked for
    if any(c.num_chunks > 1 and table.num_rows < c.num_chunks * _SMALL_CHUNK for c in cols):
        table = table.combine_chunks()
        cols = table.columns
    types, n, columns = table.schema.types, table.num_rows, []
    for name, arrow, nullable, decimal in rules.records:
        i = given.get(name)
        if i is None or types[i] != arrow:
            return None
        column = cols[i]
        if not nullable and column.null_count or decimal and not _within(column):
            return None
        columns.append(column)
    for special, default in ((TIME, frontier), (DIFF, 1)):
        i = given.get(special)
        if i is None:
            columns.append(pa.array(np.full(n, default, dtype=np.int64)))
            continue
        column = cols[i]
        if column.type != pa.int64() or column.null_count:
            return None
        columns.append(column)
    t, d = (np.asarray(c.to_numpy()) for c in columns[-2:])
    if n and (t.min() < frontier or t.max() >= upto or d.min() == np.iinfo(np.int64).min
              or float(np.abs(d).sum(dtype=np.float64)) >= 2.0 ** 62):
        return None
    return pa.Table.from_arrays(columns, schema=rules.updates)


@dataclass(frozen=True)
class _Rules:
    """What arrow_ready asks of an input's columns, worked out once per schema: each record
    column's (lower-case name, Arrow type, nullable, whether a DECIMAL), the names a table
    may have, and the updates' schema."""

    records: tuple
    names: frozenset
    updates: pa.Schema


@per_schema
def _rules(schema: StructType) -> _Rules:
    records = tuple(
        (f.name.lower(), arrow.type, f.nullable, isinstance(f.dataType, DecimalType))
        for f, arrow in zip(schema.fields, arrow_schema(schema)))
    return _Rules(records, frozenset(r[0] for r in records) | {TIME, DIFF},
                  arrow_schema(updates_schema(list(schema.fields))))


def _within(column) -> bool:
    """Whether a decimal128 column holds no value beyond its type's precision (Arrow's
    buffers may hold more): wider values are refused by the rules, never coded. Arrow's
    full validation checks exactly that, without a value made a Python Decimal."""
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


_SMALL_CHUNK = 1 << 16  # rows


# The most bytes Spark's size estimate may give a frame the driver fetches to count its rows:
# a generous width per update row, and a floor, so that a tiny limit still fetches a file.
_ROW_BYTES, _FETCH_FLOOR = 256, 64 << 20


def _local(df: DataFrame, limit: int) -> Union[DataFrame, pa.Table, None]:
    """`df` as local rows when it holds at most `limit`, else None. Rows already local (a
    pyarrow Table or pandas frame given to createDataFrame) cost nothing. Any other frame (a
    Python list given to createDataFrame, a cached frame, a file scan, a plan) costs one job
    for at most limit + 1 rows, returned as Arrow, unless Spark's size estimate already puts
    it beyond the limit (a frame of RDD rows has no estimate: it is fetched)."""
    execution = df._jdf.queryExecution()
    plan = execution.analyzed()
    kind = plan.getClass().getSimpleName()
    if kind == "LocalRelation":
        return df if plan.data().size() <= limit else None
    if kind != "LogicalRDD" and int(str(execution.optimizedPlan().stats().sizeInBytes())) \
            > max(limit * _ROW_BYTES, _FETCH_FLOOR):
        return None
    table = df.limit(limit + 1).toArrow()
    return table if table.num_rows <= limit else None
