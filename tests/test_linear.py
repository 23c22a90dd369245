"""Linear operators and fused chains against the reference interpreter on random multi-step
update streams (negative diffs, repeated records, null bounds), plus fusion's physical form."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_against_reference
from plans import Dataflow

EV = "a BIGINT, b BIGINT, lo BIGINT, hi BIGINT"
HORIZON = 10  # input times are 0..HORIZON-1


def spread(xp, cols):
    """a copies of each row (a in 0..3), shifted in time by |b|, alternating signs."""
    from gpu_kernels.diffs import parents
    counts = xp.astype(xp.clip(cols["a"], 0, 3), xp.int64)
    parent = parents(xp, counts)
    starts = xp.cumulative_sum(counts, include_initial=True)[:-1]
    pos = xp.arange(parent.shape[0], dtype=xp.int64) - xp.take(starts, parent)
    b = xp.take(cols["b"], parent)
    return {"parent": parent, "a": xp.take(cols["a"], parent), "y": b + pos,
            "time": xp.abs(b) + pos, "diff": 1 - 2 * (pos % 2)}


def evens(xp, cols):
    keep = xp.nonzero(cols["y"] % 2 == 0)[0]
    return {"parent": keep, "a": xp.take(cols["a"], keep), "y": xp.take(cols["y"], keep)}


def linear_flow() -> Dataflow:
    flow = Dataflow()
    ev = flow.input("ev", EV)
    flow.output("filter_map", ev.filter("a >= 1").map("a", "b", "a + coalesce(b, 0) AS s"))
    flow.output("flat_map", ev.flat_map("array(named_struct('x', a), named_struct('x', a % 2))"))
    flow.output("explode", ev.explode(
        "array(named_struct('a', a, 'diff', 2L), named_struct('a', -a, 'diff', b))"))
    flow.output("temporal", ev.temporal_filter(lower="lo", upper="hi"))
    flow.output("upper_only", ev.map("a", "hi").temporal_filter(upper="hi"))
    flow.output("join_function", ev.join_function(
        "array(named_struct('a', a, 'time', lo, 'diff', 1L), "
        "named_struct('a', a + 10, 'time', hi, 'diff', -3L))"))
    flow.output("kernels", ev.map("a", "coalesce(b, 0) AS b")
                .join_function(kernel=spread, schema="a BIGINT, y BIGINT")
                .join_function(kernel=evens, schema="a BIGINT, y BIGINT")
                .filter("y > -2"))
    flow.output("concat", ev.filter("b > 0").concat(ev.filter("a = 2").negate()).consolidate())
    flow.output("chain5", ev.filter("a <> 3")
                .map("a", "lo", "hi", "coalesce(b, 1) AS w")
                .flat_map("array(named_struct('a', a, 'lo', lo, 'hi', hi, 'w', w), "
                          "named_struct('a', a * 2, 'lo', lo, 'hi', hi, 'w', w))")
                .explode("array(named_struct('a', a, 'lo', lo, 'hi', hi, 'diff', w))")
                .temporal_filter(lower="lo", upper="hi"))
    # selections and renames only: run on the driver's codes (linear/driver._projected)
    flow.output("renames", ev.filter("b IS NOT NULL").consolidate()
                .map("b AS x", "a", "A AS a2").map("x", "a2 AS a", "x AS y")
                .join_function(kernel=evens, schema="a BIGINT, y BIGINT")
                .map("y AS v", "a"))
    return flow


small = st.integers(0, 3)
maybe = st.one_of(st.none(), st.integers(-2, 12))
update = st.tuples(st.tuples(small, st.one_of(st.none(), st.integers(-2, 2)), maybe, maybe),
                   st.integers(0, HORIZON - 1), st.sampled_from([-2, -1, 1, 1, 2]))
cuts = st.sets(st.integers(1, HORIZON - 1), max_size=3).map(lambda s: sorted(s) + [HORIZON])


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(updates=st.lists(update, max_size=25), cuts=cuts)
def test_linear_operators_match_reference(spark, conf, updates, cuts):
    run_against_reference(spark, conf, linear_flow(), {"ev": (EV, updates)}, cuts)


def test_repeated_records_and_retractions(spark, conf):
    """A fixed stream that exercises cancellation: inserts, full retraction, re-insertion."""
    ups = [((1, 1, 2, 5), 0, 1), ((1, 1, 2, 5), 0, 1), ((1, 1, 2, 5), 3, -2),
           ((2, None, None, 4), 1, 1), ((2, None, None, 4), 6, -1), ((3, -1, 7, 2), 2, 1),
           ((1, 1, 2, 5), 8, 1)]
    run_against_reference(spark, conf, linear_flow(), {"ev": (EV, ups)}, [2, 4, HORIZON])


def test_unfused_plan_matches_too(spark, conf):
    ups = [((1, 2, 0, 9), 0, 1), ((2, -1, 3, 4), 1, -1), ((3, None, None, 2), 5, 2)]
    run_against_reference(spark, conf, linear_flow(), {"ev": (EV, ups)}, [3, HORIZON],
                          optimize=False)


def test_explain_shows_one_fused_operator():
    flow = linear_flow()
    from plans.fusion import fuse
    from plans.ir import Linear, explain
    fused = fuse({"chain5": flow.outputs["chain5"]})
    node = fused["chain5"]
    assert isinstance(node, Linear) and len(node.stages) == 5
    text = explain(fused)
    assert text.count("Linear[") == 1 and "temporal_filter" in text


def test_fused_expression_chain_has_no_python(spark, conf):
    from executor import Runner
    runner = Runner(linear_flow(), conf=conf, spark=spark)
    plan = runner.physical_plan("chain5")
    for python_node in ("BatchEvalPython", "ArrowEvalPython", "MapInArrow", "PythonUDF"):
        assert python_node not in plan
    kernel_plan = runner.physical_plan("kernels")
    assert kernel_plan.count("MapInArrow") == 1  # two kernel stages, one Arrow round trip
