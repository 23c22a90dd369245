"""Linear stages (map, filter, negate, temporal_filter) evaluated on Arrow, without Spark.

The driver placement runs a step in this process; handing a few rows to Catalyst costs a py4j
round trip and an analysis per operator. This compiles the common forms of Spark SQL
expressions (parsed by sqlglot) to pyarrow.compute with Spark's types and results. What it
cannot match exactly raises NotCompiled (at compile time) or Fallback (rows at run time whose
Spark answer is an error, or a case not reproduced): the caller then uses Catalyst, which gives
Spark's own answer or error, so ANSI on or off both stay exact.

Subset: column refs, literals (INT/BIGINT by size, 1L/1S/1Y, 1.5 as DECIMAL(2,1), 1e3 as
DOUBLE, strings, TRUE/FALSE, NULL, DATE '...', TIMESTAMP '...'), + - * % (integral), / (to
DOUBLE), unary -, abs over TINYINT..BIGINT, DOUBLE and DECIMAL (Spark's precision and scale
up to 38), sqrt of a DOUBLE, comparisons and <=>, AND/OR/NOT, IS [NOT] NULL, IN, BETWEEN,
CASE, IF, COALESCE, greatest/least (integral, DECIMAL, DATE, TIMESTAMP),
upper/lower (ASCII), length, concat/||, substring, CAST among integral, DOUBLE, DECIMAL,
BOOLEAN, STRING, DATE and TIMESTAMP where exact (those that read the session's time zone,
a DATE to or from a TIMESTAMP and TIMESTAMP literals, only where it is UTC); DECIMAL results above 38 digits with Spark's
adjusted scale and DECIMAL division (HALF_UP), STRING LIKE 'pattern', DATE +/- INTERVAL 'n'
DAY | MONTH | YEAR, EXTRACT and year/month/day/quarter of a DATE, to_json(struct(...)) of integral, BOOLEAN, STRING, DECIMAL and DATE
fields, and lateral aliases (a projection naming its earlier outputs), as the SQL front end
(plans/sql.py) writes them (tests/test_expressions.py proves each).
"""
from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Context, Decimal
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from executor.arrange.encoding import NoCode, decimal_array, decimal_words, per_schema, unscaled
from plans import ir
from plans.types import INTEGRAL_DECIMAL, adjusted, decimal_result

DIFF = "diff"


class NotCompiled(Exception):
    """This expression or stage chain has no Arrow form here: evaluate it with Catalyst."""


class Fallback(Exception):
    """These rows hit a case whose Spark behaviour is not reproduced (an ANSI error such as
    overflow, a failing cast, a division by zero, non-ASCII case mapping): re-run them on
    Catalyst, which raises Spark's error or gives Spark's answer."""


# --------------------------------------------------------------------------- types
INTEGRAL = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
DOUBLE = pa.float64()
STRING = pa.string()
BOOL = pa.bool_()
DATE = pa.date32()
TIMESTAMP = pa.timestamp("us", tz="UTC")
NULL = pa.null()
MAX_PRECISION = 38
# Decimal arithmetic here is exact: Python's default context would round to 28 digits.
_EXACT = Context(prec=2 * MAX_PRECISION + 4)
_BOUNDS = {t: (-(2 ** (8 * w - 1)), 2 ** (8 * w - 1) - 1)
           for t, w in zip(INTEGRAL, (1, 2, 4, 8))}
_SQL_NAMES = {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int",
              pa.int64(): "bigint", DOUBLE: "double", STRING: "string", BOOL: "boolean",
              DATE: "date", TIMESTAMP: "timestamp", NULL: "void"}
# Spark's DecimalType.forType: the decimal an integral column widens to.
_INTEGRAL_DECIMAL = {t: INTEGRAL_DECIMAL[_SQL_NAMES[t].upper()] for t in INTEGRAL}


def _integral(t) -> bool:
    return t in INTEGRAL


def _decimal(t) -> bool:
    return pa.types.is_decimal128(t)


def _numeric(t) -> bool:
    return _integral(t) or _decimal(t) or t == DOUBLE


def simple_string(t) -> str:
    """Spark's simpleString of a type (for error messages that match linear.py's)."""
    return f"decimal({t.precision},{t.scale})" if _decimal(t) else _SQL_NAMES.get(t, str(t))


def _input_type(t: pa.DataType) -> pa.DataType:
    """The compute type of an input column: Spark's types as Arrow, others not compiled."""
    if pa.types.is_large_string(t) or t == STRING:
        return STRING
    if pa.types.is_timestamp(t):
        if t.unit == "us" and t.tz in ("UTC", "+00:00"):
            return TIMESTAMP
        raise NotCompiled(f"timestamp column type {t}")
    if t in INTEGRAL or t in (DOUBLE, BOOL, DATE, NULL) or _decimal(t):
        return t
    raise NotCompiled(f"column type {t}")


@dataclass(frozen=True)
class Expr:
    """A compiled expression: its Spark type, its evaluator over a table, and whether it is
    a literal (its value kept for Spark's literal typing rules)."""
    type: pa.DataType
    fn: Callable[[pa.Table], pa.Array]
    literal: object = None
    is_literal: bool = False
    suffixed: bool = False  # `1L` or CAST(1 AS BIGINT): sqlglot parses both alike, Spark
    #                         types them apart in decimal arithmetic (a literal or not)
    column: Optional[int] = None  # the input column it reads as is, if it is one


def _const(value, t) -> Expr:
    scalar = pa.scalar(value, type=t)
    return Expr(t, lambda tbl: pa.repeat(scalar, tbl.num_rows), value, True)


def _folded(e: Expr) -> Expr:
    """An expression of no column (every supported function is deterministic), evaluated
    on one row the first time and repeated: DATE '1994-01-01' + INTERVAL 1 YEAR costs its
    calendar arithmetic once per compiled chain, not once per row at every step. A value
    that raises is not kept, so it raises at each call, as it would over every row."""
    value: list = []

    def fn(tbl: pa.Table):
        if not tbl.num_rows:
            return e.fn(tbl)
        if not value:
            value.append(_arr(e.fn(tbl.slice(0, 1)))[0])
        return pa.repeat(value[0], tbl.num_rows)
    return replace(e, fn=fn)


def _as(a: pa.Array, t: pa.DataType) -> pa.Array:
    return a if a.type == t else pc.cast(a, t)


def _arr(col) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


# --------------------------------------------------------------------------- coercion
def _decimal_of(e: Expr) -> tuple[int, int]:
    """(precision, scale) an operand has in decimal arithmetic: integral literals take the
    tightest decimal (Spark's DecimalType.fromLiteral), integral columns DecimalType.forType."""
    t = e.type
    if _decimal(t):
        return t.precision, t.scale
    if e.suffixed:
        raise NotCompiled("integral literal with a type suffix, or a CAST of one, in decimal arithmetic")
    if e.is_literal and e.literal is not None:
        return max(len(str(abs(e.literal))), 1), 0
    return _INTEGRAL_DECIMAL[t]


def _wider_decimal(p1, s1, p2, s2) -> pa.DataType:
    scale = max(s1, s2)
    precision = max(p1 - s1, p2 - s2) + scale
    if precision > MAX_PRECISION:  # checked before pa.decimal128, which refuses it
        raise NotCompiled("decimal precision above 38 (Spark adjusts it)")
    return pa.decimal128(precision, scale)


def _common(types) -> pa.DataType:
    """Spark's wider common type for CASE/IF/COALESCE/IN/comparison operands, where it is
    certain; anything else is not compiled."""
    ts = [t for t in types if t != NULL]
    if not ts:
        return NULL
    if all(t == ts[0] for t in ts):
        return ts[0]
    if all(_integral(t) for t in ts):
        return max(ts, key=INTEGRAL.index)
    if all(_integral(t) or t == DOUBLE for t in ts):
        return DOUBLE
    if all(_decimal(t) or _integral(t) for t in ts):  # integrals as DecimalType.forType
        ps = [(t.precision, t.scale) if _decimal(t) else _INTEGRAL_DECIMAL[t] for t in ts]
        out = pa.decimal128(*ps[0])
        for p, sc in ps[1:]:
            out = _wider_decimal(out.precision, out.scale, p, sc)
        return out
    raise NotCompiled(f"no certain common type of {', '.join(map(str, ts))}")


def _to(e: Expr, t: pa.DataType) -> Expr:
    """An implicit widening cast (never fails: integral widening, integral to double,
    decimal to a wider decimal, null to anything)."""
    if e.type == t:
        return e
    src = e.type
    if src == NULL:
        return Expr(t, lambda tbl: pa.nulls(tbl.num_rows, t), None, e.is_literal)
    if _integral(src) and (_integral(t) or t == DOUBLE):
        return Expr(t, lambda tbl: pc.cast(e.fn(tbl), t, safe=False), e.literal, e.is_literal)
    if (_decimal(src) or _integral(src)) and _decimal(t):
        return Expr(t, lambda tbl: _to_decimal(e.fn(tbl), t), e.literal, e.is_literal)
    raise NotCompiled(f"implicit cast {src} -> {t}")


def _to_decimal(a: pa.Array, t) -> pa.Array:
    """Exact cast to decimal `t`, Fallback when a value does not fit its precision."""
    if _integral(a.type):
        a = pc.cast(a, pa.decimal128(MAX_PRECISION, 0))
    if a.type.scale > t.scale:
        raise NotCompiled("decimal rounding")  # callers only widen; _cast rounds itself
    try:
        if a.type.precision - a.type.scale > t.precision - t.scale:
            a = pc.cast(a, pa.decimal128(MAX_PRECISION, a.type.scale))
        return pc.cast(a, t)
    except pa.ArrowInvalid as e:
        raise Fallback(f"decimal value out of range for {simple_string(t)}") from e


# --------------------------------------------------------------------------- compiler
@dataclass(frozen=True)
class Session:
    """The Spark settings whose value changes a compiled answer, as the runner's conf sets
    them (Spark's defaults otherwise)."""

    precision_loss: bool = True  # spark.sql.decimalOperations.allowPrecisionLoss
    json_ignore_nulls: bool = True  # spark.sql.jsonGenerator.ignoreNullFields
    # spark.sql.session.timeZone is UTC (the profiles'; assumed where a conf lacks it): in
    # another zone the forms that read it (a DATE to or from a TIMESTAMP, a TIMESTAMP
    # literal) are left to Spark
    utc: bool = True

    KEYS = ("spark.sql.decimalOperations.allowPrecisionLoss",
            "spark.sql.jsonGenerator.ignoreNullFields", "spark.sql.session.timeZone")

    @staticmethod
    def of(conf: Mapping[str, str]) -> "Session":
        def flag(key: str) -> bool:
            return str(conf.get(key, "true")).strip().lower() != "false"
        zone = str(conf.get("spark.sql.session.timeZone", "UTC")).strip().upper()
        return Session(flag("spark.sql.decimalOperations.allowPrecisionLoss"),
                       flag("spark.sql.jsonGenerator.ignoreNullFields"), zone in _UTC)


_UTC = {"UTC", "ETC/UTC", "GMT", "ETC/GMT", "Z", "+00:00"}


class _Compiler:
    def __init__(self, schema: pa.Schema, session: Session = Session()):
        self.session = session
        self.lateral: dict = {}  # lower-case name -> (name, Expr) of the projection so far
        self.reads: set[int] = set()  # the input columns the compiled expressions read
        self.columns = {}
        self.types = schema.types
        for i, f in enumerate(schema):
            key = f.name.lower()
            self.columns[key] = None if key in self.columns else (i, f.name, _input_type(f.type))

    def parse(self, text: str) -> exp.Expression:
        if re.search(r"\b(var)?char\b|\\", text, re.I):
            raise NotCompiled("CHAR/VARCHAR types and backslash escapes")
        try:
            return sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.ParseError as e:
            raise NotCompiled(f"cannot parse {text!r}: {e}") from e

    def column(self, node: exp.Column) -> tuple[str, Expr]:
        if node.table or not isinstance(node.this, exp.Identifier):
            raise NotCompiled("qualified or star column")
        key = node.name.lower()
        entry = self.columns.get(key, "missing")
        if entry == "missing" and key in self.lateral:  # an alias of the same projection
            if self.lateral[key] is None:
                raise NotCompiled(f"lateral alias {node.name!r} is ambiguous")
            if self.lateral[key][1].column is not None:  # an input column under a new name
                self.reads.add(self.lateral[key][1].column)
            return self.lateral[key]
        if entry is None or entry == "missing":
            raise NotCompiled(f"column {node.name!r} is ambiguous or missing")
        i, name, t = entry
        self.reads.add(i)
        return name, Expr(t, lambda tbl: _as(_arr(tbl.column(i)), t),
                          column=i if t == self.types[i] else None)

    def alias(self, name: str, e: Expr) -> None:
        """A projection's output, which its later expressions may name (Spark's lateral
        column alias; an input column of that name still wins, as in Spark)."""
        key = name.lower()
        self.lateral[key] = None if key in self.lateral else (name, e)

    def compile(self, node: exp.Expression) -> Expr:
        if isinstance(node, exp.Paren):
            return self.compile(node.this)
        if isinstance(node, exp.Column):
            return self.column(node)[1]
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise NotCompiled(f"expression {node.sql(dialect='spark')!r}")
        e = handler(self, node)
        return e if e.is_literal or node.find(exp.Column) is not None else _folded(e)


# --- literals
_INT_RE = re.compile(r"\d+")
_DEC_RE = re.compile(r"\d*\.\d*")
_EXP_RE = re.compile(r"(\d+\.?\d*|\.\d+)[eE][+-]?\d+")
_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_TS_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(\.\d{1,6})?")


def _number(text: str, negative: bool) -> Expr:
    sign = -1 if negative else 1
    if _INT_RE.fullmatch(text):
        v = sign * int(text)
        for t in (pa.int32(), pa.int64()):
            lo, hi = _BOUNDS[t]
            if lo <= v <= hi:
                return _const(v, t)
        raise NotCompiled("integer literal beyond bigint (a decimal in Spark)")
    if _DEC_RE.fullmatch(text) and text != ".":
        d = _EXACT.multiply(Decimal(text), sign)
        digits, exponent = len(d.as_tuple().digits), -d.as_tuple().exponent
        t = pa.decimal128(max(digits, exponent), exponent)
        if t.precision > MAX_PRECISION:
            raise NotCompiled("decimal literal above 38 digits")
        return _const(d, t)
    if _EXP_RE.fullmatch(text):
        return _const(sign * float(text), DOUBLE)
    raise NotCompiled(f"numeric literal {text!r}")


def _literal(c: _Compiler, node: exp.Literal) -> Expr:
    if node.is_string:
        return _const(node.this, STRING)
    return _number(node.this, False)


def _neg(c: _Compiler, node: exp.Neg) -> Expr:
    inner = node.this
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return _number(inner.this, True)  # Spark's grammar: MINUS? INTEGER_VALUE is a literal
    e = c.compile(inner)
    return _unary_numeric(e, "negate")


def _unary_numeric(e: Expr, op: str) -> Expr:
    t = e.type
    if _integral(t):
        lo = _BOUNDS[t][0]

        def fn(tbl):
            a = e.fn(tbl)
            if pc.any(pc.equal(a, lo)).as_py():
                raise Fallback(f"{op} overflows {simple_string(t)}")
            return getattr(pc, op)(a)
        return Expr(t, fn)
    if _decimal(t) or t == DOUBLE:
        return Expr(t, lambda tbl: getattr(pc, op)(e.fn(tbl)))
    raise NotCompiled(f"{op} of {t}")


def _boolean(c, node):
    return _const(bool(node.this), BOOL)


def _null(c, node):
    return _const(None, NULL)


# --- arithmetic
def _arith(op: str):
    def handler(c: _Compiler, node) -> Expr:
        if isinstance(node.expression, exp.Interval) and op in ("add", "subtract"):
            return _date_shift(c.compile(node.this), node.expression, op == "subtract")
        a, b = c.compile(node.this), c.compile(node.expression)
        if _integral(a.type) and _integral(b.type):
            return _integral_arith(op, a, b)
        if a.type == NULL or b.type == NULL:
            raise NotCompiled("arithmetic with an untyped NULL")
        if {a.type, b.type} <= {DOUBLE, *INTEGRAL}:
            a, b = _to(a, DOUBLE), _to(b, DOUBLE)
            return Expr(DOUBLE, lambda tbl: getattr(pc, op)(a.fn(tbl), b.fn(tbl)))
        if (_decimal(a.type) or _integral(a.type)) and (_decimal(b.type) or _integral(b.type)):
            (p1, s1), (p2, s2) = _decimal_of(a), _decimal_of(b)
            precision, scale = decimal_result(op, (p1, s1), (p2, s2))
            a, b = _to(a, pa.decimal128(p1, s1)), _to(b, pa.decimal128(p2, s2))
            if precision <= MAX_PRECISION:
                t = pa.decimal128(precision, scale)
                return Expr(t, lambda tbl: pc.cast(getattr(pc, op)(a.fn(tbl), b.fn(tbl)), t))
            t = _adjusted(c, precision, scale)

            if precision > 2 * MAX_PRECISION:  # beyond decimal256: on Python integers
                return Expr(t, lambda tbl: _exact_product(a.fn(tbl), b.fn(tbl), t))

            def wide(tbl):  # exact in 76 digits, then rounded as Spark rounds (HALF_UP)
                x, y = (pc.cast(e.fn(tbl), pa.decimal256(e.type.precision, e.type.scale))
                        for e in (a, b))
                return _rounded(getattr(pc, op)(x, y), t)
            return Expr(t, wide)
        raise NotCompiled(f"{op} of {a.type} and {b.type}")
    return handler


def _adjusted(c: "_Compiler", precision: int, scale: int) -> pa.DataType:
    """Spark's DecimalType.adjustPrecisionScale for a result above 38 digits (with
    spark.sql.decimalOperations.allowPrecisionLoss, the default): 38 digits, the integral
    ones kept, the scale cut to no less than min(scale, 6)."""
    if not c.session.precision_loss:
        raise NotCompiled("decimal result above 38 digits without precision loss")
    return pa.decimal128(*adjusted(precision, scale))


def _exact_product(x: pa.Array, y: pa.Array, t) -> pa.Array:
    """x * y per row on Python integers, rounded HALF_UP to `t` (a product of more than 76
    digits, which decimal256 cannot hold)."""
    shift = x.type.scale + y.type.scale - t.scale
    return _on_integers(t, lambda m, n: _half_up(m * n, 10 ** shift) if shift > 0
                        else m * n * 10 ** -shift, x, y)


def _on_integers(t, f, *arrays: pa.Array,
                 largest: Optional[Callable[[int], int]] = None) -> pa.Array:
    """Per row, f(the arrays' unscaled values) as the unscaled value of decimal `t`: exact,
    null where any array is; Fallback where it overflows `t` (Spark's ANSI error, or its
    null). `largest(the arguments' largest magnitude)` bounds f's values, intermediate ones
    too: where that stays below 2**62, f runs on int64 (numpy's loop, ~100x faster), else
    (or with no `largest`) on object arrays of Python integers (a Python loop over Decimals
    took ~9 us a row). A null row's values are 1: no division by zero there."""
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    valid = np.ones(len(arrays[0]), dtype=bool)
    for a in arrays:
        valid &= np.asarray(pc.is_valid(a))
    small = _small(arrays, largest)
    q = np.where(valid, f(*(np.where(valid, v, 1) for v in small or map(_integers, arrays))), 0)
    if (not small or t.precision <= 18) and np.any(np.abs(q) >= 10 ** t.precision):
        raise Fallback(f"decimal value out of range for {simple_string(t)}")
    if small:  # int64 values: the high word is the sign's
        return decimal_array(q, q >> 63, t, None if valid.all() else valid)
    low = (q & (2 ** 64 - 1)).astype(np.uint64).view(np.int64)  # |q| < 2**127: two words
    return decimal_array(low, (q >> 64).astype(np.int64), t, None if valid.all() else valid)


def _small(arrays: list, largest) -> Optional[list]:
    """The arrays' unscaled values as int64 (a null's 0) where `largest` of their largest
    magnitude stays below 2**62; else None."""
    if largest is None:
        return None
    try:
        values = [unscaled(a) for a in arrays]
    except NoCode:  # beyond int64
        return None
    most = max((max(-int(v.min()), int(v.max())) for v in values if len(v)), default=0)
    return values if largest(most) < 2 ** 62 else None


def _integers(a: pa.Array) -> np.ndarray:
    """A decimal128 array's unscaled values as Python integers (an object array)."""
    low, high = decimal_words(a)
    return high.astype(object) * 2 ** 64 + low.view(np.uint64).astype(object)


def _rounded(x: pa.Array, t) -> pa.Array:
    """An exact decimal256 result rounded half away from zero (Java's HALF_UP) to `t`'s
    scale; Fallback where it overflows `t` (Spark's ANSI error, or its null)."""
    if x.type.scale > t.scale:
        x = pc.round(x, ndigits=t.scale, round_mode="half_towards_infinity")
    try:
        return pc.cast(x, t)
    except pa.ArrowInvalid as e:
        raise Fallback(f"decimal value out of range for {simple_string(t)}") from e


def _integral_arith(op: str, a: Expr, b: Expr) -> Expr:
    t = _common([a.type, b.type])
    lo, hi = _BOUNDS[t]
    checked = getattr(pc, f"{op}_checked")

    def fn(tbl):
        x, y = pc.cast(a.fn(tbl), pa.int64()), pc.cast(b.fn(tbl), pa.int64())
        try:
            out = checked(x, y)
        except pa.ArrowInvalid as e:
            raise Fallback(f"{op} overflows {simple_string(t)}") from e
        if t != pa.int64():
            mn, mx = pc.min_max(out).values()
            if mn.is_valid and (mn.as_py() < lo or mx.as_py() > hi):
                raise Fallback(f"{op} overflows {simple_string(t)}")
            out = pc.cast(out, t)
        return out
    return Expr(t, fn)


def _div(c: _Compiler, node) -> Expr:
    a, b = c.compile(node.this), c.compile(node.expression)
    if (_decimal(a.type) or _decimal(b.type)) and all(
            _decimal(t) or _integral(t) for t in (a.type, b.type)):
        return _decimal_div(c, a, b)
    if not ({a.type, b.type} <= {DOUBLE, *INTEGRAL}):
        raise NotCompiled(f"division of {a.type} by {b.type}")
    a, b = _to(a, DOUBLE), _to(b, DOUBLE)

    def fn(tbl):
        x, y = a.fn(tbl), b.fn(tbl)
        if _zero_divisor(x, y, 0.0):  # Spark's error, only where both sides are present
            raise Fallback("division by zero")
        return pc.divide(x, y)
    return Expr(DOUBLE, fn)


def _decimal_div(c: _Compiler, a: Expr, b: Expr) -> Expr:
    """Spark's decimal division: scale max(6, s1 + p2 + 1) and p1 - s1 + s2 integral digits,
    adjusted to 38 digits; the exact quotient rounded HALF_UP to the result's scale, once (a
    38-digit divisor whose quotient a rounding at 38 places would carry is checked against
    Spark in tests/test_expressions.py). Per row on Python integers."""
    (p1, s1), (p2, s2) = _decimal_of(a), _decimal_of(b)
    precision, scale = decimal_result("divide", (p1, s1), (p2, s2))
    t = pa.decimal128(precision, scale) if precision <= MAX_PRECISION else \
        _adjusted(c, precision, scale)
    a, b = _to(a, pa.decimal128(p1, s1)), _to(b, pa.decimal128(p2, s2))

    def fn(tbl):
        x, y = a.fn(tbl), b.fn(tbl)
        if _zero_divisor(x, y, pa.scalar(0, y.type)):
            raise Fallback("division by zero")
        # (m / 10^s1) / (n / 10^s2) at scale S is m * 10^(s2 + S) / (n * 10^s1), the
        # common powers of ten cancelled (so more rows stay within int64)
        common = min(s2 + t.scale, s1)
        up, down = 10 ** (s2 + t.scale - common), 10 ** (s1 - common)
        return _on_integers(t, lambda m, n: _half_up(m * up, n * down), x, y,
                            largest=lambda most: max(most, 1) * max(up, down))
    return Expr(t, fn)


def _half_up(n, d):
    """n / d rounded half away from zero (Java's RoundingMode.HALF_UP), per element: `n` an
    integer array (int64, or object of Python integers), `d` one too or a Python integer.
    No value exceeds |n| or |d|, so int64 inputs below 2**62 cannot overflow."""
    n_, d_ = np.abs(n), np.abs(d)
    q = n_ // d_
    r = n_ - q * d_
    q = q + (r >= d_ - r)  # 2r >= d without doubling
    return np.where((n < 0) != (d < 0), -q, q)


def _zero_divisor(x, y, zero) -> bool:
    """Whether some row divides a present value by a present zero (a null on either side
    gives null: Spark evaluates neither)."""
    return bool(pc.any(pc.and_(pc.equal(y, zero), pc.is_valid(x))).as_py())


def _mod(c: _Compiler, node) -> Expr:
    """Integral `%`: Java's remainder (sign of the dividend; MIN % -1 is 0); a zero divisor
    is an ANSI error (null without ANSI): Fallback."""
    a, b = c.compile(node.this), c.compile(node.expression)
    if not (_integral(a.type) and _integral(b.type)):
        raise NotCompiled(f"% of {a.type} and {b.type}")
    t = _common([a.type, b.type])

    def fn(tbl):
        x, y = pc.cast(a.fn(tbl), pa.int64()), pc.cast(b.fn(tbl), pa.int64())
        if _zero_divisor(x, y, 0):
            raise Fallback("remainder by zero")
        null = pc.or_(pc.is_null(x), pc.is_null(y))
        xs = np.asarray(pc.fill_null(x, 0))
        ys = np.asarray(pc.fill_null(y, 1))
        out = np.fmod(xs, np.where(ys == -1, 1, ys))
        return pc.cast(pa.array(out, mask=np.asarray(null)), t)
    return Expr(t, fn)


def _abs(c: _Compiler, node) -> Expr:
    return _unary_numeric(c.compile(node.this), "abs")


def _sqrt(c: _Compiler, node) -> Expr:
    """sqrt of a DOUBLE (the SQL front end's stddev casts its variance): IEEE's square root,
    as Java's Math.sqrt; a negative value or NaN gives NaN, as in Spark."""
    a = c.compile(node.this)
    if a.type != DOUBLE:
        raise NotCompiled(f"sqrt of {a.type}")
    return Expr(DOUBLE, lambda tbl: pc.sqrt(a.fn(tbl)))


# --- comparison and logic
def _comparable(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    if (_decimal(a.type) or _decimal(b.type)) and {_integral(a.type) or _decimal(a.type),
                                                   _integral(b.type) or _decimal(b.type)} == {True}:
        (p1, s1), (p2, s2) = _decimal_of(a), _decimal_of(b)
        t = _wider_decimal(p1, s1, p2, s2)
        return _to(_to(a, pa.decimal128(p1, s1)), t), _to(_to(b, pa.decimal128(p2, s2)), t)
    t = _common([a.type, b.type])
    return _to(a, t), _to(b, t)


def _no_nan(a: pa.Array) -> pa.Array:
    if a.type == DOUBLE and pc.any(pc.is_nan(a)).as_py():
        raise Fallback("NaN in a comparison (Spark orders NaN above all values)")
    return a


def _comparison(op: str):
    def handler(c: _Compiler, node) -> Expr:
        a, b = _comparable(c.compile(node.this), c.compile(node.expression))
        return _compare(op, a, b)
    return handler


def _compare(op: str, a: Expr, b: Expr) -> Expr:
    if a.type == NULL:  # both operands untyped NULLs
        return _const(op == "null_safe" or None, BOOL)
    if op == "null_safe":
        def fn(tbl):
            x, y = _no_nan(a.fn(tbl)), _no_nan(b.fn(tbl))
            both_null = pc.and_(pc.is_null(x), pc.is_null(y))
            return pc.or_(both_null, pc.fill_null(pc.equal(x, y), False))
        return Expr(BOOL, fn)
    return Expr(BOOL, lambda tbl: getattr(pc, op)(_no_nan(a.fn(tbl)), _no_nan(b.fn(tbl))))


def _null_safe_neq(c, node):
    eq = _comparison("null_safe")(c, node)
    return Expr(BOOL, lambda tbl: pc.invert(eq.fn(tbl)))


def _logic(op: str):
    def handler(c: _Compiler, node) -> Expr:
        a, b = c.compile(node.this), c.compile(node.expression)
        a, b = _predicate(a, True), _predicate(b, True)
        return Expr(BOOL, lambda tbl: getattr(pc, op)(a.fn(tbl), b.fn(tbl)))
    return handler


def _predicate(e: Expr, null_ok: bool = False) -> Expr:
    """A boolean operand; an untyped NULL only where Spark takes one (AND, OR; CASE WHEN
    NULL fails its analysis)."""
    if e.type == NULL and null_ok:
        return _to(e, BOOL)
    if e.type != BOOL:
        raise NotCompiled(f"{e.type} where a boolean is needed")
    return e


def _not(c, node):
    e = _predicate(c.compile(node.this))
    return Expr(BOOL, lambda tbl: pc.invert(e.fn(tbl)))


def _is(c, node):
    if not isinstance(node.expression, exp.Null):
        raise NotCompiled("IS TRUE/FALSE")
    e = c.compile(node.this)
    return Expr(BOOL, lambda tbl: pc.is_null(e.fn(tbl)))


def _in(c, node):
    if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
        raise NotCompiled("IN subquery")
    value = c.compile(node.this)
    items = [c.compile(x) for x in node.expressions]
    t = _common([value.type] + [i.type for i in items])
    value, items = _to(value, t), [_to(i, t) for i in items]
    if t == NULL:
        return _const(None, BOOL)

    def fn(tbl):
        v = _no_nan(value.fn(tbl))
        out = None
        for item in items:
            eq = pc.equal(v, _no_nan(item.fn(tbl)))
            out = eq if out is None else pc.or_kleene(out, eq)
        return out
    return Expr(BOOL, fn)


def _between(c, node):
    if node.args.get("symmetric"):
        raise NotCompiled("BETWEEN SYMMETRIC")
    v = c.compile(node.this)
    lo = _compare("greater_equal", *_comparable(v, c.compile(node.args["low"])))
    hi = _compare("less_equal", *_comparable(v, c.compile(node.args["high"])))
    return Expr(BOOL, lambda tbl: pc.and_kleene(lo.fn(tbl), hi.fn(tbl)))


# --- conditionals
def _choose(conds: list[Expr], values: list[Expr], default: Expr | None) -> Expr:
    t = _common([v.type for v in values] + ([default.type] if default else []))
    values = [_to(v, t) for v in values]
    default = _to(default, t) if default else _const(None, t)

    def fn(tbl):
        out = default.fn(tbl)
        for cond, value in zip(reversed(conds), reversed(values)):
            out = pc.if_else(pc.fill_null(cond.fn(tbl), False), value.fn(tbl), out)
        return out
    return Expr(t, fn)


def _case(c, node):
    ifs = node.args["ifs"]
    default = c.compile(node.args["default"]) if node.args.get("default") else None
    if node.this is not None:
        operand = c.compile(node.this)
        conds = [_compare("equal", *_comparable(operand, c.compile(i.this))) for i in ifs]
    else:
        conds = [_predicate(c.compile(i.this)) for i in ifs]
    return _choose(conds, [c.compile(i.args["true"]) for i in ifs], default)


def _if(c, node):
    false = node.args.get("false")
    return _choose([_predicate(c.compile(node.this))], [c.compile(node.args["true"])],
                   c.compile(false) if false is not None else None)


def _coalesce(c, node):
    if node.args.get("is_null"):
        raise NotCompiled("ifnull/nvl spelled with is_null")
    args = [c.compile(node.this)] + [c.compile(x) for x in node.expressions]
    t = _common([a.type for a in args])
    args = [_to(a, t) for a in args]
    if len(args) == 1:
        return args[0]
    return Expr(t, lambda tbl: pc.coalesce(*[a.fn(tbl) for a in args]))


def _element_wise(fn_name: str):
    """greatest/least: Spark skips nulls (null only when every argument is null). DOUBLE is
    not compiled: Spark orders NaN above every number, Arrow's element-wise max does not."""
    def handler(c, node):
        args = [c.compile(node.this)] + [c.compile(x) for x in node.expressions]
        t = _common([a.type for a in args])
        if not (_integral(t) or _decimal(t) or t in (DATE, TIMESTAMP)):
            raise NotCompiled(f"{fn_name} over {t}")
        args = [_to(a, t) for a in args]
        # Arrow has no element-wise kernel for dates or zoned timestamps: compare their ints
        storage = {DATE: pa.int32(), TIMESTAMP: pa.int64()}.get(t, t)

        def fn(tbl):
            values = [pc.cast(a.fn(tbl), storage) for a in args]
            return pc.cast(getattr(pc, fn_name)(*values, skip_nulls=True), t)
        return Expr(t, fn)
    return handler


# --- strings
def _ascii_only(a: pa.Array, what: str) -> pa.Array:
    if pc.all(pc.string_is_ascii(a)).as_py() is False:
        raise Fallback(f"{what} of a non-ASCII string (Java case mapping)")
    return a


def _case_map(fn_name: str):
    def handler(c, node):
        e = c.compile(node.this)
        if e.type != STRING:
            raise NotCompiled(f"{fn_name} of {e.type}")
        return Expr(STRING, lambda tbl: getattr(pc, fn_name)(_ascii_only(e.fn(tbl), fn_name)))
    return handler


def _length(c, node):
    e = c.compile(node.this)
    if e.type != STRING:
        raise NotCompiled(f"length of {e.type}")
    return Expr(pa.int32(), lambda tbl: pc.cast(pc.utf8_length(e.fn(tbl)), pa.int32()))


def _stringish(e: Expr) -> Expr:
    """concat's implicit cast of an argument to STRING (integral and string only)."""
    if e.type == STRING:
        return e
    if _integral(e.type) or e.type == NULL:
        return _cast_expr(e, STRING)
    raise NotCompiled(f"concat of {e.type}")


def _concat_args(args: list[Expr]) -> Expr:
    args = [_stringish(a) for a in args]
    return Expr(STRING, lambda tbl: pc.binary_join_element_wise(
        *[a.fn(tbl) for a in args], "", null_handling="emit_null"))


def _concat(c, node):
    if not node.expressions:
        raise NotCompiled("concat()")
    return _concat_args([c.compile(x) for x in node.expressions])


def _dpipe(c, node):
    return _concat_args([c.compile(node.this), c.compile(node.expression)])


_INT_MAX = 2 ** 31 - 1


def _substring_bounds(pos: int, length: int, nchars: int) -> tuple[int, int]:
    """UTF8String.substringSQL's code-point range [start, end)."""
    start = pos - 1 if pos > 0 else (nchars + pos if pos < 0 else 0)
    end = min(max(start + length, -_INT_MAX - 1), _INT_MAX)
    return max(start, 0), end


def _substring(c, node):
    s = c.compile(node.this)
    pos = c.compile(node.args["start"])
    length = c.compile(node.args["length"]) if node.args.get("length") else _const(_INT_MAX, pa.int32())
    if s.type != STRING or not all(x.type in (pa.int8(), pa.int16(), pa.int32())
                                   for x in (pos, length)):
        raise NotCompiled(f"substring({s.type}, {pos.type}, {length.type})")
    if pos.is_literal and length.is_literal and pos.literal is not None \
            and length.literal is not None and pos.literal >= 0:
        start, end = _substring_bounds(pos.literal, length.literal, 0)
        if start >= end:
            return Expr(STRING, lambda tbl: pc.if_else(pc.is_null(s.fn(tbl)),
                                                       pa.scalar(None, STRING), ""))
        return Expr(STRING, lambda tbl: pc.utf8_slice_codeunits(s.fn(tbl), start, end))

    def fn(tbl):
        out = []
        for v, p, n in zip(s.fn(tbl).to_pylist(), pos.fn(tbl).to_pylist(),
                           length.fn(tbl).to_pylist()):
            if v is None or p is None or n is None:
                out.append(None)
                continue
            start, end = _substring_bounds(p, n, len(v))
            out.append(v[start:end] if start < end else "")
        return pa.array(out, STRING)
    return Expr(STRING, fn)


# --- casts
_CAST_TYPES = {
    exp.DataType.Type.TINYINT: pa.int8(), exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.INT: pa.int32(), exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.DOUBLE: DOUBLE, exp.DataType.Type.BOOLEAN: BOOL,
    exp.DataType.Type.TEXT: STRING, exp.DataType.Type.DATE: DATE,
    exp.DataType.Type.TIMESTAMPTZ: TIMESTAMP,
}
_EPOCH = _dt.date(1970, 1, 1)


def _target_type(dt: exp.DataType) -> pa.DataType:
    if dt.this == exp.DataType.Type.DECIMAL:
        params = [int(p.this.this) for p in dt.expressions]
        p, s = (params + [10, 0][len(params):])[:2] if params else (10, 0)
        if not 0 < p <= MAX_PRECISION or not 0 <= s <= p:
            raise NotCompiled(f"decimal({p},{s})")
        return pa.decimal128(p, s)
    if dt.expressions or dt.this not in _CAST_TYPES:
        raise NotCompiled(f"cast to {dt.sql(dialect='spark')}")
    return _CAST_TYPES[dt.this]


def _cast(c, node):
    if node.args.get("safe") or node.args.get("format") or node.args.get("default"):
        raise NotCompiled("try_cast / cast with format")
    t = _target_type(node.args["to"])
    inner = node.this
    if isinstance(inner, exp.Literal) and inner.is_string and t in (DATE, TIMESTAMP):
        if t == TIMESTAMP and not c.session.utc:
            raise NotCompiled("TIMESTAMP literal in a session time zone other than UTC")
        return _temporal_literal(inner.this, t)
    a = c.compile(inner)
    if TIMESTAMP in (a.type, t) and a.type != t and not c.session.utc:
        raise NotCompiled(f"cast of {a.type} to {t} in a session time zone other than UTC")
    out = _cast_expr(a, t)
    if isinstance(inner, (exp.Literal, exp.Neg)) and _integral(t):
        return Expr(out.type, out.fn, suffixed=True)
    return out


def _temporal_literal(text: str, t) -> Expr:
    m = (_DATE_RE if t == DATE else _TS_RE).fullmatch(text)
    try:
        if m is None:
            raise ValueError(text)
        if t == DATE:
            return _const(_dt.date(*map(int, m.groups())), DATE)
        frac = m.group(7) or ".0"
        value = _dt.datetime(*map(int, m.groups()[:6]),
                             int(frac[1:].ljust(6, "0")), tzinfo=_dt.timezone.utc)
        return _const(value, TIMESTAMP)
    except ValueError as e:
        raise NotCompiled(f"{simple_string(t)} literal {text!r}") from e


def _range_checked(a: pa.Array, t) -> pa.Array:
    lo, hi = _BOUNDS[t]
    mn, mx = pc.min_max(a).values()
    if mn.is_valid and (mn.as_py() < lo or mx.as_py() > hi):
        raise Fallback(f"cast overflows {simple_string(t)}")
    return pc.cast(a, t, safe=False)


def _cast_expr(e: Expr, t: pa.DataType) -> Expr:
    src = e.type
    if src == t:
        return e
    if src == NULL:
        return _to(e, t)
    conv = _CASTS.get((_family(src), _family(t)))
    if conv is None:
        raise NotCompiled(f"cast {simple_string(src)} -> {simple_string(t)}")
    return Expr(t, lambda tbl: conv(e.fn(tbl), t))


def _family(t) -> str:
    if _integral(t):
        return "int"
    if _decimal(t):
        return "decimal"
    return simple_string(t)


def _string_to_int(a, t):
    if pc.all(pc.match_substring_regex(a, r"^[+-]?[0-9]{1,19}$")).as_py() is False:
        raise Fallback("string to integer cast of a value that is not plain digits")
    return _range_checked(_parse_ints(a), t)


def _parse_ints(a: pa.Array) -> pa.Array:
    values = [None if v is None else int(v) for v in a.to_pylist()]
    if any(v is not None and not -(2 ** 63) <= v < 2 ** 63 for v in values):
        raise Fallback("string to integer cast overflows")
    return pa.array(values, pa.int64())


def _double_to_int(a, t):
    bad = pc.or_(pc.is_nan(a), pc.or_(pc.less(a, -2.0 ** 63), pc.greater_equal(a, 2.0 ** 63)))
    if pc.any(bad).as_py():
        raise Fallback("double to integer cast out of range")
    return _range_checked(pc.cast(pc.trunc(a), pa.int64()), t)


def _decimal_to_int(a, t):
    values = [None if v is None else int(v) for v in a.to_pylist()]  # int() truncates
    if any(v is not None and not -(2 ** 63) <= v < 2 ** 63 for v in values):
        raise Fallback("decimal to integer cast overflows")
    return _range_checked(pa.array(values, pa.int64()), t)


def _decimal_to_decimal(a, t):
    if a.type.scale <= t.scale:
        return _to_decimal(a, t)
    # HALF_UP on the unscaled values: the dropped digits decide
    down = 10 ** (a.type.scale - t.scale)
    return _on_integers(t, lambda m: _half_up(m, down), a, largest=lambda most: max(most, down))


def _date_to_string(a, t):
    mn, mx = pc.min_max(a).values()
    if mn.is_valid and (mn.as_py().year < 1 or mx.as_py().year > 9999):
        raise Fallback("date outside years 1-9999 to string")
    return pc.cast(a, STRING)


def _string_to_date(a, t):
    out = []
    for v in a.to_pylist():
        if v is None:
            out.append(None)
            continue
        m = _DATE_RE.fullmatch(v)
        try:
            out.append(_dt.date(*map(int, m.groups())) if m else None)
        except ValueError:
            m = None
        if m is None:
            raise Fallback("string to date cast of a value not in yyyy-mm-dd form")
    return pa.array(out, DATE)


_US_PER_DAY = 86_400_000_000
_CASTS = {
    ("int", "int"): _range_checked,
    ("boolean", "int"): lambda a, t: pc.cast(a, t),
    ("double", "int"): _double_to_int,
    ("decimal", "int"): _decimal_to_int,
    ("string", "int"): _string_to_int,
    ("int", "double"): lambda a, t: pc.cast(a, DOUBLE, safe=False),
    ("boolean", "double"): lambda a, t: pc.cast(a, DOUBLE),
    ("int", "decimal"): _to_decimal,
    ("decimal", "decimal"): _decimal_to_decimal,
    ("int", "boolean"): lambda a, t: pc.not_equal(a, 0),
    ("int", "string"): lambda a, t: pc.cast(a, STRING),
    ("boolean", "string"): lambda a, t: pc.cast(a, STRING),
    ("date", "string"): _date_to_string,
    ("string", "date"): _string_to_date,
    ("timestamp", "date"): lambda a, t: _timestamp_to_date(a),
    ("date", "timestamp"): lambda a, t: pc.cast(pc.multiply(
        pc.cast(pc.cast(a, pa.int32()), pa.int64()), _US_PER_DAY), TIMESTAMP),
}


def _timestamp_to_date(a):
    us = np.asarray(pc.fill_null(pc.cast(a, pa.int64()), 0))
    days = pa.array(np.floor_divide(us, _US_PER_DAY).astype(np.int32), mask=np.asarray(pc.is_null(a)))
    return pc.cast(days, DATE)


# --- dates shifted by interval literals
_DAYS_RANGE = (-719162, 2932896)  # 0001-01-01 and 9999-12-31 as days since 1970-01-01


def _date_shift(a: Expr, interval: exp.Interval, back: bool) -> Expr:
    """DATE +/- INTERVAL 'n' DAY | MONTH | YEAR, a DATE as in Spark: days are added; months
    and years move the month and clamp the day to its length (LocalDate.plusMonths). A result
    outside years 1-9999 is left to Catalyst."""
    unit = interval.args.get("unit")
    unit = unit.name.upper() if unit is not None else ""
    amount = interval.this
    if a.type != DATE or unit not in ("DAY", "MONTH", "YEAR") or \
            not isinstance(amount, exp.Literal) or \
            not re.fullmatch(r"[+-]?\d{1,6}", str(amount.this).strip()):
        raise NotCompiled(f"interval arithmetic {interval.sql(dialect='spark')!r} on {a.type}")
    n = int(str(amount.this).strip()) * (-1 if back else 1)

    def fn(tbl):
        x = a.fn(tbl)
        days = np.asarray(pc.fill_null(pc.cast(x, pa.int32()), 0), dtype=np.int64)
        if unit == "DAY":
            out = days + n
        else:
            start = days.astype("datetime64[D]")
            month = start.astype("datetime64[M]")
            target = month + n * (12 if unit == "YEAR" else 1)
            first = target.astype("datetime64[D]")
            length = ((target + 1).astype("datetime64[D]") - first).astype(np.int64)
            day = (start - month.astype("datetime64[D]")).astype(np.int64)
            out = (first.astype(np.int64) + np.minimum(day, length - 1))
        valid = np.asarray(pc.is_valid(x))
        if valid.any() and (out[valid].min() < _DAYS_RANGE[0] or out[valid].max() > _DAYS_RANGE[1]):
            raise Fallback("date out of the years 1-9999")
        return pc.cast(pa.array(out.astype(np.int32), mask=~valid), DATE)
    return Expr(DATE, fn)


# --- fields of a DATE
_DATE_FIELDS = {"YEAR": "year", "MONTH": "month", "DAY": "day", "QUARTER": "quarter"}


def _date_field(unit: str, e: Expr) -> Expr:
    """A field of a DATE as Spark's INT (EXTRACT, year(), month(), ...); of a TIMESTAMP it
    depends on the session time zone: left to Catalyst."""
    if e.type != DATE or unit not in _DATE_FIELDS:
        raise NotCompiled(f"{unit} of {e.type}")
    fn = getattr(pc, _DATE_FIELDS[unit])
    return Expr(pa.int32(), lambda tbl: pc.cast(fn(e.fn(tbl)), pa.int32()))


def _extract(c, node):
    return _date_field(node.this.name.upper(), c.compile(node.expression))


def _field_of(unit: str):
    def handler(c, node):
        inner = node.this
        if isinstance(inner, exp.TsOrDsToDate) and not inner.args.get("format"):
            inner = inner.this  # year(d) of a DATE reads d itself
        return _date_field(unit, c.compile(inner))
    return handler


# --- LIKE
def _like(c, node):
    """STRING LIKE 'pattern' (% and _; a backslash escape never reaches here, parse refuses
    it) on Arrow's match_like, which reads the pattern as Spark does."""
    a, pattern = c.compile(node.this), node.expression
    if node.args.get("escape") is not None or a.type != STRING or \
            not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise NotCompiled(f"LIKE {pattern.sql(dialect='spark')!r} on {a.type}")
    text, negate = pattern.this, bool(node.args.get("negate"))

    def fn(tbl):
        out = pc.match_like(a.fn(tbl), text)
        return pc.invert(out) if negate else out
    return Expr(BOOL, fn)


# --- to_json(struct(...)): Spark's JSON text (Jackson), for the types whose text is certain
_JSON_ESCAPE = re.compile(r'["\\\x00-\x1f]')
_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
               "\f": "\\f", "\r": "\\r"}


def _json_string(text: str) -> str:
    """A JSON string as Jackson writes it: quote, backslash and control characters escaped
    (\\uXXXX in upper-case hex where no short form exists), everything else as is."""
    return '"' + _JSON_ESCAPE.sub(
        lambda m: _JSON_SHORT.get(m.group(), f"\\u{ord(m.group()):04X}"), text) + '"'


def _json_value(t):
    """value -> JSON text for a field of Arrow type `t`, None where it is not certain."""
    if _integral(t):
        return str
    if t == BOOL:
        return lambda v: "true" if v else "false"
    if t == STRING:
        return _json_string
    if _decimal(t):
        return str  # Decimal's text is BigDecimal.toString's (1.50, 1E-7)
    if t == DATE:
        return lambda v: '"' + v.isoformat() + '"'
    return None


def _to_json(c, node):
    struct = node.this
    if not isinstance(struct, exp.Struct) or any(
            v is not None for k, v in node.args.items() if k != "this"):
        raise NotCompiled("to_json of other than struct(...) without options")
    if not c.session.json_ignore_nulls:
        raise NotCompiled("to_json with spark.sql.jsonGenerator.ignoreNullFields=false")
    fields = []
    for item in struct.expressions:
        if isinstance(item, exp.PropertyEQ):
            name, e = item.this.name, c.compile(item.expression)
        elif isinstance(item, exp.Alias):
            name, e = item.alias, c.compile(item.this)
        elif isinstance(item, exp.Column):
            name, e = c.column(item)
        else:
            raise NotCompiled(f"struct field {item.sql(dialect='spark')!r}")
        form = _json_value(e.type)
        if form is None:
            raise NotCompiled(f"to_json of a {e.type} field")
        fields.append((_json_string(name) + ":", e, form))

    def fn(tbl):
        try:
            columns = [[None if v is None else key + form(v) for v in e.fn(tbl).to_pylist()]
                       for key, e, form in fields]
        except (ValueError, OverflowError) as err:  # a date Python cannot hold
            raise Fallback(f"to_json of a value outside Python's range: {err}") from err
        rows = zip(*columns) if columns else [()] * tbl.num_rows
        return pa.array(["{" + ",".join(v for v in row if v is not None) + "}" for row in rows],
                        STRING)
    return Expr(STRING, fn)


_HANDLERS = {
    exp.Literal: _literal, exp.Boolean: _boolean, exp.Null: _null, exp.Neg: _neg,
    exp.Add: _arith("add"), exp.Sub: _arith("subtract"), exp.Mul: _arith("multiply"),
    exp.Div: _div, exp.Mod: _mod, exp.Abs: _abs, exp.Sqrt: _sqrt,
    exp.EQ: _comparison("equal"), exp.NEQ: _comparison("not_equal"),
    exp.LT: _comparison("less"), exp.LTE: _comparison("less_equal"),
    exp.GT: _comparison("greater"), exp.GTE: _comparison("greater_equal"),
    exp.NullSafeEQ: _comparison("null_safe"), exp.NullSafeNEQ: _null_safe_neq,
    exp.And: _logic("and_kleene"), exp.Or: _logic("or_kleene"), exp.Not: _not,
    exp.Is: _is, exp.In: _in, exp.Between: _between,
    exp.Case: _case, exp.If: _if, exp.Coalesce: _coalesce,
    exp.Greatest: _element_wise("max_element_wise"), exp.Least: _element_wise("min_element_wise"),
    exp.Upper: _case_map("ascii_upper"), exp.Lower: _case_map("ascii_lower"),
    exp.Length: _length, exp.Concat: _concat, exp.DPipe: _dpipe, exp.Substring: _substring,
    exp.Cast: _cast, exp.TryCast: _cast, exp.Like: _like, exp.JSONFormat: _to_json,
    exp.Extract: _extract, exp.Year: _field_of("YEAR"), exp.Month: _field_of("MONTH"),
    exp.Day: _field_of("DAY"), exp.DayOfMonth: _field_of("DAY"), exp.Quarter: _field_of("QUARTER"),
}


# --------------------------------------------------------------------------- stages
Step = Callable[[pa.Table], pa.Table]


class Compiled:
    """A compiled chain of stages: `schema` is its output (records, time, diff) with
    Spark's types; calling it on an input table of the compiled schema gives the output."""

    def __init__(self, schema: pa.Schema, steps: list[Step], input_schema: pa.Schema,
                 projection: Optional[list[int]] = None,
                 copies: Optional[list[Optional[int]]] = None, reads: frozenset = frozenset()):
        self.schema = schema
        self._steps = steps
        self._input = input_schema
        # when every stage is a Map of columns as they are: the input column each output
        # record column is, so that a caller holding the columns in another form (the
        # driver's codes) selects them instead of running the steps
        self.projection = projection
        # when the stages only filter, map and negate, never reading or setting times: per
        # output record column, the input column it is as it is (else None), each output row
        # being the input row whose index a caller put in the time column; `reads`: the
        # input record columns an expression reads (the others' values are never looked at)
        self.copies = copies
        self.reads = reads

    def __call__(self, table: pa.Table) -> pa.Table:
        if table.schema.types != self._input.types or table.schema.names != self._input.names:
            raise ValueError(f"input schema {table.schema} is not the compiled {self._input}")
        for step in self._steps:
            table = step(table)
        return table.cast(self.schema)


def compile_stages(stages: tuple, schema: pa.Schema, time_col: str = "time",
                   conf: Optional[Mapping[str, str]] = None) -> Compiled:
    """The Arrow form of `stages` (Map, Filter, Negate, TemporalFilter) over updates of
    `schema` (records, then `time_col` and `diff`), cached by its arguments. `conf` (the
    runner's) gives the session settings that change an answer (`Session`). Raises
    NotCompiled when a stage or expression is outside the supported subset, and PlanError
    where spark.py does (a temporal bound that is not an integer, output columns that break
    plans.ir.check_stage_columns)."""
    hit = _compiled(schema, tuple(stages), time_col, Session.of(conf or {}))
    if isinstance(hit, NotCompiled):
        raise hit
    return hit


@per_schema  # every chain of every step asks
def _compiled(schema: pa.Schema, stages: tuple, time_col: str, session: "Session"):
    """compile_stages' answer, NotCompiled returned rather than raised so that it is
    remembered too: a step pays no parse either way."""
    try:
        return _compile(stages, schema, time_col, session)
    except NotCompiled as e:
        return e


def _compile(stages, schema: pa.Schema, time_col: str, session: "Session") -> Compiled:
    if [n.lower() for n in schema.names[-2:]] != [time_col.lower(), DIFF] \
            or schema.field(-1).type != pa.int64() or not _integral(schema.field(-2).type):
        raise NotCompiled(f"input schema does not end with {time_col}, diff BIGINT")
    steps, current = [], schema
    projection = list(range(len(schema) - 2))
    copies: Optional[list] = list(projection)
    reads: set = set()
    for stage in stages:
        builder = _STAGES.get(type(stage))
        if builder is None:
            raise NotCompiled(f"stage {stage.label()}")
        time_at = len(current) - 2
        step, current = builder(stage, current, time_col, session)
        ir.check_stage_columns(current.names, [time_col], stage)
        steps.append(step)
        sources = getattr(step, "columns", None)
        projection = None if projection is None or sources is None else \
            [projection[i] for i in sources]
        if copies is not None:
            stage_reads = set() if isinstance(stage, ir.Negate) else getattr(step, "reads", None)
            if isinstance(stage, ir.TemporalFilter) or stage_reads is None or \
                    time_at in stage_reads:
                copies = None
                continue
            reads |= {copies[i] for i in stage_reads if i < time_at and copies[i] is not None}
            if isinstance(stage, ir.Map):
                copies = [None if i is None else copies[i] for i in step.sources]
    return Compiled(current, steps, schema, projection, copies, frozenset(reads))


def _map(stage: ir.Map, schema: pa.Schema, time_col, session):
    c = _Compiler(schema, session)
    outs, reads = [], set()  # reads: of the expressions that compute (not copy) a column
    for text in stage.exprs:
        node = c.parse(text)
        c.reads = set()
        if isinstance(node, exp.Alias):
            name, e = node.alias, c.compile(node.this)
            if not isinstance(node.args.get("alias"), exp.Identifier):
                raise NotCompiled(f"alias in {text!r}")
        elif isinstance(node, exp.Column):
            name, e = c.column(node)
            if name != node.name:
                raise NotCompiled(f"column {node.name!r} named {name!r} in the input")
        else:
            raise NotCompiled(f"unaliased expression {text!r} (Spark names it)")
        outs.append((name, e))
        c.alias(name, e)
        if e.column is None:
            reads |= c.reads
    n_in = len(schema)
    out_schema = pa.schema([pa.field(n, e.type) for n, e in outs]
                           + [schema.field(n_in - 2), schema.field(n_in - 1)])

    def step(tbl: pa.Table) -> pa.Table:
        cols = [_arr(e.fn(tbl)) for _, e in outs] + [tbl.column(n_in - 2), tbl.column(n_in - 1)]
        return pa.Table.from_arrays(cols, schema=out_schema)
    if all(e.column is not None and e.column < n_in - 2 for _, e in outs):  # a projection
        step.columns = [e.column for _, e in outs]
    step.sources = [e.column if e.column is not None and e.column < n_in - 2 else None
                    for _, e in outs]
    step.reads = reads | {e.column for _, e in outs  # a copy of the time or diff reads it
                          if e.column is not None and e.column >= n_in - 2}
    return step, out_schema


def _filter(stage: ir.Filter, schema: pa.Schema, time_col, session):
    c = _Compiler(schema, session)
    e = c.compile(c.parse(stage.expr))
    if e.type != BOOL:
        raise NotCompiled(f"filter on {e.type}")

    def step(tbl: pa.Table) -> pa.Table:
        return tbl.filter(e.fn(tbl))
    step.reads = c.reads
    return step, schema


def _negate_diff(d: pa.Array | pa.ChunkedArray):
    try:
        return pc.negate_checked(d)
    except pa.ArrowInvalid as e:
        raise Fallback("negating diff overflows bigint") from e


def _negate(stage: ir.Negate, schema: pa.Schema, time_col, session):
    i = len(schema) - 1
    return (lambda tbl: tbl.set_column(i, schema.field(i), _negate_diff(tbl.column(i)))), schema


def _temporal_filter(stage: ir.TemporalFilter, schema: pa.Schema, time_col, session):
    """Each update (r, t, d) becomes (r, max(t, lower), d) and, under a non-null upper,
    (r, max(t, upper), -d); records with upper <= lower are dropped (linear.py's rule)."""
    c = _Compiler(schema, session)
    bounds = []
    for text in (stage.lower, stage.upper):
        if text is None:
            bounds.append(None)
            continue
        e = c.compile(c.parse(text))
        if not _integral(e.type):
            raise ir.temporal_bound_error(stage, text, simple_string(e.type))
        bounds.append(_to(e, pa.int64()))
    lower, upper = bounds
    ti, di = len(schema) - 2, len(schema) - 1
    time_type = schema.field(ti).type

    def joined(t, b):
        return pc.cast(pc.max_element_wise(pc.cast(t, pa.int64()), b, skip_nulls=True), time_type)

    def step(tbl: pa.Table) -> pa.Table:  # sets times: no row keeps its place (Compiled.copies)
        lo = lower.fn(tbl) if lower else None
        if upper is None:
            return tbl if lo is None else tbl.set_column(ti, schema.field(ti), joined(tbl.column(ti), lo))
        hi = upper.fn(tbl)
        dead = pc.less_equal(hi, lo) if lo is not None else pa.repeat(pa.scalar(None, BOOL), tbl.num_rows)
        live = pc.invert(pc.fill_null(dead, False))
        tbl, hi = tbl.filter(live), hi.filter(live)
        lo = lo.filter(live) if lo is not None else None
        enter = tbl if lo is None else tbl.set_column(ti, schema.field(ti), joined(tbl.column(ti), lo))
        retracting = pc.is_valid(hi)
        leave = tbl.filter(retracting)
        leave = leave.set_column(ti, schema.field(ti), joined(leave.column(ti), hi.filter(retracting)))
        leave = leave.set_column(di, schema.field(di), _negate_diff(leave.column(di)))
        return pa.concat_tables([enter, leave])
    return step, schema


_STAGES = {ir.Map: _map, ir.Filter: _filter, ir.Negate: _negate,
           ir.TemporalFilter: _temporal_filter}
