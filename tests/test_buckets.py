"""Arranging by the per-bucket kernel on the executors (executor/arrange/buckets.py): the same
buckets, rows and order as Spark's aggregate and sort for every atomic column type with nulls,
-0.0 and NaN; a layout Spark's joins read without an Exchange or a Sort; and whole runs on
the Spark placement with every arrangement made by the kernel, against the reference."""
from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import examples, updates_df, updates_table
from executor import Runner
from executor.arrange import buckets
from executor.arrange.trace import arrange
from executor.reference import reference, rows_of
from plans import Dataflow
from plans.examples import families
from plans.examples.families import CUSTOMERS, ORDERS

SCHEMA = ("k BIGINT, s STRING, d DATE, ts TIMESTAMP, m DECIMAL(12,2), w DECIMAL(30,4), "
          "x DOUBLE, b BOOLEAN, i INT")
SPARK_ONLY = {"diffspark.host.step_rows": "0"}


def _maybe(s):
    return st.one_of(st.none(), s)


record = st.tuples(
    st.integers(-2, 2), _maybe(st.sampled_from(["", "a", "ab", "é", "Z"])),
    _maybe(st.sampled_from([dt.date(2020, 1, 1), dt.date(1969, 12, 31)])),
    _maybe(st.sampled_from([dt.datetime(2021, 5, 6, 7, 8, 9, 123456), dt.datetime(1970, 1, 1)])),
    _maybe(st.sampled_from([Decimal("1.50"), Decimal("-2.25"), Decimal("9999999999.99")])),
    _maybe(st.sampled_from([Decimal("12345678901234567890123456.0001"), Decimal("-1.0000")])),
    _maybe(st.sampled_from([0.0, -0.0, math.nan, -1.5, math.inf])), _maybe(st.booleans()),
    _maybe(st.integers(-2**31, 2**31 - 1)))
update = st.tuples(record, st.integers(0, 2), st.sampled_from([-2, -1, 1, 1, 2]))


def _buckets(df) -> list[list[str]]:
    """Each partition's rows in order, as text (NaN equal to NaN, -0.0 apart from 0.0)."""
    return df.rdd.glom().map(lambda rows: [repr(tuple(r)) for r in rows]).collect()


def _layout(df) -> tuple[str, str]:
    import re

    return tuple(re.sub(r"#\d+L?", "", text) for text in buckets.declared_layout(df))


@settings(max_examples=examples(3, 6), deadline=None, suppress_health_check=list(HealthCheck))
@given(updates=st.lists(update, max_size=30),
       keys=st.sampled_from([[], ["k"], ["s", "d"], ["x"], ["w", "b"]]))
def test_kernel_arranges_as_the_aggregate_does(spark, updates, keys):
    """Both ways give the same rows in the same buckets in the same order (consolidated, zero
    sums dropped, -0.0 grouped with 0.0 and NaN with NaN), and declare the same layout."""
    df = updates_df(spark, SCHEMA, updates + [(r, t, -d) for r, t, d in updates[::3]])
    records = df.columns[:-2]
    theirs, size = arrange(df, keys, ["time"], 2)  # no expected size: the aggregate
    ours, ours_size = buckets.arrange(df, keys, records, ["time"], 2)
    assert ours_size == size
    assert _buckets(ours) == _buckets(theirs)
    assert _layout(ours) == _layout(theirs)


def test_kernel_arrangements_join_without_exchange_or_sort(spark):
    """The declared layout is what a SortMergeJoin needs: no Exchange, no Sort, and the
    join's answer is the one over the aggregate's arrangements."""
    from executor.operators.join import spark as join
    from plans import ir

    left = updates_df(spark, "k BIGINT, x STRING",
                      [((i % 7, f"x{i}"), i % 3, 1) for i in range(60)])
    right = updates_df(spark, "k BIGINT, y DOUBLE", [((i % 5, i / 2), i % 4, 1) for i in range(60)])
    j = ir.Join(ir.Input("a", "k BIGINT"), ir.Input("b", "k BIGINT"), ("k",))
    columns = join.output_columns(j, ["k", "x"], ["k", "y"])
    a, _ = buckets.arrange(left, ["k"], ["k", "x"], ["time"], 4)
    b, _ = buckets.arrange(right, ["k"], ["k", "y"], ["time"], 4)
    df = join.pair(j, a, b, ["time"], columns)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "SortMergeJoin" in plan and "Exchange" not in plan and "Sort [" not in plan, plan
    a2, _ = arrange(left, ["k"], ["time"], 4)
    b2, _ = arrange(right, ["k"], ["time"], 4)
    assert sorted(df.collect()) == sorted(join.pair(j, a2, b2, ["time"], columns).collect())


def test_method_is_chosen_by_size_and_type(spark):
    """The kernel only where it was measured faster (at least KERNEL_ROWS updates) and only
    over types it orders as Spark does; explain states the rule."""
    df = updates_df(spark, "k BIGINT, s STRING, a ARRAY<INT>", [])
    many = buckets.KERNEL_ROWS
    assert buckets.method(df.schema, ["k", "s", "time"], many) == buckets.KERNEL
    assert buckets.method(df.schema, ["k", "s", "time"], many - 1) == buckets.SQL
    assert buckets.method(df.schema, ["k", "s", "time"], None) == buckets.SQL
    assert buckets.method(df.schema, ["k", "a", "time"], many) == buckets.SQL
    lcase = spark.sql("SELECT 'a' COLLATE UTF8_LCASE AS s, 0L AS time, 1L AS diff")
    assert buckets.method(lcase.schema, ["s", "time"], many) == buckets.SQL
    flow = Dataflow()
    flow.output("n", flow.input("e", "k BIGINT").count(by=["k"]))
    assert buckets.rule() in Runner(flow, spark=spark).explain()


@pytest.fixture
def kernel_always(monkeypatch):
    """Every arrangement of a Spark step and every spine merge by the kernel; the batches
    it arranged, counted."""
    monkeypatch.setattr(buckets, "KERNEL_ROWS", 0)
    made, kernel = [], buckets.arrange

    def counted(*args):
        made.append(args[1])
        return kernel(*args)

    monkeypatch.setattr(buckets, "arrange", counted)
    return made


HORIZON = 3
ORDER_ROWS = [  # every type, nulls, -0.0 and 0.0, retractions below zero
    ((1, 1, "new", Decimal("1.50"), dt.date(2020, 1, 1), dt.datetime(2021, 5, 6, 7, 8, 9), -0.0,
      True), 0, 1),
    ((2, 1, None, Decimal("-2.25"), None, dt.datetime(1970, 1, 1), 0.0, None), 0, 2),
    ((3, 2, "é", None, dt.date(1969, 12, 31), None, None, False), 1, 1),
    ((2, 1, None, Decimal("-2.25"), None, dt.datetime(1970, 1, 1), 0.0, None), 1, -2),
    ((4, 3, "paid", Decimal("0.00"), dt.date(2020, 1, 1), None, 3.0, True), 1, 1),
    ((1, 1, "new", Decimal("1.50"), dt.date(2020, 1, 1), dt.datetime(2021, 5, 6, 7, 8, 9), 0.0,
      True), 2, -1),
    ((5, 0, "paid", Decimal("9.99"), None, None, 0.5, False), 2, -1)]
CUSTOMER_ROWS = [((1, "ann", "retail"), 0, 1), ((2, "", None), 0, 1), ((3, None, "corp"), 1, 2),
                 ((1, "ann", "retail"), 2, -1), ((1, "bob", "corp"), 2, 1)]


@pytest.mark.slow
def test_spark_placement_with_kernel_arrangements_matches_reference(spark, conf,
                                                                    kernel_always):
    """The relational family (joins, semijoin and antijoin, the reduce family, top_k) over
    every column type, stepped on the Spark placement with each arrangement and spine merge
    made by the kernel, equals the reference interpreter after every step."""
    orders, customers = ORDER_ROWS, CUSTOMER_ROWS
    flow = Dataflow()
    families.relational(flow)
    inputs = {"orders": (ORDERS, orders), "customers": (CUSTOMERS, customers)}
    expected = reference(spark, flow.outputs, {n: u for n, (_, u) in inputs.items()})
    runner = Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    lo = 0
    for upto in range(1, HORIZON + 1):
        feed = {n: updates_table(ddl, [u for u in ups if lo <= u[1] < upto])
                for n, (ddl, ups) in inputs.items()}
        assert runner.step(feed, upto=upto).placement == "spark"
        lo = upto
        for name in flow.outputs:
            assert rows_of(runner.output(name)) == \
                [u for u in expected[name] if u[1] < upto], (name, upto)
    assert len(kernel_always) >= HORIZON  # the arrangements of every step


def test_a_step_arranges_by_kernel_from_kernel_rows(spark, conf, monkeypatch):
    """A Spark step whose inputs hold at least KERNEL_ROWS updates (an Arrow table's rows,
    or what Spark's plan estimates for a frame) arranges by the kernel; a smaller one by the
    aggregate; both give the answer."""
    monkeypatch.setattr(buckets, "KERNEL_ROWS", 6)
    made, kernel = [], buckets.arrange
    monkeypatch.setattr(buckets, "arrange", lambda *a: made.append(a[1]) or kernel(*a))
    flow = Dataflow()
    e = flow.input("e", "src BIGINT, dst BIGINT")
    flow.output("j", e.arrange_by_key("src").join(e.map("dst AS src", "src AS mid"), on=["src"]))
    runner = Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    edge = "src BIGINT, dst BIGINT"
    runner.step({"e": updates_table(edge, [((i, i + 1), 0, 1) for i in range(3)])}, upto=1)
    assert made == []
    runner.step({"e": updates_table(edge, [((i, i + 1), 1, 1) for i in range(3, 9)])}, upto=2)
    assert made and all(keys == ["src"] for keys in made)
    frame = updates_df(spark, edge, [((i, i + 1), 2, 1) for i in range(9, 40)])
    made.clear()
    runner.step({"e": frame}, upto=3)
    assert made  # a local frame's rows are known to Spark's plan
    assert sorted((r.src, r.dst, r.mid) for r in runner.output("j").collect()) == \
        [(s, s + 1, s - 1) for s in range(1, 40)]


def test_each_arrangement_picks_by_the_rows_of_its_own_inputs(spark, conf, monkeypatch):
    """The choice is made per arrangement, by the updates of the inputs it reads: in a step
    where one input is big, a small input's arrangement is made by the aggregate (a
    kernel's Python tasks cost seconds for a few rows), the big one's by the kernel."""
    monkeypatch.setattr(buckets, "KERNEL_ROWS", 6)
    made, kernel = [], buckets.arrange
    monkeypatch.setattr(buckets, "arrange", lambda *a: made.append(a[0].columns) or kernel(*a))
    flow = Dataflow()
    big, small = flow.input("big", "k BIGINT, x BIGINT"), flow.input("small", "k BIGINT, y BIGINT")
    flow.output("j", big.arrange_by_key("k").join(small.arrange_by_key("k"), on=["k"]))
    runner = Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    runner.step({"big": updates_table("k BIGINT, x BIGINT",
                                      [((i % 3, i), 0, 1) for i in range(8)]),
                 "small": updates_table("k BIGINT, y BIGINT", [((1, 10), 0, 1), ((2, 20), 0, 1)])},
                upto=1)
    assert [("x" in c, "y" in c) for c in made] == [(True, False)]
    assert sorted(tuple(r) for r in runner.output("j").select("k", "x", "y").collect()) == \
        sorted((i % 3, i, 10 * (i % 3)) for i in range(8) if i % 3)


def test_spine_merges_by_kernel_keep_the_collection(spark, kernel_always):
    """Appends that make the spine merge (each merge arranged by the kernel, times advanced
    to `since`) leave batches whose union, advanced to the trace's `since`, is the
    collection appended."""
    from collections import Counter

    from executor.arrange.trace import Trace

    trace, appended = Trace(["k"], ["time"], 2), []
    for t in range(8):
        ups = [((i % 3, f"v{(i * t) % 4}"), t, 1 if (i + t) % 3 else -1) for i in range(9)]
        appended += ups
        batch, size = arrange(updates_df(spark, "k BIGINT, v STRING", ups), ["k"], ["time"],
                              2, rows=len(ups))
        trace = trace.appended(batch, size, t + 1, t - 1)
    assert len(kernel_always) > 8 and len(trace.batches) < 8  # the spine merged

    def collection(updates) -> dict:
        total = Counter()
        for record, time, diff in updates:
            total[(record, max(time, trace.since))] += diff
        return {k: v for k, v in total.items() if v}

    held = [((r.k, r.v), r.time, r.diff) for b in trace.batches for r in b.collect()]
    assert trace.since > 0 and collection(held) == collection(appended)


@pytest.mark.parametrize("backend", ["strict"])
def test_bucket_kernel_is_the_same_on_another_array_backend(backend):
    """The bucket kernel runs on the runner's array backend in the executors (cupy with
    --conf gpu); over the array API standard alone it gives numpy's batch."""
    import array_api_strict
    import pyarrow as pa

    from executor.time import DIFF

    table = pa.table({"k": [3, 1, 3, None, 1], "s": ["b", "a", "b", "z", None],
                      "x": [0.0, -0.0, 0.0, float("nan"), 1.5], "time": [0, 1, 0, 2, 1],
                      DIFF: [1, 2, 1, -1, 1]})
    order = ["k", "s", "x", "time"]
    numpy = pa.Table.from_batches(list(buckets.arranged_bucket(iter(table.to_batches()), order,
                                                               ["x"], "numpy")))
    with array_api_strict.ArrayAPIStrictFlags(api_version="2023.12"):
        other = pa.Table.from_batches(list(buckets.arranged_bucket(
            iter(table.to_batches()), order, ["x"], backend)))
    assert repr(other.to_pylist()) == repr(numpy.to_pylist())  # NaN equal to NaN
    assert numpy.column("k").to_pylist() == [None, 1, 1, 3] and \
        numpy.column(DIFF).to_pylist() == [-1, 1, 2, 2]
    assert repr(numpy.column("x").to_pylist()[2]) == "0.0"  # -0.0 grouped as 0.0
