"""Counts that keep per-key totals instead of their input (executor/operators/reduce/counted.py), pending
updates known empty where no operator moves times (executor/lateness.py), and a reduction
over a join stepped with one input left alone."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import examples, outputs_rows, run_against_reference, updates_df
from executor import Runner
from executor.lateness import late
from executor.operators.reduce.counted import counted
from plans import Dataflow

E, N = "src BIGINT, dst BIGINT", "node BIGINT, w BIGINT"
HORIZON = 8


def counting_flow() -> Dataflow:
    """Counts whose arrangements nothing else reads (keyed, global, over a join, after a
    temporal filter) beside one that shares its arrangement with a join."""
    flow = Dataflow()
    e = flow.input("e", E)
    n = flow.input("n", N)
    flow.output("by_src", e.count(by=["src"]))
    flow.output("all", e.count())
    flow.output("joined", e.map("dst AS k", "src").join(n.map("node AS k", "w"), on=["k"])
                .count(by=["w"]))
    flow.output("live", e.temporal_filter(lower="src", upper="dst").count(by=["src"]))
    by_dst = e.arrange_by_key("dst")
    flow.output("shared", by_dst.count(by=["dst"]))
    flow.output("shared_join", by_dst.join(n.map("node AS dst", "w"), on=["dst"]))
    return flow


node = st.integers(0, 3)
edge = st.tuples(st.tuples(node, st.integers(0, HORIZON)), st.integers(0, HORIZON - 1),
                 st.sampled_from([-2, -1, 1, 1, 2]))
weight = st.tuples(st.tuples(node, st.integers(-3, 3)), st.integers(0, HORIZON - 1),
                   st.sampled_from([-1, 1, 2]))
cuts = st.sets(st.integers(1, HORIZON - 1), min_size=1, max_size=3).map(
    lambda s: sorted(s) + [HORIZON])


def test_which_arrangements_counts_keep_as_totals():
    from plans.optimizer import optimize

    plan = optimize(counting_flow().outputs).plan
    kept = counted(plan)
    assert {plan[n].input for n in ("by_src", "all", "joined", "live")} <= kept, kept
    assert plan["shared"].input not in kept  # a join reads it too: the whole input
    moved = late(plan)
    assert plan["live"] not in moved and plan["by_src"] not in moved  # counts hold back


@settings(max_examples=examples(3, 5), deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(edge, max_size=16), weights=st.lists(weight, max_size=8), cuts=cuts)
def test_counts_over_totals_match_reference(spark, conf, edges, weights, cuts):
    run_against_reference(spark, conf, counting_flow(), {"e": (E, edges), "n": (N, weights)},
                          cuts)


def test_totals_stay_per_key(spark, conf):
    """Many steps of inserts and retractions over three keys: the count's state is a few
    rows per key, not the input's updates."""
    flow = Dataflow()
    flow.output("c", flow.input("e", E).count(by=["src"]))
    runner = Runner(flow, conf=conf, spark=spark)
    for t in range(20):
        ups = [((k, t * 10 + j), t, 1 if t % 3 else -1) for k in range(3) for j in range(5)]
        runner.step({"e": updates_df(spark, E, ups)}, upto=t + 1)
    (stats,) = runner.stats().values()
    assert stats["records"] <= 3 * 12, stats  # a row per key and step, merged
    final = {r["src"]: r["count"] for r in runner.snapshot("c", 19).collect()}
    assert final == {k: 5 * sum(1 if t % 3 else -1 for t in range(20)) for k in range(3)}


def test_reduction_over_a_join_with_one_input_left_alone(spark, conf):
    """Steps that give only one input of a join summed by its key (regression: Spark's
    constraint propagation over the reduction's unions failed with "key not found")."""
    flow = Dataflow()
    a = flow.input("a", "user BIGINT, item BIGINT")
    b = flow.input("b", "user BIGINT, score BIGINT")
    flow.output("s", a.join(b, on=["user"]).sum("score", by=["user"]))
    # the same until time 10, when a's records retire: its sum holds updates back
    flow.output("held", a.temporal_filter(upper="item").join(b, on=["user"])
                .sum("score", by=["user"]))
    runner = Runner(flow, conf=conf, spark=spark)
    feeds = [{"a": [((1, 10), 0, 1), ((2, 10), 0, 1)], "b": [((1, 5), 0, 1)]},
             {"b": [((2, 7), 1, 1)]}, {"a": [((1, 11), 2, 1)]}]
    for t, feed in enumerate(feeds):
        runner.step({n: updates_df(spark, f"user BIGINT, {'item' if n == 'a' else 'score'} "
                                          f"BIGINT", ups) for n, ups in feed.items()}, upto=t + 1)
    want = [((1, 5), 0, 1), ((1, 5), 2, -1), ((1, 10), 2, 1), ((2, 7), 1, 1)]
    assert outputs_rows(runner, ["s", "held"]) == {"s": want, "held": want}
