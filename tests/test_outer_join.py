"""Outer joins (`a.join(b, on=..., how="left"|"right"|"full")`) against the reference
interpreter and Spark's batch DataFrame join, over several steps with retractions, null keys
(which match nothing) and null values, on the driver and on Spark."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch_check import SPARK_ONLY, check_steps, cuts, lifetimes
from conftest import examples
from plans import Dataflow, PlanError, ir

L, R = "k BIGINT, s STRING", "k BIGINT, v DECIMAL(5,2), d DATE"
HOWS = ("inner", "left", "right", "full")
key = st.one_of(st.none(), st.integers(0, 3))
left_rec = st.tuples(key, st.one_of(st.none(), st.sampled_from(["a", "é"])))
right_rec = st.tuples(key, st.one_of(st.none(), st.sampled_from([Decimal("1.50"),
                                                                  Decimal("-2.25")])),
                      st.one_of(st.none(), st.just(dt.date(2024, 2, 29))))


def joins_flow() -> Dataflow:
    flow = Dataflow()
    a, b = flow.input("a", L), flow.input("b", R)
    for how in HOWS:
        flow.output(how, a.join(b, on=["k"], how=how))
    return flow


def spark_joins(frames):
    return {how: frames["a"].join(frames["b"], on=["k"], how=how) for how in HOWS}


@pytest.mark.parametrize("placement", ["driver", pytest.param("spark", marks=pytest.mark.slow)])
@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(a=lifetimes(left_rec), b=lifetimes(right_rec), cut_list=cuts)
def test_outer_joins_match_spark_batch_and_reference(spark, conf, placement, a, b, cut_list):
    conf = conf | SPARK_ONLY if placement == "spark" else conf
    check_steps(spark, conf, joins_flow(), {"a": (L, a), "b": (R, b)}, cut_list, spark_joins)


@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(a=st.lists(st.tuples(left_rec, st.integers(0, 5), st.sampled_from([-1, 1, 2])),
                  max_size=10),
       b=st.lists(st.tuples(right_rec, st.integers(0, 5), st.sampled_from([-1, 1, 2])),
                  max_size=10), cut_list=cuts)
def test_outer_joins_with_negative_multiplicities_match_reference(spark, conf, a, b, cut_list):
    check_steps(spark, conf, joins_flow(), {"a": (L, a), "b": (R, b)}, cut_list, None)


def test_outer_join_of_a_computed_side_needs_known_types():
    flow = Dataflow()
    a, b = flow.input("a", L), flow.input("b", R)
    ok = a.join(b.map("k", "CAST(v * 2 AS DECIMAL(7,2)) AS w"), on=["k"], how="left")
    assert "CAST(NULL AS DECIMAL(7, 2)) AS `w`" in ir.explain({"ok": ok.node})
    typed = a.join(b.map("k", "v * 2 AS w"), on=["k"], how="full")  # arithmetic types
    assert "CAST(NULL AS DECIMAL(7, 2)) AS `w`" in ir.explain({"typed": typed.node})
    with pytest.raises(PlanError, match="type of the right side's column 'w' is not known"):
        a.join(b.map("k", "round(v) AS w"), on=["k"], how="full")
    with pytest.raises(PlanError, match="right side's column names are not known"):
        a.join(b.map("k", "v * 2"), on=["k"], how="left")
    with pytest.raises(PlanError, match="how='outer' must be one of"):
        a.join(b, on=["k"], how="outer")
    with pytest.raises(PlanError, match=r"column \['s'\] is on both sides"):
        a.join(a.map("k", "s"), on=["k"], how="right")
