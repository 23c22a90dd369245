"""The Runner: runs a Dataflow on Spark step by step over input frontiers (DESIGN.md section 4).

`step(updates, upto)` accepts updates with frontier <= time < upto for every input, runs each
operator once over all those times together, and emits every output change at a time < upto
(then final); changes at later times (a temporal filter's future retractions) wait in a
pending batch until the frontier passes them. A step is a transaction: all work happens on
new DataFrames and the runner's fields are replaced only when every output has succeeded.
"""
from __future__ import annotations

import time as clock
from dataclasses import dataclass
from functools import reduce
from typing import Optional

from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType
from py4j.protocol import Py4JJavaError

from plans import Dataflow, ir
from plans.fusion import fuse
from plans.ir import PlanError

from . import linear
from .config import kernel_backend, load_conf
from .consolidate import consolidate
from .errors import InputError, StepError
from .session import spark_session
from .spine import Spine, materialise_all
from .time import DIFF, INFINITY, TIME
from .updates import normalise, read_source

TIME_COLS = [TIME]


@dataclass
class StepResult:
    step: int
    lower: int
    upper: int
    seconds: float
    changes: dict[str, DataFrame]  # this step's final output changes, per output


class Runner:
    def __init__(self, flow: Dataflow, conf="cpu", spark=None, optimize: bool = True,
                 overrides=()):
        if not isinstance(flow, Dataflow):
            raise PlanError("Runner: expects a plans.Dataflow")
        if not flow.outputs:
            raise PlanError("Runner: the dataflow declares no outputs")
        self.conf = load_conf(conf, overrides) if isinstance(conf, str) else dict(conf)
        self.spark = spark or spark_session(self.conf)
        self.backend = kernel_backend(self.conf)
        self.flow = flow
        self.plan = fuse(flow.outputs) if optimize else dict(flow.outputs)
        update = [StructField(TIME, LongType(), False), StructField(DIFF, LongType(), False)]
        self.input_schemas = {n: StructType.fromDDL(i.schema) for n, i in flow.inputs.items()}
        self._empty = {n: self.spark.createDataFrame([], StructType(s.fields + update))
                       for n, s in self.input_schemas.items()}
        resolved = self._build_all(self._empty)
        self.schemas = {name: df.schema for name, df in resolved.items()}
        self.frontier = 0
        self.steps = 0
        self.closed = False
        self._pending: dict[str, Optional[DataFrame]] = {n: None for n in self.plan}
        self._logs: dict[str, Spine] = {n: Spine() for n in self.plan}

    # ------------------------------------------------------------------ plan -> DataFrames
    def _build_all(self, sources: dict[str, DataFrame]) -> dict[str, DataFrame]:
        memo: dict[ir.Node, DataFrame] = {}
        return {name: self._build(node, sources, memo) for name, node in self.plan.items()}

    def _build(self, node: ir.Node, sources, memo) -> DataFrame:
        if node in memo:
            return memo[node]
        kids = [self._build(c, sources, memo) for c in node.children()]
        try:
            df = self._operator(node, kids, sources)
        except AnalysisException as e:
            raise PlanError(f"{node.label()}: {_first_line(e)}") from None
        memo[node] = df
        return df

    def _operator(self, node: ir.Node, kids: list[DataFrame], sources) -> DataFrame:
        if isinstance(node, ir.Input):
            return sources[node.name]
        if isinstance(node, ir.Linear):
            return linear.apply(kids[0], node.stages, TIME_COLS, self.backend)
        if isinstance(node, ir.Concat):
            first = kids[0].schema.simpleString()
            for k in kids[1:]:
                if k.schema.simpleString() != first:
                    raise PlanError(f"Concat: inputs differ ({first} vs {k.schema.simpleString()});"
                                    f" rule: concatenated collections have one schema")
            return reduce(DataFrame.unionByName, kids)
        if isinstance(node, ir.Consolidate):
            return consolidate(kids[0], TIME_COLS)
        raise PlanError(f"{node.label()}: no executor for this operator")

    # ------------------------------------------------------------------ steps
    def step(self, updates: Optional[dict] = None, upto: Optional[int] = None) -> StepResult:
        """Apply `updates` (input name -> DataFrame or Parquet/CSV path) with times in
        [frontier, upto) and advance the frontier to `upto`."""
        if upto is None or isinstance(upto, bool) or not isinstance(upto, int):
            raise PlanError("step: upto must be an integer time")
        return self._step(updates or {}, upto)

    def close(self) -> StepResult:
        """Advance the frontier to infinity: every pending change is emitted."""
        result = self._step({}, None)
        self.closed = True
        return result

    def _step(self, updates: dict, upto: Optional[int]) -> StepResult:
        started = clock.perf_counter()
        if self.closed:
            raise PlanError("step: the runner is closed")
        if upto is not None and upto < self.frontier:
            raise PlanError(f"step: upto={upto} is below the frontier {self.frontier}")
        for name in updates:
            if name not in self.input_schemas:
                raise InputError(name, "-", "unknown input",
                                 f"the dataflow's inputs are {sorted(self.input_schemas)}")
        sources = dict(self._empty)
        for name, src in updates.items():
            df = read_source(self.spark, name, src, self.input_schemas[name])
            sources[name] = normalise(name, df, self.input_schemas[name], self.frontier, upto)
        try:
            changes, pending, logs = self._run(sources, upto)
        except (Py4JJavaError, PySparkException) as e:
            if isinstance(e, AnalysisException):
                raise
            raise StepError(f"step {self.steps + 1} refused, nothing changed: "
                            f"{_first_line(e)}") from None
        self._pending, self._logs = pending, logs
        lower, self.frontier = self.frontier, INFINITY if upto is None else upto
        self.steps += 1
        return StepResult(self.steps, lower, self.frontier, clock.perf_counter() - started, changes)

    def _run(self, sources, upto):
        """Every output's changes for the step, computed together in one Spark job."""
        names, deltas = [], []
        for name, delta in self._build_all(sources).items():
            if self._pending[name] is not None:
                delta = self._pending[name].unionByName(delta)
            names.append(name)
            deltas.append(consolidate(delta, TIME_COLS))
        changes, pending, logs = {}, {}, {}
        for name, combined in zip(names, materialise_all(deltas)):
            if upto is None:
                changes[name], pending[name] = combined, None
            else:
                changes[name] = combined.where(F.col(TIME) < upto)
                pending[name] = combined.where(F.col(TIME) >= upto)
            logs[name] = self._logs[name].appended(changes[name])
        return changes, pending, logs

    # ------------------------------------------------------------------ reading outputs
    def _check_output(self, name: str):
        if name not in self.plan:
            raise PlanError(f"unknown output '{name}'; outputs are {sorted(self.plan)}")

    def output(self, name: str) -> DataFrame:
        """Every final change of an output so far: record columns, time, diff (consolidated)."""
        self._check_output(name)
        log = self._logs[name].union()
        return log if log is not None else self.spark.createDataFrame([], self.schemas[name])

    def snapshot(self, name: str, at: int) -> DataFrame:
        """The output collection at time `at` (final only below the frontier): record columns
        and their multiplicity as `count`."""
        self._check_output(name)
        if at >= self.frontier:
            raise PlanError(f"snapshot: time {at} is not final yet (frontier {self.frontier})")
        recs = linear.record_columns(self.output(name), TIME_COLS)
        return (self.output(name).where(F.col(TIME) <= at)
                .groupBy(*map(linear.q, recs)).agg(F.sum(DIFF).alias("count"))
                .where(F.col("count") != 0))

    def explain(self) -> str:
        """The plan as written and as run (after fusion)."""
        return ("== plan ==\n" + ir.explain(self.flow.outputs) +
                "\n== optimized ==\n" + ir.explain(self.plan))

    def physical_plan(self, name: str) -> str:
        """Spark's executed plan for one step of an output (before consolidation)."""
        self._check_output(name)
        df = self._build_all(self._empty)[name]
        return df._jdf.queryExecution().executedPlan().toString()


def _first_line(e: Exception) -> str:
    """The informative line of a Spark error: for a Python worker failure, the exception line
    that closes its traceback; otherwise the first line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if "Traceback (most recent call last)" in str(e):
        python = [ln for ln in lines if not ln.startswith(("at ", "File ", "Traceback"))
                  and ":" in ln and not ln.startswith("org.apache")]
        if python:
            return python[-1][:500]
    return lines[0][:500]
