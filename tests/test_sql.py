"""flow.sql: each supported construct, over random multi-step streams with retractions and
nulls, equals `spark.sql(same text)` over the accumulated inputs (Spark's batch answer) and
the reference interpreter after every step; what is not supported is refused when the plan
is built, with one line naming the construct."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch_check import HORIZON, NAN, SPARK_ONLY, check_steps, cuts, lifetimes
from conftest import examples
from plans import Dataflow, PlanError, ir

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
    # JOIN ... USING: one key column (coalesced in a FULL join) ahead of the others; each
    # side's key readable qualified
    "using_inner": "SELECT * FROM t JOIN u USING (k) WHERE x > 0 OR y > 0",
    "using_left": "SELECT k, g, u.k AS uk, y FROM t LEFT JOIN u USING (k)",
    "using_right": "SELECT * FROM t RIGHT JOIN u USING (k)",
    "using_full": "SELECT k, t.k AS tk, u.k AS uk, x, s FROM t FULL JOIN u USING (k)",
    # a * among a function's arguments: the columns it matches, named as the query names
    # them (not the relation's internal columns, nor the update's time and diff)
    "star_arguments": """SELECT a.k, hash(*) AS h, to_json(struct(*)) AS j,
                         to_json(struct(b.*)) AS jb FROM t a JOIN u b ON a.k = b.k""",
    "using_chain": """SELECT k, t2.x AS x2, y FROM t JOIN u USING (k)
                      JOIN t AS t2 USING (k) WHERE t2.g = 'a'""",
    "natural_left": "SELECT * FROM t NATURAL LEFT JOIN (SELECT k, y FROM u) AS v",
    "using_full_grouped": """SELECT k, count(*) AS n, sum(y) AS sy
                             FROM t FULL JOIN u USING (k) GROUP BY k""",
    "comma_join": "SELECT g, s FROM t, u WHERE t.k = u.k AND s <> 'b'",
    "correlated_scalar": """SELECT t.k, x, d FROM t
                            WHERE x > (SELECT avg(y) FROM u WHERE u.k = t.k)""",
    "correlated_scalar_filtered": """SELECT g, x FROM t WHERE x <= (SELECT 2 * max(y) - 1
                                     FROM u WHERE t.k = u.k AND s = 'a')""",
    "or_shared_join_key": """SELECT t.k, x, y FROM t, u WHERE (t.k = u.k AND x > 0)
                             OR (u.k = t.k AND y < 1 AND t.k = u.k) OR (t.k = u.k AND g IS NULL)""",
    # what each branch of an OR asks of one relation filters it before the join (nulls
    # included: a NULL in a branch leaves that branch unknown, so the row is not kept by it)
    "or_implied": """SELECT t.k, g, x, y, s FROM t, u WHERE t.k = u.k AND ((x > 0 AND y < 2
                     AND g = 'a') OR (x IS NULL AND s = 'b') OR (d > 0 AND y IS NULL))""",
    # b, filtered and linked to u alone, joins u first; `*` keeps FROM's column order
    "dimension_first": """SELECT * FROM (SELECT x AS bx, g AS bg FROM t) b, u,
                          (SELECT k AS ak, d AS ad FROM t) a
                          WHERE a.ak = u.k AND u.y = b.bx AND b.bg = 'a'""",
    # inner JOIN ... ON chains join as the comma list does: ON and WHERE pooled
    "inner_chain": """SELECT a.k, y, b.g, b.d FROM t a JOIN u ON a.k = u.k AND s <> 'b'
                      JOIN t b ON u.y = b.x AND a.x <= b.x WHERE b.g = 'a' OR b.d > 0""",
    "group_by": """SELECT g, count(*) AS n, count(x) AS nx, sum(x) AS sx, min(x) AS mn,
                   max(d) AS mx, avg(x) AS ax, avg(d) AS ad, sum(d) AS sd,
                   count(DISTINCT x) AS dx FROM t GROUP BY g""",
    "having": "SELECT k % 2 AS parity, sum(d) AS sd FROM t GROUP BY k % 2 HAVING sum(x) > 0",
    "distinct": "SELECT DISTINCT g, k FROM t",
    "union_all": "SELECT k FROM t UNION ALL SELECT k FROM u",
    "union": "SELECT k FROM t UNION SELECT k FROM u",
    # columns of two types widened as Spark widens them: DECIMAL(6,2) with BIGINT
    "union_null": "SELECT k, NULL AS z FROM t UNION SELECT k, y FROM u",
    "union_all_null": """SELECT g, d FROM t UNION ALL SELECT s, NULL FROM u
                         UNION ALL SELECT NULL, NULL AS n FROM u WHERE y > 1""",
    "union_widened": "SELECT d FROM t UNION SELECT y FROM u WHERE s = 'a'",
    "except_widened": "SELECT k, d FROM t EXCEPT ALL SELECT k, y FROM u",
    "cte_join_aggregate": """WITH c AS (SELECT k, count(*) AS n FROM u GROUP BY k)
                             SELECT t.k, x, n FROM t JOIN c ON t.k = c.k""",
    "in": "SELECT k, x FROM t WHERE k IN (SELECT k FROM u WHERE y > 0)",
    "exists": "SELECT k, g FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND s = 'a')",
    "not_exists": "SELECT k, g FROM t WHERE NOT EXISTS (SELECT * FROM u WHERE u.k = t.k)",
    # uncorrelated: a global condition, every row kept (dropped) while the inside has rows
    "exists_global": "SELECT k, g FROM t WHERE EXISTS (SELECT 1 FROM u WHERE y > 1)",
    "not_exists_global": """SELECT k, x FROM t
                            WHERE NOT EXISTS (SELECT * FROM u WHERE s = 'b') AND x > 0""",
    # correlated otherwise than by equality (TPC-H Q21's form); a NULL x satisfies the second
    "exists_mixed": """SELECT k, g, x FROM t
                       WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND u.y <> t.x)""",
    "not_exists_mixed": """SELECT k, x FROM t WHERE NOT EXISTS (SELECT * FROM u WHERE
                           u.k = t.k AND (y > x OR x IS NULL) AND s = 'a')""",
    "top_k": "SELECT k, x, g FROM t ORDER BY x DESC NULLS LAST, k, g LIMIT 2",
    "intersect": "SELECT k, g FROM t INTERSECT SELECT k, s FROM u",
    "intersect_all": "SELECT k FROM t INTERSECT ALL SELECT k FROM u",
    "except": "SELECT k, g FROM t EXCEPT SELECT k, s FROM u",
    "except_all": "SELECT k FROM t EXCEPT ALL SELECT k FROM u WHERE y > 0",
    "not_in": "SELECT k, x FROM t WHERE x NOT IN (SELECT y FROM u WHERE s = 'a')",
    "scalar_avg": "SELECT k, x FROM t WHERE x > (SELECT avg(y) FROM u WHERE s = 'a')",
    # uncorrelated scalar subqueries as values: one row each, over no rows too (count 0)
    "scalar_in_select": """SELECT k, x, (SELECT max(y) FROM u WHERE s = 'a') AS my,
                           x - (SELECT count(*) FROM u WHERE y > 1) AS dx FROM t""",
    # correlated by equalities: grouped and LEFT joined; a row no group meets reads NULL
    # (max, sum and arithmetic on them) or 0 (a count by itself), as SQL's value over no rows
    "scalar_correlated_in_select": """SELECT k, x, (SELECT max(y) FROM u WHERE u.k = t.k) AS my,
                                      (SELECT count(*) FROM u WHERE u.k = t.k AND s = 'a') AS n,
                                      x + (SELECT 2 * sum(y) FROM u WHERE t.k = u.k) AS xs,
                                      (SELECT count(DISTINCT s) FROM u WHERE u.y = t.d * 2)
                                      AS ns FROM t""",
    "scalar_correlated_avg": """SELECT k, (SELECT avg(y) FROM u WHERE u.k = t.k) AS ay,
                                (SELECT avg(d) * 2 FROM t AS t2 WHERE t2.k = t.k) AS ad
                                FROM t""",
    "scalar_count": "SELECT k, g FROM t WHERE k < 1 + (SELECT count(*) FROM u WHERE y > 1)",
    "row_number": """SELECT g, k, x FROM (SELECT k, g, x, d, row_number() OVER (PARTITION BY g
                     ORDER BY x DESC, k, d) AS rn FROM t) AS s WHERE rn <= 2 AND k > 0""",
    # inner joins without an equality: every pair, then the conditions
    "cross_join": "SELECT t.k, g, u.y FROM t, u WHERE x < y OR u.k IS NULL",
    "theta_join": "SELECT t.k, s FROM t JOIN u ON t.x >= u.y AND d > 0",
    "cross_join_derived": """SELECT g, m FROM t CROSS JOIN (SELECT max(y) AS m FROM u) AS v
                             WHERE x IS NOT NULL""",
    # rank and dense_rank keep ties (NULL partitions and order values tie as in Spark)
    "rank": """SELECT g, k, x FROM (SELECT k, g, x, rank() OVER (PARTITION BY g
               ORDER BY x DESC, d) AS r FROM t) AS s WHERE r <= 2""",
    "dense_rank": """SELECT k, x, d FROM (SELECT k, x, d, dense_rank() OVER (PARTITION BY k
                     ORDER BY x + 1 NULLS FIRST) AS r FROM t) AS s WHERE 2 >= r""",
    "global": """SELECT sum(x) AS sx, count(*) AS n, count(x) AS nx, avg(d) AS ad, min(g) AS mg,
                 max(x) AS mx, sum(d) AS sd, count(DISTINCT x) AS dx, avg(x) AS ax
                 FROM t WHERE k > 0""",
    "global_join": """SELECT sum(x) * 2 + count(*) AS e, coalesce(sum(d), 0) AS z
                      FROM t JOIN u ON t.k = u.k WHERE y > 0""",
    "global_having": "SELECT count(*) AS n, max(s) AS ms FROM u HAVING count(*) > 1",
    # a global aggregate over computed values: its NULL over no rows is typed when the
    # plan is built (plans/types.py expression_type), as TPC-H Q15's max over sums
    "global_arithmetic": """SELECT max(x * d) AS m, min(d / 3 - 1) AS q, sum(x * 2) AS s2,
                            avg(d * 1.5) AS a FROM t WHERE k > 0""",
    "global_max_of_sums": """WITH r AS (SELECT k, sum(x * d) AS tot FROM t GROUP BY k)
                             SELECT k, tot FROM r WHERE tot = (SELECT max(tot) FROM r)""",
    # a scalar subquery in HAVING (TPC-H Q11's form)
    "global_having_scalar": """SELECT g, sum(x * d) AS v FROM t GROUP BY g
                               HAVING sum(x * d) > (SELECT sum(y) * 0.5 FROM u WHERE s = 'a')""",
    # scalar conditions as band joins (ir.Band): decimals of two scales, the subquery on
    # the left, a correlated bound of another scale, an equality
    "band_decimal": "SELECT k, d FROM t WHERE d >= (SELECT avg(d) * 0.5 FROM t WHERE g = 'a')",
    "band_flipped": "SELECT k, x FROM t WHERE (SELECT max(y) FROM u WHERE s = 'b') > x",
    "band_correlated": """SELECT t.k, d FROM t
                          WHERE d < (SELECT 0.2 * sum(y) FROM u WHERE u.k = t.k)""",
    "band_equal": "SELECT k, x FROM t WHERE x = (SELECT min(y) FROM u)",
    "global_derived": """SELECT n * 2 AS n2, m FROM (SELECT count(*) AS n, min(y) AS m FROM u
                         WHERE s = 'a') AS c""",
    # keys of two types compare in Spark's common type (types.common_type): DECIMAL(7, 2)
    # with BIGINT in DECIMAL(22, 2); a join compares values as stored, so each side is cast
    "mixed_type_join": "SELECT t.k, x, d, y FROM t JOIN u ON u.y = t.d * 2",
    "mixed_type_exists": "SELECT k, d FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.y = t.d * 2)",
    "mixed_type_in": "SELECT k, d FROM t WHERE d * 2 IN (SELECT y FROM u WHERE s = 'a')",
    "mixed_type_scalar": """SELECT k, x FROM t
                            WHERE x <= (SELECT max(y) FROM u WHERE u.y = t.d * 2)""",
    # WITH RECURSIVE (Spark's form: anchor UNION ALL a step linear in the CTE) as iterate;
    # the walk may cycle, the level bound ends it, as Spark's levels end
    "recursive_walk": """WITH RECURSIVE r(k, n) AS (SELECT k, 0 FROM t WHERE x > 0
                         UNION ALL SELECT u.y, n + 1 FROM r JOIN u ON r.k = u.k
                         WHERE n < 3 AND s IS NOT NULL) SELECT k, n FROM r""",
    "recursive_counted": """WITH RECURSIVE r AS (SELECT k AS node, g FROM t UNION ALL
                            SELECT y, g FROM r, u WHERE r.node = u.k AND u.y > r.node)
                            SELECT node, g, count(*) AS paths FROM r GROUP BY node, g""",
    "cte_columns": """WITH c(a, b) AS (SELECT k, x FROM t WHERE x > 0)
                      SELECT a, b * 2 AS b2 FROM c""",
    "no_from": "SELECT 1 AS one, CAST(NULL AS STRING) AS s, DATE'2020-01-02' AS d",
    # names as Spark resolves them: GROUP BY an item's name where the input has no such
    # column; HAVING an item's name unless the input's column of that name is grouped (x
    # here is the count, k the input's); ORDER BY the output's names first, then the
    # input's columns and aggregates (kept aside for top_k, then dropped)
    "group_by_alias": "SELECT k % 2 AS parity, count(*) AS n FROM t GROUP BY parity",
    "having_alias": """SELECT k, sum(d) AS sd, count(*) AS x, x AS kx FROM t GROUP BY k, x
                       HAVING sd > 0 OR x > 1 OR kx = 1""",
    "having_grouped_input": "SELECT x AS k, count(*) AS n FROM t GROUP BY k, x HAVING k = 1",
    "order_by_aggregate": """SELECT g, sum(x) FROM t GROUP BY g
                             ORDER BY sum(x) DESC NULLS LAST, max(d), g LIMIT 2""",
    "order_by_input": "SELECT k AS kk, g FROM t ORDER BY x DESC NULLS FIRST, k, g LIMIT 3",
    "order_by_alias_expression": """SELECT k, count(*) AS n FROM t GROUP BY k
                                    ORDER BY n * 10 - k DESC, k LIMIT 2""",
    # ALL: ORDER BY every output column in turn; GROUP BY the items without aggregates
    # (none: a global aggregate, one row over no rows too)
    "order_by_all": "SELECT k, x FROM t ORDER BY ALL DESC LIMIT 2",
    "group_by_all": "SELECT g, k % 2 AS p, count(*) AS n, sum(x) + 1 AS s FROM t GROUP BY ALL",
    "group_by_all_global": "SELECT count(*) AS n, max(x) AS m FROM t GROUP BY ALL",
    # OFFSET n: the first n + k rows less the first n; without LIMIT, all less the first n
    "offset": """SELECT g, sum(x) AS s FROM t GROUP BY g
                 ORDER BY s DESC NULLS LAST, g LIMIT 2 OFFSET 1""",
    "offset_only": "SELECT k, x, g FROM t ORDER BY x, k, g OFFSET 2",
    # lateral column aliases: an earlier item's name where the input has no such column
    # (k is the input's in k + 1)
    "lateral_alias": "SELECT x * 2 AS k, k + 1 AS z, z * z AS zz FROM t",
    "lateral_grouped": """SELECT g, sum(x) AS s, s * 2 AS s2, count(*) AS n FROM t GROUP BY g
                          HAVING s2 > n""",
    # count_if, bool_or / some, bool_and / every as count, max and min
    "boolean_aggregates": """SELECT g, count_if(x > 0) AS c, bool_or(x > 1) AS bo,
                             bool_and(d > 0) AS ba, every(k = 1) AS e, some(x IS NULL) AS so
                             FROM t GROUP BY g""",
    "boolean_global": "SELECT count_if(x > 1) AS c, bool_or(d > 0) AS b FROM t",
    # aggregates over a whole partition, joined back to each row by the partition's values
    # (NULLs partition together)
    "window_partition": """SELECT k, x, g, sum(x) OVER (PARTITION BY g) AS sg,
                           count(*) OVER () AS n, max(d) OVER (PARTITION BY g) - d AS gap
                           FROM t WHERE k IS NOT NULL OR x > 0""",
    "window_partitions": """SELECT k, avg(x) OVER (PARTITION BY k % 2, g) AS a,
                            min(d) OVER (PARTITION BY k) AS md, count(x) OVER (PARTITION BY g)
                            AS cx, count_if(x > 0) OVER (PARTITION BY g) AS cp FROM t""",
    # grouping sets: a GROUP BY per set, UNION ALL; a grouping expression outside the set is
    # NULL outside aggregates; the empty set has no row over no rows
    "rollup": """SELECT g, k, sum(x) AS s, grouping(g) AS gg, grouping_id() AS gid,
                 upper(g) AS ug, count(k) AS ck FROM t GROUP BY ROLLUP(g, k)""",
    "cube": """SELECT g, k % 2 AS p, count(*) AS n, grouping_id() AS gid FROM t
               GROUP BY g, CUBE(k % 2)""",
    "grouping_sets": """SELECT g, count(*) AS n, sum(d) AS sd FROM t
                        GROUP BY GROUPING SETS ((g), (g), ()) HAVING g IS NULL OR count(*) > 1""",
    "with_rollup": "SELECT g, k, count(*) AS n FROM t GROUP BY g, k WITH ROLLUP",
    # FILTER (WHERE c) as CASE WHEN c THEN x END inside the aggregate
    "filter_grouped": """SELECT g, count(*) FILTER (WHERE x > 0) AS np,
                         sum(d) FILTER (WHERE k = 1) AS sd, avg(x) FILTER (WHERE g IS NULL)
                         AS ax, count(DISTINCT x) FILTER (WHERE d > 0) AS dx FROM t GROUP BY g""",
    "filter_global": """SELECT count(*) FILTER (WHERE x > 0) AS n,
                        max(d) FILTER (WHERE x < 0) AS m FROM t""",
    # IN / NOT IN correlated by equalities: per outer row, the y of the rows it meets (an
    # inner k shadows the outer one); NOT IN's null rule holds per row
    "in_correlated": "SELECT k, x FROM t WHERE x IN (SELECT y FROM u WHERE u.k = t.k)",
    "in_correlated_shadowed": """SELECT k, g FROM t
                                 WHERE k IN (SELECT k FROM u WHERE u.y = t.x AND s = 'a')""",
    "not_in_correlated": "SELECT k, x FROM t WHERE x NOT IN (SELECT y FROM u WHERE u.k = t.k)",
    # OR over subqueries: the rows either side keeps, less those both keep
    "or_in": "SELECT k, x FROM t WHERE k = 1 OR k IN (SELECT k FROM u WHERE y > 0)",
    "or_not_exists": """SELECT k, g, x FROM t WHERE x > 2
                        OR NOT EXISTS (SELECT 1 FROM u WHERE u.k = t.k) OR g = 'b'""",
    "or_in_branches": """SELECT k, x FROM t WHERE (x > 0 AND k IN (SELECT k FROM u WHERE y > 0))
                         OR (x IS NULL AND k NOT IN (SELECT y FROM u))""",
    "or_scalars": """SELECT k, x FROM t WHERE x > (SELECT min(y) FROM u)
                     OR x < (SELECT max(y) FROM u WHERE s = 'a')""",
    # EXISTS and IN as values: counts kept as correlated scalar subqueries, with the two
    # values Spark gives them there (an existence join: IN is never NULL; NOT IN is false
    # where x or a y is NULL and the subquery has rows)
    "in_as_value": """SELECT k, x, x IN (SELECT y FROM u WHERE u.k = t.k) AS xin,
                      k NOT IN (SELECT y FROM u) AS kout,
                      NOT (x IN (SELECT y FROM u WHERE u.k = t.k AND s = 'a')) AS xout,
                      EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND s = 'a') AS ex FROM t""",
    "in_as_value_star": """SELECT *, CASE WHEN k IN (SELECT k FROM u WHERE s = 'a') THEN 'yes'
                           ELSE 'no' END AS f FROM t""",
    # `*` lists the query's columns, not the subquery's value kept beside them
    "star_with_scalar": "SELECT *, (SELECT max(y) FROM u WHERE u.k = t.k) AS my FROM t",
    "in_tuple": "SELECT k, g, x FROM t WHERE (k, x) IN (SELECT k, y FROM u WHERE s = 'a')",
    "in_tuple_correlated": """SELECT k, x FROM t
                              WHERE (k, g) IN (SELECT y, s FROM u WHERE u.k = t.x)""",
    "in_tuple_grouped": """SELECT k, x FROM t
                           WHERE (k, x) IN (SELECT k, max(y) FROM u GROUP BY k)""",
    # several values: dropped where some inner row might equal them (each pair equal or
    # unknown), by pattern of nulls on either side
    "not_in_tuple": "SELECT k, g, x FROM t WHERE (k, x) NOT IN (SELECT k, y FROM u WHERE s = 'a')",
    "not_in_tuple_correlated": """SELECT k, x, g FROM t
                                  WHERE (x, g) NOT IN (SELECT y, s FROM u WHERE u.k = t.k)""",
    "not_in_three": "SELECT k, x, g, d FROM t WHERE (k, x, g) NOT IN (SELECT k, y, s FROM u)",
    "not_in_tuple_grouped": """SELECT k, x FROM t
                               WHERE (k, x) NOT IN (SELECT k, max(y) FROM u GROUP BY k)""",
    "not_in_correlated_typed": """SELECT k, d FROM t WHERE d NOT IN
                                  (SELECT y FROM u WHERE t.k = u.k AND s = 'a')""",
    # the variance family over DOUBLE, as Spark's (NULL over no value, the samples' over
    # one); max_by / min_by by a y that only equal records share (no tie to break), NULL
    # where no y is; any_value of a value its group determines
    "moments": """SELECT g, stddev(x) AS s, stddev_pop(d) AS sp, variance(d) AS v,
                  var_pop(x) AS vp, std(k) AS sk, var_samp(DISTINCT x) AS vd, count(*) AS n,
                  sum(x) AS sx FROM t GROUP BY g""",
    "moments_global": "SELECT stddev_samp(x) AS s, var_pop(d) AS v FROM t",
    "moments_over": """SELECT k, x, stddev(x) OVER (PARTITION BY g) AS sw,
                       max_by(k, to_json(struct(k, g, x, d))) OVER (PARTITION BY g) AS mw
                       FROM t""",
    "by_value": """SELECT g, max_by(x, to_json(struct(k, g, x, d))) AS mx,
                   min_by(d, CASE WHEN k > 0 THEN to_json(struct(k, g, x, d)) END) AS md,
                   min_by(k, to_json(struct(k, g, x, d))) FILTER (WHERE x > 0) AS mk
                   FROM t GROUP BY g HAVING stddev(k) IS NULL OR stddev(k) < 1""",
    "any_value": """SELECT k, x, any_value(x * 2) AS x2, any_value(g, true) AS ag,
                    count(*) AS n FROM t GROUP BY k, x, g""",
    "aggregate_of_aggregate": """SELECT n, count(*) AS groups
                                 FROM (SELECT g, count(*) AS n FROM t GROUP BY g) AS c
                                 GROUP BY n""",
}


# every column type the inputs take, through Spark's functions, casts and null rules
V = "k BIGINT, s STRING, d DATE, ts TIMESTAMP, f DOUBLE, b BOOLEAN, m DECIMAL(10,3), i INT"
v_rec = st.tuples(st.integers(0, 3), maybe(st.sampled_from(["a", "b", "ab", ""])),
                  maybe(st.sampled_from([dt.date(2020, 1, 31), dt.date(2020, 2, 29)])),
                  maybe(st.sampled_from([dt.datetime(2020, 5, 1, 3, 4, 5),
                                         dt.datetime(2021, 1, 1)])),
                  maybe(st.sampled_from([0.5, -1.25, 0.0, -0.0, NAN])), maybe(st.booleans()),
                  maybe(st.sampled_from([Decimal("1.250"), Decimal("-0.505"),
                                         Decimal("12.345")])), maybe(st.integers(-2, 3)))
TYPED = {
    "case_null": """SELECT k, CASE WHEN i > 0 THEN 'pos' WHEN i < 0 THEN 'neg' END AS sg,
                    coalesce(s, 'none') AS s2, nullif(i, 0) AS ni FROM v""",
    "integers": "SELECT k, i div 2 AS q, i % 3 AS r, k / 2 AS h, abs(i) AS a FROM v",
    "dates": """SELECT k, date_add(d, 3) AS d3, datediff(d, DATE'2020-01-01') AS dd,
                year(d) AS y, add_months(d, 1) AS am, to_date(ts) AS td FROM v""",
    "in_lists": """SELECT k, i, i IN (1, 2, NULL) AS in_null, i NOT IN (1, NULL) AS out_null,
                   i IS DISTINCT FROM 1 AS other FROM v WHERE b OR b IS NULL""",
    "casts": """SELECT k, cast(i AS STRING) AS si, cast(m AS BIGINT) AS mi,
                cast(i AS DECIMAL(5,1)) AS id, round(m, 1) AS rm, m * 2 - i AS e FROM v""",
    "typed_groups": """SELECT s, min(d) AS md, max(ts) AS mt, sum(m) AS sm, avg(m) AS am,
                       count(DISTINCT i) AS di, max(b) AS mb, min(f) AS mf FROM v GROUP BY s""",
    # keys of two types (BIGINT = INT) cast to the common one; the NULL-padded anti pattern
    "anti_by_left_join": """SELECT a.k, a.i FROM v a LEFT JOIN v b ON a.k = b.i
                            WHERE b.k IS NULL""",
    "rank_typed": """SELECT k, s, f, ts FROM (SELECT k, s, f, ts, rank() OVER (PARTITION BY s,
                     d ORDER BY f, ts DESC) AS r FROM v) AS x WHERE r < 2""",
    # DOUBLE keys as Spark compares them: -0.0 = 0.0 and NaN = NaN, in groups, joins and
    # EXISTS; NaN above every number in orders
    "float_groups": "SELECT f, count(*) AS n, max(i) AS mi, min(f) AS lo FROM v GROUP BY f",
    "float_join": "SELECT a.k, b.k AS k2, a.f FROM v a JOIN v b ON a.f = b.f WHERE a.k < b.k",
    "float_exists": """SELECT k, i FROM v a WHERE EXISTS (SELECT 1 FROM v b WHERE b.f = a.f
                       AND b.i > a.i)""",
    "float_order": "SELECT k, f FROM v ORDER BY f DESC NULLS LAST, k LIMIT 2",
    "typed_moments": """SELECT s, stddev(f) AS sf, var_pop(m) AS vm, stddev_pop(i) AS si,
                        max_by(ts, to_json(struct(k, s, d, ts, f, b, m, i))) AS mt
                        FROM v GROUP BY s""",
    "dense_rank_typed": """SELECT k, m, b FROM (SELECT k, m, b, dense_rank() OVER (PARTITION BY
                           b ORDER BY m DESC NULLS LAST) AS r FROM v) AS x WHERE r <= 2""",
}


def sql_flow(queries) -> Dataflow:
    flow = Dataflow()
    flow.input("t", T)
    flow.input("u", U)
    flow.input("v", V)
    for name, text in queries.items():
        flow.output(name, flow.sql(text))
    return flow


def spark_sql(spark, queries):
    def batch(frames):
        for name, df in frames.items():
            df.createOrReplaceTempView(name)
        return {name: spark.sql(text) for name, text in queries.items()}
    return batch


@settings(max_examples=examples(1, 2), deadline=None, suppress_health_check=list(HealthCheck))
@given(t=lifetimes(t_rec), u=lifetimes(u_rec), cut_list=cuts)
def test_sql_views_match_spark_sql_and_reference(spark, conf, t, u, cut_list):
    check_steps(spark, conf, sql_flow(QUERIES), {"t": (T, t), "u": (U, u)}, cut_list,
                spark_sql(spark, QUERIES))


@settings(max_examples=examples(1, 2), deadline=None, suppress_health_check=list(HealthCheck))
@given(v=lifetimes(v_rec), cut_list=cuts)
def test_sql_over_every_column_type_matches_spark_sql_and_reference(spark, conf, v, cut_list):
    check_steps(spark, conf, sql_flow(TYPED), {"t": (T, []), "u": (U, []), "v": (V, v)},
                cut_list, spark_sql(spark, TYPED))


# Outer joins whose ON reads the preserved side beyond the keys: a row with no surviving
# pair is padded, including one whose own predicate fails (x > 0 in a LEFT JOIN's ON keeps
# the row) and one with a NULL key; duplicate rows are padded as often as they come.
OUTER_MIXED = {
    "left_mixed": "SELECT t.k AS tk, x, u.k AS uk, y FROM t LEFT JOIN u ON t.k = u.k AND x < y",
    "left_preserved": """SELECT t.k AS tk, g, d, y, s FROM t
                         LEFT JOIN u ON t.k = u.k AND x > 0 AND s = 'a'""",
    "right_mixed": """SELECT u.k AS uk, y, s, x, g FROM t
                      RIGHT JOIN u ON u.k = t.k AND (x > y OR s = g)""",
    "full_mixed": """SELECT t.k AS tk, g, x, u.k AS uk, y, s FROM t
                     FULL JOIN u ON t.k = u.k AND y > 0 AND x <> y""",
    "left_theta": "SELECT t.k AS tk, x, y FROM t LEFT JOIN u ON x < y",
    # two predicates on the padded side: both filter it (until 174e152 only the last did)
    "left_two_padded": """SELECT t.k AS tk, x, y, s FROM t
                          LEFT JOIN u ON t.k = u.k AND u.y > 0 AND u.s = 'a'""",
    "full_theta_grouped": """SELECT g, count(*) AS n, count(y) AS ny, sum(x) AS sx
                             FROM t FULL JOIN u ON x + 1 = y + 1 AND t.k < u.k GROUP BY g""",
}


@settings(max_examples=examples(1, 3), deadline=None, suppress_health_check=list(HealthCheck))
@given(t=lifetimes(t_rec), u=lifetimes(u_rec), cut_list=cuts,
       placement=st.sampled_from(["driver", "spark"]))
def test_outer_joins_with_conditions_beyond_keys_match_spark_sql_and_reference(
        spark, conf, t, u, cut_list, placement):
    check_steps(spark, conf | (SPARK_ONLY if placement == "spark" else {}),
                sql_flow(OUTER_MIXED), {"t": (T, t), "u": (U, u)}, cut_list,
                spark_sql(spark, OUTER_MIXED))


@pytest.mark.parametrize("placement", ["driver", "spark"])
def test_outer_joins_pad_rows_whose_own_predicate_fails(spark, conf, placement):
    """Fixed rows where each padding rule matters: t's (1, x=-1) meets u's k=1 but fails
    x > 0 (padded, not dropped); two equal rows (2, x=1) each padded then each joined when
    a u row with y > x comes, and padded again when it goes, while (2, x=9) beside them
    fails x < y and stays padded (a row is padded by its own pairs, not its key's); a NULL
    key is padded on its own side of a FULL join; u's (1, y=-1, 'a') fails one of two
    predicates on the padded side."""
    t = [((1, "a", -1, None), 0, 1), ((2, "b", 1, None), 0, 2), ((2, "a", 9, None), 0, 1),
         ((None, "a", 0, None), 0, 1)]
    u = [((1, 3, "a"), 0, 1), ((2, 5, "a"), 1, 1), ((2, 5, "a"), 2, -1), ((None, 1, "b"), 1, 1),
         ((1, -1, "a"), 0, 1)]
    check_steps(spark, conf | (SPARK_ONLY if placement == "spark" else {}),
                sql_flow(OUTER_MIXED), {"t": (T, t), "u": (U, u)}, [1, 2, HORIZON],
                spark_sql(spark, OUTER_MIXED))


@pytest.mark.parametrize("placement", ["driver", "spark"])
def test_keys_of_two_types_meet_as_spark_compares_them(spark, conf, placement):
    """Keys DECIMAL(7, 2) = BIGINT in a join, EXISTS, IN and a correlated scalar subquery
    meet in Spark's common type on both placements, as Spark SQL and the reference say: the
    driver compares values as stored, where -1.00 (unscaled -100) and -1 never met (EXISTS
    gave no row). Rows chosen so that every query has rows to get wrong, over three steps
    with a retraction."""
    t = [((1, "a", 1, Decimal("-0.50")), 0, 1), ((2, "b", 2, Decimal("1.25")), 0, 1),
         ((3, None, -1, Decimal("-0.50")), 1, 1)]
    u = [((0, -1, "a"), 0, 1), ((1, 2, "a"), 1, 1), ((1, -1, "a"), 2, 1), ((0, -1, "a"), 3, -1)]
    queries = {n: text for n, text in QUERIES.items() if n.startswith("mixed_type")}
    check_steps(spark, conf | (SPARK_ONLY if placement == "spark" else {}), sql_flow(queries),
                {"t": (T, t), "u": (U, u)}, [1, 3, HORIZON], spark_sql(spark, queries))


@pytest.mark.parametrize("placement", ["driver", "spark"])
def test_correlated_scalar_subqueries_in_select_read_sql_values_over_no_rows(spark, conf,
                                                                             placement):
    """A row whose key no inner row has (or a NULL key) reads NULL from max and sum and 0
    from count, on both placements, through a group that appears, moves and vanishes; as
    Spark SQL and the reference say."""
    t = [((1, "a", 1, Decimal("1.25")), 0, 1), ((2, "b", 2, None), 0, 1),
         ((None, None, 3, Decimal("-0.50")), 1, 1), ((2, "b", 2, None), 3, -1)]
    u = [((1, 5, "a"), 0, 1), ((None, 7, "a"), 0, 1), ((2, 1, "b"), 1, 1),
         ((1, 5, "a"), 2, -1), ((1, 9, "b"), 2, 1), ((2, 1, "b"), 3, -1)]
    queries = {"scalar_correlated_in_select": QUERIES["scalar_correlated_in_select"]}
    check_steps(spark, conf | (SPARK_ONLY if placement == "spark" else {}), sql_flow(queries),
                {"t": (T, t), "u": (U, u)}, [1, 2, 3, HORIZON], spark_sql(spark, queries))


@pytest.mark.parametrize("placement", ["driver", "spark"])
def test_recursive_ctes_follow_edges_as_they_come_and_go(spark, conf, placement):
    """WITH RECURSIVE over a graph whose edges change (a path appears, a cycle that the
    level bound cuts, a retraction that removes a branch) on both placements, against
    Spark's recursive CTE and the reference."""
    t = [((1, "a", 1, None), 0, 1), ((2, "b", 1, None), 1, 1), ((1, "a", 1, None), 3, -1)]
    u = [((1, 2, "e"), 0, 1), ((2, 3, "e"), 0, 1), ((3, 1, "e"), 1, 1), ((2, 0, "e"), 2, 1),
         ((2, 3, "e"), 2, -1), ((0, 2, None), 2, 1)]
    queries = {n: QUERIES[n] for n in ("recursive_walk", "recursive_counted")}
    check_steps(spark, conf | (SPARK_ONLY if placement == "spark" else {}), sql_flow(queries),
                {"t": (T, t), "u": (U, u)}, [1, 2, 3, HORIZON], spark_sql(spark, queries))


def test_a_recursion_without_end_fails_its_step_and_changes_nothing(spark, conf):
    """A cycle and no level bound: Spark fails at its level limit, diffspark at
    diffspark.iterate.max_rounds, with the step refused and the outputs as before."""
    from executor import Runner, StepError
    from conftest import updates_df

    flow = Dataflow()
    flow.input("u", U)
    flow.output("r", flow.sql("WITH RECURSIVE r(k) AS (SELECT CAST(1 AS BIGINT) UNION ALL "
                              "SELECT u.y FROM r JOIN u ON r.k = u.k) SELECT k FROM r"))
    runner = Runner(flow, conf=conf | {"diffspark.iterate.max_rounds": "6"}, spark=spark)
    runner.step({"u": updates_df(spark, U, [((1, 2, "a"), 0, 1)])}, upto=1)
    assert sorted(r.k for r in runner.snapshot("r", at=0).collect()) == [1, 2]
    with pytest.raises(StepError, match="no fixed point in 6 rounds"):
        runner.step({"u": updates_df(spark, U, [((2, 1, "a"), 1, 1)])}, upto=2)
    assert runner.frontier == 1 and sorted(r.k for r in runner.snapshot("r", at=0).collect()) \
        == [1, 2]


def test_scalar_conditions_on_comparable_types_are_band_joins():
    """A column compared with a scalar subquery's value becomes a band join where the types
    compare on codes; a BIGINT against avg's DOUBLE stays a join and a filter."""
    from plans import ir

    flow = sql_flow(QUERIES)
    for name in ("band_decimal", "band_flipped", "band_correlated", "band_equal",
                 "correlated_scalar_filtered", "global_max_of_sums", "global_having_scalar"):
        bands = [n.band for n in ir.topological([flow.outputs[name]])
                 if isinstance(n, ir.Join) and n.band is not None]
        assert len(bands) == 1, name
    assert [n.band.op for n in ir.topological([flow.outputs["band_flipped"]])
            if isinstance(n, ir.Join) and n.band] == ["<"]
    assert not any(isinstance(n, ir.Join) and n.band
                   for n in ir.topological([flow.outputs["scalar_avg"]]))


def _chain(node):
    """(the input, its filters) of a chain of maps, filters and arrangements over an input;
    None above anything else."""
    filters = []
    while not isinstance(node, ir.Input):
        if isinstance(node, ir.Linear):
            filters += [s.expr for s in node.stages if isinstance(s, ir.Filter)]
        elif not isinstance(node, ir.Arrange):
            return None
        node = node.input
    return node.name, filters


def test_an_or_filters_each_relation_before_the_joins_and_a_dimension_joins_first():
    """FROM a, u, b WHERE ... AND ((b.g = 'a' AND a.x > 0) OR (b.g IS NULL AND u.s = 'b')):
    b is filtered by b.g = 'a' OR b.g IS NULL before any join, and so filtered and linked
    to u alone it joins u first; a and u, asked nothing by some branch, are not filtered
    (the streams' answers: test_sql_views_match_spark_sql_and_reference)."""
    flow = sql_flow({"q": """SELECT a.k, u.y FROM t a, u, t b WHERE a.k = u.k AND u.y = b.x
                             AND ((b.g = 'a' AND a.x > 0) OR (b.g IS NULL AND u.s = 'b'))"""})
    joins = [n for n in ir.topological(list(flow.outputs.values())) if isinstance(n, ir.Join)]
    first, last = joins
    sides = sorted(_chain(n) for n in (first.left, first.right))
    (t, t_filters), (u, u_filters) = sides
    assert (t, u, u_filters) == ("t", "u", [])
    assert len(t_filters) == 1 and "'a'" in t_filters[0] and "IS NULL" in t_filters[0]
    assert sorted(filter(None, (_chain(n) for n in (last.left, last.right)))) == [("t", [])]


def test_global_aggregates_are_one_row_before_during_and_after_rows(spark, conf):
    """No rows at first, rows, then all retracted: SQL's one row at every step."""
    queries = {n: q for n, q in QUERIES.items() if n.startswith("global")}
    t = [((1, "a", 2, Decimal("1.25")), 1, 1), ((2, None, None, None), 2, 2),
         ((1, "a", 2, Decimal("1.25")), 3, -1), ((2, None, None, None), 4, -2)]
    u = [((1, 1, "a"), 2, 1), ((2, 2, "a"), 2, 1), ((1, 1, "a"), 4, -1), ((2, 2, "a"), 5, -1)]
    check_steps(spark, conf, sql_flow(queries), {"t": (T, t), "u": (U, u)}, [1, 3, 6],
                spark_sql(spark, queries))


def test_a_constant_is_fed_once_at_time_zero_on_either_placement(spark, conf):
    """flow.constant (what a global aggregate's empty group comes from): its records join
    the first step that holds time 0 only, on the driver and on Spark alike; feeding it is
    refused."""
    from conftest import three_ways, updates_table
    from executor import InputError, Runner
    flow = Dataflow()
    s = flow.input("s", "k BIGINT")
    one = flow.constant("k BIGINT, tag STRING", [(1, "c"), (7, None)])
    assert flow.constant("k BIGINT, tag STRING", [(1, "c"), (7, None)]).node == one.node
    flow.output("both", one.concat(s.map("k", "'s' AS tag")).count(by=["k"]))
    three_ways(spark, conf, flow, "k BIGINT", [((1,), 1, 1), ((7,), 3, 1), ((1,), 4, -1)],
               [0, 2, 5])
    with pytest.raises(InputError, match="input '_constant0', column '-': unknown input"):
        Runner(flow, conf=conf, spark=spark).step(
            {"_constant0": updates_table("k BIGINT, tag STRING", [])}, upto=1)
    with pytest.raises(PlanError, match="every row has 2 values"):
        flow.constant("k BIGINT, tag STRING", [(1,)])


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


# SELECT items without AS, named as Spark names them (plans/sql_names.py); each list is one
# Spark query, so every name is checked against Spark's own
UNNAMED = ["k", "v.k", "K", "i + 1", "i+1", "-i", "-(i)", "- 1", "-1.50", "007", "1.50", ".5",
           "'lit'", "NULL", "true", "False", "NOT b", "i > 1", "i >= 1 AND k < 2", "i = 1 OR b",
           "i <> 1", "i != 1", "i == 1", "i <=> 1", "i % 2", "i / 2", "i * m", "i * (k + 1)",
           "((i + 1))", "NOT (NOT b)", "CAST(i AS BIGINT)", "i::bigint + 1",
           "CAST(i AS BIGINT) + 1", "CAST(m AS DECIMAL(12,3)) * 2", "CAST(i AS DECIMAL) + 1",
           "CAST(i AS DEC(5)) + 1", "CAST(i AS LONG) + 1", "upper(CAST(i AS STRING))",
           "upper(CAST(i AS VARCHAR(3)))", "coalesce(CAST(ts AS DATE), d)",
           "coalesce(CAST(ts AS TIMESTAMP), ts)", "coalesce(CAST(f AS FLOAT), 0)",
           "coalesce(CAST(i AS SMALLINT), CAST(i AS TINYINT))", "coalesce(CAST(f AS REAL), f)",
           "upper(s)", "UPPER(s)", "ucase(s)", "lower(s)", "lcase(s)", "Upper(S)",
           "coalesce(i, 0)", "nvl(i, 0)", "ifnull(s, 'z')", "nullif(i, 1)", "abs(-i)",
           "round(m)", "round(m, 1)", "length(s)", "char_length(s)", "character_length(s)",
           "year(d)", "month(ts)", "day(d)", "dayofmonth(d)", "greatest(i, k)",
           "least(i, 1, 2)", "concat(s, s, 'x')", "CASE WHEN i > 1 THEN 1 ELSE 0 END",
           "CASE i WHEN 1 THEN 'a' END", "CASE WHEN b THEN i WHEN i > 1 THEN k ELSE NULL END",
           "i IS NULL", "i IN (1, 2)", "i NOT IN (1, 2)"]
UNNAMED_GROUPED = ["s", "sum(i)", "SUM(i)", "count(*)", "count(1)", "count(i)",
                   "count(DISTINCT i)", "avg(m)", "min(s)", "max(d)", "sum(i * 2)",
                   "sum(i) + 1", "max(i) - min(i)", "sum(m) / count(*)", "max(DISTINCT i)",
                   "sum(CASE WHEN b THEN i ELSE 0 END)", "count(k) + count(DISTINCT i)",
                   "coalesce(sum(i), 0)", "count(*) FILTER (WHERE i > 1)",
                   "sum(m) FILTER (WHERE b)", "max(d) FILTER (WHERE i IS NULL AND b)",
                   "count(DISTINCT i) FILTER (WHERE s IN ('a', 'b'))",
                   "avg(f) filter (where NOT b) + 1"]
# Spark names these in ways the rules do not follow (or sqlglot cannot tell apart: `x IS
# NOT NULL` and `NOT x IS NULL` parse alike, Spark names them apart): an alias is asked for
UNNAMED_REFUSED = ["i IS NOT NULL", "i < 2.50", "NOT -1.5 >= k", "substr(s, 1, 2)", "floor(m)",
                   "if(b, 1, 0)", "i BETWEEN 1 AND 3", "s LIKE 'a%'", "s || 'b'", "1e3",
                   "TRY_CAST(i AS INT)", "0.0000001", "date_add(d, 1)", "'it''s'"]


def _output_names(text: str) -> list:
    from plans.types import columns_of

    flow = Dataflow()
    flow.input("v", V)
    return [name for name, _ in columns_of(flow.sql(text).node)]


@pytest.mark.parametrize("placement", ["driver", "spark"])
def test_join_using_over_keys_on_one_side_only(spark, conf, placement):
    """USING's key column is either side's where the other has no match (a FULL join's
    coalesce), NULL keys match nothing, on both placements, over steps that add and
    retract matches."""
    t = [((1, "a", 1, None), 0, 1), ((None, "b", 2, None), 0, 1), ((3, "c", 3, None), 1, 1),
         ((1, "a", 1, None), 2, -1)]
    u = [((1, 5, "x"), 0, 1), ((2, 6, "y"), 0, 1), ((None, 7, "z"), 1, 1), ((3, 8, None), 2, 1)]
    queries = {n: QUERIES[n] for n in QUERIES if n.startswith("using_")}
    check_steps(spark, conf | (SPARK_ONLY if placement == "spark" else {}), sql_flow(queries),
                {"t": (T, t), "u": (U, u)}, [1, 2, HORIZON], spark_sql(spark, queries))


@pytest.mark.parametrize("placement", ["driver", "spark"])
def test_correlated_in_filter_and_hidden_order_keys_on_both_placements(spark, conf, placement):
    """Correlated IN and NOT IN (an outer row whose inner rows come, hold a NULL, and go),
    FILTER aggregates, ORDER BY keys that are not selected, OFFSET, windows, OR over
    subqueries and IN of several values, on either placement, against Spark SQL and the
    reference."""
    t = [((1, "a", 5, Decimal("1.25")), 0, 1), ((1, "b", 6, None), 0, 1),
         ((2, "a", 1, Decimal("-0.50")), 0, 1), ((None, "b", 2, None), 0, 1),
         ((3, None, None, Decimal("1.25")), 1, 1), ((1, "b", 6, None), 2, -1)]
    u = [((1, 5, "a"), 0, 1), ((2, 9, "a"), 0, 1), ((1, None, "a"), 1, 1),
         ((3, 3, "b"), 1, 1), ((1, None, "a"), 2, -1), ((2, 1, "a"), 2, 1)]
    queries = {n: QUERIES[n] for n in ("in_correlated", "in_correlated_shadowed",
                                       "not_in_correlated", "not_in_correlated_typed",
                                       "filter_grouped", "order_by_aggregate",
                                       "order_by_input", "having_alias", "offset",
                                       "window_partition", "or_not_exists", "in_tuple",
                                       "boolean_global", "group_by_all_global",
                                       "in_as_value", "scalar_correlated_in_select",
                                       "rollup", "cross_join", "theta_join", "rank",
                                       "dense_rank")}
    check_steps(spark, conf | (SPARK_ONLY if placement == "spark" else {}), sql_flow(queries),
                {"t": (T, t), "u": (U, u)}, [1, 2, HORIZON], spark_sql(spark, queries))


@pytest.mark.parametrize("placement", ["driver", "spark"])
def test_rank_ties_floating_zeros_and_nulls_on_both_placements(spark, conf, placement):
    """rank() and dense_rank() <= k over DOUBLE values where -0.0 and 0.0 tie (Spark orders
    them equal) and NaN (above every number, equal to itself), NULL partitions and order
    values, ties entering and leaving the first k; ORDER BY ... LIMIT, min and max over them;
    a whole-partition window over such values and over an expression of them (-0.0 and 0.0
    are one partition); a GROUP BY
    of them with a plain and a distinct aggregate, and EXISTS whose inequality carries one,
    of a type known or not (the values meet again after a distinct that makes -0.0 0.0);
    IN and NOT IN subqueries, INTERSECT, EXCEPT, UNION and DISTINCT aggregates over them."""
    schema = "k BIGINT, p STRING, f DOUBLE"
    rows = [((1, "a", -0.0), 0, 1), ((2, "a", 0.0), 0, 1), ((3, "a", 1.5), 0, 1),
            ((4, None, None), 0, 1), ((5, None, None), 1, 1), ((6, None, 2.0), 1, 1),
            ((7, "a", -1.0), 1, 1), ((7, "a", -1.0), 2, -1), ((8, "a", 1.5), 2, 1),
            ((9, None, 2.0), 2, 1), ((1, "a", -0.0), 2, -1),
            # NaN: above every number, equal to itself (two NaN objects here: one record)
            ((10, "a", float("nan")), 1, 1), ((10, "a", float("nan")), 2, -1),
            ((11, "a", NAN), 2, 1), ((12, None, NAN), 0, 1)]
    queries = {
        "ranked": """SELECT k, p, f FROM (SELECT k, p, f, rank() OVER (PARTITION BY p
                     ORDER BY f) AS r FROM w) AS s WHERE r <= 2""",
        "dense": """SELECT k, f FROM (SELECT k, f, dense_rank() OVER (ORDER BY f DESC) AS r
                    FROM w) AS s WHERE r <= 3""",
        "partitioned": "SELECT k, count(*) OVER (PARTITION BY p, f) AS n FROM w",
        "partitioned_expr": "SELECT k, count(*) OVER (PARTITION BY coalesce(f, CAST(1 AS DOUBLE))) AS n FROM w",
        "grouped": "SELECT f, count(*) AS n, count(DISTINCT k) AS d FROM w GROUP BY f",
        "mixed": """SELECT k FROM w AS a WHERE EXISTS (SELECT 1 FROM w AS b
                    WHERE b.p = a.p AND b.f <> a.f)""",
        "mixed_expr": """SELECT k FROM (SELECT k, p, greatest(f, f) AS g FROM w) AS a
                         WHERE EXISTS (SELECT 1 FROM w AS b WHERE b.p = a.p AND b.f <> a.g)""",
        "in_sub": "SELECT k FROM w WHERE f IN (SELECT f FROM w AS b WHERE b.k = 2)",
        "not_in": "SELECT k FROM w WHERE f NOT IN (SELECT f FROM w AS b WHERE b.k IN (2, 3))",
        "sets": """(SELECT f FROM w WHERE k < 3 INTERSECT SELECT f FROM w WHERE k IN (2, 10))
                   UNION ALL (SELECT f FROM w EXCEPT SELECT f FROM w WHERE k = 2)
                   UNION ALL (SELECT f FROM w WHERE k = 1 UNION SELECT f FROM w WHERE k = 2)""",
        "distincts": "SELECT count(DISTINCT f) AS n, sum(DISTINCT f) AS s FROM w",
        "top": "SELECT k, f FROM w ORDER BY f DESC NULLS LAST, k LIMIT 3",
        "extremes": "SELECT p, min(f) AS lo, max(f) AS hi FROM w GROUP BY p"}
    flow = Dataflow()
    flow.input("w", schema)
    for name, text in queries.items():
        flow.output(name, flow.sql(text))
    check_steps(spark, conf | (SPARK_ONLY if placement == "spark" else {}), flow,
                {"w": (schema, rows)}, [1, 2, HORIZON], spark_sql(spark, queries))


def test_correlated_values_in_select_grow_a_plan_linearly():
    """Each correlated scalar subquery in a SELECT list reads the rows before it once: the
    plan, unfolded into the tree a Spark plan is, grows by the same number of operators per
    subquery (it grew fivefold with each, and six ran Catalyst out of heap)."""
    def unfolded(node, memo):
        if id(node) not in memo:
            memo[id(node)] = 1 + sum(unfolded(c, memo) for c in node.children())
        return memo[id(node)]

    sizes = []
    for n in range(1, 6):
        flow = Dataflow()
        flow.input("t", T)
        flow.input("u", U)
        items = ", ".join(f"(SELECT max(y) + {i} FROM u WHERE u.k = t.k) AS m{i}"
                          for i in range(n))
        sizes.append(unfolded(flow.sql(f"SELECT k, {items} FROM t").node, {}))
    assert len({b - a for a, b in zip(sizes, sizes[1:])}) == 1, sizes


def test_join_using_lists_columns_as_spark_does(spark):
    from plans.types import columns_of

    spark.createDataFrame([], T).createOrReplaceTempView("t")
    spark.createDataFrame([], U).createOrReplaceTempView("u")
    for how in ("", "LEFT", "RIGHT", "FULL", "NATURAL", "NATURAL FULL"):
        text = f"SELECT * FROM t {how} JOIN u" + ("" if "NATURAL" in how else " USING (k)")
        flow = Dataflow()
        flow.input("t", T)
        flow.input("u", U)
        assert [n for n, _ in columns_of(flow.sql(text).node)] == spark.sql(text).columns


def test_select_items_without_alias_are_named_as_spark_names_them(spark):
    spark.createDataFrame([], V).createOrReplaceTempView("v")
    for items, group in ((UNNAMED, ""), (UNNAMED_GROUPED, " GROUP BY s")):
        for item in items:  # one query each: several spellings name one column
            text = f"SELECT {item} FROM v{group}"
            assert _output_names(text) == spark.sql(text).columns, text


@pytest.mark.parametrize("item", UNNAMED_REFUSED)
def test_select_items_spark_names_otherwise_ask_for_an_alias(spark, item):
    spark.createDataFrame([], V).createOrReplaceTempView("v")
    spark.sql(f"SELECT {item} FROM v")  # valid Spark SQL: only its name is unknown here
    with pytest.raises(PlanError, match=r"needs a name \(rule: add AS name"):
        _output_names(f"SELECT {item} FROM v")


def _numeric(depth: int):
    """Random numeric expressions over v's columns in the grammar sql_names follows."""
    leaf = st.sampled_from(["i", "k", "m", "f", "I", "1", "2.50", "-3", "007", "NULL"])
    if depth == 0:
        return leaf
    sub = _numeric(depth - 1)
    cond = _boolean(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["+", "-", "*", "/", "%"]), sub,
                  st.sampled_from(["{} {} {}", "({}{} {})"])).map(
            lambda t: t[3].format(t[0], t[1], t[2])),
        sub.map(lambda x: f"-({x})"),
        st.tuples(st.sampled_from(["abs", "ABS", "coalesce", "nvl", "greatest"]), sub, sub).map(
            lambda t: f"{t[0]}({t[1]})" if t[0].lower() == "abs" else f"{t[0]}({t[1]}, {t[2]})"),
        st.tuples(sub, st.sampled_from(["BIGINT", "INT", "DOUBLE", "DECIMAL(9,2)", "LONG"])).map(
            lambda t: f"CAST({t[0]} AS {t[1]}) + 0"),
        st.tuples(cond, sub, sub).map(lambda t: f"CASE WHEN {t[0]} THEN {t[1]} ELSE {t[2]} END"))


def _boolean(depth: int):
    sub = _numeric(max(depth - 1, 0))
    comparison = st.tuples(sub, st.sampled_from(["=", "<", ">=", "<>", "<=>", "=="]), sub).map(
        lambda t: " ".join(t))
    if depth == 0:
        return comparison
    inner = _boolean(depth - 1)
    return st.one_of(comparison, st.sampled_from(["b", "i IS NULL", "i IN (1, 2)"]),
                     st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
                         lambda t: f"({t[0]} {t[1]} {t[2]})"),
                     inner.map(lambda x: f"NOT ({x})"))


@settings(max_examples=examples(30, 100), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(items=st.lists(st.one_of(_numeric(2), _boolean(2)), min_size=1, max_size=12))
def test_random_unnamed_expressions_are_named_as_spark_names_them_or_not_at_all(spark, items):
    """Never a wrong name: each item's name (where the rules give one) is Spark's."""
    from plans.sql import parse
    from plans.sql_names import spark_name

    text = f"SELECT {', '.join(items)} FROM v"
    spark.createDataFrame([], V).createOrReplaceTempView("v")
    want = spark.sql(text).columns
    got = [spark_name(e, text) for e in parse(text)[0].expressions]
    assert [g for g, w in zip(got, want) if g is not None and g != w] == [], (text, got, want)


@pytest.mark.parametrize("text, message", [
    ("SELECT rand() AS r FROM t", "non-deterministic function RAND()"),
    ("SELECT k, current_timestamp() AS now FROM t", "non-deterministic function"),
    ("SELECT k FROM t ORDER BY k", "ORDER BY without LIMIT is not supported"),
    ("SELECT k FROM t ORDER BY k LIMIT k", "LIMIT k is not supported; LIMIT takes"),
    ("SELECT k FROM t LIMIT 3", "LIMIT without ORDER BY"),
    ("SELECT sum(z) AS s FROM (SELECT round(x) AS z FROM t) AS c",
     "an aggregate without GROUP BY over column 'z' of a type unknown"),
    ("SELECT k, sum(x) OVER (PARTITION BY g ORDER BY k) AS s FROM t", "window function"),
    ("SELECT g, sum(sum(x)) OVER () AS s FROM t GROUP BY g", "over grouped rows"),
    ("SELECT k, count(DISTINCT x) OVER (PARTITION BY g) AS s FROM t", "window function"),
    ("SELECT k, max(x) OVER w AS m FROM t WINDOW w AS (PARTITION BY g)", "window function"),
    ("SELECT k FROM (SELECT k, percent_rank() OVER (ORDER BY x) AS r FROM t) AS s "
     "WHERE r <= 0.5", "window function"),
    ("SELECT k FROM (SELECT k, rank() OVER (ORDER BY round(x)) AS r FROM t) AS s WHERE r <= 2",
     r"RANK\(\) over ROUND\(x\), of a type not known here"),
    ("SELECT k, count(*) OVER (PARTITION BY g, round(x)) AS n FROM t",
     r"COUNT\(\*\) OVER .* partitioned by ROUND\(x\), of a type not known here"),
    ("SELECT k, r FROM (SELECT k, dense_rank() OVER (ORDER BY x) AS r FROM t) AS s "
     "WHERE r <= 2", r"DENSE_RANK\(\) AS r used other than once"),
    ("SELECT * FROM (SELECT k, row_number() OVER (ORDER BY x) AS rn FROM t) AS s "
     "WHERE rn <= 2", "used other than once"),
    ("SELECT k, rn FROM (SELECT k, row_number() OVER (ORDER BY x) AS rn FROM t) AS s "
     "WHERE rn <= 2", "used other than once"),
    ("SELECT k FROM t WHERE x > (SELECT y FROM u)", "scalar subquery"),
    ("SELECT g FROM t WHERE x > (SELECT count(*) FROM u WHERE u.k = t.k)",
     "its value must be NULL where no row correlates"),
    ("SELECT g FROM t WHERE coalesce((SELECT max(y) FROM u WHERE u.k = t.k), 0) < x",
     "compare a column or expression with it"),
    ("SELECT g FROM t WHERE x > (SELECT max(y) FROM u WHERE u.k < t.k)",
     "correlated predicate u.k < t.k in a scalar subquery"),
    ("SELECT k IS NOT NULL FROM t", "needs a name"),
    ("SELECT nope FROM t", "unknown column 'nope'"),
    ("SELECT k FROM nowhere", "unknown table 'nowhere'"),
    ("SELECT k FROM t JOIN u ON t.k = u.k", "ambiguous"),
    ("SELECT * FROM t JOIN u USING (y)", "USING column 'y' is missing from the left side"),
    ("SELECT g, x FROM t GROUP BY g", "neither grouped nor aggregated"),
    ("SELECT k FROM t INTERSECT SELECT k, y FROM u", "INTERSECT of 1 and 2 columns"),
    ("SELECT x FROM t EXCEPT ALL SELECT s FROM u", r"EXCEPT ALL of column 'x' \(BIGINT\)"),
    ("SELECT g, first(x) AS s FROM t GROUP BY g", r"aggregate FIRST\(x\)"),
    ("SELECT stddev(g) AS s FROM t", r"aggregate STDDEV_SAMP\(g\) of STRING"),
    ("SELECT g, max_by(DISTINCT k, x) AS s FROM t GROUP BY g", "DISTINCT of one column, in "
     "stddev or variance"),
    ("SELECT round(x) AS a, stddev(k) AS s FROM t GROUP BY round(x)",
     r"GROUP BY ROUND\(x\), of a type not known here, with STDDEV_SAMP\(k\)"),
    ("SELECT round(x) AS a, count(*) AS n, count(DISTINCT k) AS d FROM t GROUP BY round(x)",
     r"GROUP BY ROUND\(x\), of a type not known here, with a DISTINCT aggregate beside"),
    ("SELECT k FROM t; SELECT k FROM u", "expected one query, got 2"),
    ("SELECT k, x + (SELECT max(y) FROM u) FROM t", r"SELECT item x \+ \(SELECT .* needs a name"),
    ("SELECT k, (SELECT count(*) + 1 FROM u WHERE u.k = t.k) AS m FROM t",
     "its value must be NULL where no row correlates.*; or a count by itself"),
    ("SELECT k, (SELECT max(y) FROM u WHERE u.k > t.k) AS m FROM t",
     "correlated predicate u.k > t.k in a scalar subquery"),
    ("SELECT g, count(*) + (SELECT max(y) FROM u) AS c FROM t GROUP BY g", "subquery .* here"),
    ("WITH RECURSIVE r AS (SELECT k FROM t UNION SELECT u.k FROM r JOIN u ON r.k = u.y) "
     "SELECT * FROM r", "recursive CTE r other than anchor UNION ALL step"),
    ("WITH RECURSIVE r AS (SELECT k FROM t UNION ALL SELECT DISTINCT u.k FROM r JOIN u "
     "ON r.k = u.y) SELECT * FROM r", "recursive CTE r: a step that is not linear in r"),
    ("WITH RECURSIVE r AS (SELECT k FROM t UNION ALL SELECT a.k FROM r a JOIN r b "
     "ON a.k = b.k) SELECT * FROM r", "not linear in r"),
    ("WITH RECURSIVE r AS (SELECT k FROM t UNION ALL SELECT u.k FROM u WHERE u.y IN "
     "(SELECT k FROM r)) SELECT * FROM r", "not linear in r"),
    ("WITH RECURSIVE r AS (SELECT k FROM t UNION ALL SELECT u.k FROM r LEFT JOIN u "
     "ON r.k = u.y) SELECT * FROM r", "not linear in r"),
    ("WITH RECURSIVE r AS (SELECT k FROM t UNION ALL SELECT max(u.k) FROM r JOIN u "
     "ON r.k = u.y) SELECT * FROM r", "not linear in r"),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT k FROM r JOIN t ON r.n = t.k) "
     "SELECT * FROM r", r"step column 'k' \(BIGINT\) under anchor column 'n' \(INT\)"),
    ("WITH c(a, b) AS (SELECT k FROM t) SELECT a FROM c", "CTE c names 2 columns of its "
     "query's 1"),
    ("SELECT k FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.y < t.x)",
     "EXISTS correlated by u.y < t.x alone"),
    ("SELECT t.k FROM t JOIN u ON t.g = u.y", r"join key t.g \(STRING\) = u.y \(BIGINT\)"),
    ("SELECT DISTINCT k FROM t ORDER BY x LIMIT 1", "ORDER BY x of SELECT DISTINCT"),
    ("SELECT k, k IN (SELECT k FROM u) FROM t", "needs a name"),
    ("SELECT count(*) AS n FROM t GROUP BY ROLLUP(round(x))", r"ROUND\(x\) of a type unknown"),
    ("SELECT k, EXISTS (SELECT k FROM u GROUP BY k) AS e FROM t", "as a value"),
    ("SELECT k, 1 IN (SELECT k FROM u) AS c FROM t", "IN .* as a value"),
    ("SELECT k FROM t WHERE (k, x, g, d) NOT IN (SELECT k, y, s, y FROM u)",
     r"NOT IN of 4 values \(k, x, g, d\) is not supported; at most 3"),
    ("SELECT k FROM t WHERE k IN (SELECT k, y FROM u)", "selects 2 columns for 1"),
    ("SELECT greatest(*) AS g FROM u", r"GREATEST\(\*\) is not supported; name the columns"),
    ("SELECT x * 2 AS y, y + 1 FROM t", r"SELECT item y \+ 1 needs a name .*earlier item"),
    ("SELECT k, x FROM t ORDER BY ALL, k LIMIT 1", "ORDER BY ALL, k is not supported"),
    ("SELECT k FROM t LIMIT 2 OFFSET 1", "LIMIT without ORDER BY"),
    ("SELECT k FROM t ORDER BY k OFFSET -1", "OFFSET -1 is not supported"),
    ("SELECT sum(x) AS n, g FROM t GROUP BY n", "GROUP BY n, the name of an aggregate"),
    ("SELECT k AS kk, count(*) AS n FROM t GROUP BY kk + 1",
     "column 'k' is neither grouped nor aggregated"),
    ("SELECT k FROM t ORDER BY sum(x) LIMIT 1", "column 'k' is neither grouped"),
    ("SELECT k FROM t WHERE x IN (SELECT y FROM u WHERE u.k > t.k)",
     "correlated predicate u.k > t.k in an IN subquery"),
    ("SELECT g, max(x) FILTER (WHERE k IN (SELECT k FROM u)) AS m FROM t GROUP BY g",
     "subquery .* here"),
])
def test_unsupported_sql_is_refused_when_the_plan_is_built(text, message):
    flow = Dataflow()
    flow.input("t", T)
    flow.input("u", U)
    with pytest.raises(PlanError, match=message):
        flow.sql(text)


# ---------------------------------------------------------------------------- .sql plans
PLAN_SQL = """-- orders by market segment, as a plan file
CREATE TABLE orders (o_orderkey BIGINT, o_custkey BIGINT, o_totalprice DECIMAL(12,2));
CREATE TABLE customer (c_custkey BIGINT, c_mktsegment STRING);
CREATE VIEW big AS SELECT * FROM orders WHERE o_totalprice > 10;  -- an intermediate view
CREATE MATERIALIZED VIEW by_segment AS
  SELECT c_mktsegment, count(*) AS n, sum(o_totalprice) AS revenue, max(o_totalprice)
  FROM big JOIN customer ON o_custkey = c_custkey GROUP BY c_mktsegment;
"""


def _sql_plan_inputs(tmp_path):
    """Parquet updates (time, diff) of orders and customer, a retraction and a customer
    moved to another segment (retract + insert) among them; and the final answer."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    orders = [((1, 1, Decimal("20.00")), 0, 1), ((2, 2, Decimal("5.00")), 0, 1),
              ((3, 1, Decimal("30.50")), 1, 1), ((4, 3, Decimal("12.25")), 2, 1),
              ((1, 1, Decimal("20.00")), 3, -1), ((5, 2, Decimal("11.00")), 3, 2)]
    customer = [((1, "AUTO"), 0, 1), ((2, "FOOD"), 0, 1), ((3, None), 1, 1),
                ((2, "FOOD"), 2, -1), ((2, "AUTO"), 2, 1)]
    types = {"orders": [pa.int64(), pa.int64(), pa.decimal128(12, 2)],
             "customer": [pa.int64(), pa.string()]}
    names = {"orders": ["o_orderkey", "o_custkey", "o_totalprice"],
             "customer": ["c_custkey", "c_mktsegment"]}
    paths = {}
    for name, ups in (("orders", orders), ("customer", customer)):
        cols = {c: pa.array([r[i] for r, _, _ in ups], t)
                for i, (c, t) in enumerate(zip(names[name], types[name]))}
        cols["time"] = pa.array([t for _, t, _ in ups], pa.int64())
        cols["diff"] = pa.array([d for _, _, d in ups], pa.int64())
        paths[name] = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table(cols), paths[name])
    # orders 3 (cust 1), 4 (cust 3, NULL segment), 5 x2 (cust 2, now AUTO) are > 10
    want = {("AUTO", 3, Decimal("52.50")), (None, 1, Decimal("12.25"))}
    return paths, want


@pytest.mark.slow
def test_sql_plan_file_runs_from_the_command_line(tmp_path):
    from collections import Counter

    import pyarrow.parquet as pq
    from test_cli import assert_ok, cli
    plan = tmp_path / "views.sql"
    plan.write_text(PLAN_SQL)
    paths, want = _sql_plan_inputs(tmp_path)
    done = cli("run", plan, "--input", f"orders={paths['orders']}", "--input",
               f"customer={paths['customer']}", "--output", tmp_path / "out", "--steps", 2,
               tmp=tmp_path)
    assert_ok(done)
    acc: Counter = Counter()
    for r in pq.read_table(tmp_path / "out" / "by_segment").to_pylist():
        acc[(r["c_mktsegment"], r["n"], r["revenue"], r["max(o_totalprice)"])] += r["diff"]
    assert {r[:3] for r, m in acc.items() if m} == want and set(acc.values()) <= {0, 1}
    # the unaliased column, named as Spark names it: the largest of each segment's orders
    assert {(r[0], r[3]) for r, m in acc.items() if m} == {("AUTO", Decimal("30.50")),
                                                           (None, Decimal("12.25"))}


def test_sql_plan_file_explains_and_refuses_clearly(tmp_path):
    from test_cli import assert_ok, cli
    plan = tmp_path / "views.sql"
    plan.write_text(PLAN_SQL)
    done = cli("explain", plan)
    assert_ok(done)
    sql, rest = done.stdout.split("== plan ==")
    assert sql.startswith("== sql ==\n-- orders by market segment") and "by_segment" in sql
    assert "output by_segment" in rest and "== optimized ==" in rest and "Input orders" in rest
    for text, message in [
            (PLAN_SQL.replace("CREATE MATERIALIZED VIEW", "CREATE VIEW"), "declares no outputs"),
            (PLAN_SQL + "SELECT 1;", "a plan holds CREATE TABLE"),
            (PLAN_SQL.replace("FROM big", "FROM bigg"), "unknown table 'bigg'"),
            (PLAN_SQL.replace("o_totalprice > 10", "rand() > 0.5"), "non-deterministic")]:
        plan.write_text(text)
        done = cli("run", plan, "--output", tmp_path / "out")
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


W = "k BIGINT, w DECIMAL(38,18), v DECIMAL(30,10)"
WIDE = {"wide_sum_avg": """SELECT k, sum(w) AS sw, avg(w) AS aw, sum(v) AS sv, avg(v) AS av,
                           count(*) AS n FROM m GROUP BY k""",
        "wide_global": "SELECT sum(w * 2) AS s2, avg(v - 1) AS a1 FROM m"}
w_rec = st.tuples(st.integers(0, 1),
                  maybe(st.sampled_from([Decimal("0.123456789012345678"),
                                         Decimal("-7.000000000000000001"), Decimal("1")])),
                  maybe(st.sampled_from([Decimal("1.0000000001"), Decimal("-2.1234567891")])))


@settings(max_examples=examples(1, 3), deadline=None, suppress_health_check=list(HealthCheck))
@given(m=lifetimes(w_rec), cut_list=cuts)
def test_wide_decimal_sums_and_averages_match_spark_sql(spark, conf, m, cut_list):
    """sum and avg over DECIMAL(38,18) and DECIMAL(30,10), whose every digit Spark keeps
    (Sum: DECIMAL(38, s); Average: DECIMAL(38, s + 4)), against spark.sql and the
    reference after every step."""
    flow = Dataflow()
    flow.input("m", W)
    for name, text in WIDE.items():
        flow.output(name, flow.sql(text))
    check_steps(spark, conf, flow, {"m": (W, m)}, cut_list, spark_sql(spark, WIDE))
