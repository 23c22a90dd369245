"""Linear operators on Spark: a fused chain of join_function stages compiled to Spark SQL.

Expression stages become projections, filters and one `inline` generator each, so Catalyst
collapses the chain into a single whole-stage-codegen pipeline (no Python UDF) and the RAPIDS
plugin can run it; a run of adjacent kernel stages becomes one `mapInArrow` call per
partition (see executor/operators/linear/kernels.py). Time join is `greatest` on the epoch coordinate (a null
element time leaves it unchanged); diff product is `*`, which ANSI mode checks for overflow.
"""
from __future__ import annotations

from pyspark.sql import DataFrame

from executor.arrange.encoding import INTEGRAL
from executor.operators.linear import kernels
from executor.time import DIFF, TIME, element_time_exprs
from plans import ir
from plans.errors import PlanError
from plans.schema import expand_stars


def q(name: str) -> str:
    return f"`{name}`"


def record_columns(df: DataFrame, time_cols: list[str]) -> list[str]:
    return [c for c in df.columns if c not in time_cols and c != DIFF]


def apply(df: DataFrame, stages: tuple[ir.Stage, ...], time_cols: list[str],
          backend: str) -> DataFrame:
    """The update stream `df` (records, time columns, diff) through a chain of stages."""
    for run in runs(stages):
        if isinstance(run[0], ir.Kernel):
            df = kernels.apply(df, run, time_cols, backend)
        else:
            df = _EXPRESSION[type(run[0])](df, run[0], time_cols)
        ir.check_stage_columns(df.columns, time_cols, run[-1])
    return df


def runs(stages: tuple[ir.Stage, ...]) -> list[tuple[ir.Stage, ...]]:
    """The chain cut where it runs apart: each maximal run of kernel stages (one call per
    batch for the run) and each expression stage alone."""
    out, i = [], 0
    while i < len(stages):
        j = i + 1
        if isinstance(stages[i], ir.Kernel):
            while j < len(stages) and isinstance(stages[j], ir.Kernel):
                j += 1
        out.append(tuple(stages[i:j]))
        i = j
    return out


def _map(df, s: ir.Map, time_cols):
    return df.selectExpr(*_starred(df, s.exprs, time_cols), *map(q, time_cols), DIFF)


def _filter(df, s: ir.Filter, time_cols):
    return df.where(_starred(df, [s.expr], time_cols)[0])


def _starred(df, exprs, time_cols) -> list[str]:
    """`exprs` with a `*` standing for the record columns, as in every placement (not for
    the frame's, which has the time and diff too)."""
    return expand_stars(exprs, record_columns(df, time_cols))


def _negate(df, s: ir.Negate, time_cols):
    recs = record_columns(df, time_cols)
    return df.selectExpr(*map(q, recs), *map(q, time_cols), f"-{DIFF} AS {DIFF}")


def _generate(df, generator: str, time_cols, keep_records: bool, stage: ir.Stage,
              allowed: set[str], required: set[str] = frozenset()):
    """One generator over each update; element fields `time` and `diff` (when present and
    allowed) join the time and multiply the diff."""
    saved = [f"__t{i}" for i in range(len(time_cols))]
    recs = record_columns(df, time_cols) if keep_records else []
    g = df.selectExpr(*map(q, recs), *_starred(df, [generator], time_cols),
                      *[f"{q(t)} AS {s}" for t, s in zip(time_cols, saved)], f"{DIFF} AS __d")
    fields = [c for c in g.columns[len(recs):] if c not in saved and c != "__d"]
    special = {f.lower() for f in fields} & {TIME, DIFF}
    if special - allowed or required - special:
        raise PlanError(f"{stage.label()}: element fields {sorted(special)}; rule: "
                        f"allowed {sorted(allowed) or 'none'}, required {sorted(required) or 'none'}")
    out_recs = recs + [f for f in fields if f.lower() not in (TIME, DIFF)]
    times = (element_time_exprs(time_cols, TIME, saved) if TIME in special
             else [f"{s} AS {q(t)}" for s, t in zip(saved, time_cols)])
    out = g.selectExpr(*map(q, out_recs), *times,
                       f"__d * {DIFF} AS {DIFF}" if DIFF in special else f"__d AS {DIFF}")
    return out.where(f"{DIFF} IS NOT NULL") if DIFF in special else out


def _flat_map(df, s: ir.FlatMap, time_cols):
    return _generate(df, f"inline({s.expr})", time_cols, False, s, set())


def _explode(df, s: ir.Explode, time_cols):
    return _generate(df, f"inline({s.expr})", time_cols, False, s, {DIFF}, {DIFF})


def _join_function(df, s: ir.JoinFunction, time_cols):
    return _generate(df, f"inline({s.expr})", time_cols, False, s, {TIME, DIFF})


def _temporal_filter(df, s: ir.TemporalFilter, time_cols):
    """join_function with elements (lower, +1) and (upper, -1); a record whose upper <= lower
    is never present, and a null upper never retracts."""
    lo, hi = (_bound(df, e, s, time_cols) for e in (s.lower, s.upper))
    enter = f"named_struct('time', {lo}, 'diff', 1L)"
    elements = f"IF({hi} IS NULL, array({enter}), array({enter}, named_struct('time', {hi}, 'diff', -1L)))"
    live = df.where(f"NOT coalesce({hi} <= {lo}, false)")
    return _generate(live, f"inline({elements})", time_cols, True, s, {TIME, DIFF})


def _bound(df, expr, s, time_cols) -> str:
    if expr is None:
        return "CAST(NULL AS BIGINT)"
    expr = _starred(df, [expr], time_cols)[0]
    kind = df.selectExpr(expr).schema[0].dataType
    if not isinstance(kind, INTEGRAL):
        raise ir.temporal_bound_error(s, expr, kind.simpleString())
    return f"CAST(({expr}) AS BIGINT)"


_EXPRESSION = {
    ir.Map: _map,
    ir.Filter: _filter,
    ir.Negate: _negate,
    ir.FlatMap: _flat_map,
    ir.Explode: _explode,
    ir.JoinFunction: _join_function,
    ir.TemporalFilter: _temporal_filter,
}
