"""Bad input is refused whole: a clear error naming input, column and rule, and the runner's
state and outputs exactly as they were before the step."""
from __future__ import annotations

import pytest

from conftest import outputs_rows, updates_df
from executor import InputError, PlanError, Runner, StepError
from plans import Dataflow

DDL = "k BIGINT NOT NULL, v BIGINT"


@pytest.fixture()
def runner(spark, conf):
    flow = Dataflow()
    xs = flow.input("xs", DDL)
    flow.output("out", xs.map("k", "v * 2 AS v2"))
    flow.output("weighted", xs.explode("array(named_struct('k', k, 'diff', v))"))
    r = Runner(flow, conf=conf, spark=spark)
    r.step({"xs": updates_df(spark, DDL, [((1, 2), 0, 1), ((2, 3), 1, 1)])}, upto=2)
    return r


def state(r):
    return (r.frontier, r.steps, r.closed, outputs_rows(r, ["out", "weighted"]))


def df_of(spark, ddl, rows):
    return spark.createDataFrame(rows, ddl)


BAD = {
    "missing column": ("v", lambda s: df_of(s, "k BIGINT, time BIGINT, diff BIGINT", [(1, 2, 1)])),
    "unexpected column": ("extra", lambda s: df_of(
        s, "k BIGINT, v BIGINT, extra BIGINT, time BIGINT, diff BIGINT", [(1, 1, 1, 2, 1)])),
    "wrong type": ("v", lambda s: df_of(
        s, "k BIGINT, v DOUBLE, time BIGINT, diff BIGINT", [(1, 1.5, 2, 1)])),
    "null in a NOT NULL column": ("k", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(None, 1, 2, 1)])),
    "null time": ("time", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(1, 1, None, 1)])),
    "null diff": ("diff", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(1, 1, 2, None)])),
    "time below the frontier": ("time", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(1, 1, 1, 1)])),
    "time at or beyond upto": ("time", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT", [(1, 1, 5, 1)])),
    "diff overflow": ("diff", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time BIGINT, diff BIGINT",
        [(1, 1, 2, 2**63 - 1), (1, 1, 3, 5)])),
    "text that is not a number": ("v", lambda s: df_of(
        s, "k STRING, v STRING, time STRING, diff STRING", [("1", "x", "2", "1")])),
    "diff beyond int64 in text": ("diff", lambda s: df_of(
        s, "k STRING, v STRING, time STRING, diff STRING", [("1", "1", "2", "99999999999999999999")])),
    "wrong type of time": ("time", lambda s: df_of(
        s, "k BIGINT, v BIGINT, time DOUBLE, diff BIGINT", [(1, 1, 2.0, 1)])),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_batch_is_refused_whole(spark, runner, case):
    column, make = BAD[case]
    before = state(runner)
    good = updates_df(spark, DDL, [((7, 7), 2, 1)])
    with pytest.raises(InputError) as err:
        runner.step({"xs": make(spark)}, upto=5)
    assert err.value.input == "xs" and err.value.column == column, str(err.value)
    assert "input 'xs'" in str(err.value) and f"column '{column}'" in str(err.value)
    assert state(runner) == before
    runner.step({"xs": good}, upto=5)  # the runner still works afterwards
    assert runner.frontier == 5


def test_unknown_input_and_bad_source(spark, runner, tmp_path):
    before = state(runner)
    with pytest.raises(InputError, match="unknown input"):
        runner.step({"nope": updates_df(spark, DDL, [])}, upto=3)
    junk = tmp_path / "x.json"
    junk.write_text("{}")
    with pytest.raises(InputError, match="Parquet"):
        runner.step({"xs": str(junk)}, upto=3)
    with pytest.raises(InputError, match="not found"):
        runner.step({"xs": str(tmp_path / "missing.parquet")}, upto=3)
    assert state(runner) == before


def test_diff_product_overflow_refuses_the_step(spark, runner):
    """explode multiplies diffs: int64 overflow there is caught by ANSI arithmetic and the
    step is refused with nothing changed."""
    before = state(runner)
    big = updates_df(spark, DDL, [((1, 2**62), 2, 4)])
    with pytest.raises(StepError, match="refused"):
        runner.step({"xs": big}, upto=3)
    assert state(runner) == before


def test_frontier_rules(spark, runner):
    with pytest.raises(PlanError, match="below the frontier"):
        runner.step({}, upto=1)
    runner.close()
    with pytest.raises(PlanError, match="closed"):
        runner.step({}, upto=10)
    with pytest.raises(PlanError, match="unknown output"):
        runner.output("nope")


def test_plan_errors_name_the_operator(spark, conf):
    with pytest.raises(PlanError, match="reserved"):
        Dataflow().input("e", "time BIGINT")
    flow = Dataflow()
    e = flow.input("e", "a BIGINT, s STRING")
    flow.output("bad", e.map("a AS diff"))
    with pytest.raises(PlanError, match="reserved column name 'diff'"):
        Runner(flow, conf=conf, spark=spark)
    flow = Dataflow()
    e = flow.input("e", "a BIGINT, s STRING")
    flow.output("bad", e.temporal_filter(lower="s"))
    with pytest.raises(PlanError, match="integer times"):
        Runner(flow, conf=conf, spark=spark)
    flow = Dataflow()
    e = flow.input("e", "a BIGINT")
    flow.output("bad", e.filter("nosuchcolumn > 1"))
    with pytest.raises(PlanError, match="filter"):
        Runner(flow, conf=conf, spark=spark)


def test_snapshot_and_absent_time_and_diff(spark, conf):
    flow = Dataflow()
    xs = flow.input("xs", DDL)
    flow.output("out", xs)
    r = Runner(flow, conf=conf, spark=spark)
    r.step({"xs": spark.createDataFrame([(1, 1), (1, 1), (2, None)], "k BIGINT, v BIGINT")},
           upto=3)
    got = sorted(tuple(x) for x in r.snapshot("out", at=2).collect())
    assert got == [(1, 1, 2), (2, None, 1)]
    with pytest.raises(PlanError, match="not final"):
        r.snapshot("out", at=3)
