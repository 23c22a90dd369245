"""Worst-case optimal joins on Spark: delta queries for triangles, 4-cliques and other
conjunctive queries against the reference interpreter, on random multi-step update streams
with retractions and several changes at one time; each on three paths of the query operator
(whole small steps on the driver, the rules alone on the driver's arrays, Spark SQL)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import examples, run_against_reference
from executor.reference import reference
from plans import Dataflow
from plans.builder import Collection

G = "src BIGINT, dst BIGINT"
HORIZON = 6


def triangle_flow() -> Dataflow:
    flow = Dataflow()
    flow.input("g", G)
    flow.output("tri", flow.query("tri(x, y, z) :- g(x, y), g(y, z), g(x, z)"))
    flow.output("tri_count", flow.query(
        "tri(x, y, z) :- g(x, y), g(y, z), g(x, z), x < y, y < z").count())
    return flow


def query_flow() -> Dataflow:
    """Cliques, constants, repeated variables, a validator and a derived relation."""
    flow = triangle_flow()
    g = flow.inputs["g"]
    flow.output("k4", flow.query(
        "k4(a, b, c, d) :- g(a, b), g(a, c), g(a, d), g(b, c), g(b, d), g(c, d)"))
    flow.output("loops", flow.query("p(x, z) :- g(x, x), g(x, z), g(z, 2)"))
    flow.output("sym", flow.query("s(x, y) :- g(x, y), g(y, x), h(x)",
                                  h=Collection(flow, g).map("src AS n").filter("n >= 1")))
    return flow


node = st.integers(0, 3)
edge = st.tuples(st.tuples(node, node), st.integers(0, HORIZON - 1),
                 st.sampled_from([-1, 1, 1, 2]))
cuts = st.sets(st.integers(1, HORIZON - 1), max_size=2).map(lambda s: sorted(s) + [HORIZON])
# the whole step on the driver (executor/driver.py); on Spark with the rules on the driver's
# arrays; on Spark with local_rows=1: every step with more than one seed as Spark SQL
SPARK = {"diffspark.host.step_rows": "0"}
PATHS = pytest.mark.parametrize(
    "path", [{}, SPARK, SPARK | {"diffspark.query.local_rows": "1"}],
    ids=["host", "arrays", "sql"])


@pytest.mark.slow
@settings(max_examples=examples(2, 3), deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(edge, max_size=16), cuts=cuts)
@pytest.mark.parametrize("path", [{}, SPARK], ids=["host", "arrays"])
def test_queries_match_reference(spark, conf, path, edges, cuts):
    run_against_reference(spark, conf | path, query_flow(), {"g": (G, edges)}, cuts)


@pytest.mark.slow
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(edge, min_size=10, max_size=16), cuts=cuts)
def test_queries_match_reference_as_spark_sql(spark, conf, edges, cuts):
    """The same on the Spark SQL rules: about 30 joins per query and step, 80 s an example
    on two cores, so one example (at least ten edges, so every query has seeds)."""
    run_against_reference(spark, conf | SPARK | {"diffspark.query.local_rows": "1"},
                          query_flow(), {"g": (G, edges)}, cuts)


@PATHS
def test_whole_triangles_at_one_time_and_retracted(spark, conf, path):
    """All edges of two triangles (sharing an edge) arrive at once, both directions, then
    one shared edge is retracted and re-added at one time with another: no triangle is lost
    or counted twice."""
    both = lambda a, b, t, d: [((a, b), t, d), ((b, a), t, d)]  # noqa: E731
    edges = (both(0, 1, 0, 1) + both(1, 2, 0, 1) + both(0, 2, 0, 1) + both(1, 3, 0, 1)
             + both(2, 3, 0, 1) + both(1, 2, 2, -1) + both(1, 2, 3, 1) + both(0, 3, 3, 1)
             + both(0, 1, 4, 1))
    run_against_reference(spark, conf | path, triangle_flow(), {"g": (G, edges)},
                          [1, 3, HORIZON])


NAIVE = [("tri", "tri(x, y, z) :- g(x, y), g(y, z), g(x, z)"),
         ("k4", "k4(a, b, c, d) :- g(a, b), g(a, c), g(a, d), g(b, c), g(b, d), g(c, d)"),
         ("sym", "p(x, z) :- g(x, z), g(z, x), g(x, 2), x < z")]


def naive_flow(queries) -> Dataflow:
    """Seed 001's naive plans beside the delta queries."""
    flow = Dataflow()
    flow.input("g", G)
    for name, text in queries:
        flow.output(name, flow.query(text, plan="naive"))
        flow.output(name + "_delta", flow.query(text))
    return flow


def random_edges(seed: int, n: int) -> list:
    import random

    rng = random.Random(seed)
    return [((rng.randrange(4), rng.randrange(4)), rng.randrange(HORIZON),
             rng.choice([-1, 1, 1, 2])) for _ in range(n)]


def test_naive_plan_equals_delta_query(spark):
    """The naive plan means what the delta query means: the reference interpreter on a
    random multi-step stream with retractions (the triangles benchmark's smoke test runs
    both plans on Spark and compares)."""
    edges = random_edges(7, 40)
    want = reference(spark, naive_flow(NAIVE).outputs, {"g": edges})
    for name, _ in NAIVE:
        assert want[name] and want[name] == want[name + "_delta"], name


@pytest.mark.slow
def test_naive_plan_on_spark(spark, conf):
    """The naive triangle plan (~20 operators, each arranged) on Spark, step by step."""
    run_against_reference(spark, conf, naive_flow(NAIVE[:1]), {"g": (G, random_edges(7, 40))},
                          [3, HORIZON])


@pytest.mark.parametrize("path", [SPARK, SPARK | {"diffspark.query.local_rows": "1"}],
                         ids=["arrays", "sql"])
def test_a_query_over_a_map_of_an_input_read_from_parquet(spark, conf, path, tmp_path):
    """A query whose relation maps an input given as a Spark frame (a Parquet file), a STRING
    variable with a null joining it to itself. On the Spark SQL rules the relation's records
    (a checkpoint of the seeds' own lineage, with the same attribute ids) once left Spark
    unable to resolve any of their columns: the step failed."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from conftest import updates_table
    from executor import Runner
    from executor.reference import rows_of

    ddl = "c_id BIGINT, status STRING, total BIGINT"
    flow = Dataflow()
    o = flow.input("o", ddl)
    flow.output("same", flow.query("q(a, b, s) :- rs(a, s), rs(b, s)",
                                   rs=o.map("c_id", "status")))
    stream = [((1, "paid", 3), 0, 1), ((2, "paid", 4), 0, 1), ((3, None, 1), 0, 1),
              ((2, "paid", 4), 1, -1), ((4, "new", 2), 1, 1), ((5, "new", 2), 1, 1),
              ((1, "paid", 3), 1, 1)]
    pq.write_table(updates_table(ddl, stream), str(tmp_path / "o.parquet"))
    frame = spark.read.parquet(str(tmp_path / "o.parquet"))
    expected = reference(spark, flow.outputs, {"o": stream})["same"]
    runner = Runner(flow, conf=conf | path, spark=spark)
    for t in range(2):
        assert not runner.step({"o": frame.where(F.col("time") == t)}, upto=t + 1).host
        assert rows_of(runner.output("same")) == [u for u in expected if u[1] <= t]
    assert any(d < 0 for _, _, d in expected)
