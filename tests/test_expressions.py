"""executor/operators/linear/expressions.py against Spark: random expressions from the supported grammar over
random Arrow tables (every column type, nulls, integers at the int32/int64 bounds, NaN), each
evaluated by compile_stages and by Spark on the same data; rows and output types must be equal,
and a Fallback must be an error in Spark too unless it is one of the cases handed back on purpose.
"""
from __future__ import annotations

import datetime as dt
import math
import os
import random
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from executor.operators.linear.expressions import Fallback, NotCompiled, compile_stages
from plans import ir
from plans.errors import PlanError

SCHEMA = pa.schema([
    ("i8", pa.int8()), ("i", pa.int32()), ("a", pa.int64()), ("b", pa.int64()),
    ("x", pa.float64()), ("p", pa.decimal128(10, 2)), ("q", pa.decimal128(5, 3)),
    ("s", pa.string()), ("bo", pa.bool_()), ("dt", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")), ("time", pa.int64()), ("diff", pa.int64())])
INT_COLS = ["i8", "i", "a", "b", "time", "diff"]
# A Fallback Spark does not share is allowed for these: cases handed back on purpose, and
# errors on rows a lazy construct (CASE, IF, COALESCE, AND, OR; a division, whose dividend
# Spark's generated code skips where the divisor is null) never evaluates in Spark.
DELIBERATE = ("NaN", "non-ASCII", "not plain digits", "yyyy-mm-dd", "years 1-9999")
LAZY = ("CASE", "IF(", "coalesce", " AND ", " OR ", " / ")
EXAMPLES = int(os.environ.get("DIFFSPARK_EXPRESSION_EXAMPLES", "30"))  # more: a deeper run
EXPRS_PER_EXAMPLE = 14
ROWS = 12


# --------------------------------------------------------------------------- random tables
def _int(r: random.Random, bits: int):
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    v = r.choice([r.randint(-5, 5), r.randint(-1000, 1000), lo, hi, lo + r.randint(0, 3),
                   hi - r.randint(0, 3), r.randint(lo, hi), 2 ** (bits // 2) + r.randint(-2, 2)])
    return min(max(v, lo), hi)


def _value(r: random.Random, t: pa.DataType):
    if r.random() < 0.2:
        return None
    if pa.types.is_integer(t):
        return _int(r, t.bit_width)
    if t == pa.float64():
        return r.choice([0.0, -0.0, 1.5, -2.25, 1e300, float(r.randint(-9, 9)), r.uniform(-1e3, 1e3),
                         float("inf"), float("nan") if r.random() < 0.1 else 3.0])
    if pa.types.is_decimal(t):
        digits = r.randint(0, t.precision)
        return Decimal(r.randint(-(10 ** digits) + 1, 10 ** digits - 1)).scaleb(-t.scale)
    if t == pa.string():
        return "".join(r.choice(["a", "B", "7", "-", " ", "é", "1", "0", "%", "_", '"', "\\",
                                 "\n", "\x01", "\x1f", "\t"]) for _ in range(r.randint(0, 5))) \
            if r.random() < 0.8 else r.choice(["12", "-3", "2024-02-29", "2023-02-29", "99999999999999999999"])
    if t == pa.bool_():
        return r.random() < 0.5
    if t == pa.date32():
        return dt.date(1900, 1, 1) + dt.timedelta(days=r.randint(0, 80000))
    return dt.datetime(1960, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=r.randint(0, 3 * 10 ** 15))


def random_table(r: random.Random, rows: int = ROWS, min_diff: float = 0.25) -> pa.Table:
    """`min_diff`: the share of diffs that are -2**63 (negating one overflows)."""
    cols = [[_value(r, f.type) for _ in range(rows)] for f in SCHEMA]
    cols[-2] = [r.randint(0, 9) for _ in range(rows)]  # time: never null
    cols[-1] = [-(2 ** 63) if r.random() < min_diff else r.choice([1, -1, 2]) for _ in range(rows)]
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols, SCHEMA)], schema=SCHEMA)


# --------------------------------------------------------------------------- random expressions
KINDS = ["int", "double", "decimal", "string", "bool", "date", "ts"]


def gen(r: random.Random, kind: str, depth: int) -> str:
    leaf = depth <= 0 or r.random() < 0.3
    g = _LEAVES[kind] if leaf else r.choice(_NODES[kind])
    return g(r, depth - 1)


def _int_literal(r):
    v = _int(r, r.choice([32, 64]))
    return f"{v}L" if r.random() < 0.3 and v >= 0 else str(v)


def _either(r, d, kind, other=None):
    return gen(r, kind if other is None or r.random() < 0.5 else other, d)


_LEAVES = {
    "int": lambda r, d: r.choice([r.choice(INT_COLS), r.choice(INT_COLS), _int_literal(r)]),
    "double": lambda r, d: r.choice(["x", "x", "1.5e0", "-2E1"]),
    "decimal": lambda r, d: r.choice(["p", "q", "12.34", "0.5", "-3.0"]),
    "string": lambda r, d: r.choice(["s", "s", "`s`", "'ab'", "''", "\"x y\""]),
    "bool": lambda r, d: r.choice(["bo", "bo", "TRUE", "FALSE"]),
    "date": lambda r, d: r.choice(["dt", "dt", "DATE '2020-02-29'"]),
    "ts": lambda r, d: r.choice(["ts", "ts", "TIMESTAMP '2001-02-03 04:05:06.789'"]),
}


def _cmp(r, d):
    kind = r.choice(KINDS)
    other = {"int": "decimal", "decimal": "int", "double": "int"}.get(kind)
    op = r.choice(["=", "<>", "!=", "<", "<=", ">", ">=", "<=>"])
    return f"({_either(r, d, kind, other)} {op} {_either(r, d, kind, other)})"


def _case(kind):
    def g(r, d):
        branches = " ".join(f"WHEN {gen(r, 'bool', d)} THEN {_or_null(r, kind, d)}"
                            for _ in range(r.randint(1, 2)))
        default = f" ELSE {_or_null(r, kind, d)}" if r.random() < 0.7 else ""
        return f"CASE {branches}{default} END"
    return g


def _or_null(r, kind, d):
    return "NULL" if r.random() < 0.15 else gen(r, kind, d)


def _generic(kind):
    """CASE, IF and COALESCE over `kind`."""
    return [_case(kind),
            lambda r, d: f"IF({gen(r, 'bool', d)}, {_or_null(r, kind, d)}, {gen(r, kind, d)})",
            lambda r, d: f"coalesce({_or_null(r, kind, d)}, {gen(r, kind, d)})",
            lambda r, d: f"{r.choice(['greatest', 'least'])}({_or_null(r, kind, d)}, "
                         f"{_or_null(r, kind, d)}{', ' + gen(r, kind, d) if r.random() < 0.3 else ''})"]


_NODES = {
    "int": [
        lambda r, d: f"({gen(r, 'int', d)} {r.choice('+-*%')} {gen(r, 'int', d)})",
        lambda r, d: f"(-({gen(r, 'int', d)}))",
        lambda r, d: f"abs({gen(r, 'int', d)})",
        lambda r, d: f"CAST({gen(r, r.choice(['int', 'int', 'double', 'decimal', 'bool']), d)} AS "
                     f"{r.choice(['TINYINT', 'SMALLINT', 'INT', 'BIGINT'])})",
        lambda r, d: f"CAST({gen(r, 'string', d)} AS {r.choice(['INT', 'BIGINT'])})",
        lambda r, d: f"length({gen(r, 'string', d)})",
        lambda r, d: r.choice([f"EXTRACT({u} FROM {gen(r, 'date', d)})" for u in
                               ("YEAR", "MONTH", "DAY", "QUARTER")] +
                              [f"{f}({gen(r, 'date', d)})" for f in
                               ("year", "month", "day", "dayofmonth", "quarter")]),
        *_generic("int")],
    "double": [
        lambda r, d: f"({_either(r, d, 'double', 'int')} {r.choice('+-*/')} {_either(r, d, 'double', 'int')})",
        lambda r, d: f"({gen(r, 'int', d)} / {gen(r, 'int', d)})",
        lambda r, d: f"(-({gen(r, 'double', d)}))",
        lambda r, d: f"abs({gen(r, 'double', d)})",
        lambda r, d: f"sqrt({gen(r, 'double', d)})",
        lambda r, d: f"CAST({gen(r, r.choice(['int', 'bool']), d)} AS DOUBLE)",
        *_generic("double")],
    "decimal": [
        lambda r, d: f"({_either(r, d, 'decimal', 'int')} {r.choice('+-*')} {gen(r, 'decimal', d)})",
        lambda r, d: f"(-({gen(r, 'decimal', d)}))",
        lambda r, d: f"abs({gen(r, 'decimal', d)})",
        lambda r, d: f"CAST({gen(r, r.choice(['int', 'decimal']), d)} AS DECIMAL("
                     f"{r.choice([4, 12, 20])},{r.choice([0, 1, 3])}))",
        # results above 38 digits (Spark cuts the scale) and division (HALF_UP)
        lambda r, d: f"(CAST({gen(r, 'decimal', d)} AS DECIMAL(38,{r.choice([0, 2, 10])})) "
                     f"{r.choice('+-*')} {_either(r, d, 'decimal', 'int')})",
        lambda r, d: f"({_either(r, d, 'decimal', 'int')} / {_either(r, d, 'decimal', 'int')})",
        *_generic("decimal")],
    "string": [
        lambda r, d: f"{r.choice(['upper', 'lower'])}({gen(r, 'string', d)})",
        lambda r, d: f"concat({gen(r, 'string', d)}, {_either(r, d, 'string', 'int')})",
        lambda r, d: f"({gen(r, 'string', d)} || {gen(r, 'string', d)})",
        lambda r, d: f"substring({gen(r, 'string', d)}, {r.randint(-4, 4)}"
                     + (f", {r.randint(-1, 4)})" if r.random() < 0.7 else ")"),
        lambda r, d: f"substr({gen(r, 'string', d)}, {r.choice(['i8', 'i', '2'])}, {r.choice(['i8', '3'])})",
        lambda r, d: f"CAST({gen(r, r.choice(['int', 'bool', 'date', 'string']), d)} AS STRING)",
        lambda r, d: "to_json(struct(" + ", ".join(
            f"{gen(r, k, d)} AS `{n}`" for n, k in zip(["f", 'g"h', "i"], r.sample(
                ["int", "string", "bool", "decimal", "date"], r.randint(1, 3)))) + "))",
        *_generic("string")],
    "bool": [
        _cmp, _cmp,
        lambda r, d: f"({gen(r, 'bool', d)} {r.choice(['AND', 'OR'])} {_or_null(r, 'bool', d)})",
        lambda r, d: f"(NOT {gen(r, 'bool', d)})",
        lambda r, d: f"({gen(r, r.choice(KINDS), d)} IS {r.choice(['', 'NOT '])}NULL)",
        lambda r, d: f"({gen(r, 'int', d)} IN ({', '.join(_or_null(r, 'int', d) for _ in range(r.randint(1, 3)))}))",
        lambda r, d: f"({gen(r, 'string', d)} IN ('a', {gen(r, 'string', d)}))",
        lambda r, d: (lambda k: f"({gen(r, k, d)} BETWEEN {gen(r, k, d)} AND {gen(r, k, d)})")(
            r.choice(["int", "decimal", "date", "string"])),
        lambda r, d: f"CAST({gen(r, 'int', d)} AS BOOLEAN)",
        lambda r, d: f"({gen(r, 'string', d)} {r.choice(['', 'NOT '])}LIKE '" + "".join(
            r.choice(["a", "%", "_", "é", "B", " ", '"']) for _ in range(r.randint(0, 4))) + "')",
        *_generic("bool")],
    "date": [
        lambda r, d: f"CAST({gen(r, r.choice(['ts', 'string']), d)} AS DATE)",
        lambda r, d: f"({gen(r, 'date', d)} {r.choice('+-')} INTERVAL '"
                     f"{r.choice([0, 1, 11, 13, 31, 90, 400, 100000])}' "
                     f"{r.choice(['DAY', 'MONTH', 'YEAR'])})",
        *_generic("date")],
    "ts": [
        lambda r, d: f"CAST({gen(r, 'date', d)} AS TIMESTAMP)",
        *_generic("ts")],
}


# --------------------------------------------------------------------------- comparison
def _norm(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    return v


def _rows(table: pa.Table):
    return [tuple(_norm(v) for v in row.values()) for row in table.to_pylist()]


def _types(schema: pa.Schema):
    return [(f.name, pa.string() if f.type == pa.large_string() else f.type) for f in schema]


def _spark_fails(spark, table, call) -> bool:
    try:
        call(spark.createDataFrame(table)).collect()
    except Exception:  # noqa: BLE001 - any Spark error (ANSI overflow, cast, division)
        return True
    return False


def _check_fallback(spark, table, text, reason, call):
    if _spark_fails(spark, table, call):
        return
    assert any(k in str(reason) for k in DELIBERATE) or any(k in text for k in LAZY), \
        f"Fallback ({reason}) but Spark evaluates {text!r}"


def _compare_with_spark(spark, seed, ansi: bool):
    r = random.Random(seed)
    table = random_table(r)
    exprs = [gen(r, r.choice(KINDS), r.randint(1, 3)) for _ in range(EXPRS_PER_EXAMPLE)]
    ok, checked_fallbacks = [], 0
    for i, text in enumerate(exprs):
        stage = ir.Map((f"{text} AS c{i}",))
        try:
            compiled = compile_stages((stage,), SCHEMA)
        except NotCompiled:
            continue
        try:
            ok.append((f"{text} AS c{i}", compiled(table)))
        except Fallback as reason:
            if ansi and checked_fallbacks < 2:  # each check is a Spark job of its own
                checked_fallbacks += 1
                _check_fallback(spark, table, text, reason, lambda df, s=stage: df.selectExpr(*s.exprs))
    if not ok:
        return
    from pyspark.sql.pandas.types import to_arrow_schema
    df = spark.createDataFrame(table).selectExpr(*[e for e, _ in ok])
    want = df.toArrow()
    spark_types = _types(to_arrow_schema(df.schema))
    for j, (text, got) in enumerate(ok):
        assert _types(got.schema)[0] == spark_types[j], text
        assert _rows(got.select([0])) == _rows(want.select([j])), text
        assert got.column_names[1:] == ["time", "diff"] and got.select([1, 2]) == table.select([11, 12])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2 ** 32))
def test_random_expressions_equal_spark(spark, seed):
    _compare_with_spark(spark, seed, ansi=True)


@settings(max_examples=max(EXAMPLES // 3, 1), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2 ** 32))
def test_random_expressions_equal_spark_without_ansi(spark, seed):
    """With ANSI off Spark wraps, or gives null, where it raised: those rows are Fallbacks
    here (Catalyst answers them), and every answer given is still Spark's."""
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        _compare_with_spark(spark, seed, ansi=False)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")


# Edge cases named one by one: literal typing, rounding, bounds, 1-based substring, nulls.
EDGE_CASES = [
    "p + 1", "p * 2", "p + 1L", "p * CAST(2 AS BIGINT)", "q < CAST(1 AS SMALLINT)", "p + 12345678901", "q * 1.5", "p + i8", "p * a", "p - 0.001", "1 + 1L",
    "-2147483648", "-9223372036854775808", "2147483648", "1.", ".5", "0.05", "-0.0", "1e3",
    "CAST(p AS DECIMAL(4,1))", "CAST(q AS DECIMAL(3,0))", "CAST(p AS INT)", "CAST(x AS BIGINT)",
    "CAST(2.5 AS INT)", "CAST(-2.5 AS INT)", "CAST(a AS DECIMAL(20,0))", "CAST(i8 AS STRING)",
    "substring(s, -2)", "substring(s, 0)", "substring(s, 2, -1)", "substring(s, 0, 2)",
    "substring(s, i8)", "concat(s, NULL)", "s || 'x'", "concat(s, a, i8)", "length('é')",
    "a IN (1, NULL)", "NULL IN (1)", "i8 IN (1, 2L)", "CASE a WHEN 1 THEN 'x' END",
    "CASE WHEN NULL THEN 1 ELSE 2 END", "IF(NULL, 1, 2)", "coalesce(NULL, i8, a)",
    "coalesce(p, q)", "IF(bo, p, 1.5)", "i8 * i8", "i8 + 1", "CAST(200 AS TINYINT)",
    "DATE '2020-02-29' = dt", "ts > TIMESTAMP '2000-01-01 00:00:00'", "CAST(ts AS DATE)",
    "CAST(dt AS TIMESTAMP)", "CAST(dt AS STRING)", "x / 2", "a / 3", "i / i8", "abs(p)", "-p",
    "abs(x)", "sqrt(x)", "sqrt(-x)", "NOT (a > 1)", "bo <=> NULL", "NULL <=> NULL", "NULL = NULL", "p <=> q", "p = 1", "p < 1.5", "a = x", "s < 'a'",
    "bo < TRUE", "a BETWEEN i8 AND 10", "s IS NOT NULL AND bo", "i % 7", "a % -1",
    "CAST('12' AS INT)", "CAST('2020-01-31' AS DATE)", "CAST(TRUE AS INT)", "CAST(i AS BOOLEAN)",
    "least(a, i8)", "greatest(a, NULL)", "least(NULL, NULL)", "greatest(p, q, 0.5)",
    "least(dt, DATE '2020-02-29')", "greatest(ts, NULL, ts)", "greatest(x, 1.5)", "least(s, 'b')",
    "DATE '2020-01-31' + INTERVAL '1' MONTH", "DATE '2020-02-29' + INTERVAL '1' YEAR",
    "DATE '2020-03-31' - INTERVAL '1' MONTH", "dt - INTERVAL '90' DAY", "dt + INTERVAL '-3' MONTH",
    "CAST('1998-12-01' AS DATE) - INTERVAL '90' DAY", "s LIKE '%a%'", "s NOT LIKE 'a_'",
    "s LIKE ''", "s LIKE '%'", "s LIKE '_'", "NULL LIKE 'a'",
    "to_json(struct(a AS a, s AS s, dt AS d, p AS p, bo AS b))", "to_json(struct(s AS s))",
    "to_json(struct(CAST(NULL AS INT) AS n))", "to_json(struct(q AS `q\"`))",
    "to_json(struct(CAST(0.0000001 AS DECIMAL(10,7)) AS tiny, CAST(0 AS DECIMAL(9,7)) AS z))",
    "CAST(p AS DECIMAL(38,2)) / CAST(a AS DECIMAL(20,0))", "p / q", "p / 3", "a / p",
    "CAST(p AS DECIMAL(38,2)) * q * p", "CAST(p AS DECIMAL(38,10)) + q", "p * p * p * p",
    "CAST(CAST(p AS DECIMAL(38,2)) / CAST(i AS DECIMAL(20,0)) AS DECIMAL(19,6))",
    "CAST(1 AS DECIMAL(38,0)) / CAST(3 AS DECIMAL(38,37))", "CASE WHEN bo THEN p ELSE 0 END",
    "coalesce(p, a)", "IF(bo, q, i8)", "coalesce(q, i, p)", "EXTRACT(YEAR FROM dt)",
    "EXTRACT(MONTH FROM dt)", "EXTRACT(DAY FROM dt)", "year(dt)", "quarter(dt)",
    "dayofmonth(DATE '2020-02-29')",
    # 4.99..(31 nines)..965E-7: rounded once to 6 places it is 0; rounded at 38 places first,
    # 0.000001. Spark answers 0.
    "CAST(500000000000000000000000000 AS DECIMAL(38,0)) / "
    "CAST(1000000000000000000000000000000007 AS DECIMAL(34,0))",
]


@pytest.mark.parametrize("ansi", [True, False])
def test_edge_cases_equal_spark(spark, ansi):
    r = random.Random(7)
    table = pa.concat_tables([random_table(r, 40, min_diff=0.0) for _ in range(2)])
    ok = []
    spark.conf.set("spark.sql.ansi.enabled", str(ansi).lower())
    try:
        for i, text in enumerate(EDGE_CASES):
            try:
                got = compile_stages((ir.Map((f"{text} AS c{i}",)),), SCHEMA)(table)
            except (NotCompiled, Fallback):
                continue
            ok.append((f"{text} AS c{i}", got))
        from pyspark.sql.pandas.types import to_arrow_schema
        df = spark.createDataFrame(table).selectExpr(*[e for e, _ in ok])
        want, types = df.toArrow(), _types(to_arrow_schema(df.schema))
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")
    assert len(ok) > len(EDGE_CASES) * 2 // 3
    for j, (text, got) in enumerate(ok):
        assert (_types(got.schema)[0], _rows(got.select([0]))) == (types[j], _rows(want.select([j]))), text


# forms that read spark.sql.session.timeZone
ZONED = ["CAST(ts AS DATE)", "CAST(dt AS TIMESTAMP)", "ts < TIMESTAMP '2021-01-01 00:00:00'",
         "year(CAST(ts AS DATE))", "dt = CAST(ts AS DATE)"]


def test_time_zone_forms_follow_the_session_zone(spark, conf):
    """A DATE to or from a TIMESTAMP and a TIMESTAMP literal read the session's time zone:
    they compile to Arrow only in UTC, and a Runner over a session in another zone (a
    session passed in, or --conf spark.sql.session.timeZone) answers on its driver
    placement as Spark does (it answered in UTC before, silently unlike Spark)."""
    from executor import Runner
    from plans import Dataflow

    zone = {"spark.sql.session.timeZone": "America/New_York"}
    for text in ZONED:
        compile_stages((ir.Map((f"{text} AS c",)),), SCHEMA, conf={})
        with pytest.raises(NotCompiled, match="time zone"):
            compile_stages((ir.Map((f"{text} AS c",)),), SCHEMA, conf=zone)
    utc = dt.timezone.utc
    stamps = [dt.datetime(2021, 1, 1, h, tzinfo=utc) for h in (0, 3, 5, 12)] + [None]
    table = pa.table({"k": pa.array(range(5), pa.int64()),
                      "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
                      "dt": pa.array([dt.date(2021, 1, 1)] * 4 + [None], pa.date32()),
                      "time": pa.array([0] * 5, pa.int64()), "diff": pa.array([1] * 5, pa.int64())})
    exprs = ["k"] + [f"{text} AS c{i}" for i, text in enumerate(ZONED)]
    flow = Dataflow()
    flow.output("o", flow.input("t", "k BIGINT, ts TIMESTAMP, dt DATE").map(*exprs))
    spark.conf.set("spark.sql.session.timeZone", zone["spark.sql.session.timeZone"])
    try:
        # the profile's settings give way to the session's (Spark's default where unset)
        runner = Runner(flow, conf=conf | {"spark.sql.decimalOperations.allowPrecisionLoss":
                                           "false"}, spark=spark)
        assert runner.conf["spark.sql.decimalOperations.allowPrecisionLoss"] == "true"
        result = runner.step({"t": table}, upto=1)
        want = spark.createDataFrame(table).selectExpr(*exprs).toArrow()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert result.host
    got = result.arrow("o").drop_columns(["time", "diff"]).sort_by("k")
    assert got.to_pylist() == want.sort_by("k").to_pylist()
    assert got.column("c0").to_pylist()[1] == dt.date(2020, 12, 31)  # 03:00 UTC in New York


ARITHMETIC = ["p * (1 - q)", "a * 0.0001", "p / 3", "p / q", "100.00 * p / q", "-i * i8",
              "i / a", "x + p", "1.50 + p", "(p + 1) * (q - 2)", "p * p * p * p * p",
              "p / (q * q * q)", "i8 + i8", "a - 12345678901", "1 + 2.5", ".5 * q", "1e3 + p",
              "-(p - i)", "p + 1L", "CAST(i AS DECIMAL(4, 1)) * a", "p * CAST(2 AS BIGINT)",
              "CASE WHEN bo THEN p END", "CASE WHEN i > 0 THEN q * 2 ELSE NULL END",
              "CASE a WHEN 1 THEN s WHEN 2 THEN 'z' END", "CASE WHEN bo THEN 1 ELSE i END",
              "CASE WHEN bo THEN CAST(p AS DECIMAL(10, 2)) ELSE p END", "p > q",
              "NOT (i = a OR bo)", "s LIKE 'a%' AND i IS NOT NULL", "i IN (1, 2)",
              "x BETWEEN 1 AND 2", "p <=> q", "true", "a % 2", "i8 % i", "i % a"]
FUNCTIONS = ["year(dt)", "month(ts)", "day(dt)", "dayofmonth(ts)", "quarter(dt)",
             "dayofweek(dt)", "dayofyear(ts)", "weekofyear(dt)", "hour(ts)", "length(s)",
             "upper(s)", "lower(s)", "abs(i8)", "abs(p)", "abs(-x)", "coalesce(p, NULL, p)",
             "coalesce(x, x + 1)", "coalesce(a, b)", "coalesce(dt, dt)"]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2 ** 32))
def test_plan_time_types_equal_spark_analysis(spark, seed):
    """plans/types.py's expression_type (what the SQL front end knows of a column when the
    plan is built, without Spark) equals the type Spark's analyzer gives, wherever it claims
    one: named arithmetic over every numeric kind, the functions it types (coalesce of two
    types it leaves unknown), and random expressions of the grammar above. Analysis only: no Spark job."""
    import sqlglot

    from plans.types import expression_type, spark_type
    r = random.Random(seed)
    exprs = ARITHMETIC + FUNCTIONS + ["coalesce(i, a)", "coalesce(p, q)"] + [gen(r, r.choice(["int", "double", "decimal"]), r.randint(1, 3))
                          for _ in range(EXPRS_PER_EXAMPLE)]
    frame = spark.createDataFrame(random_table(r, 0))
    types = {f.name: spark_type(f.dataType.simpleString()) for f in frame.schema.fields}
    claimed = [(e, expression_type(sqlglot.parse_one(e, read="spark"), types)) for e in exprs]
    claimed = [(e, t) for e, t in claimed if t is not None]
    assert {e for e, _ in claimed} >= set(ARITHMETIC + FUNCTIONS) - {"p + 1L",
                                                                      "p * CAST(2 AS BIGINT)"}
    analyzed = frame.selectExpr(*(f"{e} AS c{i}" for i, (e, _) in enumerate(claimed))).schema
    for (e, t), field in zip(claimed, analyzed.fields):
        assert t == spark_type(field.dataType.simpleString()), e


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2 ** 32))
def test_filter_map_negate_chain_equals_spark(spark, seed):
    """A whole chain (filter, map, negate, temporal_filter, map) against executor/operators/linear/spark.py
    on Spark."""
    from executor.operators.linear import spark as linear

    r = random.Random(seed)
    table = random_table(r, 30, min_diff=0.01)
    stages = (ir.Filter(gen(r, "bool", 2)),
              ir.Map((f"{gen(r, 'int', 1)} AS k", "s", f"{gen(r, 'bool', 2)} AS keep", "i8")),
              ir.Negate(), ir.TemporalFilter(r.choice([None, "i8"]), r.choice([None, "i8 + 3"])),
              ir.Filter(f"keep OR k {r.choice(['<', '>'])} i8"),
              ir.Map(("k", f"concat(s, {r.choice(['k', 'i8'])}) AS t2", "(i8 - k) AS d2")))
    try:
        compiled = compile_stages(stages, SCHEMA)
    except NotCompiled:
        return
    run = lambda df: linear.apply(df, stages, ["time"], "numpy")  # noqa: E731
    try:
        got = compiled(table)
    except Fallback as reason:
        _check_fallback(spark, table, repr(stages), reason, run)
        return
    from pyspark.sql.pandas.types import to_arrow_schema
    df = run(spark.createDataFrame(table))
    assert _types(got.schema) == _types(to_arrow_schema(df.schema))
    assert sorted(map(repr, _rows(got))) == sorted(map(repr, _rows(df.toArrow())))


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2 ** 32), st.sampled_from([(None, None), ("i8", None), (None, "i8"),
                                                  ("i8", "i8 + time"), ("CAST(i8 AS INT)", "i"),
                                                  ("NULL", "i8"), ("i8", "IF(bo, i8 + 3, NULL)")]))
def test_temporal_filter_equals_linear(spark, seed, bounds):
    from executor.operators.linear import spark as linear

    r = random.Random(seed)
    table = random_table(r, 30)
    stage = ir.TemporalFilter(*bounds)
    try:
        compiled = compile_stages((stage,), SCHEMA)
    except PlanError:
        with pytest.raises(PlanError):
            linear.apply(spark.createDataFrame(table), (stage,), ["time"], "numpy")
        return
    df = linear.apply(spark.createDataFrame(table), (stage,), ["time"], "numpy")
    try:
        got = compiled(table)
    except Fallback:  # a diff of -2**63 to retract
        assert _spark_fails(spark, table, lambda d: linear.apply(d, (stage,), ["time"], "numpy"))
        return
    assert sorted(map(repr, _rows(got))) == sorted(map(repr, _rows(df.toArrow())))


def test_session_is_ansi(spark):
    """The Fallback cases assume ANSI errors; with ANSI off they are still exact (Catalyst
    answers them), but this suite's 'Spark raises too' checks need it on."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"


@pytest.mark.parametrize("stages", [
    (ir.Map(("p % b AS m",)),),
    (ir.Map(("a div b AS m",)),),
    (ir.Map(("try_cast(s AS INT) AS m",)),),
    (ir.Map(("CAST(x AS STRING) AS m",)),),
    (ir.Map(("a + s AS m",)),),
    (ir.Map(("a + 1",)),),  # Spark names it
    (ir.Map(("A",)),),  # Spark's name for a case-folded reference
    (ir.Map(("upper(a) AS m",)),),
    (ir.Map(("CAST(s AS VARCHAR(3)) AS m",)),),
    (ir.Map(("'a\\nb' AS m",)),),
    (ir.Map(("nope AS m",)),),
    (ir.Filter("a"),),
    (ir.FlatMap("array(named_struct('k', a))"),),
])
def test_not_compiled(stages):
    with pytest.raises(NotCompiled):
        compile_stages(stages, SCHEMA)


def test_lateral_aliases_resolve_as_in_spark(spark):
    """A projection's expressions may name its earlier outputs (Spark's lateral column alias,
    as the SQL front end writes group keys); an input column of that name still wins."""
    table = random_table(random.Random(3), 30, min_diff=0.0)
    stages = (ir.Map(("i8 + 1 AS z", "z * 2 AS w", "b AS a", "a AS c",
                      "to_json(struct(z AS z, s AS s)) AS k")),)
    got = compile_stages(stages, SCHEMA)(table)
    want = spark.createDataFrame(table).selectExpr(*stages[0].exprs).toArrow()
    assert _rows(got.select(list(range(5)))) == _rows(want)


@pytest.mark.parametrize("stages, projection", [
    ((ir.Map(("a", "s AS t", "A AS a2")),), [2, 7, 2]),  # case-folded, a column twice
    ((ir.Map(("b AS z", "z AS w")),), [3, 3]),  # a lateral alias of a column
    ((ir.Map(("p", "s")), ir.Map(("s AS u", "p"))), [7, 5]),  # composed
    ((ir.Map(("a", "b")), ir.Negate(), ir.Map(("b",))), None),  # diffs change
    ((ir.Map(("a + 1 AS c",)),), None),  # computed
    ((ir.Map(("a", "time AS t")),), None),  # a time is no record column
    ((ir.Map(("a", "b")), ir.Filter("a > b")), None),
])
def test_projection_names_the_columns_a_chain_selects(stages, projection):
    """Compiled.projection, which the driver runs on codes instead of the steps, is exactly
    the columns the steps would select."""
    compiled = compile_stages(stages, SCHEMA)
    assert compiled.projection == projection
    if projection is not None:
        table = random_table(random.Random(5), 40, min_diff=0.0)
        got = compiled(table)
        assert [c.to_pylist() for c in got.columns[:len(projection)]] == \
            [table.column(i).to_pylist() for i in projection]


def test_session_settings_that_change_an_answer_are_not_compiled_away():
    """Decimal results above 38 digits follow allowPrecisionLoss, and to_json's text
    ignoreNullFields: set otherwise, the expression is left to Catalyst."""
    wide = (ir.Map(("p * p * p * p AS m",)),)
    assert compile_stages(wide, SCHEMA).schema.field("m").type == pa.decimal128(38, 6)
    with pytest.raises(NotCompiled, match="without precision loss"):
        compile_stages(wide, SCHEMA, conf={"spark.sql.decimalOperations.allowPrecisionLoss":
                                           "false"})
    json = (ir.Map(("to_json(struct(a AS a)) AS j",)),)
    compile_stages(json, SCHEMA)
    with pytest.raises(NotCompiled, match="ignoreNullFields"):
        compile_stages(json, SCHEMA, conf={"spark.sql.jsonGenerator.ignoreNullFields": "false"})


def test_greatest_and_least_compile_where_arrow_matches_spark():
    """The triangle flow's orientation (least/greatest of two BIGINTs) runs on Arrow; DOUBLE
    (NaN orders above every number in Spark, not in Arrow) goes to Catalyst."""
    for text in ("least(a, i8)", "greatest(p, q, 0.5)", "greatest(ts, NULL, ts)",
                 "least(dt, DATE '2020-02-29')"):
        compile_stages((ir.Map((f"{text} AS m",)),), SCHEMA)
    with pytest.raises(NotCompiled):
        compile_stages((ir.Map(("greatest(x, 1.5) AS m",)),), SCHEMA)


@pytest.mark.parametrize("exprs, rule", [(("a AS time",), "reserved column name 'time'"),
                                         (("a AS k", "b AS K"), "duplicate output column")])
def test_output_column_rules(exprs, rule):
    with pytest.raises(PlanError, match=rule):
        compile_stages((ir.Map(exprs),), SCHEMA)


def test_temporal_bound_must_be_integer():
    with pytest.raises(PlanError, match="bound 's' has type string"):
        compile_stages((ir.TemporalFilter("s", None),), SCHEMA)


def test_cached_and_overflow_falls_back():
    stages = (ir.Map(("a + b AS c",)),)
    assert compile_stages(stages, SCHEMA) is compile_stages(stages, SCHEMA)
    t = pa.Table.from_pylist([dict(zip(SCHEMA.names, [0, 0, 2 ** 62, 2 ** 62, None, None, None,
                                                      None, None, None, None, 0, 1]))], SCHEMA)
    with pytest.raises(Fallback, match="overflow"):
        compile_stages(stages, SCHEMA)(t)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2 ** 32))
def test_decimal_division_and_narrowing_cast_round_half_up_exactly(seed):
    """x / y and a cast that drops digits against Python's Decimal (the exact quotient
    rounded once, HALF_UP, to the result's scale; out of range falls back), whole and
    sliced: values of a few digits (int64 arithmetic) or of up to 38 (Python integers),
    ties, negatives, nulls."""
    import decimal

    r = random.Random(seed)
    (p1, s1), (p2, s2) = [(p, r.randint(0, p)) for p in (r.randint(1, 38), r.randint(1, 38))]
    wide = r.random() < 0.3

    def value(p, s, divisor=False):
        if r.random() < 0.1:
            return None
        v = r.randint(0, 10 ** r.randint(0, p if wide else min(p, 6)) - 1) * r.choice([1, -1])
        return Decimal(v or int(divisor)).scaleb(-s)
    x, y = pa.decimal128(p1, s1), pa.decimal128(p2, s2)
    schema = pa.schema([("x", x), ("y", y), ("time", pa.int64()), ("diff", pa.int64())])
    table = pa.Table.from_arrays([
        pa.array([value(p1, s1) for _ in range(30)], x),
        pa.array([value(p2, s2, divisor=True) for _ in range(30)], y),
        pa.array([0] * 30, pa.int64()), pa.array([1] * 30, pa.int64())], schema=schema)
    cut = r.randint(0, s1)
    cast = f"CAST(x AS DECIMAL({max(1, min(38, p1 - s1 + cut + r.randint(0, 2)))}, {cut}))"
    context = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)
    xs, ys = table.column("x").to_pylist(), table.column("y").to_pylist()
    for text, exact, rows in (("x / y", context.divide, zip(xs, ys)),
                              (cast, lambda a: a, zip(xs))):
        chain = compile_stages((ir.Map((f"{text} AS c",)),), schema)
        t = chain.schema.field("c").type
        want = [None if None in row else
                context.quantize(exact(*row), Decimal(1).scaleb(-t.scale)) for row in rows]
        if any(w is not None and abs(w) >= Decimal(10) ** (t.precision - t.scale)
               for w in want):
            with pytest.raises(Fallback, match="out of range"):
                chain(table)
            continue
        assert chain(table).column("c").to_pylist() == want, text
        assert chain(table.slice(7, 11)).column("c").to_pylist() == want[7:18], text


def test_column_free_expressions_are_kept_and_still_raise():
    """An expression of no column is evaluated on one row and repeated (expressions._folded),
    by the same compiled chain for tables of any size, the empty one included; a constant
    that overflows is not kept: it falls back at every call."""
    table = random_table(random.Random(3), 5)
    chain = compile_stages((ir.Map(("DATE '2020-01-31' + INTERVAL '1' MONTH AS d", "a AS a",
                                    "IF(a IS NULL, 0, year(DATE '2020-02-29')) AS y")),), SCHEMA)
    for rows in (0, 5, 2):
        got = chain(table.slice(0, rows))
        assert got.column("d").to_pylist() == [dt.date(2020, 2, 29)] * rows
        assert got.column("y").to_pylist() == [
            0 if a is None else 2020 for a in table.column("a").to_pylist()[:rows]]
    over = compile_stages((ir.Map(("9223372036854775807L + 1L AS o",)),), SCHEMA)
    assert over(table.slice(0, 0)).num_rows == 0
    for _ in range(2):
        with pytest.raises(Fallback, match="overflow"):
            over(table)


def test_benchmark_smoke(spark, tmp_path):
    """benchmarks/expressions.py end to end at a tiny size; both sides must agree."""
    import json

    from benchmarks import expressions

    out = tmp_path / "expressions.json"
    expressions.main(["--sizes", "50", "--repeat", "2", "--out", str(out)], spark=spark)
    saved = json.loads(out.read_text())
    assert saved["sizes"]["50"]["equal"] and saved["sizes"]["50"]["arrow_s"] > 0


@pytest.mark.parametrize("stages, copies, reads", [
    ((ir.Map(("a", "b", "s AS t")), ir.Filter("a > b"), ir.Map(("t", "a"))), [7, 2], {2, 3}),
    ((ir.Map(("b AS z", "z AS w")),), [3, 3], set()),  # a lateral alias of a column
    ((ir.Map(("i8 AS z", "z + 1 AS w")),), [0, None], {0}),  # computed from one
    ((ir.Map(("a", "b")), ir.Negate(), ir.Map(("b",))), [3], set()),  # diffs change
    ((ir.Map(("i8 + 1 AS c", "s")), ir.Filter("c > 2")), [None, 7], {0}),  # computed
    ((ir.Map(("coalesce(s, 'n') AS u", "u AS v", "p")),), [None, None, 5], {7}),
    ((ir.Map(("a", "time AS t")),), None, None),  # reads the time
    ((ir.Filter("time > 3"),), None, None),
    ((ir.TemporalFilter("a", None),), None, None),  # sets times
])
def test_copies_name_the_columns_a_chain_carries_row_by_row(stages, copies, reads):
    """Compiled.copies and Compiled.reads, by which the driver takes a carried column's codes
    by each output row's input row (its index in the time column) and decodes only what an
    expression reads: the copies are the input's values at those rows, and the columns no
    expression reads can be anything."""
    compiled = compile_stages(stages, SCHEMA)
    assert compiled.copies == copies
    if copies is None:
        return
    assert compiled.reads == reads
    table = random_table(random.Random(7), 60, min_diff=0.0)
    want = compiled(table)
    k = len(SCHEMA) - 2
    indexed = table.set_column(k, SCHEMA.field(k), pa.array(range(table.num_rows), pa.int64()))
    for i in set(range(k)) - reads:  # never looked at
        indexed = indexed.set_column(i, SCHEMA.field(i), pa.nulls(table.num_rows, SCHEMA[i].type))
    got = compiled(indexed)
    rows = pa.array(got.column(len(copies)).to_numpy())
    assert got.column(len(copies) + 1) == want.column(len(copies) + 1)  # diffs
    assert table.column(k).take(rows) == want.column(len(copies))  # times, by the index
    for j, i in enumerate(copies):
        assert want.column(j) == (table.column(i).take(rows) if i is not None else got.column(j))
