"""Outer joins lowered to the IR every placement already runs: the inner join, plus each
preserved side's records without a match (antijoin) padded with typed NULLs for the other
side's columns, concatenated. The optimizer and both placements get them for free; the
padding's types are read from the plan (plans/types.py) when it is built.
"""
from __future__ import annotations

from .errors import PlanError
from .types import columns_of

HOW = ("inner", "left", "right", "full")


def outer_join(left, right, on: tuple[str, ...], how: str, inner):
    """`inner` (left.join(right, on)) plus the unmatched records of the preserved sides, in
    the inner join's column order: on columns, left's others, right's others. A null key
    matches nothing, so its record is unmatched and padded, as in SQL."""
    lcols, rcols = _columns(left, on, how, "left"), _columns(right, on, how, "right")
    lnames, rnames = {n for n, _ in lcols}, {n for n, _ in rcols}
    clash = sorted((lnames & rnames) - set(on))
    if clash:
        raise PlanError(f"join how={how!r}: column {clash} is on both sides (rule: rename "
                        f"one side with map)")
    keys = [f"`{k}`" for k in on]
    parts = [inner]
    if how in ("left", "full"):
        parts.append(left.antijoin(right, on).map(
            *keys, *_kept(lcols, on), *_nulls(rcols, on, how, "right")))
    if how in ("right", "full"):
        parts.append(right.antijoin(left, on).map(
            *keys, *_nulls(lcols, on, how, "left"), *_kept(rcols, on)))
    return parts[0].concat(*parts[1:])


def _columns(side, on, how, which):
    cols = columns_of(side.node)
    if cols is None:
        raise PlanError(f"join how={how!r}: the {which} side's column names are not known "
                        f"when the plan is built (rule: name every expression of a map "
                        f"with AS)")
    missing = [k for k in on if k not in {n for n, _ in cols}]
    if missing:
        raise PlanError(f"join how={how!r}: the {which} side has no column {missing}")
    return cols


def _kept(cols, on):
    return [f"`{n}`" for n, _ in cols if n not in on]


def _nulls(cols, on, how, which):
    unknown = [n for n, t in cols if n not in on and t is None]
    if unknown:
        raise PlanError(f"join how={how!r}: the type of the {which} side's column "
                        f"'{unknown[0]}' is not known when the plan is built, and its "
                        f"unmatched rows need a typed NULL (rule: give it with CAST(... AS "
                        f"type) AS {unknown[0]} in a map)")
    return [f"CAST(NULL AS {t}) AS `{n}`" for n, t in cols if n not in on]
