"""Joins over arrangements with the delta rule (DESIGN.md section 6).

A join is bilinear in its inputs' updates: each pair of updates (a, ta, da), (b, tb, db) with
equal keys contributes (a ++ b, ta v tb, da * db). So a step's new output is
dA x (B_old + dB) + A_old x dB: every new pair exactly once, whatever the times. Each term
joins one arranged batch with another; both are hash-partitioned by the key into P parts and
sorted, so Spark plans a SortMergeJoin with no Exchange and no Sort on either side. A band
join's comparison joins the key's equality as one more condition of the pair.
"""
from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import DataFrame, functions as F

from executor.arrange.trace import View
from executor.operators.linear.spark import q, record_columns
from executor.time import DIFF
from plans import ir
from plans.errors import PlanError

COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
           "=": operator.eq}


def output_columns(node: ir.Join, lrec: list[str], rrec: list[str]) -> list[str]:
    """on columns, the left's others, the right's others (or the left's own order), from
    the two sides' record columns."""
    for side, recs in (("left", lrec), ("right", rrec)):
        missing = [k for k in node.on if k not in recs]
        if missing:
            raise PlanError(f"{node.label()}: the {side} input has no column {missing}")
    if node.left_order:
        return lrec
    lo = [c for c in lrec if c not in node.on]
    ro = [c for c in rrec if c not in node.on]
    clash = sorted({c.lower() for c in lo} & {c.lower() for c in ro})
    if clash:
        raise PlanError(f"{node.label()}: both sides have columns {clash}; "
                        f"rule: rename one side with map first")
    return list(node.on) + lo + ro


def pair(node: ir.Join, a: DataFrame, b: DataFrame, time_cols, out_cols) -> DataFrame:
    """One term of the delta rule: two arranged batches joined on the key."""
    l, r = a.alias("l"), b.alias("r")
    cond = [F.col(f"l.{q(k)}") == F.col(f"r.{q(k)}") for k in node.on]
    if node.band is not None:  # Spark's comparison, its casts included
        x, v = F.col(f"l.{q(node.band.column)}"), F.col(f"r.{q(node.band.value)}")
        cond.append(COMPARE[node.band.op](x, v))
    lrec = set(record_columns(a, time_cols))
    cols = [F.col(f"l.{q(c)}" if c in lrec else f"r.{q(c)}").alias(c) for c in out_cols]
    times = [F.greatest(F.col(f"l.{q(t)}"), F.col(f"r.{q(t)}")).alias(t) for t in time_cols]
    return l.hint("merge").join(r, cond, "inner").select(*cols, *times,
                                           (F.col(f"l.{DIFF}") * F.col(f"r.{DIFF}")).alias(DIFF))


def delta(node: ir.Join, left: View, right: View, time_cols, empty_left, empty_right):
    """dA x (B_old + dB) + A_old x dB."""
    out_cols = output_columns(node, record_columns(empty_left, time_cols),
                              record_columns(empty_right, time_cols))
    terms = [(a, b) for a in left.delta for b in right.all()]
    terms += [(a, b) for a in left.old for b in right.delta]
    frames = [pair(node, a, b, time_cols, out_cols) for a, b in terms]
    if not frames:
        return pair(node, empty_left, empty_right, time_cols, out_cols)
    return reduce(DataFrame.union, frames)
