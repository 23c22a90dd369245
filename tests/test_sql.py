"""flow.sql: each supported construct, over random multi-step streams with retractions and
nulls, equals `spark.sql(same text)` over the accumulated inputs (Spark's batch answer) and
the reference interpreter after every step; what is not supported is refused when the plan
is built, with one line naming the construct."""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch_check import check_steps, cuts, lifetimes
from conftest import examples
from plans import Dataflow, PlanError

T, U = "k BIGINT, g STRING, x BIGINT, d DECIMAL(6,2)", "k BIGINT, y BIGINT, s STRING"
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
t_rec = st.tuples(maybe(st.integers(0, 2)), maybe(st.sampled_from(["a", "b"])),
                  maybe(st.integers(-2, 3)), maybe(st.sampled_from([Decimal("1.25"),
                                                                    Decimal("-0.50")])))
u_rec = st.tuples(maybe(st.integers(0, 2)), maybe(st.integers(-1, 2)),
                  maybe(st.sampled_from(["a", "b"])))

QUERIES = {
    "select_where": "SELECT k, x * 2 + 1 AS x2, upper(g) AS ug FROM t WHERE x > 0 OR g IS NULL",
    "inner_join": "SELECT t.k, x, y FROM t JOIN u ON t.k = u.k AND x < y",
    "left_join": "SELECT t.k AS tk, g, y FROM t LEFT JOIN u ON t.k = u.k",
    "right_join": "SELECT u.k AS uk, x, s FROM t RIGHT JOIN u ON t.k = u.k AND t.x > 0",
    "full_join": "SELECT t.k AS tk, u.k AS uk, d, s FROM t FULL OUTER JOIN u ON u.k = t.k",
    "comma_join": "SELECT g, s FROM t, u WHERE t.k = u.k AND s <> 'b'",
    "group_by": """SELECT g, count(*) AS n, count(x) AS nx, sum(x) AS sx, min(x) AS mn,
                   max(d) AS mx, avg(x) AS ax, avg(d) AS ad, sum(d) AS sd,
                   count(DISTINCT x) AS dx FROM t GROUP BY g""",
    "having": "SELECT k % 2 AS parity, sum(d) AS sd FROM t GROUP BY k % 2 HAVING sum(x) > 0",
    "distinct": "SELECT DISTINCT g, k FROM t",
    "union_all": "SELECT k FROM t UNION ALL SELECT k FROM u",
    "union": "SELECT k FROM t UNION SELECT k FROM u",
    "cte_join_aggregate": """WITH c AS (SELECT k, count(*) AS n FROM u GROUP BY k)
                             SELECT t.k, x, n FROM t JOIN c ON t.k = c.k""",
    "in": "SELECT k, x FROM t WHERE k IN (SELECT k FROM u WHERE y > 0)",
    "exists": "SELECT k, g FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND s = 'a')",
    "not_exists": "SELECT k, g FROM t WHERE NOT EXISTS (SELECT * FROM u WHERE u.k = t.k)",
    "top_k": "SELECT k, x, g FROM t ORDER BY x DESC NULLS LAST, k, g LIMIT 2",
    "intersect": "SELECT k, g FROM t INTERSECT SELECT k, s FROM u",
    "intersect_all": "SELECT k FROM t INTERSECT ALL SELECT k FROM u",
    "except": "SELECT k, g FROM t EXCEPT SELECT k, s FROM u",
    "except_all": "SELECT k FROM t EXCEPT ALL SELECT k FROM u WHERE y > 0",
    "not_in": "SELECT k, x FROM t WHERE x NOT IN (SELECT y FROM u WHERE s = 'a')",
    "scalar_avg": "SELECT k, x FROM t WHERE x > (SELECT avg(y) FROM u WHERE s = 'a')",
    "scalar_count": "SELECT k, g FROM t WHERE k < 1 + (SELECT count(*) FROM u WHERE y > 1)",
    "row_number": """SELECT g, k, x FROM (SELECT k, g, x, d, row_number() OVER (PARTITION BY g
                     ORDER BY x DESC, k, d) AS rn FROM t) AS s WHERE rn <= 2 AND k > 0""",
    "aggregate_of_aggregate": """SELECT n, count(*) AS groups
                                 FROM (SELECT g, count(*) AS n FROM t GROUP BY g) AS c
                                 GROUP BY n""",
}


def sql_flow(queries) -> Dataflow:
    flow = Dataflow()
    flow.input("t", T)
    flow.input("u", U)
    for name, text in queries.items():
        flow.output(name, flow.sql(text))
    return flow


def spark_sql(spark, queries):
    def batch(frames):
        for name, df in frames.items():
            df.createOrReplaceTempView(name)
        return {name: spark.sql(text) for name, text in queries.items()}
    return batch


@settings(max_examples=examples(1, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(t=lifetimes(t_rec), u=lifetimes(u_rec), cut_list=cuts)
def test_sql_views_match_spark_sql_and_reference(spark, conf, t, u, cut_list):
    check_steps(spark, conf, sql_flow(QUERIES), {"t": (T, t), "u": (U, u)}, cut_list,
                spark_sql(spark, QUERIES))


def test_collections_by_keyword_and_sql_over_sql():
    flow = Dataflow()
    t = flow.input("t", T)
    recent = t.filter("x > 0")
    q = flow.sql("SELECT g, count(*) AS n FROM recent GROUP BY g", recent=recent)
    again = flow.sql("SELECT n FROM counted WHERE n > 1", counted=q)
    flow.output("again", again)
    assert "filter(x > 0)" in flow.explain()
    with pytest.raises(PlanError, match="recent= must be a Collection of this Dataflow"):
        flow.sql("SELECT * FROM recent", recent=Dataflow().input("t", T))


@pytest.mark.parametrize("text, message", [
    ("SELECT rand() AS r FROM t", "non-deterministic function RAND()"),
    ("SELECT k, current_timestamp() AS now FROM t", "non-deterministic function"),
    ("SELECT k FROM t ORDER BY k", "ORDER BY without LIMIT is not supported"),
    ("SELECT k FROM t LIMIT 3", "LIMIT without ORDER BY"),
    ("SELECT count(*) AS n FROM t", "an aggregate without GROUP BY"),
    ("SELECT k, sum(x) OVER (PARTITION BY g) AS s FROM t", "window function"),
    ("SELECT k FROM (SELECT k, rank() OVER (ORDER BY x) AS r FROM t) AS s WHERE r <= 2",
     "window function"),
    ("SELECT * FROM (SELECT k, row_number() OVER (ORDER BY x) AS rn FROM t) AS s "
     "WHERE rn <= 2", "used other than once"),
    ("SELECT k, rn FROM (SELECT k, row_number() OVER (ORDER BY x) AS rn FROM t) AS s "
     "WHERE rn <= 2", "used other than once"),
    ("SELECT k FROM t WHERE x > (SELECT y FROM u)", "scalar subquery"),
    ("SELECT k FROM t WHERE x > (SELECT max(y) FROM u WHERE u.k = t.k)", "unknown column"),
    ("SELECT k + 1 FROM t", "needs a name"),
    ("SELECT nope FROM t", "unknown column 'nope'"),
    ("SELECT k FROM nowhere", "unknown table 'nowhere'"),
    ("SELECT k FROM t JOIN u ON t.k = u.k", "ambiguous"),
    ("SELECT t.k FROM t, u", "cross join"),
    ("SELECT t.k FROM t LEFT JOIN u ON t.k = u.k AND x > 0", "LEFT JOIN condition"),
    ("SELECT g, x FROM t GROUP BY g", "neither grouped nor aggregated"),
    ("SELECT k FROM t INTERSECT SELECT k, y FROM u", "INTERSECT of 1 and 2 columns"),
    ("SELECT x FROM t EXCEPT ALL SELECT s FROM u", r"EXCEPT ALL of column 'x' \(BIGINT\)"),
    ("SELECT g, stddev(x) AS s FROM t GROUP BY g", "aggregate STDDEV"),
    ("SELECT k FROM t; SELECT k FROM u", "expected one query, got 2"),
    ("SELECT k, (SELECT max(y) FROM u) AS m FROM t", "subquery .* here"),
])
def test_unsupported_sql_is_refused_when_the_plan_is_built(text, message):
    flow = Dataflow()
    flow.input("t", T)
    flow.input("u", U)
    with pytest.raises(PlanError, match=message):
        flow.sql(text)
