"""top_k on the driver as a ranked index (executor/operators/reduce/top_k.py): checked three ways
(driver placement, Spark placement, reference interpreter) on random multi-step streams with
negative diffs, multiplicities above one, nulls, ties, ASC/DESC and NULLS FIRST/LAST over several
order keys and expressions, k from 1 to 4, keyed and global, with steps that switch placement; and a
step that reads a few rows per touched group, not the groups."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import examples, three_ways, updates_table
from executor import Runner
from executor.operators.reduce import top_k
from plans import Dataflow

S = "g STRING, h BIGINT, x BIGINT, p DECIMAL(10,2), d DATE, f DOUBLE, s STRING"
HORIZON = 6


def top_k_flow(k: int) -> Dataflow:
    """top_k over several orders; ties broken by records with and without STRING columns
    (whose codes do not sort as the strings); one ordered by a STRING (no sortable codes:
    it goes through reduce_driver, ranking decoded values). A quoted name, as the SQL front
    end writes one, reads its column's codes; other expressions are evaluated."""
    flow = Dataflow()
    s = flow.input("s", S)
    ranked = s.map("g", "h", "x", "p", "d", "f")
    flow.output("x_desc", ranked.top_k(k, order_by="`x` DESC", by=["g"]))
    flow.output("p_x", ranked.top_k(k, order_by="p NULLS LAST, x DESC NULLS FIRST",
                                     by=["g"]))
    flow.output("expr", ranked.top_k(k, order_by="x + h, d DESC", by=["g", "h"]))
    flow.output("global", s.top_k(k, order_by="`d` DESC, f"))
    flow.output("double", s.top_k(k, order_by="f DESC NULLS FIRST", by=["h"]))
    flow.output("of_a_sum", ranked.sum("p", by=["g", "h"]).top_k(
        k, order_by="p DESC", by=["g"]))
    flow.output("by_string", s.top_k(k, order_by="s DESC, x", by=["g"]))
    return flow


def _maybe(s):
    return st.one_of(st.none(), s)


record = st.tuples(
    _maybe(st.sampled_from(["a", "b"])), st.integers(0, 2), _maybe(st.integers(-2, 2)),
    _maybe(st.sampled_from([Decimal("1.50"), Decimal("-2.25"), Decimal("0.00")])),
    _maybe(st.sampled_from([dt.date(2020, 1, 1), dt.date(1969, 12, 31)])),
    _maybe(st.sampled_from([0.5, -1.25, 0.0])), _maybe(st.sampled_from(["u", "v", ""])))
updates = st.lists(st.tuples(record, st.integers(0, HORIZON - 1),
                             st.sampled_from([-2, -1, 1, 1, 2])), max_size=18)
cuts = st.sets(st.integers(1, HORIZON - 1), max_size=4).map(lambda s: sorted(s) + [HORIZON])


@pytest.mark.parametrize("spare", [0, top_k.SPARE, float("inf")])
@settings(max_examples=examples(3, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(k=st.integers(1, 4), stream=updates, cuts=cuts)
def test_top_k_on_the_driver_matches_reference_and_spark(spark, conf, spare, k, stream, cuts):
    """The index's runs merged at every step, as they pass the default share, and never."""
    default, top_k.SPARE = top_k.SPARE, spare
    try:
        assert all(three_ways(spark, conf, top_k_flow(k), S, stream, cuts))
    finally:
        top_k.SPARE = default


@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(k=st.integers(1, 4), stream=updates, cuts=cuts)
def test_top_k_switching_placement_matches_reference(spark, conf, k, stream, cuts):
    """Steps of more than 3 updates run on Spark, the others on the driver: the index is
    rebuilt from the mirror after a Spark step. (The Spark placement alone is the test
    above's.)"""
    three_ways(spark, conf, top_k_flow(k), S, stream, cuts, {"diffspark.host.step_rows": "3"},
               spark_runner=False)


def _u(t, d, g="a", h=0, x=0):
    return ((g, h, x, None, None, None, None), t, d)


def test_a_step_reads_a_few_rows_per_touched_group(spark, conf, monkeypatch):
    """After a load of 4,000 records in two groups, a step of two changes reads the touched
    records' updates and k + 2 index rows per group, not the groups; its output is the change
    of the top k alone."""
    from executor.arrange import mirror

    flow = Dataflow()
    flow.output("top", flow.input("s", S).map("g", "h", "x").top_k(
        2, order_by="x DESC", by=["g"]))
    runner = Runner(flow, conf=conf, spark=spark)
    load = [_u(0, 1 + i % 2, g="ab"[i % 2], h=i, x=i) for i in range(4000)]
    assert runner.step({"s": updates_table(S, load)}, upto=1).host
    read, built = [], []
    for name in ("rows", "all"):
        real = getattr(mirror.Mirror, name)
        monkeypatch.setattr(mirror.Mirror, name, lambda self, *a, real=real: (
            lambda run: read.append(run.size) or run)(real(self, *a)))
    real_built = top_k._built
    monkeypatch.setattr(top_k, "_built", lambda *a: built.append(1) or real_built(*a))
    # "a" loses its best record; "b" gains one below its top 2
    step = [_u(1, -1, h=3998, x=3998), _u(1, 1, g="b", h=5000, x=7)]
    result = runner.step({"s": updates_table(S, step)}, upto=2)
    assert result.host and not built and sum(read) <= 4, read
    got = sorted((r["g"], r["x"], r["diff"]) for r in result.arrow("top").to_pylist())
    assert got == [("a", 3994, 1), ("a", 3998, -1)]


def test_ties_at_the_cut_go_by_the_record_in_spark_order(spark, conf):
    """Records tied in the order keys are ranked by the rest of the record in Spark's order,
    not by codes: "b" and "c" are coded before "a", yet a top 1 of x (tied) keeps "a", and a
    top 2 per group keeps "a" and "b"; ties within the top, not at its cut, keep them all."""
    def u(h, x, s, t, d):
        return (("g", h, x, None, None, None, s), t, d)

    stream = [u(0, 1, "c", 0, 1), u(0, 1, "b", 0, 1), u(1, 0, "z", 0, 1), u(0, 1, "a", 1, 1),
              u(0, 1, "b", 2, -1), u(0, 1, "a", 3, -1)]
    flow = Dataflow()
    s = flow.input("s", S)
    flow.output("one", s.top_k(1, order_by="x"))
    flow.output("two", s.top_k(2, order_by="x DESC", by=["g"]))
    flow.output("all", s.top_k(4, order_by="x", by=["g"]))
    assert all(three_ways(spark, conf, flow, S, stream, [1, 2, 3, 4]))


def test_rows_dead_in_the_base_are_not_candidates(spark, conf, monkeypatch):
    """The records a step deletes stay in the base as dead rows, before a group's live ones,
    until the runs merge: a later step looks past them for its k + T candidates (a top 2 of
    8 and 7 is unchanged by a 1 below it)."""
    flow = Dataflow()
    flow.output("top", flow.input("s", S).map("g", "h", "x").top_k(
        2, order_by="x DESC", by=["g"]))
    runner = Runner(flow, conf=conf, spark=spark)
    monkeypatch.setattr(top_k, "SPARE", 0)  # the load merges into the base
    runner.step({"s": updates_table(S, [_u(0, 1, h=x, x=x) for x in (10, 9, 8, 7, 6)])},
                upto=1)
    monkeypatch.setattr(top_k, "SPARE", float("inf"))  # then never again
    steps = [[_u(1, -1, h=10, x=10), _u(1, -1, h=9, x=9)], [_u(2, 1, h=1, x=1)]]
    got = [sorted((r["x"], r["diff"]) for r in runner.step(
        {"s": updates_table(S, step)}, upto=t + 2).arrow("top").to_pylist())
        for t, step in enumerate(steps)]
    assert got == [[(7, 1), (8, 1), (9, -1), (10, -1)], []]
