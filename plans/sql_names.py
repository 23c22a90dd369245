"""The column name Spark gives a SELECT item that has no alias (`sum(x)`, `count(1)`, `(x + 1)`).

A view's columns must be named as Spark names them, or a user reading `sum(x)` from the
output finds no such column. Spark prints the analysed expression in its own SQL
(`toPrettySQL`): functions in lower case as the query spells them, every binary operator in
parentheses, `count(*)` as `count(1)`, string literals unquoted, a top-level CAST as its
operand. The rules below cover a grammar whose every form is checked against Spark's own
names (tests/test_sql.py); anything outside it returns None and the item needs an alias.
sqlglot folds spellings Spark keeps apart (`nvl`, `ifnull` and `coalesce` are one node), so
a function's name is read back from the query text where sqlglot recorded its position.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Optional

from sqlglot import exp

_BINARY = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%",
           exp.EQ: "=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=",
           exp.NullSafeEQ: "<=>", exp.And: "AND", exp.Or: "OR"}
_ORDERING = {"<", "<=", ">", ">="}
_AGGREGATES = {exp.Sum: "sum", exp.Count: "count", exp.Avg: "avg", exp.Min: "min",
               exp.Max: "max"}
# spelled name -> the sqlglot node it parses to; arguments in Spark's order: `this`, then
# `expression` or `decimals`, then `expressions`
_FUNCTIONS = {"coalesce": exp.Coalesce, "nvl": exp.Coalesce, "ifnull": exp.Coalesce,
              "upper": exp.Upper, "ucase": exp.Upper, "lower": exp.Lower, "lcase": exp.Lower,
              "abs": exp.Abs, "length": exp.Length, "char_length": exp.Length,
              "character_length": exp.Length, "year": exp.Year, "month": exp.Month,
              "day": exp.Day, "dayofmonth": exp.DayOfMonth, "round": exp.Round,
              "nullif": exp.Nullif, "greatest": exp.Greatest, "least": exp.Least,
              "concat": exp.Concat}
# flags sqlglot sets on these nodes that change nothing Spark prints
_FLAGS = {"ignore_nulls", "safe", "coalesce", "big_int"}
# sqlglot's type (as it reads Spark's spellings: LONG is BIGINT, VARCHAR(n) is TEXT) -> Spark's
_TYPES = {"INT": "INT", "BIGINT": "BIGINT", "SMALLINT": "SMALLINT", "TINYINT": "TINYINT",
          "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "TEXT": "STRING", "DATE": "DATE",
          "TIMESTAMPTZ": "TIMESTAMP", "TIMESTAMPNTZ": "TIMESTAMP_NTZ", "BOOLEAN": "BOOLEAN"}


def spark_name(e: exp.Expression, text: str) -> Optional[str]:
    """Spark's name for the SELECT item `e` parsed from `text`, or None where these rules do
    not say it."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Cast) and not e.args.get("safe"):  # a top-level CAST: its operand
        return spark_name(e.this, text)
    return _sql(e, text)


def _sql(e: exp.Expression, text: str) -> Optional[str]:
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Column):
        return None if isinstance(e.this, exp.Star) else e.name
    if isinstance(e, exp.Literal):
        return e.this if e.is_string else _number(e.this)
    if isinstance(e, exp.Boolean):
        return "true" if e.this else "false"
    if isinstance(e, exp.Null):
        return "NULL"
    if isinstance(e, exp.Neg):
        if isinstance(e.this, exp.Literal) and not e.this.is_string:  # one literal to Spark
            n = _number(e.this.this)
            return None if n is None else f"-{n}"
        return _wrap("(- {})", _sql(e.this, text))
    if isinstance(e, exp.Not):
        return None if isinstance(e.this, exp.Is) else _wrap("(NOT {})", _sql(e.this, text))
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
        return _wrap("({} IS NULL)", _sql(e.this, text))
    if isinstance(e, exp.NEQ):  # Spark's parser reads a <> b as NOT (a = b)
        return _wrap("(NOT {})", _sql(exp.EQ(this=e.this, expression=e.expression), text))
    op = _BINARY.get(type(e))
    if op is not None:
        if op in _ORDERING and (_decimal_literal(e.this) or _decimal_literal(e.expression)):
            return None  # Spark's analyser rounds it against an integer (i < 2.5: i < 3)
        a, b = _sql(e.this, text), _sql(e.expression, text)
        return None if a is None or b is None else f"({a} {op} {b})"
    if isinstance(e, exp.In) and not e.args.get("query") and e.expressions:
        return _call("({} IN ({}))", [e.this], e.expressions, text)
    if isinstance(e, exp.Case):
        return _case(e, text)
    if isinstance(e, exp.Cast) and not e.args.get("safe"):
        return _cast(e, text)
    if type(e) in _AGGREGATES:
        return _aggregate(e, text)
    if isinstance(e, exp.Filter) and type(e.this) in _AGGREGATES:
        return _call("{} FILTER (WHERE {})", [e.this, e.expression.this], [], text)
    return _function(e, text)


def _decimal_literal(e: exp.Expression) -> bool:
    while isinstance(e, (exp.Paren, exp.Neg)):
        e = e.this
    return isinstance(e, exp.Literal) and not e.is_string and not e.this.isdigit()


def _wrap(template: str, inner: Optional[str]) -> Optional[str]:
    return None if inner is None else template.format(inner)


def _number(digits: str) -> Optional[str]:
    """A numeric literal as Spark prints it: integers without leading zeros, decimals with
    the scale written (1.50); not exponents, whose DOUBLE Spark prints its own way."""
    if not digits.replace(".", "", 1).isdigit():
        return None
    try:
        value = Decimal(digits)
    except InvalidOperation:
        return None
    out = str(value)
    return None if "E" in out else out


def _call(template: str, first: list, rest: list, text: str) -> Optional[str]:
    parts = [_sql(x, text) for x in first]
    tail = [_sql(x, text) for x in rest]
    if any(p is None for p in parts + tail):
        return None
    return template.format(*parts, ", ".join(tail))


def _case(e: exp.Case, text: str) -> Optional[str]:
    """CASE WHEN c THEN v ... [ELSE d] END; a simple CASE x WHEN v compares (x = v)."""
    out = ["CASE"]
    for branch in e.args.get("ifs") or []:
        cond = branch.this
        if e.this is not None:
            cond = exp.EQ(this=e.this, expression=cond)
        c, v = _sql(cond, text), _sql(branch.args.get("true"), text)
        if c is None or v is None:
            return None
        out += ["WHEN", c, "THEN", v]
    default = e.args.get("default")
    if default is not None:
        d = _sql(default, text)
        if d is None:
            return None
        out += ["ELSE", d]
    return " ".join(out + ["END"])


def _cast(e: exp.Cast, text: str) -> Optional[str]:
    to = e.to
    name = getattr(to.this, "name", None)
    params = [p.this.this if isinstance(p.this, exp.Literal) else None
              for p in to.expressions]
    if name == "DECIMAL" and len(params) <= 2 and None not in params:
        precision, scale = params + ["10", "0"][len(params):]
        typ = f"DECIMAL({int(precision)},{int(scale)})"
    elif name in _TYPES:
        typ = _TYPES[name]
    else:
        return None
    return _wrap(f"CAST({{}} AS {typ})", _sql(e.this, text))


def _aggregate(e: exp.AggFunc, text: str) -> Optional[str]:
    """sum, count, avg, min, max, with DISTINCT; count(*) is count(1)."""
    name = _AGGREGATES[type(e)]
    if e.expressions or set(_set_args(e)) - {"this"} - _FLAGS:
        return None
    arg = e.this
    if isinstance(arg, exp.Star):
        return f"{name}(1)" if name == "count" else None
    if isinstance(arg, exp.Distinct):
        return _call(f"{name}(DISTINCT {{}})", [], arg.expressions, text)
    return _call(f"{name}({{}})", [arg], [], text)


def _function(e: exp.Expression, text: str) -> Optional[str]:
    """One of _FUNCTIONS, named as the query spells it (sqlglot keeps the name's position
    in `meta`)."""
    start, end = e.meta.get("start"), e.meta.get("end")
    if start is None or end is None:
        return None
    spelled = text[start:end + 1].lower()
    if _FUNCTIONS.get(spelled) is not type(e) or set(_set_args(e)) - {
            "this", "expression", "decimals", "expressions"} - _FLAGS:
        return None
    if isinstance(e, (exp.Year, exp.Month, exp.Day, exp.DayOfMonth)):
        inner = e.this  # sqlglot wraps the argument in a TO_DATE the query does not have
        if isinstance(inner, exp.TsOrDsToDate) and not inner.meta:
            if set(_set_args(inner)) - {"this"}:
                return None
            e = e.copy()
            e.set("this", inner.this)
    first = [e.this] if e.this is not None else []
    second = [e.args[k] for k in ("expression", "decimals") if e.args.get(k) is not None]
    if isinstance(e, exp.Round) and not second:  # Spark prints round's default scale
        second = [exp.Literal.number(0)]
    return _call(f"{spelled}({{}})", [], first + second + list(e.expressions), text)


def _set_args(e: exp.Expression) -> list[str]:
    return [k for k, v in e.args.items() if v not in (None, [], False)]
