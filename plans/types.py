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
        if cols is None:  # a map typing every column itself (CASTs) needs no input's
            cols = _map(stage.exprs, []) if isinstance(stage, ir.Map) else None
            if cols is None or None in (t for _, t in cols):
                return None
            continue
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
    `types`), a CAST, a literal, unary minus and + - * / over those (Spark's arithmetic
    types, DECIMAL precision and scale included), a comparison or other predicate, a CASE
    whose branches have one type, a date or time part (year(d), ...), length, upper and
    lower, abs, and coalesce of arguments of one type, parenthesised or not; else None."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Column) and not e.table:
        return types.get(e.name.lower())
    if isinstance(e, exp.Cast):  # try_cast too, and Spark's CAST as sqlglot reads it
        return e.to.sql("spark")
    if isinstance(e, exp.Literal):
        return "STRING" if e.is_string else _number_type(e.this)
    if isinstance(e, exp.Neg):  # Spark's parser reads -2147483648 as one INT literal
        if isinstance(e.this, exp.Literal) and not e.this.is_string:
            return _number_type(e.this.this, negative=True)
        return expression_type(e.this, types)
    if isinstance(e, _PREDICATES):
        return "BOOLEAN"
    if isinstance(e, exp.Case):  # its branches' type where they have one (NULLs aside)
        branches = [b.args.get("true") for b in e.args.get("ifs") or []] + [
            e.args.get("default")]
        found = [expression_type(x, types) for x in branches
                 if x is not None and not isinstance(x, exp.Null)]
        return found[0] if found and None not in found and all(
            same_type(found[0], t) for t in found) else None
    if isinstance(e, _INT_FUNCTIONS):
        return "INT"
    if isinstance(e, (exp.Upper, exp.Lower)):
        return "STRING"
    if isinstance(e, (exp.Abs, exp.Coalesce)):  # the argument's type, or all the arguments'
        found = [expression_type(x, types) for x in [e.this, *e.expressions]
                 if not isinstance(x, exp.Null)]
        return found[0] if found and len(set(found)) == 1 else None
    if isinstance(e, exp.Mod):  # integral % integral: the wider type (others unclaimed)
        a, b = (expression_type(x, types) for x in (e.this, e.expression))
        return max(a, b, key=INTEGRAL.index) if a in INTEGRAL and b in INTEGRAL else None
    op = _ARITHMETIC.get(type(e))
    if op is None or isinstance(e.expression, exp.Interval):
        return None
    a, b = (expression_type(x, types) for x in (e.this, e.expression))
    if a in INTEGRAL and b in INTEGRAL:
        return "DOUBLE" if op == "divide" else max(a, b, key=INTEGRAL.index)
    if a is None or b is None or not {a, b} <= {*INTEGRAL, "DOUBLE"} | {
            t for t in (a, b) if t.startswith("DECIMAL")}:
        return None
    if "DOUBLE" in (a, b):
        return "DOUBLE"
    x, y = _decimal_operand(e.this, a), _decimal_operand(e.expression, b)
    if x is None or y is None:
        return None
    p, s = adjusted(*decimal_result(op, x, y))
    return f"DECIMAL({p}, {s})"


_INT_FUNCTIONS = (exp.Year, exp.Quarter, exp.Month, exp.Day, exp.DayOfMonth, exp.DayOfWeek,
                  exp.DayOfYear, exp.WeekOfYear, exp.Hour, exp.Length)
_PREDICATES = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.And,
               exp.Or, exp.Not, exp.Is, exp.In, exp.Between, exp.Like, exp.Boolean)
_ARITHMETIC = {exp.Add: "add", exp.Sub: "subtract", exp.Mul: "multiply", exp.Div: "divide"}
INTEGRAL_DECIMAL = {"TINYINT": (3, 0), "SMALLINT": (5, 0), "INT": (10, 0), "BIGINT": (20, 0)}


def _number_type(text: str, negative: bool = False) -> Optional[str]:
    """A numeric literal's Spark type: INT or BIGINT by size, DECIMAL(digits, scale) for
    1.50, DOUBLE with an exponent; None beyond those (a suffix, a huge integer)."""
    if text.isdigit():
        v = -int(text) if negative else int(text)
        return "INT" if -2**31 <= v < 2**31 else "BIGINT" if -2**63 <= v < 2**63 else None
    whole, dot, frac = text.partition(".")
    if dot and (whole + frac).isdigit():
        digits = len((whole + frac).lstrip("0")) or 1
        return "DECIMAL({}, {})".format(max(digits, len(frac)), len(frac)) \
            if max(digits, len(frac)) <= MAX_PRECISION else None
    return "DOUBLE" if "e" in text.lower() else None


def _decimal_operand(e: exp.Expression, t: str) -> Optional[tuple[int, int]]:
    """(precision, scale) an operand has in decimal arithmetic: an integral literal the
    tightest (Spark's DecimalType.fromLiteral), an integral column DecimalType.forType; None
    for a suffixed literal (1L, a CAST of a literal), whose treatment is not certain."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal):
        e = e.this  # -1 is one literal to Spark's parser; -(1) and -(-1) are not
    if t in INTEGRAL:
        if isinstance(e, exp.Literal):
            return max(len(e.this.lstrip("0")), 1), 0
        if isinstance(e, exp.Cast) and isinstance(e.this, exp.Literal):
            return None
        return INTEGRAL_DECIMAL[t]
    return _decimal(t)


def decimal_result(op: str, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """Spark's DecimalPrecision: (precision, scale) of DECIMAL a `op` b (add, subtract,
    multiply, divide), before the 38-digit adjustment."""
    (p1, s1), (p2, s2) = a, b
    if op == "multiply":
        return p1 + p2 + 1, s1 + s2
    if op == "divide":
        scale = max(6, s1 + p2 + 1)
        return p1 - s1 + s2 + scale, scale
    scale = max(s1, s2)
    return max(p1 - s1, p2 - s2) + scale + 1, scale


def adjusted(precision: int, scale: int) -> tuple[int, int]:
    """Spark's DecimalType.adjustPrecisionScale under allowPrecisionLoss (the default): a
    result above 38 digits keeps its integral digits and at least min(scale, 6) decimals."""
    if precision <= MAX_PRECISION:
        return precision, scale
    return MAX_PRECISION, max(MAX_PRECISION - (precision - scale), min(scale, 6))


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
    p, s = ([int(x.this.this) for x in d.expressions] + [10, 0][len(d.expressions):])[:2]
    return p, s  # DECIMAL is DECIMAL(10, 0), DECIMAL(p) is DECIMAL(p, 0), as in Spark


def common_type(a: Optional[str], b: Optional[str]) -> Optional[str]:
    """The type Spark compares `a = b` in (its implicit widening of the two sides) where it
    holds every value of both exactly: either type where they are one, the wider integer,
    and for a decimal and an integer or another decimal DECIMAL(range + scale, scale) of
    the larger integral range and scale (DecimalPrecision.widerDecimalType) within 38
    digits; None otherwise (an unknown type, another pair, a wider decimal past 38)."""
    if a is None or b is None:
        return None
    if same_type(a, b):
        return a
    if a in INTEGRAL and b in INTEGRAL:
        return max(a, b, key=INTEGRAL.index)
    da, db = (_decimal(t) or INTEGRAL_DECIMAL.get(t) for t in (a, b))
    if da is None or db is None:
        return None
    scale = max(da[1], db[1])
    precision = max(da[0] - da[1], db[0] - db[1]) + scale
    return f"DECIMAL({precision}, {scale})" if precision <= MAX_PRECISION else None


def same_type(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two known type names name one type (DECIMAL(p,s) however spaced)."""
    if a is None or b is None:
        return False
    da, db = _decimal(a), _decimal(b)
    return da == db if da or db else a.upper() == b.upper()


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


ORDERED_ALIKE = ("DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "DOUBLE", "FLOAT")


def band_comparable(column: Optional[str], value: Optional[str]) -> bool:
    """Whether a band join may compare a `column` of this type with a `value` of that one
    (ir.Band): two exact numbers (integers and decimals, compared after a power-of-ten
    rescale, as Spark compares them) or one ordered type on both sides, whose codes sort as
    its values (executor/arrange/encoding.py). Others, a STRING or a DATE against a
    TIMESTAMP, stay a join and a filter."""
    def exact(t):
        return t in INTEGRAL or _decimal(t) is not None
    return (exact(column) and exact(value)) or (column == value and column in ORDERED_ALIKE)
