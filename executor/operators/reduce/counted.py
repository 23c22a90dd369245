"""A count keeps per-key totals, not its input (DESIGN.md section 6, the reduce family).

A count depends only on each key's summed multiplicity. So when counts are the only readers
of an arrangement, the runner never builds it: the arrangement's trace holds, instead of the
input's updates, rows (key columns, time, diff) whose diffs sum per key to the key's count
as of the last frontier. Each step appends the count's own output changes weighted by the
count (+new, -old per touched key: no extra job), and merging compacts them to a row per
key, so the state grows with the keys, not the input (a triangle count keeps one row, not
every triangle). A step reads the input's changes and the totals of the keys they touch,
as the Spark placement's running totals do (spark_totals.py `count_changes`).
"""
from __future__ import annotations

from pyspark.sql import DataFrame, functions as F

from executor.arrange.spine import STEP, materialise_counted
from executor.arrange.trace import Trace
from executor.operators.linear.spark import q
from executor.time import DIFF, TIME
from plans import ir


def counted(plan: dict) -> set:
    """Arrangements that only counts read: not an output (handles import those), not an
    input's arrangement a query may ask for (queries arrange their inputs on demand)."""
    nodes = ir.topological(plan.values())
    readers: dict[ir.Node, list[ir.Node]] = {}
    for n in nodes:
        for c in n.children():
            readers.setdefault(c, []).append(n)
    queried = {i for n in nodes if isinstance(n, ir.Query) for i in n.inputs}
    return {a for a, rs in readers.items()
            if isinstance(a, ir.Arrange) and a.keys is not None and a not in plan.values()
            and a.input not in queried
            and all(isinstance(r, ir.Reduce) and r.reduction.kind == "count" for r in rs)}


def appended(out: DataFrame, totals: Trace, upper: int) -> tuple[DataFrame, Trace]:
    """The count's changes (key columns, count, time, diff), materialised, and the totals
    with them added (times below `upper`; merges compact to upper - 1)."""
    out, size = materialise_counted(out, STEP)
    keys = list(totals.keys)
    batch = out.select(*map(q, keys), TIME, (F.col("count") * F.col(DIFF)).alias(DIFF))
    return out, totals.appended(batch, size, upper, upper - 1)
