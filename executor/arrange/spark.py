"""Arrangements on the Spark placement: a step's updates arranged into a new batch of the
node's trace (hash-partitioned by key and sorted, executor/arrange/trace.py), and another
runner's live trace read in place. The driver placement's are driver.py."""
from __future__ import annotations

from pyspark.sql import DataFrame, functions as F

from executor.arrange.trace import Trace, View, arrange as arranged_batch
from executor.operators.linear import spark as linear
from executor.time import TIME
from plans import ir
from plans.errors import PlanError


def arrange(runner, node: ir.Arrange, delta: DataFrame, step) -> DataFrame:
    """Arrange the step's updates into a new batch of the node's trace (one per node)."""
    keys = list(node.keys) if node.keys is not None else \
        linear.record_columns(delta, step.time_cols)
    missing = [k for k in keys if k not in delta.columns]
    if missing:
        raise PlanError(f"{node.label()}: no column {missing} to arrange by")
    trace = step.state.get(node) or Trace(keys, step.time_cols, runner.partitions,
                                                 backend=runner.backend)
    if step.resolving:
        step.views[node] = View(keys, [], [])
        return delta
    if node in runner._counted:  # its counts keep per-key totals in its place
        step.views[node] = View(keys, trace.batches, [] if node in step.empty else [delta])
        step.commits[node] = trace
        return delta
    if node in step.empty:
        step.views[node] = View(keys, trace.batches, [])
        step.commits[node] = trace.appended(None, 0, step.upper, step.since)
        return delta
    batch, size = arranged_batch(delta, keys, step.time_cols, runner.partitions,
                                 rows=step.expected(node), backend=runner.backend,
                                 estimate=step.total)
    step.views[node] = View(keys, trace.batches, [batch] if size else [])
    step.commits[node] = trace.appended(batch, size, step.upper, step.since)
    return batch

def imported(runner, node: ir.Imported, step) -> DataFrame:
    """Read another runner's live trace: batches before the frontier as `old`, the
    step's interval as `delta` (filters keep the arranged layout: no copy)."""
    handle = node.handle
    if step.resolving:
        step.views[node] = View(list(handle.keys), [], [])
        return handle.empty()
    if step.upper > handle.runner.frontier:
        raise PlanError(f"{node.label()}: upto {step.upper} is beyond the source "
                        f"runner's frontier {handle.runner.frontier}")
    lo, hi = F.col(TIME) >= runner.frontier, F.col(TIME) < step.upper
    batches = handle.trace.batches
    step.views[node] = View(list(handle.keys), [b.where(~lo) for b in batches],
                            [b.where(lo & hi) for b in batches])
    step.holds.append((handle, step.upper - 1))
    return step.views[node].delta_frame(handle.empty())
