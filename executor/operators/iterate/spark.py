"""Iteration to a fixed point over product times (DESIGN.md section 6, "Iterate").

Inside an iterate scope a time is (epoch, iteration), ordered as a product. A step runs the
scope round by round in the iteration coordinate, all of the step's epochs together: round i
feeds the body the variable's changes at iteration i. Every operator inside reads traces that
hold all earlier steps' epochs at every iteration plus this step's earlier rounds, so only
changes propagate, and a new update meeting an old one from a later iteration lands at that
later iteration: joins and reductions hold such changes back until their round. The body's
result at iteration i, less the input at iteration 0, is the variable's change at iteration
i+1. The step is done when no change and nothing held back remains; the scope's output is
the result summed over iterations, per epoch. Outer collections enter at iteration 0 by a
projection, so an outer arrangement is read in place (its partitioning survives), never
copied. The driver placement runs the same rule on arrays (executor/operators/iterate/driver.py).
"""
from __future__ import annotations

import time as clock
from collections import ChainMap
from functools import reduce

from pyspark.sql import DataFrame, functions as F

from executor.arrange.consolidate import consolidate
from executor.arrange.spine import detached, materialise_counted, materialise_with
from executor.arrange.trace import View
from executor.operators.linear.spark import q, record_columns
from executor.runtime.config import MAX_ROUNDS_KEY, max_rounds
from executor.runtime.errors import StepError
from executor.time import DIFF, ITERATION
from plans import ir
from plans.errors import PlanError


def run(runner, node: ir.Iterate, kids: list[DataFrame], step) -> DataFrame:
    """The iterate's output changes for the step (records, time, diff)."""
    if len(step.time_cols) != 1:
        raise PlanError(f"{node.label()}: nested iterate scopes are not supported")
    scope = Scope(runner, node, kids, step)
    if step.resolving:
        return scope.resolve()
    if node in step.empty:
        return kids[0]
    out = scope.run()
    runner.rounds[node.label()] = scope.seconds
    return out


def divergence(node: ir.Iterate, limit: int) -> StepError:
    """The refusal of a step whose iterate found no fixed point in `limit` rounds."""
    return StepError(f"step refused, nothing changed: {node.label()} found no fixed point in "
                     f"{limit} rounds (rule: {MAX_ROUNDS_KEY}={limit}; raise it, or check "
                     f"that the body converges)")


def enter(df: DataFrame, time_cols: list[str], iteration: int = 0) -> DataFrame:
    """An update stream at `iteration` of the scope: a projection, so arranged batches keep
    their partitioning and order."""
    recs = record_columns(df, time_cols)
    return df.select(*map(q, recs), *map(q, time_cols),
                     F.lit(iteration).cast("bigint").alias(ITERATION), DIFF)


class Scope:
    """One step of one iterate: its rounds, the traces they append to, what waits."""

    def __init__(self, runner, node: ir.Iterate, kids: list[DataFrame], step):
        self.runner, self.node, self.step = runner, node, step
        _, outer = ir.scope_of(node)
        self.x, self.outer = kids[0], dict(zip(outer, kids[1:]))
        self.time_cols = step.time_cols + [ITERATION]
        self.traces: dict = {}   # inner Arrange -> its Trace after this step's rounds so far
        self.held: dict = {}     # inner Join/Reduce -> (changes at later iterations, least one)
        self._emitted: dict = {}  # inner Reduce -> its changes in this step's rounds so far
        self.round = 0
        self.seconds: list[float] = []  # per round
        self.deepest = -1  # no trace inside holds an iteration above this (set by run)

    # ------------------------------------------------------------------ rounds
    def resolve(self) -> DataFrame:
        """Build one round on empty inputs (no jobs) to check the body keeps the
        variable's columns and types."""
        var = enter(self.x, self.step.time_cols)
        rs = self._round_step(var, False)
        result = rs.value(self.node.body)
        inner, _ = ir.scope_of(self.node)  # their schemas, for the driver (executor/driver.py)
        self.step.memo.update({n: rs.memo[n] for n in inner if n in rs.memo})
        want, got = (_record_types(df, self.time_cols) for df in (var, result))
        if [(n.lower(), t) for n, t in want] != [(n.lower(), t) for n, t in got]:
            raise PlanError(f"{self.node.label()}: the body returns ({_ddl(got)}) but the "
                            f"variable is ({_ddl(want)}); rule: body(v) has v's columns "
                            f"and types")
        return self.x

    def emitted(self, node: ir.Reduce):
        """The reduction's changes in this step's earlier rounds (None before its first)."""
        frames = self._emitted.get(node)
        return reduce(DataFrame.unionByName, frames) if frames else None

    def _deepest(self) -> int:
        """The highest iteration in the scope's traces from earlier steps (one job; none in
        a first step): from that round on no join or reduction can emit at a later one."""
        inner, _ = ir.scope_of(self.node)
        traces = [self.runner._state.get(n) for n in inner if isinstance(n, ir.Arrange)]
        batches = [b for t in traces if t is not None for b in t.batches]
        if not batches:
            return -1
        top = reduce(DataFrame.union, [b.select(ITERATION) for b in batches]) \
            .agg(F.max(ITERATION)).first()[0]
        return -1 if top is None else top

    def run(self) -> DataFrame:
        limit = max_rounds(self.runner.conf)
        self.deepest = self._deepest()
        start = enter(self.x, self.step.time_cols)
        var, var_empty = start, self.node.input in self.step.empty
        leave = [self.x]
        while True:
            if self.round >= limit:
                raise divergence(self.node, limit)
            began = clock.perf_counter()
            rs = self._round_step(var, var_empty)
            result = rs.value(self.node.body)
            self.traces.update(rs.commits)
            changes = 0
            if self.round == 0 or self.node.body not in rs.empty:
                feedback = _later(result)
                if self.round == 0:  # the variable was the input at iteration 0
                    feedback = feedback.unionByName(_later(start.withColumn(DIFF, -F.col(DIFF))))
                var, changes = materialise_counted(consolidate(feedback, self.time_cols))
                var = detached(var)
                leave.append(var.drop(ITERATION))
            self.seconds.append(clock.perf_counter() - began)
            waiting = [least for _, least in self.held.values()]
            if not changes and not waiting:
                break
            self.round = self.round + 1 if changes else min(waiting)
            var_empty = not changes
        self.step.commits.update(self.traces)
        return consolidate(reduce(DataFrame.unionByName, leave), self.step.time_cols)

    def _round_step(self, var: DataFrame, var_empty: bool):
        """The round as a runner step inside the scope: the variable's changes, outer
        collections entered (their changes only in round 0), this scope's traces."""
        outer_step, first = self.step, self.round == 0
        rs = self.runner._new_step({}, outer_step.upto, state=ChainMap(self.traces,
                                                                       self.runner._state),
                                   lower=outer_step.lower, time_cols=self.time_cols,
                                   scope=self, resolving=outer_step.resolving)
        rs.memo[self.node.variable] = var
        if var_empty:
            rs.empty.add(self.node.variable)
        for o, df in self.outer.items():
            rs.memo[o] = enter(df if first else df.limit(0), outer_step.time_cols)
            if not first or o in outer_step.empty:
                rs.empty.add(o)
            view = outer_step.views.get(o)
            if view is not None:
                old, new = ([enter(b, outer_step.time_cols) for b in batches]
                            for batches in (view.old, view.delta))
                rs.views[o] = View(view.keys, old, new) if first else View(view.keys, old + new, [])
        return rs

    def admit(self, rs, node: ir.Node, df: DataFrame) -> DataFrame:
        """A join's or a reduction's changes at later iterations wait for their round; what
        waited for this one joins in (the walk calls it, executor/walk.py)."""
        if rs.resolving:
            return df
        if isinstance(node, ir.Reduce) and node not in rs.empty:
            df = detached(df)  # materialised by the runner
            self._emitted.setdefault(node, []).append(df)
        held = self.held.pop(node, None)
        if held is None and (node in rs.empty or self.round >= self.deepest):
            return df
        frame = df if held is None else df.unionByName(held[0])
        it, now = F.col(ITERATION), F.col(ITERATION) <= self.round

        def split(f):
            return f.agg(F.count(F.when(now, 1)).alias("now"),
                         F.count(F.when(~now, 1)).alias("later"),
                         F.min(F.when(~now, it)).alias("least")).first()

        if held is not None or isinstance(node, ir.Join):
            frame, row = materialise_with(frame, split)  # one job, not two
            frame = detached(frame)
        else:
            row = split(frame)
        if row["later"]:
            self.held[node] = (frame.where(~now), row["least"])
        if row["now"]:
            rs.empty.discard(node)
        else:
            rs.empty.add(node)
        return frame.where(now)


def _later(df: DataFrame) -> DataFrame:
    """The same changes one iteration later."""
    return df.withColumn(ITERATION, F.col(ITERATION) + 1)


def _record_types(df: DataFrame, time_cols: list[str]) -> list[tuple[str, str]]:
    recs = set(record_columns(df, time_cols))
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields if f.name in recs]


def _ddl(cols) -> str:
    return ", ".join(f"{n} {t}" for n, t in cols)
