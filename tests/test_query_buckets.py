"""Conjunctive queries per bucket on the executors (executor/operators/query/buckets.py):
the kernel forced on every step of the Spark placement, against the reference interpreter
on random multi-step streams with retractions, several changes at one time and nulls in a
carried variable; the bucket layout it relies on; the method rule."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import examples, run_against_reference
from executor.operators.query import buckets
from test_wcoj import HORIZON, cuts, edge, query_flow

G = "src BIGINT, dst BIGINT"
R = "a BIGINT, w BIGINT, b BIGINT"
# every step on Spark, none of its rules on the driver's arrays
SPARK = {"diffspark.host.step_rows": "0", "diffspark.query.local_rows": "1"}


@pytest.fixture
def kernel(monkeypatch):
    """Every step's extensions through several extenders per bucket; the extensions the
    kernel took (True) or left to Spark SQL (False)."""
    monkeypatch.setattr(buckets, "KERNEL_ROWS", 0)
    taken, extend = [], buckets.extend

    def spy(*args, **kwargs):
        out = extend(*args, **kwargs)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(buckets, "extend", spy)
    return taken


def carried_flow():
    """A prefix with a variable that no extender reads (w, null at times), and the triangle
    count, whose head drops the variables it extends."""
    flow = query_flow()
    flow.input("r", R)
    flow.output("wedged", flow.query("q(a, w, b, c) :- r(a, w, b), g(b, c), g(a, c)"))
    flow.output("counted", flow.query("t(x) :- g(x, y), g(y, z), g(x, z)").count())
    return flow


node = st.integers(0, 3)
row = st.tuples(st.tuples(node, st.one_of(st.none(), node), node), st.integers(0, HORIZON - 1),
                st.sampled_from([-1, 1, 1, 2]))


@pytest.mark.slow  # a step of these queries on the Spark placement takes tens of seconds
@settings(max_examples=examples(1, 2), deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(edge, min_size=10, max_size=16), rows=st.lists(row, max_size=8),
       cuts=cuts)
def test_queries_per_bucket_match_reference(spark, conf, kernel, edges, rows, cuts):
    run_against_reference(spark, conf | SPARK, carried_flow(), {"g": (G, edges), "r": (R, rows)},
                          cuts)
    assert kernel.count(True) >= 6  # each rule of the triangle queries, at least


def test_each_bucket_lands_in_its_own_partition(spark):
    """The representative of bucket j is sent to partition j by Spark's hash partitioning,
    which the kernel's one-bucket-per-partition rule rests on."""
    from pyspark.sql import functions as F

    for count in (1, 2, 8, 13):
        reps = buckets._representatives(spark, count)
        df = spark.createDataFrame([(r, j) for j, r in enumerate(reps)], "r BIGINT, j INT")
        placed = df.repartition(count, "r").select("j", F.spark_partition_id().alias("p"))
        assert all(x["j"] == x["p"] for x in placed.collect())


def test_a_partition_with_two_buckets_is_refused():
    import pyarrow as pa

    from plans import query as cq

    query = cq.parse("t(x, y, z) :- g(x, y), g(y, z), g(x, z)")
    rule = cq.delta_rules(query, cq.plan_order(query))[0]
    table = pa.table({"__tag": [0, 0], "__b": [3, 5], "__k0": pa.array([None, None], pa.int64()),
                      "__v": pa.array([None, None], pa.int64()), "x": [1, 2], "y": [2, 3],
                      "time": [0, 0], "diff": [1, 1]})
    with pytest.raises(RuntimeError, match="holds buckets"):
        list(buckets.extended_bucket(iter(table.to_batches()), rule.steps[0], {}, ["x", "y"],
                                     ["x", "y", "z"]))


def test_method_rule(spark):
    ints = spark.createDataFrame([(1, 2)], G)
    text = spark.createDataFrame([(1, "a")], "src BIGINT, dst STRING")
    at = buckets.KERNEL_ROWS
    assert buckets.method([ints], at) == buckets.KERNEL
    assert buckets.method([ints], at - 1) == buckets.method([ints], None) == buckets.SQL
    assert buckets.method([ints, text], at) == buckets.SQL  # no codes for strings here
    assert f"{at:,}" in buckets.rule()
