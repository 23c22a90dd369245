"""The driver placement: a whole step in this process on array kernels, no Spark job.

Each Spark job costs 0.1-1 s whatever its size (DESIGN.md section 11), so a step of a thousand
updates through a dozen operators costs seconds on Spark. When a step's updates are few (local
tables; Parquet files pyarrow reads as Spark would; other frames and files fetched in one job)
and every operator of the plan has a driver form, the runner runs the step here. Record
columns of every type are int64 codes (executor/arrange/encoding.py). A pyarrow Table that already has
the input's types is checked on Arrow; any other input goes through updates.normalise (a
projection Catalyst folds into the local rows). Linear chains run on Arrow
(executor/operators/linear/expressions.py) or as kernels on the arrays, else as Spark expressions over the
local rows. Arrangements, joins, the reduce family (executor/operators/reduce/driver.py) and conjunctive
queries run against host mirrors of the traces (executor/arrange/mirror.py); so does another runner's
arrangement a plan imports (its reader's hold kept as on Spark). An iterate runs round by
round at product times, each round a walk of this same evaluator over the body (`_iterate`;
reductions there by executor/operators/reduce/product.py `host_delta`). Outputs come back as Arrow.
Under durable state the step's new frames are committed as Arrow tables (executor/durability/state.py),
with no Spark job.

Updates that stages move to times at or after `upto` are held (DESIGN.md section 4): an
output's, a reduction's and a query's relation's, each as one Arrow table (or, after a step
on Spark, a Spark frame: executor/arrange/spine.py `as_frame` and `as_table` let either placement
read the other's), released when the frontier passes them.

Spark stays the reference and the state: traces receive the host's updates when Spark next
reads them. A step runs on Spark instead when it is big, when the plan holds another operator
(a query inside an iterate), when an iterate's input holds updates for later times, or
when a value has no code (`Unsupported`, raised before anything is
committed). Tests run every operator both ways.
"""
from __future__ import annotations

import copy
import os
import time as clock
from collections import ChainMap
from dataclasses import dataclass, field
from itertools import groupby
from typing import Optional, Union

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from executor.arrange.changes import Changes, Unsupported, updates_schema
from executor.arrange.encoding import NULL_CODE, NoCode, fits
from executor.arrange.mirror import Mirror, run_of
from executor.arrange.spine import as_table
from executor.arrange.trace import Trace
from executor.durability.state import arrow_digest
from executor.inputs.updates import normalise, parquet_table, read_source
from executor.lateness import holds_back
from executor.operators.iterate import spark as iterate
from executor.operators.join import spark as join
from executor.operators.linear import expressions, kernels, spark as linear
from executor.operators.query import codes as query_codes, delta_rules
from executor.operators.reduce import (driver as reduce_host, product as reduce_product, top_k,
                                       totals)
from executor.runtime.config import host_mirror_rows, host_step_rows, max_rounds
from executor.time import DIFF, INFINITY, ITERATION, TIME
from gpu_kernels import consolidate, join_times, multiply_diffs, namespace, neighbours
from plans import ir, query as cq
from plans.ir import PlanError

_HOSTED = (ir.Input, ir.Linear, ir.Concat, ir.Consolidate, ir.Arrange, ir.Imported, ir.Join,
           ir.Query, ir.Reduce, ir.Iterate, ir.Variable)


def supports(runner) -> bool:
    """Whether the runner's plan can ever step on the host."""
    if host_step_rows(runner.conf) == 0:
        return False
    return all(isinstance(node, _HOSTED) for node in _every_node(runner.plan.values()))


def _every_node(roots) -> list[ir.Node]:
    """The plan's nodes, iterate bodies included."""
    out = []
    for node in ir.topological(roots):
        if isinstance(node, ir.Iterate):
            out += _every_node([node.body])
        out.append(node)
    return out


@dataclass
class _View:
    """An arrangement in a host step: its trace, its mirror before the step, the step's
    batch, and what the step's queries read (the mirror and the batch, unmerged)."""

    trace: Trace
    old: Mirror
    batch: Changes
    read: Optional[Mirror]


class HostStep:
    """One step's operators on the host: each node's changes (memo), the arrangements'
    views, the traces to commit and the updates held for later times (before and after)."""

    def __init__(self, runner, sources: dict[str, DataFrame], upto: int, held: dict):
        self.runner, self.sources, self.upto, self.held = runner, sources, upto, held
        self.lower = runner.frontier
        self.xp = namespace(runner.backend)
        self.encoder = runner.encoder
        self.spark = runner.spark
        self.memo: dict = {}
        self.views: dict = {}
        self.commits: dict = {}
        self.holds: list = []  # (TraceHandle, since) per import read (Runner._advance)
        self.pending: dict = {}  # as `held`, after the step (None: nothing waits)
        self.state = runner._state  # the traces operators read (a scope's over them in a round)
        self.scope: Optional[_Scope] = None  # the iterate scope whose round this walk is
        self.clock = _Clock()  # shared by an iterate's rounds (shallow copies of this walk)

    # ------------------------------------------------------------------ values
    def changes(self, node: ir.Node) -> Changes:
        value = self.value(node)
        if isinstance(value, DataFrame):  # collected once, however many operators read it
            value = self.memo[node] = self._encoded(_rows(value), value.schema)
        return value

    def _encoded(self, table: pa.Table, schema: StructType) -> Changes:
        """Updates as Arrow (records, time, diff; columns by position) as Changes with
        Spark `schema`."""
        try:
            codes = [self.encoder.encode(table.column(i), f.dataType)
                     for i, f in enumerate(schema.fields[:-2])]
        except NoCode as e:
            raise Unsupported(str(e)) from None
        xp = self.xp
        n = table.num_columns
        t, d = (xp.asarray(table.column(i).to_numpy().astype(np.int64)) for i in (n - 2, n - 1))
        return Changes(schema, [xp.asarray(c) for c in codes], t, d)

    def _due(self, key, changes: Changes) -> Changes:
        """`changes` with the updates held under `key`: those before upto, returned, and the
        rest, held again (self.pending) until the frontier passes them."""
        xp = self.xp
        before = self.held.get(key)
        if before is not None:
            changes = self._concat([self._encoded(before, changes.schema), changes])
        later = changes.t >= self.upto
        self.pending[key] = self._consolidated(changes.take(xp, xp.nonzero(later)[0])).table(
            xp, self.encoder) if bool(xp.any(later)) else None
        return changes.take(xp, xp.nonzero(xp.logical_not(later))[0])

    def value(self, node: ir.Node):
        if node not in self.memo:
            value = self.clock.timed(operator_name(node), lambda: self._evaluate(node))
            if self.scope is not None and isinstance(node, (ir.Join, ir.Reduce)):
                value = self.scope.admit(self, node, value)
            self.memo[node] = value
        return self.memo[node]

    def _evaluate(self, node: ir.Node):
        if isinstance(node, ir.Input):
            source = self.sources.get(node.name)
            schema = self.runner._empty[node.name].schema
            if source is None:
                return self.empty(schema)
            return self._encoded(source, schema) if isinstance(source, pa.Table) else source
        if isinstance(node, ir.Linear):
            return self._linear(node) if self.scope is None else self._inner_linear(node)
        if isinstance(node, ir.Concat):
            return self._concat([self.changes(c) for c in node.children()])
        if isinstance(node, ir.Consolidate):
            return self._consolidated(self.changes(node.input))
        if isinstance(node, ir.Arrange):
            return self._arrange(node)
        if isinstance(node, ir.Imported):
            return self._import(node)
        if isinstance(node, ir.Reduce):
            return self._reduce(node)
        if isinstance(node, ir.Join):
            return self._join(node)
        if isinstance(node, ir.Query) and self.scope is None:
            return self._query(node)
        if isinstance(node, ir.Iterate):
            return self._iterate(node)
        raise Unsupported(node.label())

    def _linear(self, node: ir.Linear, source=None, schema: Optional[StructType] = None):
        """A fused chain, run by run: expression stages on Arrow (executor/operators/linear/expressions.py)
        where they compile and Spark's answer is reproduced, otherwise Spark's expressions
        over the local rows (Catalyst on the driver); kernel stages on the arrays
        (executor/operators/linear/kernels.py). Stages that set times join them with the update's, as on
        Spark; what lands at or after upto is held by the operators downstream. `source` and
        `schema` replace the node's input and schema."""
        value = self.changes(node.input) if source is None else source
        for is_kernel, run in groupby(node.stages, key=lambda s: isinstance(s, ir.Kernel)):
            run, table = tuple(run), self._table(value)
            if is_kernel:
                value = self._kernels(table, run)
                continue
            try:
                value = expressions.compile_stages(run, table.schema)(table)
            except (expressions.NotCompiled, expressions.Fallback):
                value = linear.apply(self.spark.createDataFrame(table), run, [TIME],
                                     self.runner.backend)
        return self._encoded(value, schema or self.runner.node_schemas[node]) \
            if isinstance(value, pa.Table) else value

    def _kernels(self, table: pa.Table, run: tuple) -> pa.Table:
        """A run of kernel stages over the step's updates in one call, as on a Spark
        partition; a column no kernel takes (a null, a string) goes to Spark, which reports
        it."""
        schema = kernels.arrow_output_schema(run[-1], [TIME])
        try:
            out = [kernels.run_batch(self.xp, b, run, [TIME], schema)
                   for b in table.combine_chunks().to_batches() if b.num_rows]
        except TypeError as e:
            raise Unsupported(str(e)) from None
        return pa.Table.from_batches(out, schema=schema)

    def _table(self, value) -> pa.Table:
        """A chain's updates as decoded Arrow: Changes, Arrow, or a local frame's rows."""
        if isinstance(value, Changes):
            return value.table(self.xp, self.encoder)
        return value if isinstance(value, pa.Table) else _rows(value)

    def _inner_linear(self, node: ir.Linear) -> Changes:
        """A chain inside an iterate scope. The body refuses stages that set times, so every
        output row keeps the times of the input row it came from: the chain runs with the
        row's index (below any upto) as its only time, and rows take their times back by it."""
        xp, source = self.xp, self.changes(node.input)
        n = source.size
        index = xp.arange(n, dtype=xp.int64) - n
        records = source.schema.fields[:len(source.names)]
        schema = self.runner.node_schemas[node]
        out = self._linear(node, Changes(updates_schema(records), source.cols, index, source.d),
                           updates_schema(schema.fields[:-3]))
        out = out if isinstance(out, Changes) else self._encoded(_rows(out), out.schema)
        rows = out.t + n
        return Changes.of(schema, out.cols, [xp.take(c, rows) for c in source.times], out.d)

    def empty(self, schema: StructType) -> Changes:
        none = self.xp.zeros(0, dtype=self.xp.int64)
        k = 2 if ITERATION in schema.fieldNames() else 1
        return Changes.of(schema, [none for _ in schema.fields[:-1 - k]], [none] * k, none)

    def _concat(self, parts: list[Changes]) -> Changes:
        xp = self.xp
        return Changes.of(parts[0].schema,
                          [xp.concat([p.col(n) for p in parts]) for n in parts[0].names],
                          [xp.concat(ts) for ts in zip(*(p.times for p in parts))],
                          xp.concat([p.d for p in parts]))

    def _consolidated(self, c: Changes) -> Changes:
        keys, d = consolidate(self.xp, [*c.cols, *c.times], c.d)
        n = len(c.cols)
        return Changes.of(c.schema, keys[:n], keys[n:], d)

    def delta(self, changes: Changes) -> Optional[tuple]:
        """(rows, a function decoding `changes` to Arrow) for a durable runner's state
        directory to write as this step's trace batch; None without durable state."""
        if self.runner._store is None:
            return None
        xp, encoder = self.xp, self.encoder
        return changes.size, lambda: changes.table(xp, encoder)

    # ------------------------------------------------------------------ arrangements
    def mirror(self, node: ir.Arrange, trace: Trace, columns: list[str], nkeys: int,
               schema: StructType) -> Mirror:
        """The trace's mirror, built from its Spark batches (updates with `schema`; one job)
        when it has none; kept on the trace (in place: it is the same collection)."""
        if trace.mirror is None:
            records = sum(s for s, _ in trace.synced().spine.batches)
            if records > host_mirror_rows(self.runner.conf) or not trace.mirrorable:
                raise Unsupported(f"{node.label()}: no mirror of {records} records")
            try:
                trace.mirror = Mirror.of(self.xp, trace.batches, columns, nkeys, self.encoder,
                                         schema)
            except NoCode as e:  # a value without a code: this trace is never mirrored
                trace.mirrorable = False
                raise Unsupported(str(e)) from None
        return trace.mirror

    def _arrange(self, node: ir.Arrange) -> Changes:
        """The step's updates as the arrangement's new batch; the new mirror holds them.
        An arrangement that only counts read holds its key columns alone (executor/operators/reduce/counted.py):
        their diffs summed per key are the count's totals, which the count appends as its
        updates fall due (executor/operators/reduce/totals.py), as on Spark. An arrangement inside an iterate
        scope keeps the iteration as its mirror's last column and compacts only the outer
        time, to lower - 1: rounds still tell the step's epochs and every iteration apart."""
        runner = self.runner
        batch = self._consolidated(self.changes(node.input))
        keys = list(node.keys) if node.keys is not None else batch.names
        inner = [ITERATION] if batch.inner else []
        trace = self.state.get(node) or Trace(keys, [TIME, *inner], runner.partitions)
        since = trace.next_since((self.upto if self.scope is None else self.lower) - 1)
        if node in runner._counted:  # the count appends its due updates (executor/operators/reduce/totals.py)
            old = self.mirror(node, trace, keys, len(keys),
                              updates_schema([batch.schema[k] for k in keys]))
            self.views[node] = _View(trace, old, batch, None)
            self.commits[node] = trace.host_appended(old, self.upto, since)
            return batch
        columns = keys + [c for c in batch.names if c not in keys] + inner
        old = self.mirror(node, trace, columns, len(keys), batch.schema)
        run = run_of(self.xp, [*map(batch.col, columns[:len(columns) - len(inner)]),
                               *batch.inner], batch.t, batch.d)
        self.views[node] = _View(trace, old, batch, old.reading(run))
        self.commits[node] = trace.host_appended(old.appended(run, since), self.upto, since,
                                                 self.delta(batch))
        return batch

    def _import(self, node: ir.Imported) -> Changes:
        """Another runner's arrangement read through its mirror, as executor/runner.py
        `_import` reads it on Spark: updates before this runner's frontier are the old
        collection, the step's interval its batch; the reader's hold then moves to the
        step's end, so the source compacts only to the least hold."""
        handle, runner = node.handle, self.runner
        if self.upto > handle.runner.frontier:
            raise PlanError(f"{node.label()}: upto {self.upto} is beyond the source "
                            f"runner's frontier {handle.runner.frontier}")
        if handle.runner.encoder is not self.encoder:
            raise Unsupported(f"{node.label()}: the source codes values with another encoder")
        schema = runner.node_schemas[node]
        names = [f.name for f in schema.fields[:-2]]
        trace = handle.trace
        mirror = self.mirror(handle.node, trace, list(handle.keys) + [
            c for c in names if c not in handle.keys], len(handle.keys), handle.schema)
        every = mirror.all()
        now = self.xp.nonzero(self.xp.logical_and(every.t >= self.lower, every.t < self.upto))[0]
        batch = Changes(schema, [self.xp.take(every.cols[mirror.columns.index(c)], now)
                                 for c in names],
                        self.xp.take(every.t, now), self.xp.take(every.d, now))
        self.views[node] = _View(trace, mirror.below(self.lower), batch, mirror.below(self.upto))
        self.holds.append((handle, self.upto - 1))
        return batch

    # ------------------------------------------------------------------ reductions
    def _reduce(self, node: ir.Reduce) -> Changes:
        """Abelian reductions keep running totals per key (executor/operators/reduce/totals.py); the others
        re-evaluate the keys the step touches (executor/operators/reduce/driver.py). Only updates before
        upto are reduced; the rest wait (`_due`), though the trace already holds them."""
        self.value(node.input)
        view = self.views[node.input]
        if self.scope is not None:
            return self._consolidated(reduce_product.host_delta(self, node, view))
        ready = self._due(node, view.batch)
        family = totals if totals.applies(node, view) else \
            top_k if top_k.applies(node) else reduce_host
        return self._consolidated(family.delta(self, node, view, ready))

    # ------------------------------------------------------------------ joins
    def _join(self, node: ir.Join) -> Changes:
        """dA x (B_old + dB) + A_old x dB, as executor/operators/join/spark.py: each term looks one side's
        batch keys up in the other side's mirror."""
        for side in (node.left, node.right):
            self.value(side)
        left, right = self.views[node.left], self.views[node.right]
        lrec, rrec = left.batch.names, right.batch.names
        out = join.output_columns(node, lrec, rrec)
        on = list(node.on)
        fields = {f.name: f for f in right.batch.schema.fields[:len(rrec)]}
        fields |= {f.name: f for f in left.batch.schema.fields[:len(lrec)]}
        k = len(left.batch.times)
        parts = [self._pairs(on, _columns(left.batch), _found(right.read, left.batch, on, k),
                             lrec, out),
                 self._pairs(on, _found(left.old, right.batch, on, k), _columns(right.batch),
                             lrec, out)]
        schema = updates_schema([fields[c] for c in out], k > 1)
        return self._concat([Changes.of(schema, *p) for p in parts])

    def _pairs(self, on: list[str], a: tuple, b: tuple, lrec: list[str], out: list[str]):
        """(columns, times, diff) of every pair of a's and b's updates with equal keys:
        columns from a where a has them, times joined, diffs multiplied."""
        xp = self.xp
        (acols, at, ad), (bcols, bt, bd) = a, b
        live = xp.ones(ad.shape[0], dtype=xp.bool)
        for k in on:  # a null key joins nothing (Spark's `=`)
            live = xp.logical_and(live, acols[k] != NULL_CODE)
        if not bool(xp.all(live)):
            rows = xp.nonzero(live)[0]
            acols = {c: xp.take(v, rows) for c, v in acols.items()}
            at, ad = [xp.take(x, rows) for x in at], xp.take(ad, rows)
        acode, bcode = delta_rules.codes(xp, [acols[k] for k in on], [bcols[k] for k in on],
                                         ad.shape[0], bd.shape[0])
        order = xp.argsort(bcode)
        ordered = xp.take(bcode, order)
        lo = xp.searchsorted(ordered, acode, side="left")
        hi = xp.searchsorted(ordered, acode, side="right")
        i, j = neighbours(xp, order, lo, hi)
        cols = [xp.take(acols[c], i) if c in lrec else xp.take(bcols[c], j) for c in out]
        t = join_times(xp, tuple(xp.take(x, i) for x in at), tuple(xp.take(x, j) for x in bt))
        return cols, list(t), multiply_diffs(xp, xp.take(ad, i), xp.take(bd, j))

    # ------------------------------------------------------------------ iterate
    def _iterate(self, node: ir.Iterate) -> Changes:
        """The scope's rounds (the rule is executor/operators/iterate/spark.py's): round i walks the body with
        this same evaluator over the variable's changes at iteration i, all of the step's
        epochs together; the result at i less the input at iteration 0 is the variable's
        change at i + 1. Done when nothing changes and nothing is held back; the output is
        the result summed over iterations, per epoch."""
        xp, schema = self.xp, self.runner.node_schemas[node]
        _, outer = ir.scope_of(node)
        x = self.changes(node.input)
        entering = [self.changes(o) for o in outer]  # evaluated before the rounds
        if any(bool(xp.any(c.t >= self.upto)) for c in [x, *entering]):
            raise Unsupported(f"{node.label()}: its inputs hold updates for later times")
        entering = [c.size for c in entering]
        if not x.size and not any(entering):
            return self.empty(schema)  # nothing entered: the fixed point stays
        limit = max_rounds(self.runner.conf)
        scope = _Scope(node, xp)
        start = _entered(xp, x)
        var, leave, seconds = start, [x], []
        while True:
            if scope.round >= limit:
                raise iterate.divergence(node, limit)
            began = clock.perf_counter()
            result = self._round(scope, var, outer).changes(node.body)
            if scope.round == 0:  # the variable was the input at iteration 0
                result = self._concat([result, Changes.of(result.schema, start.cols,
                                                          start.times, -start.d)])
            var = self._consolidated(result)
            var.inner[-1] = var.inner[-1] + 1
            leave.append(Changes(x.schema, var.cols, var.t, var.d))
            seconds.append(clock.perf_counter() - began)
            waiting = scope.waiting()
            if not var.size and waiting is None:
                break
            scope.round = scope.round + 1 if var.size else waiting
        self.commits.update(scope.traces)
        self.runner.rounds[node.label()] = seconds
        out = self._concat(leave)
        return self._consolidated(Changes(schema, out.cols, out.t, out.d))

    def _round(self, scope: "_Scope", var: Changes, outer) -> "HostStep":
        """The walk of one round: the variable's changes; outer collections entered at
        iteration 0 without copying, their changes in round 0 only; outer arrangements'
        mirrors read in place (at iteration 0); the scope's traces over the runner's."""
        xp = self.xp
        rs = copy.copy(self)
        rs.memo, rs.views, rs.commits = {scope.node.variable: var}, {}, scope.traces
        rs.state, rs.scope = ChainMap(scope.traces, self.runner._state), scope
        for o in outer:
            c = self.changes(o)
            rs.memo[o] = _entered(xp, c if scope.round == 0 else
                                  c.take(xp, xp.zeros(0, dtype=xp.int64)))
            view = self.views.get(o)
            if view is not None:
                rs.views[o] = _View(view.trace, view.old if scope.round == 0 else view.read,
                                    rs.memo[o], view.read)
        return rs

    # ------------------------------------------------------------------ queries
    def _query(self, node: ir.Query) -> Changes:
        """The query's delta rules (executor/operators/query/delta_rules.py) over the step's seeds, looking
        index rows up in the mirrors of the arrangements the extenders read."""
        xp = self.xp
        inputs = {r: self._due((node, r), self.changes(i))
                  for r, i in zip(node.relations, node.inputs)}
        kinds = {r: [f.dataType for f in c.schema.fields[:len(c.cols)]]
                 for r, c in inputs.items()}
        query = query_codes.coded(node.query, kinds, self.encoder)
        position = {r: i for i, r in enumerate(node.relations)}
        seeds = {r: (c.cols, c.t, c.d) for r, c in inputs.items()}

        def lookup(wants: dict) -> dict:
            out = {}
            for req, tables in wants.items():
                names = inputs[req.relation].names
                arranged = ir.Arrange(node.inputs[position[req.relation]],
                                      tuple(names[k] for k in req.key))
                self.value(arranged)
                mirror = self.views[arranged].read
                asked = [xp.concat([t[j] for t in tables]) for j in range(len(req.key))]
                run = mirror.rows(asked)
                col = {n: run.cols[mirror.columns.index(n)] for n in names}
                keep = xp.ones(run.t.shape[0], dtype=xp.bool)
                for k, x in req.constants:
                    keep = xp.logical_and(keep, col[names[k]] == x)
                value = xp.zeros_like(run.t) if req.value is None else col[names[req.value]]
                for k in req.repeats:
                    keep = xp.logical_and(keep, col[names[k]] == value)
                rows = xp.nonzero(keep)[0]
                out[req] = ([xp.take(col[names[k]], rows) for k in req.key],
                            xp.take(value, rows), xp.take(run.t, rows), xp.take(run.d, rows))
            return out

        cols, t, d = delta_rules.run(xp, query, cq.delta_rules(query, node.order), seeds,
                                     lookup, null=NULL_CODE)
        joined = delta_rules.joined(query)
        fields = []
        for v in query.head:
            r, k = query.binding(v)
            column = inputs[r].schema.fields[k]
            fields.append(StructField(v, column.dataType, column.nullable and v not in joined))
        return Changes(updates_schema(fields), list(cols), t, d)

    # ------------------------------------------------------------------ the step
    def outputs(self) -> dict[str, Changes]:
        """Each output's changes before upto (the rest held)."""
        return {name: self._consolidated(self._due(name, self.changes(node)))
                for name, node in self.runner.plan.items()}


def operator_name(node: ir.Node) -> str:
    """An operator as users read it: its label, and for an arrangement what it arranges
    (runner.stats() names traces so)."""
    if isinstance(node, ir.Arrange):
        source = node.input
        return f"{node.label()} of " + (source.name if isinstance(source, ir.Input)
                                        else source.label())
    return node.label()


@dataclass
class _Clock:
    """Each operator's own seconds in a step (the time of the inputs it asks for excluded),
    summed over an iterate's rounds: StepResult.operators."""
    seconds: dict = field(default_factory=dict)
    nested: list = field(default_factory=list)  # the inputs' seconds, per open operator

    def timed(self, name: str, evaluate):
        started = clock.perf_counter()
        self.nested.append(0.0)
        try:
            return evaluate()
        finally:
            spent = clock.perf_counter() - started
            self.seconds[name] = self.seconds.get(name, 0.0) + spent - self.nested.pop()
            if self.nested:
                self.nested[-1] += spent


@dataclass
class _Scope:
    """One step of one iterate on the driver: the round, the traces its rounds append to,
    the joins' and reductions' changes held for later iterations, and what each reduction
    emitted this step at iterations a later round may still correct."""

    node: ir.Iterate
    xp: object
    round: int = 0
    traces: dict = field(default_factory=dict)
    held: dict = field(default_factory=dict)
    emitted: dict = field(default_factory=dict)

    def admit(self, step: HostStep, node: ir.Node, value: Changes) -> Changes:
        """A join's or reduction's changes at later iterations wait for their round; what
        waited for this one joins in."""
        xp = self.xp
        if isinstance(node, ir.Reduce):
            self.emitted[node] = step._concat([self.emitted[node], value]) \
                if node in self.emitted else value
        held = self.held.pop(node, None)
        if held is not None:
            value = step._concat([value, held])
        later = value.inner[-1] > self.round
        if bool(xp.any(later)):
            self.held[node] = value.take(xp, xp.nonzero(later)[0])
            value = value.take(xp, xp.nonzero(xp.logical_not(later))[0])
        return value

    def emitted_since(self, node: ir.Reduce) -> Optional[Changes]:
        """The reduction's changes of this step's rounds at iterations from this round on
        (the only ones a round corrects; the rest are dropped)."""
        xp, c = self.xp, self.emitted.get(node)
        if c is not None:
            c = self.emitted[node] = c.take(xp, xp.nonzero(c.inner[-1] >= self.round)[0])
        return c

    def waiting(self) -> Optional[int]:
        """The least iteration of a held change (None when nothing is held)."""
        least = [int(self.xp.min(c.inner[-1])) for c in self.held.values()]
        return min(least) if least else None


def _entered(xp, c: Changes) -> Changes:
    """Outer changes at iteration 0 of a scope: the same arrays, a time coordinate more."""
    return Changes.of(updates_schema(c.schema.fields[:len(c.names)], True), c.cols,
                      [c.t, xp.zeros_like(c.t)], c.d)



def _rows(df: DataFrame) -> pa.Table:
    """The rows of a local frame as Arrow (no job when Catalyst folds it into the local
    rows)."""
    rows = df.collect()
    columns = list(zip(*rows)) if rows else [()] * len(df.columns)
    arrow = to_arrow_schema(df.schema)
    return pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, arrow)],
                                schema=arrow)


def _columns(c: Changes) -> tuple:
    """A batch as ({column: array}, times, diff)."""
    return dict(zip(c.names, c.cols)), c.times, c.d


def _found(mirror: Mirror, batch: Changes, on: list[str], k: int) -> tuple:
    """The mirror's updates under the batch's keys, as ({column: array}, k times, diff): an
    outer mirror read inside a scope is at iteration 0."""
    run = mirror.rows([batch.col(c) for c in on])
    cols = dict(zip(mirror.columns, run.cols))
    inner = cols.pop(ITERATION, None)
    times = [run.t] if k == 1 else [run.t, run.t * 0 if inner is None else inner]
    return cols, times, run.d


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
    limit = host_step_rows(runner.conf)
    sources = {}
    for name, source in updates.items():
        schema = runner.input_schemas[name]
        if isinstance(source, (str, os.PathLike)):  # Parquet pyarrow reads as Spark would
            table = parquet_table(name, source)
            if table is not None and table.num_rows > limit:
                return None
            if table is not None and (ready := _ready(table, schema, runner.frontier,
                                                      upto)) is not None:
                sources[name] = ready
                continue
        if isinstance(source, pa.Table):
            if source.num_rows > limit:
                return None
            ready = _ready(source, schema, runner.frontier, upto)
            if ready is not None:
                sources[name] = ready
                continue
        rows = _local(read_source(runner.spark, name, source, schema), limit)
        if rows is None:
            return None
        if isinstance(rows, pa.Table):  # collected from a computed frame: check it on Arrow
            ready = _ready(rows, schema, runner.frontier, upto)
            if ready is not None:
                sources[name] = ready
                continue
            rows = runner.spark.createDataFrame(rows)
        sources[name] = normalise(name, rows, schema, runner.frontier, upto, local=True)
    held = _held(runner)
    if held is None:
        return None
    host = HostStep(runner, sources, INFINITY if upto is None else upto, held)
    try:
        outs = host.outputs()
    except Unsupported:
        return None
    arrow = {name: to_arrow_schema(runner.schemas[name]) for name in outs}
    tables = {name: c.table(host.xp, host.encoder).cast(arrow[name]) for name, c in outs.items()}
    pending = {name: None if host.pending[name] is None else host.pending[name].cast(arrow[name])
               for name in outs}
    state = {key: table for key, table in host.pending.items() if key not in outs}
    digests = {} if runner._store is None else {  # of the rows as given, not as coded
        name: arrow_digest(s if isinstance(s, pa.Table) else _rows(s))
        for name, s in sources.items()}
    return Done(tables, pending, host.commits | state, host.holds, digests, host.clock.seconds)


def _held(runner) -> Optional[dict]:
    """The updates held for later times (outputs', reductions', queries') as Arrow; a
    Spark step's frames are read once (a job each), None when one holds more than the
    driver's state may (diffspark.host.mirror_rows)."""
    limit = host_mirror_rows(runner.conf)
    held = {}
    for key in [*runner._pending, *_holding(runner)]:
        value = runner._pending[key] if isinstance(key, str) else runner._state.get(key)
        if value is None:
            continue
        held[key] = as_table(value, limit)
        if held[key] is None:
            return None
    return held


def _holding(runner) -> list:
    """The keys of the runner's state under which reductions and queries may hold updates
    (asked for one by one: a resumed runner's state reads an entry when asked,
    executor/durability/state.py `_LazyState`)."""
    keys = []
    for node in ir.topological(runner.plan.values()):
        if isinstance(node, ir.Reduce) and holds_back(node, runner._late):
            keys.append(node)
        elif isinstance(node, ir.Query) and holds_back(node, runner._late):
            keys += [(node, r) for r in node.relations]
    return keys


def _ready(table: pa.Table, schema: StructType, frontier: int, upto: int) -> Optional[pa.Table]:
    """A pyarrow Table that already has the input's Arrow types and breaks no rule, as
    (records, time, diff) without Spark; None sends it through updates.normalise, which
    converts what needs converting and words the refusal of what breaks a rule."""
    given = {f.name.lower(): f.name for f in table.schema}
    if len(given) != table.num_columns or \
            set(given) - {f.name.lower() for f in schema.fields} - {TIME, DIFF}:
        return None
    n, columns = table.num_rows, []
    for f, arrow in zip(schema.fields, to_arrow_schema(schema)):
        name = given.get(f.name.lower())
        if name is None or table.schema.field(name).type != arrow.type:
            return None
        column = table.column(name)
        if column.null_count and not f.nullable or not fits(column, f.dataType):
            return None
        columns.append(column)
    for special, default in ((TIME, frontier), (DIFF, 1)):
        name = given.get(special)
        if name is None:
            columns.append(pa.array(np.full(n, default, dtype=np.int64)))
            continue
        column = table.column(name)
        if column.type != pa.int64() or column.null_count:
            return None
        columns.append(column)
    t, d = (np.asarray(c.to_numpy()) for c in columns[-2:])
    if n and (t.min() < frontier or t.max() >= upto or d.min() == np.iinfo(np.int64).min
              or float(np.abs(d).sum(dtype=np.float64)) >= 2.0 ** 62):
        return None
    return pa.Table.from_arrays(columns, schema=to_arrow_schema(updates_schema(
        list(schema.fields))))


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
