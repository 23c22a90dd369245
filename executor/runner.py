"""The Runner: runs a Dataflow on Spark step by step over input frontiers (DESIGN.md section 4).

`step(updates, upto)` accepts updates with frontier <= time < upto for every input, runs each
operator once over all those times together, and emits every output change at a time < upto
(then final); changes at later times (a temporal filter's future retractions) wait in a
pending batch until the frontier passes them. A step is a transaction: all work happens on
new DataFrames and the runner's fields are replaced only when every output has succeeded.
"""
from __future__ import annotations

import time as clock
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import LongType, StructField, StructType

from executor import driver
from executor.arrange.consolidate import consolidate
from executor.arrange.encoding import Encoder, arrow_schema, check_collations
from executor.arrange.spine import (STEP, Spine, as_frame, compute_deferred, deferring, is_computed,
                                    materialise_all, output_log, summed)
from executor.arrange.trace import Trace
from executor.durability.state import arrow_digest
from executor.inputs import tables as input_tables
from executor.inputs.updates import normalise, read_source
from executor.lateness import holding, late
from executor.operators.join import check_keys
from executor.operators.linear import spark as linear
from executor.operators.linear.expressions import Session
from executor.operators.query import check_variables
from executor.operators.reduce.counted import counted
from executor.runtime import limits
from executor.runtime.config import (OUTPUT_HISTORY_KEY, host_step_rows, kernel_backend, load_conf,
                                     output_history, partitions)
from executor.runtime.errors import InputError, StepError, first_line
from executor.runtime.session import spark_session
from executor.spark import SparkStep, arrow_frame, expected_rows
from executor.subscriptions import Subscription, Subscriptions
from executor.time import DIFF, INFINITY, TIME
from executor.walk import operator_name
from gpu_kernels import DiffOverflow
from plans import Dataflow, ir
from plans.errors import PlanError
from plans.optimizer import optimize as optimize_plan
from plans.optimizer.prune import input_reads

TIME_COLS = [TIME]
UPDATE = [StructField(TIME, LongType(), False), StructField(DIFF, LongType(), False)]


@dataclass
class StepResult:
    step: int
    lower: int
    upper: int
    seconds: float
    changes: Mapping[str, DataFrame]  # this step's final output changes, per output
    skipped: bool = False  # a resumed runner recognised a committed step: nothing ran
    # where the step ran: "driver" (executor/driver.py, no Spark job) or "spark"
    # (executor/spark.py): the placement of its walk (executor/walk.py)
    placement: str = "spark"
    # a driver step: each operator's own seconds, its inputs' excluded (driver.operator_name)
    operators: Mapping[str, float] = field(default_factory=dict)

    @property
    def host(self) -> bool:
        """Whether the step ran on the driver placement (placement == "driver")."""
        return self.placement == "driver"

    def arrow(self, name: str) -> pa.Table:
        """An output's changes of this step as Arrow (records, time, diff): no Spark for
        a step that ran on the driver. A Spark step's are computed by then (checkpoints),
        so reading them in as many tasks as there are cores loses nothing, and tasks and
        Arrow streams of a few rows each cost (a join + sum at 1M orders, 20 steps of 1,000
        changes, two A/B runs: medians 0.94 and 0.93 s in P = 8 tasks, 0.85 and 0.79 s)."""
        if isinstance(self.changes, Frames):
            return self.changes.tables[name]
        frame = self.changes[name]
        return frame.coalesce(frame.sparkSession.sparkContext.defaultParallelism).toArrow()


class Frames(Mapping):
    """A driver step's changes per output, held as Arrow; each becomes a (local) Spark
    frame only when asked for."""

    def __init__(self, tables: dict[str, pa.Table]):
        self.tables, self._frames = tables, {}

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._frames:
            self._frames[name] = as_frame(self.tables[name])
        return self._frames[name]

    def __iter__(self):
        return iter(self.tables)

    def __len__(self) -> int:
        return len(self.tables)


class Runner:
    def __init__(self, flow: Dataflow, conf="cpu", spark=None, optimize: bool = True,
                 overrides=(), state=None):
        if not isinstance(flow, Dataflow):
            raise PlanError("Runner: expects a plans.Dataflow")
        if not flow.outputs:
            raise PlanError("Runner: the dataflow declares no outputs")
        self.conf = load_conf(conf, overrides) if isinstance(conf, str) else dict(conf)
        self.spark = spark or spark_session(self.conf)
        # the settings that change an expression's answer as this session has them (a
        # session passed in may differ from the profile), read once: the driver
        # placement's expressions follow them (linear/expressions.py Session)
        self.conf.update({k: self.spark.conf.get(k) for k in Session.KEYS})
        self.backend = kernel_backend(self.conf)
        self.flow = flow
        self.plan = optimize_plan(flow.outputs).plan if optimize else dict(flow.outputs)
        self.constants = ir.constants(flow.outputs.values())  # inputs the runner feeds
        self._reads = input_reads(self.plan)  # input -> the columns outputs and state depend on
        self.input_schemas = {n: input_tables.updates_schema(i, StructType.fromDDL(i.schema))
                              for n, i in {**flow.inputs, **self.constants}.items()}
        # over an RDD of no partitions: reading it runs no task (a local empty list would
        # start Python workers in every step that leaves the input alone)
        self._empty = {n: self.spark.createDataFrame(self.spark.sparkContext.emptyRDD(),
                                                     StructType(s.fields + UPDATE))
                       for n, s in self.input_schemas.items()}
        self.partitions = partitions(self.conf)
        self._counted = counted(self.plan)  # arrangements counts keep as totals (reduce/counted.py)
        self._late = late(self.plan)  # what may change at or after upto (lateness.py)
        self._holding = holding(self.plan, self._late)  # state keys of updates held back
        # the most rows per input of a step on the driver (runtime/config.py host_step_rows)
        self.step_rows = host_step_rows(
            self.conf, local=self.spark.sparkContext.master.startswith("local"))
        self._on_driver = driver.supports(self)  # small steps may run on the driver (driver.py)
        # Arrange -> Trace; Reduce, (Query, relation) -> updates waiting for their time (a
        # Spark frame, or Arrow after a driver step: either placement reads both)
        self._state: dict[object, object] = {}
        self.rounds: dict[str, list[float]] = {}  # iterate -> seconds of each round, last step
        self.frontier = 0
        resolving = self._new_step(self._empty, None, resolving=True)
        resolved = self._build_all(resolving)
        self.schemas = {name: df.schema for name, df in resolved.items()}
        # every node's update schema as Spark resolves it: the driver's steps keep its types
        self.node_schemas = {node: df.schema for node, df in resolving.memo.items()}
        check_keys(self.plan, self.node_schemas)  # both placements compare keys alike
        check_collations(self.plan, self.node_schemas)  # ... and strings by their bytes
        check_variables(self.plan, self.node_schemas)
        # the driver's codes of column values (executor/arrange/encoding.py); an importing runner
        # shares its source's, so the source's mirror is read as it is
        shared = [n.handle.runner.encoder for n in ir.topological(self.plan.values())
                  if isinstance(n, ir.Imported)]
        self.encoder = shared[0] if shared else Encoder()
        self.frontier = 0
        self.steps = 0
        self._placement: Optional[str] = None  # where the last step ran (explain)
        self.closed = False
        self._pending: dict[str, object] = {n: None for n in self.plan}  # as _state's waiting
        self.history = output_history(self.conf)  # what the output logs keep (runtime/config.py)
        self._logs: dict[str, Spine] = {n: output_log(self.history) for n in self.plan}
        self._tables = input_tables.tables(flow)  # keyed and strict inputs' current rows
        self._subscriptions = Subscriptions()  # callbacks after each committed step
        # durability (executor/durability/state.py): commit each step to `state`, resume from it
        self._store = None
        if state is not None:
            from executor.durability.state import Store
            self._store = Store(self, state)
            self._store.restore(self)

    def release_state(self) -> None:
        """Give up the state directory's lock (another runner may then open it); this runner
        steps on without durability."""
        if self._store is not None:
            self._store.release()
            self._store = None

    # ------------------------------------------------------------------ plan -> DataFrames
    def _new_step(self, sources: dict, upto: Optional[int], **kw) -> SparkStep:
        return SparkStep(self, sources, upto, **kw)

    def _build_all(self, step: SparkStep) -> dict[str, DataFrame]:
        return {name: step.value(node) for name, node in self.plan.items()}

    # ------------------------------------------------------------------ steps
    def step(self, updates: Optional[dict] = None, upto: Optional[int] = None,
             note: Optional[dict] = None) -> StepResult:
        """Apply `updates` (input name -> DataFrame or Parquet/CSV path) with times in
        [frontier, upto) and advance the frontier to `upto`. `note` (JSON values) is recorded
        with the step in a durable state's history, committed with it (`follow` records
        the files a step read)."""
        if upto is None or isinstance(upto, bool) or not isinstance(upto, int):
            raise PlanError("step: upto must be an integer time")
        result = self._step(updates or {}, upto, note or {})
        self._subscriptions.deliver(result)
        return result

    def close(self) -> StepResult:
        """Advance the frontier to infinity: every pending change is emitted."""
        result = self._step({}, None)
        self.closed = True
        self._subscriptions.deliver(result)
        return result

    def subscribe(self, name: str, callback) -> Subscription:
        """Call `callback(changes, result)` with each step's final changes of output `name`
        (an Arrow table: record columns, time, diff) once the step has committed;
        `.cancel()` on the returned handle unsubscribes (executor/subscriptions.py)."""
        self._check_output(name)
        return self._subscriptions.add(name, callback)

    def _step(self, updates: dict, upto: Optional[int],
              note: Optional[dict] = None) -> StepResult:
        started = clock.perf_counter()
        replay = self._store.replay(upto, self.frontier) if self._store else None
        lower = replay["lower"] if replay else self.frontier
        if self.closed and replay is None:
            if self._store is not None:
                raise self._store.closed()
            raise PlanError("step: the runner is closed")
        if upto is not None and upto < lower:
            raise PlanError(f"step: upto={upto} is below the frontier {lower}")
        for name in updates:
            if name not in self.flow.inputs:
                raise InputError(name, "-", "unknown input",
                                 f"the dataflow's inputs are {sorted(self.flow.inputs)}")
        if self.constants and lower == 0 and (upto is None or upto > 0):
            updates = {**updates, **self._constant_updates()}
        ruled = None
        if replay is None and self._tables:  # keyed and strict inputs (executor/inputs/tables.py)
            updates, ruled = input_tables.translate(self, updates, lower, upto)
        if replay is None and self._on_driver:
            done = self._driver_step(updates, upto)
            if done is not None:
                logs = {n: self._logs[n].appended(t) if t.num_rows else self._logs[n]
                        for n, t in done.tables.items()}
                try:  # Spark writes only a trace batch Spark made since the last commit
                    self._commit(done.commits, done.pending, logs, lower, upto, done.digests,
                                 ruled, note)
                except (Py4JJavaError, PySparkException) as e:
                    raise self._refused(e) from None
                result = self._advance(Frames(done.tables), done.pending, logs, done.commits,
                                       done.holds, upto, started, ruled,
                                       driver.DriverStep.placement)
                result.operators = done.seconds
                return result
        sources, digests, rows = dict(self._empty), {}, {}
        for name, src in updates.items():
            schema = self.input_schemas[name]
            # an Arrow table of the input's types that breaks no rule is checked on the driver
            # (driver.arrow_ready), not by a Spark job over every row; a durable step's digest
            # needs that job
            ready = driver.arrow_ready(src, schema, lower, upto) \
                if replay is None and self._store is None else None
            if ready is not None:
                sources[name] = arrow_frame(self.spark, ready, schema, self._reads.get(name))
                rows[name] = ready.num_rows
                continue
            sources[name] = normalise(name, read_source(self.spark, name, src, schema), schema,
                                      lower, upto, digests if self._store else None)
            rows[name] = expected_rows(sources[name]) or 0
        if replay is not None:  # a committed step repeated by a resumed driver
            self._store.skip(replay, digests, lambda n: arrow_digest(sources[n].toArrow()))
            changes = {n: self.output(n).where((F.col(TIME) >= lower) & (
                F.col(TIME) < (INFINITY if upto is None else upto))) for n in self.plan}
            return StepResult(replay["step"], lower, INFINITY if upto is None else upto,
                              clock.perf_counter() - started, changes, skipped=True)
        step = self._new_step(sources, upto, given=set(updates), rows=rows)
        try:
            changes, pending, logs = self._run(step)
            limits.check_outputs(self.conf, changes, self.steps + 1)
            self._commit(step.commits, pending, logs, lower, upto, digests, ruled, note)
        except (Py4JJavaError, PySparkException) as e:
            raise self._refused(e) from None
        return self._advance(changes, pending, logs, step.commits, step.holds, upto, started,
                             ruled)

    def _constant_updates(self) -> dict[str, pa.Table]:
        """The plan's constants as updates at time 0, for the step that holds it."""
        out = {}
        for name, node in self.constants.items():
            schema = StructType(self.input_schemas[name].fields + UPDATE)
            arrow = arrow_schema(schema)
            rows = [tuple(r) + (0, 1) for r in node.rows]
            cols = list(zip(*rows)) if rows else [[] for _ in arrow]
            out[name] = pa.Table.from_arrays([pa.array(list(c), type=f.type)
                                              for c, f in zip(cols, arrow)], schema=arrow)
        return out

    def _commit(self, commits: dict, pending: dict, logs: dict, lower: int,
                upto: Optional[int], digests: dict, ruled=None, note=None) -> None:
        """Make a computed step durable (executor/durability/state.py), whichever placement ran it;
        `ruled`: the step's changes to keyed and strict inputs' tables; `note`: recorded in
        the step's history record."""
        if self._store is not None:
            ruled = ruled or input_tables.Ruled({}, {})
            self._store.commit(self, {**self._state, **commits}, pending, logs,
                               {"step": self.steps + 1, "lower": lower, "upto": upto,
                                "inputs": digests | ruled.digests, **(note or {})},
                               INFINITY if upto is None else upto, upto is None,
                               ruled.batches(self._tables))

    def _driver_step(self, updates: dict, upto: Optional[int]) -> Optional[driver.Done]:
        """The step on the driver placement (executor/driver.py), or None to run it on
        Spark."""
        try:
            done = driver.step(self, updates, upto)
            if done is not None:
                limits.check_outputs(self.conf, done.tables, self.steps + 1)
            return done
        except (Py4JJavaError, PySparkException, DiffOverflow) as e:
            raise self._refused(e) from None

    def _refused(self, e: Exception) -> Exception:
        """The StepError for a step that failed in Spark or in a kernel (an analysis error,
        a bug in the plan, stays itself)."""
        if isinstance(e, AnalysisException):
            return e
        return StepError(f"step {self.steps + 1} refused, nothing changed: "
                         f"{first_line(e)}{limits.memory_hint(e)}")

    def _advance(self, changes, pending, logs, commits, holds, upto, started, ruled=None,
                 placement: str = SparkStep.placement) -> StepResult:
        """Commit a step that has succeeded: its state replaces the runner's."""
        self._pending, self._logs = pending, logs
        if ruled is not None:
            ruled.apply()
        self._state.update(commits)
        for handle, since in holds:
            handle.hold(since)
        lower, self.frontier = self.frontier, INFINITY if upto is None else upto
        self.steps += 1
        self._placement = placement
        return StepResult(self.steps, lower, self.frontier, clock.perf_counter() - started, changes,
                          placement=placement)

    def _run(self, step: SparkStep):
        """Every output's changes for the step, and every reduction's pending updates,
        materialised by Spark jobs one at a time (none for what is known to be empty), with
        what the step deferred (spine merges, batches no job read: spine.deferred)."""
        with deferring() as later:
            return self._run_deferring(step, later)

    def _run_deferring(self, step: SparkStep, later: list):
        upto = step.upto
        built, idle = {}, set()
        for name, delta in self._build_all(step).items():
            node = self.plan[name]
            if self._pending[name] is not None:
                built[name] = consolidate(as_frame(self._pending[name]).unionByName(delta),
                                          TIME_COLS)
            elif node in step.empty:
                built[name] = delta  # known to be empty: no job, nothing logged
                idle.add(name)
            else:
                built[name] = delta if node in step.consolidated else \
                    consolidate(delta, TIME_COLS)
        jobs = [(name, df) for name, df in built.items()
                if name not in idle and not is_computed(df)]  # a reduction's own result
        jobs += [(node, df) for node, df in step.pending.items() if df is not None]
        done = dict(zip([k for k, _ in jobs], materialise_all([df for _, df in jobs], STEP)))
        step.commits.update({node: done.get(node) for node in step.pending})
        changes, pending, logs = {}, {}, {}
        for name, df in built.items():
            combined = done.get(name, df)
            if upto is None or name in idle or self.plan[name] not in self._late:
                changes[name], pending[name] = combined, None
            else:
                changes[name] = combined.where(F.col(TIME) < upto)
                pending[name] = combined.where(F.col(TIME) >= upto)
            logs[name] = self._logs[name] if name in idle else \
                self._logs[name].appended(changes[name])
        compute_deferred(later)  # the spines' merges (the logs' too) and unread batches
        return changes, pending, logs

    # ------------------------------------------------------------------ reading outputs
    def _check_output(self, name: str):
        if name not in self.plan:
            raise PlanError(f"unknown output '{name}'; outputs are {sorted(self.plan)}")

    def output(self, name: str) -> DataFrame:
        """Every final change of an output so far: record columns, time, diff (consolidated).
        With diffspark.output.history=current, older changes come summed per record at its
        latest time: their sum, the present contents, is exact; their past times are not."""
        self._check_output(name)
        log = self._logs[name].union()
        return log if log is not None else self.spark.createDataFrame([], self.schemas[name])

    def output_arrow(self, name: str, collect: bool = True) -> Optional[pa.Table]:
        """`output(name)` as Arrow: without Spark where every step so far ran on the driver;
        otherwise collected from Spark, or None when `collect` is False."""
        self._check_output(name)
        log = self._logs[name]
        if not log.batches:
            return pa.Table.from_pylist([], arrow_schema(self.schemas[name]))
        table = log.table()
        return table if table is not None or not collect else self.output(name).toArrow()

    def snapshot(self, name: str, at: int) -> DataFrame:
        """The output collection at time `at` (final only below the frontier): record columns
        and their multiplicity as `count` (`multiplicity` if a record column is `count`)."""
        self._check_output(name)
        if at >= self.frontier:
            raise PlanError(f"snapshot: time {at} is not final yet (frontier {self.frontier})")
        if self.history == "current" and at < self.frontier - 1:
            raise PlanError(f"snapshot: time {at} is past; this runner keeps only the present "
                            f"(time {self.frontier - 1}) of its outputs (rule: "
                            f"{OUTPUT_HISTORY_KEY}=current; set it to all to keep every time)")
        recs = [f.name for f in self.schemas[name].fields if f.name not in (*TIME_COLS, DIFF)]
        label = "multiplicity" if "count" in (r.lower() for r in recs) else "count"
        log = self.output_arrow(name, collect=False)  # driver steps: summed on Arrow, no job
        if log is not None and (table := summed(log.filter(pc.less_equal(log[TIME], at)),
                                                recs, [(DIFF, "sum")], [label])) is not None:
            return as_frame(table)
        return (self.output(name).where(F.col(TIME) <= at)
                .groupBy(*map(linear.q, recs)).agg(F.sum(DIFF).alias(label))
                .where(F.col(label) != 0))

    def explain(self) -> str:
        """The plan as written and as run (after the optimizer, plans/optimizer), and where
        its steps run (the placement rule, and the last step's placement)."""
        return ("== plan ==\n" + ir.explain(self.flow.outputs) +
                "\n== optimized ==\n" + ir.explain(self.plan) +
                "\n== placement ==\n" + driver.describe(self, self._placement))

    def physical_plan(self, name: str) -> str:
        """Spark's executed plan for one step of an output (before consolidation)."""
        self._check_output(name)
        df = self._build_all(self._new_step(self._empty, None, resolving=True))[name]
        return df._jdf.queryExecution().executedPlan().toString()

    # ------------------------------------------------------------------ arrangements
    def arrangement(self, name: str) -> "TraceHandle":
        """A handle on the live arrangement an output names (flow.output(name, arr)), for
        another Dataflow on the same SparkSession to import."""
        self._check_output(name)
        node = self.plan[name]
        if not isinstance(node, ir.Arrange):
            raise PlanError(f"output '{name}' is not an arrangement (use arrange_by_key)")
        return TraceHandle(self, node, name)

    def stats(self) -> dict[str, dict]:
        """Per arrangement: batches, records, bytes, since and upper; `input`, the input it
        indexes through linear stages only, or None where its records are derived."""
        return {operator_name(node): {**trace.stats(), "input": ir.arranged_input(node)}
                for node, trace in self._state.items() if isinstance(trace, Trace)}


class TraceHandle:
    """A reader's hold on a runner's live arrangement: importing runners read it, and while
    the handle is held the trace keeps times distinguishable from `since` on."""

    def __init__(self, runner: "Runner", node: ir.Arrange, name: str):
        self.runner, self.node, self.name = runner, node, name
        self.schema = runner.schemas[name]
        self.keys = list(node.keys) if node.keys is not None else \
            linear.record_columns(runner.output(name), TIME_COLS)
        self.hold(runner.frontier - 1)

    @property
    def trace(self) -> Trace:
        return self.runner._state[self.node]

    def empty(self) -> DataFrame:
        return self.runner.spark.createDataFrame([], self.schema)

    def hold(self, since: int) -> None:
        trace = self.runner._state.get(self.node)
        if trace is not None:
            trace.holds[id(self)] = since

    def release(self) -> None:
        """Drop the hold: the trace may compact past this reader."""
        trace = self.runner._state.get(self.node)
        if trace is not None:
            trace.holds.pop(id(self), None)
