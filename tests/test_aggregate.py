"""Several values per group in one reduction (`Collection.aggregate`, SQL's GROUP BY list):
count(*), count(x), sum, min and max over STRING, BIGINT, INT, DECIMAL and DOUBLE columns with
nulls, keyed and global, checked three ways (driver placement, Spark placement, reference
interpreter) on random streams with negative diffs; groups that vanish, come back, cancel or
hold only nulls; running totals where every value is abelian over exact types; and the
errors a bad aggregate gets when the plan is built."""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import test_totals as totals
from conftest import examples, three_ways, updates_table
from executor import Runner
from plans import Dataflow, PlanError

S = "k STRING, g BIGINT, x BIGINT, p DECIMAL(10,2), y INT, f DOUBLE"
HORIZON = totals.HORIZON


def aggregate_flow() -> Dataflow:
    """Abelian aggregates (running totals on the driver) keyed and global, one with min and
    max (its touched groups re-evaluated), one beside a sum on the same arrangement."""
    flow = Dataflow()
    s = flow.input("s", S)
    flow.output("totals", s.aggregate(by=["k"], n="count(*)", nx="count(x)", sx="sum(x)",
                                      sp="sum(p)", sy="sum(y)"))
    flow.output("extremes", s.aggregate(by=["k", "g"], n="count(*)", lo="min(y)", hi="max(p)",
                                        name="max(k)", sf="sum(f)"))
    flow.output("global", s.aggregate(n="count(*)", sp="sum(p)", np="count(p)"))
    flow.output("beside", s.sum("x", by=["k"]))
    return flow


# test_totals' records and times, with a DOUBLE column
record = st.tuples(totals.record, totals.maybe(st.sampled_from([0.5, -1.25, 3.0]))) \
    .map(lambda r: (*r[0], r[1]))
updates = st.lists(st.tuples(record, st.integers(0, HORIZON - 1),
                             st.sampled_from([-2, -1, 1, 1, 2])), max_size=16)


@settings(max_examples=examples(3, 3), deadline=None, suppress_health_check=list(HealthCheck))
@given(stream=updates, cuts=totals.cuts)
def test_aggregates_match_reference_and_spark(spark, conf, stream, cuts):
    assert all(three_ways(spark, conf, aggregate_flow(), S, stream, cuts))


def _u(t, d, k="a", g=0, x=1, p="1.00", y=1, f=1.0):
    return ((k, g, x, None if p is None else Decimal(p), y, f), t, d)


# test_totals' story of group "a" (appears, vanishes, comes back, cancels, holds only nulls),
# each record with a DOUBLE that is null where its x is
STORY = [[((*r, None if r[2] is None else 1.0), t, d) for r, t, d in step]
         for step in totals.STORY]


def test_groups_that_vanish_cancel_or_hold_nulls(spark, conf):
    """A hand-made stream through every case running totals cannot decide alone: loaded on
    Spark, stepped on the driver (totals rebuilt from Spark's batches) and back on Spark
    (the hypothesis test above starts on the driver)."""
    stream = [u for step in STORY for u in step]
    steps = list(range(1, len(STORY) + 1))
    switching = {"diffspark.host.step_rows": "2"}  # steps of 3 rows run on Spark
    ran = three_ways(spark, conf, aggregate_flow(), S, stream, steps, switching)
    assert ran == [False, True, True, True, True, True, False]


def test_a_step_reads_the_totals_it_changes_not_the_groups(spark, conf, monkeypatch):
    """After a load of 4,000 records in two groups, a step of two changes to an abelian
    aggregate reads a few rows of the mirrors (the totals of the keys it touches)."""
    from executor.arrange import mirror

    flow = Dataflow()
    flow.output("a", flow.input("s", S).aggregate(by=["k"], n="count(*)", sp="sum(p)",
                                                  sx="sum(x)", nx="count(x)"))
    runner = Runner(flow, conf=conf, spark=spark)
    load = [_u(0, 1, k="ab"[i % 2], g=i, x=i, p=f"{i}.00") for i in range(4000)]
    assert runner.step({"s": updates_table(S, load)}, upto=1).host
    read = []
    for name in ("rows", "all"):
        real = getattr(mirror.Mirror, name)
        monkeypatch.setattr(mirror.Mirror, name, lambda self, *a, real=real: (
            lambda run: read.append(run.size) or run)(real(self, *a)))
    step = [_u(1, -1, g=2, x=2, p="2.00"), _u(1, 1, k="b", g=9999, x=None, p="7.00")]
    result = runner.step({"s": updates_table(S, step)}, upto=2)
    assert result.host and 0 < sum(read) <= 40, read
    a, b = sum(range(0, 4000, 2)), sum(range(1, 4000, 2))

    def row(k, n, sp, sx, nx, d):
        return {"k": k, "n": n, "sp": Decimal(f"{sp}.00"), "sx": sx, "nx": nx, "time": 1,
                "diff": d}
    assert sorted(result.arrow("a").to_pylist(), key=str) == sorted([
        row("a", 2000, a, a, 2000, -1), row("a", 1999, a - 2, a - 2, 1999, 1),
        row("b", 2000, b, b, 2000, -1), row("b", 2001, b + 7, b, 2000, 1)], key=str)


@pytest.mark.parametrize("values, rule", [
    ({}, "name at least one value"),
    ({"n": "avg(x)"}, "rule: one of count"),
    ({"n": "sum(*)"}, "only count takes *"),
    ({"k": "count(*)"}, "declared twice"),
])
def test_a_bad_aggregate_is_refused_when_built(values, rule):
    flow = Dataflow()
    with pytest.raises(PlanError, match=rule):
        flow.input("s", S).aggregate(by=["k"], **values)


@pytest.mark.parametrize("value, rule", [
    ("sum(k)", "sum needs a numeric column"),
    ("min(nope)", "no column 'nope'"),
])
def test_a_bad_column_is_refused_when_the_runner_builds(spark, conf, value, rule):
    flow = Dataflow()
    flow.output("a", flow.input("s", S).aggregate(by=["g"], v=value))
    with pytest.raises(PlanError, match=rule):
        Runner(flow, conf=conf, spark=spark)


def test_an_aggregate_inside_an_iterate(spark, conf):
    """Distances from node 0 with the least distance and the number of candidates per node
    in one aggregate of the body (product times: the driver's and Spark's forms), over
    edge inserts and deletes, three ways."""
    import random

    flow = Dataflow()
    edges = flow.input("s", "src BIGINT, dst BIGINT")
    roots = flow.constant("node BIGINT, dist BIGINT", [(0, 0)])
    out = edges.map("src AS node", "dst")
    flow.output("dist", roots.iterate(lambda v: v.join(out, on=["node"])
                                      .map("dst AS node", "dist + 1 AS dist").concat(roots)
                                      .aggregate(by=["node"], dist="min(dist)", n="count(*)")
                                      .map("node", "dist")))
    rng, live, stream = random.Random(5), set(), []
    for t in range(4):
        for _ in range(6):
            e = (rng.randrange(6), rng.randrange(6))
            d = -1 if e in live and rng.random() < 0.4 else 1 if e not in live else 0
            if d:
                (live.discard if d < 0 else live.add)(e)
                stream.append((e, t, d))
    assert all(three_ways(spark, conf, flow, "src BIGINT, dst BIGINT", stream, [1, 2, 3, 4]))
