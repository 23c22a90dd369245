"""Band joins (`a.band_join(b, on, column, op, value)`, the plan of a scalar subquery's
condition): the bounds on codes against exact Decimal comparisons, and the operator against
the reference interpreter and Spark's batch join over several steps with retractions, null
keys, null and boundary values of every comparable type, on the driver and on Spark."""
from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DecimalType, LongType

from batch_check import SPARK_ONLY, check_steps, cuts, lifetimes
from conftest import examples
from plans import Dataflow, PlanError

OPS = ("<", "<=", ">", ">=", "=")
NULL = -(2**63)
EDGES = [NULL + 1, -(10**18), -12345, -1, 0, 1, 999, 1000, 1001, 10**18, 2**63 - 1]
codes = st.one_of(st.sampled_from(EDGES), st.integers(-(2**63) + 1, 2**63 - 1),
                  st.integers(-2000, 2000))


def _kind(scale):
    return LongType() if scale is None else DecimalType(38, scale)


@settings(max_examples=400, deadline=None)
@given(xs=st.lists(codes, min_size=1, max_size=4), v=st.one_of(st.just(NULL), codes),
       sx=st.one_of(st.none(), st.integers(0, 38)), sv=st.one_of(st.none(), st.integers(0, 38)),
       op=st.sampled_from(OPS))
def test_bounds_select_exactly_the_codes_that_compare(xs, v, sx, sv, op):
    """x op v on the values the codes stand for (unscaled at each type's scale), as Decimal
    compares them, iff low <= x <= high; a NULL bound selects nothing, nor is NULL ever
    selected (low is above NULL's code)."""
    from executor.operators.join.band import bounds

    low, high = bounds(np, op, np.asarray([v], dtype=np.int64), _kind(sx), _kind(sv))
    low, high = int(low[0]), int(high[0])
    assert low > NULL
    for x in xs:
        if v == NULL:
            assert not low <= x <= high
            continue
        a, b = Decimal(x).scaleb(-(sx or 0)), Decimal(v).scaleb(-(sv or 0))
        want = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "=": a == b}[op]
        assert (low <= x <= high) == want, (x, v, sx, sv, op, low, high)


A = "k BIGINT, x DECIMAL(5,2), n INT, d DATE, f DOUBLE"
B = "k BIGINT, v DECIMAL(7,3), w DATE, g DOUBLE"
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
key = maybe(st.integers(0, 2))
floats = maybe(st.sampled_from([-0.0, 0.0, 1.5, math.nan, math.inf, -math.inf]))
dates = maybe(st.sampled_from([dt.date(2024, 2, 28), dt.date(2024, 2, 29)]))
a_rec = st.tuples(key, maybe(st.sampled_from([Decimal(s) for s in
                                              ("-1.00", "0.00", "1.25", "1.50", "2.00")])),
                  maybe(st.integers(-1, 2)), dates, floats)
b_rec = st.tuples(key, maybe(st.sampled_from([Decimal(s) for s in
                                              ("-1.000", "1.250", "1.499", "1.500", "1.501")])),
                  dates, floats)
# (left column, right value): decimals of two scales, an integer against a decimal, dates,
# doubles (NaN equal to NaN and above every number, -0.0 equal to 0.0, as Spark compares)
BANDS = [("x", op, "v") for op in OPS] + [("n", ">=", "v"), ("n", "=", "v"), ("d", "<", "w"),
                                          ("d", "=", "w"), ("f", ">", "g"), ("f", "<=", "g"),
                                          ("f", "=", "g")]
NAMES = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "=": "eq"}


def _name(column, op, value):
    return f"{column}_{NAMES[op]}_{value}"


def bands_flow() -> Dataflow:
    flow = Dataflow()
    a, b = flow.input("a", A), flow.input("b", B)
    for band in BANDS:
        flow.output(_name(*band), a.band_join(b, ["k"], *band))
    return flow


def spark_bands(frames):
    from pyspark.sql import functions as F

    from executor.operators.join.spark import COMPARE

    a, b = frames["a"].alias("a"), frames["b"].alias("b")
    out = {}
    for column, op, value in BANDS:
        cond = (F.col("a.k") == F.col("b.k")) & COMPARE[op](F.col(f"a.{column}"),
                                                            F.col(f"b.{value}"))
        out[_name(column, op, value)] = a.join(b, cond).select("a.*")
    return out


@pytest.mark.parametrize("placement", ["driver", pytest.param("spark", marks=pytest.mark.slow)])
@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(a=lifetimes(a_rec), b=lifetimes(b_rec), cut_list=cuts)
def test_band_joins_match_spark_batch_and_reference(spark, conf, placement, a, b, cut_list):
    conf = conf | SPARK_ONLY if placement == "spark" else conf
    check_steps(spark, conf, bands_flow(), {"a": (A, a), "b": (B, b)}, cut_list, spark_bands)


@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(a=st.lists(st.tuples(a_rec, st.integers(0, 5), st.sampled_from([-1, 1, 2])),
                  max_size=10),
       b=st.lists(st.tuples(b_rec, st.integers(0, 5), st.sampled_from([-2, -1, 1, 2])),
                  max_size=10), cut_list=cuts)
def test_band_joins_with_negative_multiplicities_match_reference(spark, conf, a, b, cut_list):
    """Bounds retracted and inserted at several times within a step, with multiplicities of
    both signs: the ranges they cover cancel only where their weights do."""
    check_steps(spark, conf, bands_flow(), {"a": (A, a), "b": (B, b)}, cut_list, None)


def test_a_moving_bound_reads_only_the_rows_it_passes(spark, conf, monkeypatch):
    """A bound moving from 1.000 to 1.600 changes the output by the rows between, and the
    step reads only those (Mirror.banded's rows), not every row of the key twice."""
    from conftest import updates_table
    from executor import Runner
    from executor.arrange.mirror import Mirror

    read = []
    banded = Mirror.banded

    def counted(self, *args):
        out = banded(self, *args)
        read.append(out[0].size)
        return out
    monkeypatch.setattr(Mirror, "banded", counted)

    flow = Dataflow()
    a, b = flow.input("a", A), flow.input("b", B)
    flow.output("above", a.band_join(b, ["k"], "x", ">", "v"))
    runner = Runner(flow, conf=conf, spark=spark)
    rows = [((1, Decimal(i) / 100, None, None, None), 0, 1) for i in range(0, 300)]
    runner.step({"a": updates_table(A, rows),
                 "b": updates_table(B, [((1, Decimal("1.000"), None, None), 0, 1)])}, upto=1)
    result = runner.step({"b": updates_table(B, [((1, Decimal("1.000"), None, None), 1, -1),
                                                 ((1, Decimal("1.600"), None, None), 1, 1)])},
                         upto=2)
    assert result.host and read[-1] == 60
    changed = result.arrow("above").to_pylist()
    assert sorted(r["x"] for r in changed) == [Decimal(i) / 100 for i in range(101, 161)]
    assert {r["diff"] for r in changed} == {-1}


def test_band_joins_over_traces_left_on_spark(spark, conf):
    """diffspark.host.lookup_rows=0: after a first step on Spark (16 rows, above step_rows),
    driver steps read each bound's range from the traces Spark arranged (Mirror.over: the
    key's updates fetched, then searched as a run) while bounds move and rows come and go."""
    from batch_check import collection, output_rows
    from executor import Runner
    from executor.reference import reference

    from conftest import updates_df

    a = [((i % 2, Decimal(i) / 4, i - 8, None, i / 2), 0, 1) for i in range(16)]
    a += [((0, Decimal("2.00"), 1, None, 1.5), 2, -1), ((1, Decimal("1.25"), 3, None, 2.0), 3, 2)]
    b = [((0, Decimal("1.000"), None, 1.0), 0, 1), ((1, Decimal("2.001"), None, 3.5), 0, 1),
         ((0, Decimal("1.000"), None, 1.0), 2, -1), ((0, Decimal("2.499"), None, 0.5), 2, 1),
         ((1, Decimal("2.001"), None, 3.5), 4, -1), ((1, Decimal("0.250"), None, 7.5), 4, 1)]
    flow = bands_flow()
    want = reference(spark, flow.outputs, {"a": a, "b": b})
    runner = Runner(flow, conf=conf | {"diffspark.host.lookup_rows": "0",
                                       "diffspark.host.step_rows": "15"}, spark=spark)
    lo, placements = 0, []
    for upto in (1, 3, 5, 6):
        placements.append(runner.step({n: updates_df(spark, ddl, [u for u in ups
                                                                    if lo <= u[1] < upto])
                                       for n, (ddl, ups) in (("a", (A, a)), ("b", (B, b)))},
                                      upto=upto).placement)
        lo = upto
        for name in flow.outputs:
            assert collection(output_rows(runner, name), upto - 1) == \
                collection(want[name], upto - 1), (name, upto)
    assert placements == ["spark", "driver", "driver", "driver"]
    assert any(s["remote_records"] for s in runner.stats().values())


def test_band_join_is_refused_when_its_comparison_has_no_range():
    flow = Dataflow()
    a, b = flow.input("a", A + ", s STRING"), flow.input("b", B + ", t STRING")
    with pytest.raises(PlanError, match=r"'s' \(STRING\) > 't' \(STRING\) compares other types"):
        a.band_join(b, ["k"], "s", ">", "t")
    with pytest.raises(PlanError, match=r"'d' \(DATE\) < 'v' \(DECIMAL\(7, 3\)\)"):
        a.band_join(b, ["k"], "d", "<", "v")
    with pytest.raises(PlanError, match="op '<>' must be one of"):
        a.band_join(b, ["k"], "x", "<>", "v")
    with pytest.raises(PlanError, match="the other side has no column 'nope'"):
        a.band_join(b, ["k"], "x", ">", "nope")
    with pytest.raises(PlanError, match="column 'k' is one of the keys"):
        a.band_join(b.map("k", "k AS k2", "v"), ["k"], "k", ">", "k2")
    with pytest.raises(PlanError, match="type of the other side's column 'w2' is not known"):
        a.band_join(b.map("k", "round(v) AS w2"), ["k"], "x", ">", "w2")


I, S = "k BIGINT, x BIGINT, y BIGINT", "k BIGINT, v BIGINT"
guarded = st.tuples(maybe(st.integers(0, 1)), st.integers(0, 5), st.integers(0, 5))
seed = st.tuples(maybe(st.integers(0, 1)), maybe(st.integers(0, 5)))


def reach_flow() -> Dataflow:
    """Values reached from seeds through guarded steps (k, x, y): y once some reached v of
    the key is at most x. The bound side is the iterate's variable (its arrangement holds
    the iteration), the guarded steps enter the scope from outside."""
    flow = Dataflow()
    a, s = flow.input("a", I), flow.input("s", S)

    def step(reached):
        typed = reached.map("CAST(k AS BIGINT) AS k", "CAST(v AS BIGINT) AS v")
        return s.concat(a.band_join(typed, ["k"], "x", ">=", "v").map("k", "y AS v")).distinct()
    flow.output("reach", s.iterate(step))
    return flow


@pytest.mark.parametrize("placement", ["driver", pytest.param("spark", marks=pytest.mark.slow)])
@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(a=lifetimes(guarded), s=lifetimes(seed), cut_list=cuts)
def test_band_join_inside_an_iterate_matches_reference(spark, conf, placement, a, s, cut_list):
    conf = conf | SPARK_ONLY if placement == "spark" else conf
    check_steps(spark, conf, reach_flow(), {"a": (I, a), "s": (S, s)}, cut_list, None)
