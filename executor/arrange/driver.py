"""Arrangements on the driver placement: a step's batch appended to the trace's mirror (sorted
int64 runs, executor/arrange/mirror.py), and another runner's arrangement read through its
mirror. What the step's operators read of an arrangement is its `View`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pyspark.sql.types import StructType

from executor.arrange.changes import Changes, Unsupported, updates_schema
from executor.arrange.encoding import NoCode
from executor.arrange.mirror import Mirror, run_of
from executor.arrange.trace import Trace
from executor.runtime.config import host_lookup_rows, host_mirror_rows
from executor.time import ITERATION, TIME
from plans import ir
from plans.ir import PlanError


@dataclass
class View:
    """An arrangement in a driver step: its trace, its mirror before the step, the step's
    batch, and what the step's queries read (the mirror and the batch, unmerged)."""

    trace: Trace
    old: Mirror
    batch: Changes
    read: Optional[Mirror]


def mirror(step, node: ir.Arrange, trace: Trace, columns: list[str], nkeys: int,
           schema: StructType) -> Mirror:
    """The trace's mirror, built from its Spark batches (updates with `schema`; one job)
    when it has none, or over them (no job; a job per lookup) when they hold more than
    diffspark.host.lookup_rows records; kept on the trace (in place: it is the same
    collection)."""
    if trace.mirror is None:
        conf = step.runner.conf
        batches = trace.synced().spine.counted().batches  # the decision needs true sizes
        records = sum(s for s, _ in batches)
        if not trace.mirrorable:
            raise Unsupported(f"{node.label()}: values without codes")
        if records > host_lookup_rows(conf):
            trace.mirror = Mirror.over(step.xp, batches, columns, nkeys, step.encoder, schema,
                                       host_mirror_rows(conf))
            return trace.mirror
        if records > host_mirror_rows(conf):
            raise Unsupported(f"{node.label()}: no mirror of {records} records")
        try:
            trace.mirror = Mirror.of(step.xp, trace.batches, columns, nkeys, step.encoder,
                                     schema)
        except NoCode as e:  # a value without a code: this trace is never mirrored
            trace.mirrorable = False
            raise Unsupported(str(e)) from None
    return trace.mirror


def arrange(step, node: ir.Arrange) -> Changes:
    """The step's updates as the arrangement's new batch; the new mirror holds them.
    An arrangement that only counts read holds its key columns alone
    (executor/operators/reduce/counted.py): their diffs summed per key are the count's
    totals, which the count appends as its updates fall due (operators/reduce/totals.py), as
    on Spark. An arrangement inside an iterate scope keeps the iteration as its mirror's last
    column and compacts only the outer time, to lower - 1: rounds still tell the step's
    epochs and every iteration apart."""
    runner = step.runner
    batch = step.changes(node.input)
    keys = list(node.keys) if node.keys is not None else batch.names
    inner = [ITERATION] if batch.inner else []
    trace = step.state.get(node) or Trace(keys, [TIME, *inner], runner.partitions,
                                                     backend=runner.backend)
    since = trace.next_since(step.since)
    if node in runner._counted:  # the count appends its due updates (reduce/totals.py)
        batch = step.consolidated(batch)
        old = mirror(step, node, trace, keys, len(keys),
                     updates_schema([batch.schema[k] for k in keys]))
        step.views[node] = View(trace, old, batch, None)
        step.commits[node] = trace.driver_appended(old, step.upto, since)
        return batch
    records = keys + [c for c in batch.names if c not in keys]
    columns = records + inner
    old = mirror(step, node, trace, columns, len(keys), batch.schema)
    if not batch.size:  # nothing to sort or append: the trace only moves on
        step.views[node] = View(trace, old, batch, old)
        step.commits[node] = trace.driver_appended(old, step.upto, since, step.delta(batch))
        return batch
    run = run_of(step.xp, [*map(batch.col, records), *batch.inner], batch.t, batch.d)
    # the batch is the run's updates (consolidated once, in the arrangement's order)
    batch = Changes.of(batch.schema, [run.cols[records.index(c)] for c in batch.names],
                       [run.t, *run.cols[len(records):]], run.d,
                       canonical=not inner and records == batch.names)
    step.views[node] = View(trace, old, batch, old.reading(run))
    step.commits[node] = trace.driver_appended(old.appended(run, since), step.upto, since,
                                             step.delta(batch))
    return batch


def imported(step, node: ir.Imported) -> Changes:
    """Another runner's arrangement read through its mirror, as executor/runner.py
    `_import` reads it on Spark: updates before this runner's frontier are the old
    collection, the step's interval its batch; the reader's hold then moves to the
    step's end, so the source compacts only to the least hold."""
    handle, runner = node.handle, step.runner
    if step.upto > handle.runner.frontier:
        raise PlanError(f"{node.label()}: upto {step.upto} is beyond the source "
                        f"runner's frontier {handle.runner.frontier}")
    if handle.runner.encoder is not step.encoder:
        raise Unsupported(f"{node.label()}: the source codes values with another encoder")
    schema = runner.node_schemas[node]
    names = [f.name for f in schema.fields[:-2]]
    trace = handle.trace
    source = mirror(step, handle.node, trace, list(handle.keys) + [
        c for c in names if c not in handle.keys], len(handle.keys), handle.schema)
    every = source.all()
    now = step.xp.nonzero(step.xp.logical_and(every.t >= step.lower, every.t < step.upto))[0]
    batch = Changes(schema, [step.xp.take(every.cols[source.columns.index(c)], now)
                             for c in names],
                    step.xp.take(every.t, now), step.xp.take(every.d, now))
    step.views[node] = View(trace, source.below(step.lower), batch, source.below(step.upto))
    step.holds.append((handle, step.upto - 1))
    return batch
