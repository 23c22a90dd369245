"""Record columns of a plan node, with their Spark types where the plan alone tells them.

Outer joins pad the missing side with typed NULLs and SQL's avg picks its result type by its
argument's, both when the plan is built, without Spark. Types come only from what is certain:
declared schemas, columns passed through, CASTs, and the reduce family's result rules (Spark's
Sum and Average). Any other expression's type is None (unknown): a caller that needs it
refuses the plan and asks for a CAST, rather than guessing.
"""
from __future__ import annotations

from typing import Optional

import sqlglot
from sqlglot import exp

from . import ir
from .schema import split_top_level

Columns = list[tuple[str, Optional[str]]]  # (name, Spark type text or None)
INTEGRAL = ("TINYINT", "SMALLINT", "INT", "BIGINT")
MAX_PRECISION = 38


def spark_type(text: str) -> str:
    """A Spark type in one canonical spelling ("decimal(10,2)" -> "DECIMAL(10, 2)")."""
    return exp.DataType.build(text, dialect="spark").sql("spark")


def ddl_columns(ddl: str) -> Columns:
    """(name, type) of each column of a Spark DDL schema."""
    out = []
    for col in split_top_level(ddl):
        if col.startswith("`"):
            end = col.index("`", 1)
            name, rest = col[1:end], col[end + 1:]
        else:
            name, _, rest = col.partition(" ")
            name = name.rstrip(":")
        out.append((name, spark_type(rest.strip().lstrip(":").strip())))
    return out


def columns_of(node: ir.Node) -> Optional[Columns]:
    """The node's record columns, or None where a column's name is decided by the executor
    (an unaliased expression, a generator, an imported trace)."""
    if isinstance(node, ir.Input):
        return ddl_columns(node.schema)
    if isinstance(node, (ir.Arrange, ir.Consolidate, ir.Concat)):
        return columns_of(node.children()[0])
    if isinstance(node, ir.Iterate):
        return columns_of(node.input)
    if isinstance(node, ir.Linear):
        return _linear(node)
    if isinstance(node, ir.Join):
        left, right = columns_of(node.left), columns_of(node.right)
        if left is None or right is None:
            return None
        if node.left_order:
            return left
        lt, rt = dict(left), dict(right)
        if any(k not in lt or k not in rt for k in node.on):
            return None
        return ([(k, lt[k] if lt[k] == rt[k] else None) for k in node.on]
                + [c for c in left if c[0] not in node.on]
                + [c for c in right if c[0] not in node.on])
    if isinstance(node, ir.Reduce):
        return _reduce(node)
    if isinstance(node, ir.Query):
        inputs = dict(zip(node.relations, (columns_of(c) for c in node.inputs)))
        out = []
        for v in node.query.head:
            rel, k = node.query.binding(v)
            cols = inputs[rel]
            out.append((v, cols[k][1] if cols is not None and k < len(cols) else None))
        return out
    return None


def _linear(node: ir.Linear) -> Optional[Columns]:
    cols = columns_of(node.input)
    for stage in node.stages:
        if cols is None:
            return None
        if isinstance(stage, ir.Map):
            cols = _map(stage.exprs, cols)
        elif isinstance(stage, ir.Kernel):
            cols = ddl_columns(stage.schema)
        elif not isinstance(stage, (ir.Filter, ir.Negate, ir.TemporalFilter)):
            return None
    return cols


def _map(exprs, cols: Columns) -> Optional[Columns]:
    types = {n.lower(): t for n, t in cols}
    out = []
    for text in exprs:
        try:
            e = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.ParseError:
            return None
        if isinstance(e, exp.Alias):
            name, e = e.alias, e.this
        elif isinstance(e, exp.Column) and not e.table:
            name = e.name
        else:
            return None
        out.append((name, expression_type(e, types)))
    return out


def expression_type(e: exp.Expression, types: dict[str, Optional[str]]) -> Optional[str]:
    """The Spark type of `e` where certain: a column of known type (by lower-case name in
    `types`), a CAST, a parenthesised one of those; else None."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Column) and not e.table:
        return types.get(e.name.lower())
    if isinstance(e, exp.Cast):  # try_cast too, and Spark's CAST as sqlglot reads it
        return e.to.sql("spark")
    return None


def _reduce(node: ir.Reduce) -> Optional[Columns]:
    cols = columns_of(node.input)
    if cols is None:
        return None
    red, types = node.reduction, {n: t for n, t in cols}
    by = [(b, types.get(b)) for b in node.by]
    if red.kind == "count":
        return by + [("count", "BIGINT")]
    if red.kind in ("min", "max"):
        return by + [(red.column, types.get(red.column))]
    if red.kind == "sum":
        return by + [(red.column, sum_type(types.get(red.column)))]
    if red.kind == "aggregate":
        return by + [(n, "BIGINT" if k == "count" else sum_type(types.get(c)) if k == "sum"
                      else types.get(c)) for n, k, c in red.parts]
    if red.kind == "kernel":
        return by + ddl_columns(red.schema)
    return cols  # distinct, threshold, top_k keep the input's records


def _decimal(t: Optional[str]) -> Optional[tuple[int, int]]:
    if t is None or not t.startswith("DECIMAL"):
        return None
    d = exp.DataType.build(t, dialect="spark")
    p, s = (int(x.this.this) for x in d.expressions) if d.expressions else (10, 0)
    return p, s


def sum_type(t: Optional[str]) -> Optional[str]:
    """Spark's Sum result type: integral -> BIGINT, DECIMAL(p, s) -> DECIMAL(p + 10, s)
    (at most 38), FLOAT/DOUBLE -> DOUBLE."""
    if t in INTEGRAL:
        return "BIGINT"
    if t in ("FLOAT", "DOUBLE"):
        return "DOUBLE"
    dec = _decimal(t)
    return None if dec is None else f"DECIMAL({min(MAX_PRECISION, dec[0] + 10)}, {dec[1]})"


def avg_type(t: Optional[str]) -> Optional[str]:
    """Spark's Average result type: DECIMAL(p, s) -> DECIMAL(p + 4, s + 4) (bounded to 38),
    other numbers -> DOUBLE."""
    if t in INTEGRAL or t in ("FLOAT", "DOUBLE"):
        return "DOUBLE"
    dec = _decimal(t)
    if dec is None:
        return None
    return "DECIMAL({}, {})".format(*_bounded(dec[0] + 4, dec[1] + 4))


def _bounded(precision: int, scale: int) -> tuple[int, int]:
    """Spark's DecimalType.bounded: each of precision and scale capped at 38."""
    return min(precision, MAX_PRECISION), min(scale, MAX_PRECISION)
