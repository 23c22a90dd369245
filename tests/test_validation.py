"""Bad input is refused whole: a clear error naming input, column and rule, and the runner's
state and outputs exactly as they were before the step."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from conftest import outputs_rows, updates_df
from executor import InputError, PlanError, Runner, StepError
from plans import Dataflow

DDL = "k BIGINT NOT NULL, v BIGINT"


@pytest.fixture()
def runner(spark, conf):
    flow = Dataflow()
    xs = flow.input("xs", DDL)
    flow.output("out", xs.map("k", "v * 2 AS v2"))
    flow.output("weighted", xs.explode("array(named_struct('k', k, 'diff', v))"))
    r = Runner(flow, conf=conf, spark=spark)
    r.step({"xs": updates_df(spark, DDL, [((1, 2), 0, 1), ((2, 3), 1, 1)])}, upto=2)
    return r


def state(r):
    return (r.frontier, r.steps, r.closed, outputs_rows(r, ["out", "weighted"]))


def df_of(spark, ddl, rows):
    return spark.createDataFrame(rows, ddl)


BAD = {
    "missing column": ("v", lambda s: df_of(s, "k BIGINT, time BIGINT, diff BIGINT", [(1, 2, 1)])),
    "unexpected column": ("extra", lambda s: df_of(
        s, "k BIGINT, v BIGINT, extra BIGINT, time BIGINT, diff BIGINT", [(1, 1, 1, 2, 1)])),
    "wrong type": ("v", lambda s: df_of(
        s, "k BIGINT, v DOUBLE, time BIGINT, diff BIGINT", [(1, 1.5, 2, 1)])),
    "null in a NOT NULL column": ("k", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(None, 1, 2, 1)])),
    "null time": ("time", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(1, 1, None, 1)])),
    "null diff": ("diff", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(1, 1, 2, None)])),
    "time below the frontier": ("time", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(1, 1, 1, 1)])),
    "time at or beyond upto": ("time", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(1, 1, 5, 1)])),
    "diff overflow": ("diff", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT",
        [(1, 1, 2, 2**63 - 1), (1, 1, 3, 5)])),
    "text that is not a number": ("v", lambda s: df_of(
        s, "k STRING, v STRING, time STRING, diff STRING", [("1", "x", "2", "1")])),
    "diff beyond int64 in text": ("diff", lambda s: df_of(
        s, "k STRING, v STRING, time STRING, diff STRING", [("1", "1", "2", "99999999999999999999")])),
    "wrong type of time": ("time", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time DOUBLE, diff BIGINT", [(1, 1, 2.0, 1)])),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_batch_is_refused_whole(spark, runner, case):
    column, make = BAD[case]
    before = state(runner)
    good = updates_df(spark, DDL, [((7, 7), 2, 1)])
    with pytest.raises(InputError) as err:
        runner.step({"xs": make(spark)}, upto=5)
    assert err.value.input == "xs" and err.value.column == column, str(err.value)
    assert "input 'xs'" in str(err.value) and f"column '{column}'" in str(err.value)
    assert state(runner) == before
    runner.step({"xs": good}, upto=5)  # the runner still works afterwards
    assert runner.frontier == 5


def test_unknown_input_and_bad_source(spark, runner, tmp_path):
    before = state(runner)
    with pytest.raises(InputError, match="unknown input"):
        runner.step({"nope": updates_df(spark, DDL, [])}, upto=3)
    junk = tmp_path / "x.json"
    junk.write_text("{}")
    with pytest.raises(InputError, match="Parquet"):
        runner.step({"xs": str(junk)}, upto=3)
    with pytest.raises(InputError, match="not found"):
        runner.step({"xs": str(tmp_path / "missing.parquet")}, upto=3)
    assert state(runner) == before


def test_diff_product_overflow_refuses_the_step(spark, runner):
    """explode multiplies diffs: int64 overflow there is caught by ANSI arithmetic and the
    step is refused with nothing changed."""
    before = state(runner)
    big = updates_df(spark, DDL, [((1, 2**62), 2, 4)])
    with pytest.raises(StepError, match="refused, nothing changed: .ARITHMETIC_OVERFLOW. long"):
        runner.step({"xs": big}, upto=3)
    assert state(runner) == before


def test_a_java_error_is_told_by_its_own_line(spark):
    """py4j's first line only names the JVM method that threw (a job that failed in
    localCheckpoint said no more than that); the error a user sees is the Java exception's."""
    from py4j.protocol import Py4JJavaError

    from executor.runtime.errors import first_line
    with pytest.raises(Py4JJavaError) as raised:
        spark._jvm.java.util.Objects.requireNonNull(None, "no x7")
    assert first_line(raised.value) == "java.lang.NullPointerException: no x7"


def test_frontier_rules(spark, runner):
    with pytest.raises(PlanError, match="below the frontier"):
        runner.step({}, upto=1)
    runner.close()
    with pytest.raises(PlanError, match="closed"):
        runner.step({}, upto=10)
    with pytest.raises(PlanError, match="unknown output"):
        runner.output("nope")


def test_plan_errors_name_the_operator(spark, conf):
    with pytest.raises(PlanError, match="reserved"):
        Dataflow().input("e", "time BIGINT")
    flow = Dataflow()
    e = flow.input("e", "a BIGINT, s STRING")
    flow.output("bad", e.map("a AS diff"))
    with pytest.raises(PlanError, match="reserved column name 'diff'"):
        Runner(flow, conf=conf, spark=spark)
    flow = Dataflow()
    e = flow.input("e", "a BIGINT, s STRING")
    flow.output("bad", e.temporal_filter(lower="s"))
    with pytest.raises(PlanError, match="integer times"):
        Runner(flow, conf=conf, spark=spark)
    flow = Dataflow()
    e = flow.input("e", "a BIGINT")
    flow.output("bad", e.filter("nosuchcolumn > 1"))
    with pytest.raises(PlanError, match="filter"):
        Runner(flow, conf=conf, spark=spark)


def test_an_expression_that_reads_an_updates_time_or_diff_is_refused_when_built():
    """A filter on `diff > 0` kept an insertion and dropped its retraction (the record stayed
    forever); a map of `time` made the time part of the record; `rand()` gave a retraction
    another record than its insertion's. Each is refused, naming the operator, the
    expression and the column or function; fields, strings, aliases, function names and
    lambda variables of those names are not reads."""
    e = Dataflow().input("e", "k BIGINT, s STRUCT<time: BIGINT>, xs ARRAY<BIGINT>")
    for build, column in ((lambda: e.filter("diff > 0"), "diff"),
                          (lambda: e.map("k", "`time` + 1 AS t"), "time"),
                          (lambda: e.explode("array(named_struct('k', k, 'diff', diff))"), "diff"),
                          (lambda: e.temporal_filter(lower="time"), "time"),
                          (lambda: e.top_k(1, order_by="time DESC"), "time")):
        with pytest.raises(PlanError, match=f"reads the column '{column}' .*rule: expressions "
                                            "read the record's columns"):
            build()
    e.map("k", "s.time AS t", "k AS x").filter("transform(xs, time -> time + 1) IS NOT NULL")
    e.join_function("array(named_struct('k', k, 'time', k + 1, 'diff', 2L))")
    e.map("date_diff(to_date('2020-01-02'), to_date('2020-01-01')) AS d", "k AS random",
          "unix_timestamp(to_date('2020-01-01')) AS u")
    for build, call in ((lambda: e.map("k", "rand() AS r"), "rand"),
                        (lambda: e.filter("k < unix_timestamp()"), "unix_timestamp"),
                        (lambda: e.temporal_filter(upper="datediff(current_date, to_date('2020-01-01'))"),
                         "current_date")):
        with pytest.raises(PlanError, match=f"calls {call}, whose value changes between calls"):
            build()
    with pytest.raises(PlanError, match="top_k: order_by 'hash.*' reads \\*"):
        e.top_k(1, order_by="hash(*) DESC")
    with pytest.raises(PlanError, match="threshold: .*calls rand"):
        e.threshold("CASE WHEN rand() < 0.5 THEN count ELSE 0 END")
    with pytest.raises(PlanError, match="is a window function .*use top_k or reduce"):
        e.map("k", "row_number() OVER (ORDER BY k) AS r")


def test_snapshot_and_absent_time_and_diff(spark, conf):
    flow = Dataflow()
    xs = flow.input("xs", DDL)
    flow.output("out", xs)
    r = Runner(flow, conf=conf, spark=spark)
    r.step({"xs": spark.createDataFrame([(1, 1), (1, 1), (2, None)], "k BIGINT, v BIGINT")},
           upto=3)
    got = sorted(tuple(x) for x in r.snapshot("out", at=2).collect())
    assert got == [(1, 1, 2), (2, None, 1)]
    with pytest.raises(PlanError, match="not final"):
        r.snapshot("out", at=3)


# ---------------------------------------------------------------------------- issue 21
SPARK_ONLY = {"diffspark.host.step_rows": "0"}


def keep(spark, conf, ddl, extra=None):
    """A runner whose output `out` is its input as given."""
    flow = Dataflow()
    flow.output("out", flow.input("xs", ddl))
    return Runner(flow, conf=conf | (extra or {}), spark=spark)


def values(r):
    return sorted(tuple(x)[:-2] for x in r.output("out").collect())


def test_csv_rfc4180_quoting_round_trips(spark, conf, tmp_path):
    """Quotes doubled inside a quoted field and commas, as Python's csv module
    and pandas write them, come back as they were."""
    import csv as pycsv

    import pandas as pd

    texts = ['cust 13, "vip"', 'plain', '"', 'a,b', '']
    path = tmp_path / "q.csv"
    with open(path, "w", newline="") as f:
        w = pycsv.writer(f)
        w.writerow(["k", "s"])
        w.writerows([(i, t) for i, t in enumerate(texts)])
    pd.DataFrame({"k": range(len(texts)), "s": texts}).to_csv(tmp_path / "p.csv", index=False)
    for source in (str(path), str(tmp_path / "p.csv")):
        r = keep(spark, conf, "k BIGINT, s STRING")
        r.step({"xs": source}, upto=1)
        assert values(r) == [(i, t or None) for i, t in enumerate(texts)], source


def test_csv_options_and_a_header_of_another_dialect(spark, conf, tmp_path):
    from executor import csv

    path = tmp_path / "semi.csv"
    path.write_text("k;s;time\n1;x y;0\n2;NA;0\n")
    r = keep(spark, conf, "k BIGINT, s STRING")
    with pytest.raises(InputError, match=r"one field holding semicolons.*delimiter=';'"):
        r.step({"xs": str(path)}, upto=1)
    r.step({"xs": csv(path, delimiter=";", null_value="NA")}, upto=1)
    assert values(r) == [(1, "x y"), (2, None)]
    bare = tmp_path / "bare.csv"
    bare.write_text("3,z,1,2\n")
    r.step({"xs": csv(bare, header=False)}, upto=2)
    assert sorted(tuple(x) for x in r.output("out").collect())[-1] == (3, "z", 1, 2)


def test_decimal_is_never_rounded(spark, conf, tmp_path):
    """More fraction digits than the scale, or more integer digits than precision - scale,
    from CSV, Parquet, pyarrow and pandas: refused with the rule, the value and its row, by
    the driver path and the Spark path alike; exact values are accepted."""
    from decimal import Decimal

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    ddl = "k BIGINT, d DECIMAL(12,2)"
    (tmp_path / "s.csv").write_text("k,d\n1,1.5\n2,12.555\n")
    (tmp_path / "p.csv").write_text("k,d\n1,1.5\n2,2.50\n3,12345678901.5\n")
    pq.write_table(pa.table({"k": [1, 2], "d": pa.array([Decimal("1.500"), Decimal("12.555")],
                                                         pa.decimal128(6, 3))}),
                   tmp_path / "s.parquet")
    cases = [(str(tmp_path / "s.csv"), "scale exceeded", "row 2: '12.555'"),
             (str(tmp_path / "p.csv"), "precision exceeded", "row 3: '12345678901.5'"),
             (str(tmp_path / "s.parquet"), "scale exceeded", "row 2: '12.555'"),
             (pa.table({"k": [7], "d": pa.array([Decimal("1E+12")], pa.decimal128(13, 0))}),
              "precision exceeded", "row 1: '1000000000000'"),
             (pd.DataFrame({"k": [1, 2], "d": [Decimal("0.1"), Decimal("0.125")]}),
              "scale exceeded", "row 2: '0.125'")]
    for source, rule, shown in cases:
        messages = set()
        for extra in ({}, SPARK_ONLY):
            r = keep(spark, conf, ddl, extra)
            with pytest.raises(InputError, match=rule) as e:
                r.step({"xs": source}, upto=1)
            assert "column 'd'" in str(e.value) and shown in str(e.value), str(e.value)
            messages.add(str(e.value))
        assert len(messages) == 1, messages
    r = keep(spark, conf, ddl)
    r.step({"xs": pa.table({"k": [1, 2], "d": pa.array([Decimal("1.5"), Decimal("-3")],
                                                       pa.decimal128(3, 1))})}, upto=1)
    r.step({"xs": pd.DataFrame({"k": [3], "d": ["9999999999.99"], "time": [1]})}, upto=2)
    assert values(r) == [(1, Decimal("1.50")), (2, Decimal("-3.00")),
                         (3, Decimal("9999999999.99"))]


def test_decimal_beyond_its_precision_in_its_own_arrow_type(spark, conf):
    """An Arrow decimal column of the input's own type may hold more digits than the
    declared precision (Arrow checks precision only when it parses): refused on both
    placements, for a narrow DECIMAL and one wider than int64; the widest value that fits
    is kept exactly."""
    from decimal import Decimal

    import pyarrow as pa

    def table(precision, unscaled):
        words = b"".join(u.to_bytes(16, "little", signed=True) for u in unscaled)
        d = pa.Array.from_buffers(pa.decimal128(precision, 2), len(unscaled),
                                  [None, pa.py_buffer(words)])
        return pa.table({"k": list(range(len(unscaled))), "d": d})

    for precision in (12, 20):
        ddl = f"k BIGINT, d DECIMAL({precision},2)"
        big = 10 ** precision  # one digit more than the type holds
        for extra in ({}, SPARK_ONLY):
            r = keep(spark, conf, ddl, extra)
            with pytest.raises(InputError, match="precision exceeded") as e:
                r.step({"xs": table(precision, [150, -big])}, upto=1)
            assert "column 'd'" in str(e.value), str(e.value)
            r.step({"xs": table(precision, [150, 1 - big])}, upto=1)
            assert [v for _, v in values(r)] == [Decimal(150).scaleb(-2),
                                                 Decimal(1 - big).scaleb(-2)]


@settings(max_examples=200, deadline=None)
@given(precision=st.sampled_from([1, 2, 9, 15, 18, 19, 20, 38]),
       values=st.lists(st.tuples(st.integers(-6, 6), st.integers(-1, 1), st.booleans()),
                       max_size=12),
       skip=st.integers(0, 3), cuts=st.lists(st.integers(0, 12), max_size=3))
@example(precision=15, values=[(0, 0, True), (-1, 0, True)], skip=0, cuts=[1])  # -10**15
@example(precision=15, values=[(1, 0, True), (0, 0, True)], skip=0, cuts=[])  # 10**15
@example(precision=15, values=[(-1, 1, True), (1, -1, True)], skip=0, cuts=[])  # +-(10**15-1)
def test_a_decimal_column_is_within_its_precision_iff_every_valid_value_is(precision, values,
                                                                            skip, cuts):
    """_within against Python's integers: unscaled values at and around +-10**precision,
    +-2**63, 2**64 and 0, null slots holding out-of-range values, an array sliced past its
    start, split in chunks."""
    import pyarrow as pa

    from executor.driver import _within
    bases = [0, 10 ** precision, 2 ** 63, 2 ** 64, 10 ** 38 - 1, 1, 7]
    unscaled = [(1 if b >= 0 else -1) * bases[abs(b)] + e for b, e, _ in values]
    valid = [ok for _, _, ok in values]
    words = b"".join(u.to_bytes(16, "little", signed=True) for u in unscaled)
    mask = pa.array(valid, pa.bool_()).buffers()[1] if values else None
    array = pa.Array.from_buffers(pa.decimal128(precision, 0), len(unscaled),
                                  [mask, pa.py_buffer(words)]).slice(skip)
    bounds = sorted({0, len(array), *(min(c, len(array)) for c in cuts)})
    column = pa.chunked_array([array.slice(a, b - a) for a, b in zip(bounds, bounds[1:])],
                              pa.decimal128(precision, 0))
    expected = all(abs(u) < 10 ** precision
                   for u, ok in list(zip(unscaled, valid))[skip:] if ok)
    assert _within(column) == expected


def test_refusals_show_a_value_and_its_row(spark, conf, tmp_path):
    (tmp_path / "d.csv").write_text("k,day\n1,2024-01-02\n2,2024-01-03\n3,someday\n4,x\n")
    r = keep(spark, conf, "k BIGINT, day DATE")
    with pytest.raises(InputError, match=r"value is not a DATE \(2 rows, first at row 3: "
                                         r"'someday'\)"):
        r.step({"xs": str(tmp_path / "d.csv")}, upto=1)
    with pytest.raises(InputError, match=r"null time \(1 row, first at row 2: null\)"):
        r.step({"xs": spark.createDataFrame([(1, None, 0), (2, None, None)],
                                            "k BIGINT, day DATE, time BIGINT")}, upto=1)


def test_pandas_frames_all_null_columns_and_naive_timestamps(spark, conf, tmp_path):
    import datetime as dt

    import pandas as pd
    import pyarrow as pa

    r = keep(spark, conf, "k BIGINT NOT NULL, v BIGINT")
    r.step({"xs": pd.DataFrame({"k": [1, 2], "v": pd.array([5, None], dtype="Int64")})},
           upto=1)
    r.step({"xs": pa.table({"k": [3], "v": pa.nulls(1), "time": [1]})}, upto=2)
    assert values(r) == [(1, 5), (2, None), (3, None)]
    with pytest.raises(InputError, match=r"column 'k': null in a NOT NULL column "
                                         r"\(all values are null, type unknown\)"):
        r.step({"xs": pa.table({"k": pa.nulls(1), "v": [1]})}, upto=3)
    with pytest.raises(InputError, match="expects a Spark DataFrame, a pandas DataFrame, a "
                                         "pyarrow Table") as e:
        r.step({"xs": [(1, 2)]}, upto=3)
    assert "got list" in str(e.value)
    # naive timestamps, from pandas through Parquet (timestamp_ntz) and from pyarrow
    stamps = [dt.datetime(2024, 1, 2, 3, 4, 5)]
    pd.DataFrame({"k": [1], "at": stamps}).to_parquet(tmp_path / "ns.parquet")
    with pytest.raises(InputError, match="coerce_timestamps='us'"):
        keep(spark, conf, "k BIGINT, at TIMESTAMP").step({"xs": str(tmp_path / "ns.parquet")},
                                                        upto=1)
    pd.DataFrame({"k": [1], "at": stamps}).to_parquet(tmp_path / "t.parquet",
                                                      coerce_timestamps="us")
    got = []
    for source in (str(tmp_path / "t.parquet"), pa.table({"k": [1], "at": stamps})):
        r = keep(spark, conf, "k BIGINT, at TIMESTAMP")
        r.step({"xs": source}, upto=1)
        got.append(values(r))
    assert got[0] == got[1] and len(got[0]) == 1
    r = keep(spark, conf, "k BIGINT, at TIMESTAMP_NTZ")
    with pytest.raises(InputError, match="tz_localize"):
        r.step({"xs": pa.table({"k": [1], "at": pa.array(stamps, pa.timestamp("us", "UTC"))})},
               upto=1)


def test_reductions_are_type_checked_when_the_plan_is_built(spark, conf):
    for build, words in [
            (lambda e: e.sum("name", by=["g"]), ["sum(name)", "'name'", "STRING", "numeric"]),
            (lambda e: e.max("tags", by=["g"]), ["max(tags)", "MAP<STRING,BIGINT>", "order"]),
            (lambda e: e.top_k(1, order_by="tags DESC"), ["top_k", "MAP", "order"]),
            (lambda e: e.min("nope"), ["no column 'nope'", "g, name, tags"])]:
        flow = Dataflow()
        e = flow.input("e", "g BIGINT, name STRING, tags MAP<STRING, BIGINT>")
        flow.output("bad", build(e))
        with pytest.raises(PlanError) as e:
            Runner(flow, conf=conf, spark=spark)
        assert all(w in str(e.value) for w in words), str(e.value)


def test_typo_suggestions_name_only_the_users_columns(spark, conf):
    for build in (lambda n: n.sum("w", by=["node"]).filter("ww > 1"),
                  lambda n: n.top_k(1, order_by="w DESC", by=["node"]).filter("ww > 1"),
                  lambda n: n.count(by=["node"]).map("node", "cont")):
        flow = Dataflow()
        flow.output("bad", build(flow.input("n", "node BIGINT, w BIGINT")))
        with pytest.raises(PlanError) as e:
            Runner(flow, conf=conf, spark=spark)
        assert "no column" in str(e.value) and "did you mean" in str(e.value), str(e.value)
        assert "__" not in str(e.value), str(e.value)


@pytest.mark.parametrize("left, right, refused", [
    ("DECIMAL(10,3)", "DECIMAL(12,2)", True), ("BIGINT", "DECIMAL(12,2)", True),
    ("FLOAT", "DOUBLE", True), ("DATE", "TIMESTAMP", True), ("STRING", "BIGINT", True),
    ("INT", "BIGINT", False), ("DECIMAL(10,3)", "DECIMAL(10,3)", False)])
def test_a_join_on_keys_the_placements_compare_differently_is_refused_when_built(
        spark, conf, left, right, refused):
    """The driver compares join keys as stored (a DECIMAL as its unscaled integer, a DATE as
    days), Spark in a type it casts both sides to: DECIMAL(10,3) 1.250 and DECIMAL(12,2)
    1.25 met on Spark and not on the driver. A join (semijoin, antijoin) or a query variable
    over keys of two types is refused when the runner is built unless both are integers,
    which meet alike (the SQL front end casts both sides to Spark's common type itself)."""
    import re

    flow = Dataflow()
    a = flow.input("a", f"k {left}, x BIGINT")
    b = flow.input("b", f"k {right}, y BIGINT")
    flow.output("j", a.join(b, on=["k"]))
    queried = Dataflow()
    queried.output("q", queried.query("q(x, y) :- a(k, x), b(k, y)",
                                      a=queried.input("a", f"k {left}, x BIGINT"),
                                      b=queried.input("b", f"k {right}, y BIGINT")))
    for plan, message in ((flow, f"Join[on k]: key column 'k' is {left} on the left and "
                                 f"{right} on the right"),
                          (queried, f"query q: variable k stands for a.k ({left}) and b.k "
                                    f"({right})")):
        if refused:
            with pytest.raises(PlanError, match=re.escape(message)):
                Runner(plan, conf=conf, spark=spark)
        else:
            Runner(plan, conf=conf, spark=spark)


@pytest.mark.parametrize("ddl, exprs, message", [
    ("s STRING COLLATE UTF8_LCASE, v BIGINT", ["s", "v"],
     r"Input t \(.*\): column 's' is string collate UTF8_LCASE"),
    ("s ARRAY<STRING COLLATE UNICODE_CI>, v BIGINT", ["v"], r"column 's' is array<string "
                                                            r"collate UNICODE_CI>"),
    ("s STRING, v BIGINT", ["s COLLATE UTF8_LCASE AS c", "v"],
     r"Linear\[map\(.*\)\]: column 'c' is string collate UTF8_LCASE"),
    ("s STRING, v BIGINT", ["CAST(s COLLATE UTF8_LCASE AS STRING) AS c", "v"], None)])
def test_a_string_collation_other_than_binary_is_refused_when_built(spark, conf, ddl, exprs,
                                                                    message):
    """Both placements group, join and order strings by their bytes; Spark holds 'a' and 'A'
    one value under UTF8_LCASE (both placements counted them as two groups, silently). A
    collated STRING anywhere in a node's records is refused when the runner is built; a
    CAST to STRING is UTF8_BINARY again, and a collation inside an expression is Spark's."""
    flow = Dataflow()
    flow.output("o", flow.input("t", ddl).map(*exprs).count(by=[exprs[0].split()[-1]]))
    if message is None:
        Runner(flow, conf=conf, spark=spark)
        return
    with pytest.raises(PlanError, match=message + r" \(rule: strings compare by their bytes, "
                                                  r"UTF8_BINARY; collation \w+ is not supported"):
        Runner(flow, conf=conf, spark=spark)
