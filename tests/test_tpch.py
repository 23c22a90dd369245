"""TPC-H as SQL views (benchmarks/tpch_workload.py): tpchgen-cli's tables at SF 0.01 loaded
in a first step, then refresh steps (new orders with their lineitems, orders deleted with
theirs, customers and parts updated). After every step each query's view equals DuckDB's
answer and Spark SQL's over the same accumulated tables, as multisets (decimals exact;
where DuckDB answers a DOUBLE, to 1e-9). The queries the SQL front end refuses are listed
with their refusal, so the list cannot silently rot."""
from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal

import pytest

from benchmarks import tpch_workload as tpch
from plans import Dataflow

SCALE = 0.01
REFUSED: dict = {}  # query -> what its PlanError says (README "SQL views" lists the reasons)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return tpch.generate(SCALE, tmp_path_factory.mktemp("tpch"))


def test_refused_queries_are_refused_when_the_plan_is_built(tables):
    import re
    _, refused = tpch.views(Dataflow(), tables)
    assert set(refused) == set(REFUSED)
    for name, message in refused.items():
        assert message.startswith("sql: ") and "\n" not in message, message
        assert re.search(REFUSED[name], message), (name, message)


def _check(spark, conf, tables, steps: int, orders: int):
    from executor import Runner
    from executor.reference import plain

    flow = Dataflow()
    texts, _ = tpch.views(flow, tables)
    runner = Runner(flow, conf=conf, spark=spark)
    refresh = tpch.Refreshes(tables)
    for t in range(steps + 1):
        if t == 0:
            runner.step({n: tpch.with_diff(tb, 1, 0) for n, tb in tables.items()}, upto=1)
        else:
            runner.step(tpch.step_updates(refresh.step(orders), t), upto=t + 1)
        now = refresh.tables
        for name, df in now.items():
            spark.createDataFrame(df).createOrReplaceTempView(name)
        duck = tpch.duckdb_answers(now, texts)
        for name, text in texts.items():
            ours = Counter()
            for r in runner.snapshot(name, at=t).collect():
                ours[tuple(plain(v) for v in r[:-1])] += r[-1]
            ours = sorted((r for r, m in ours.items() for _ in range(m)), key=_order)
            spark_rows = sorted((tuple(plain(v) for v in r)
                                 for r in spark.sql(text).collect()), key=_order)
            assert ours == spark_rows, (name, t, "Spark SQL")
            assert _close(ours, sorted(duck[name], key=_order)), (name, t, "DuckDB")
    return runner


def _order(row):
    """A sort key that DuckDB's DOUBLEs and Spark's DECIMALs agree on."""
    return tuple((v is not None, round(float(v), 4) if isinstance(v, (float, Decimal))
                  else v) for v in row)


def _close(ours: list, theirs: list) -> bool:
    def same(a, b):
        if isinstance(a, float) or isinstance(b, float):
            return a is not None and b is not None and math.isclose(
                float(a), float(b), rel_tol=1e-9, abs_tol=1e-6)
        return a == b
    return len(ours) == len(theirs) and all(
        len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
        for x, y in zip(ours, theirs))


def test_tpch_views_equal_duckdb_and_spark_sql_after_every_refresh(spark, conf, tables):
    _check(spark, conf, tables, steps=2, orders=5)


@pytest.mark.slow
def test_tpch_views_over_more_and_bigger_refreshes(spark, conf, tables):
    _check(spark, conf, tables, steps=5, orders=30)
