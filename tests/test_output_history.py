"""diffspark.output.history=current: a runner that keeps only its outputs' present contents.

The output logs then merge by consolidating each record's changes at its latest time, so a
runner stepping for days holds memory in proportion to its outputs, not to its steps. The
present contents (and the newest step's changes, which `follow` rewrites after a crash) stay
exact on both placements and across a resume; a snapshot of a past time is refused."""
from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from conftest import examples, updates_table
from executor import Runner
from executor.reference import reference, rows_of
from executor.runtime.config import ConfigError
from plans import Dataflow, PlanError

DDL = "k BIGINT, g STRING, x DECIMAL(6,2)"
CURRENT = {"diffspark.output.history": "current"}


def flow() -> Dataflow:
    f = Dataflow()
    s = f.input("s", DDL)
    f.output("rows", s.map("k", "g", "x * 2 AS x2"))
    f.output("sums", s.sum("x", by=["g"]))
    return f


def present(updates) -> dict:
    """Each record's multiplicity summed over `updates`, zeros dropped."""
    total = Counter()
    for record, _, d in updates:
        total[record] += d
    return {r: d for r, d in total.items() if d}


def test_a_churning_output_keeps_a_log_of_its_present_size(spark, conf):
    """Each step inserts one key and retracts the last: the present is one row. Kept whole,
    the log grows by two rows a step; kept current, it stays within two rows per batch."""
    f = Dataflow()
    f.output("live", f.input("s", "k BIGINT").map("k"))
    runners = {h: Runner(f, conf=conf | {"diffspark.output.history": h}, spark=spark)
               for h in ("all", "current")}
    steps = 40
    for i in range(steps):
        ups = [((i,), i, 1)] + ([((i - 1,), i, -1)] if i else [])
        for r in runners.values():
            r.step({"s": updates_table("k BIGINT", ups)}, upto=i + 1)
    kept = {h: rows_of(r.output("live")) for h, r in runners.items()}
    assert len(kept["all"]) == 2 * steps - 1
    batches = len(runners["current"]._logs["live"].batches)
    assert len(kept["current"]) <= 2 * batches < steps
    for log in kept.values():
        assert present(log) == {(steps - 1,): 1}
    # the newest step's changes are kept as they were
    assert sorted(u for u in kept["current"] if u[1] == steps - 1) == \
        [((steps - 2,), steps - 1, -1), ((steps - 1,), steps - 1, 1)]
    assert runners["current"].snapshot("live", steps - 1).count() == 1
    with pytest.raises(PlanError, match="diffspark.output.history=current"):
        runners["current"].snapshot("live", steps - 2)
    assert runners["all"].snapshot("live", 3).count() == 1


maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
records = st.tuples(st.integers(0, 3), maybe(st.sampled_from(["a", "b"])),
                    maybe(st.sampled_from([Decimal("1.25"), Decimal("-0.50")])))
HORIZON = 14  # more steps than a spine's slack (8), so the logs merge


@settings(max_examples=examples(3, 4), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=st.lists(st.tuples(records, st.integers(0, HORIZON - 1),
                                 st.sampled_from([1, 1, -1, 2])), max_size=40),
       spark_steps=st.sets(st.integers(0, HORIZON - 1), max_size=4),
       resume_at=st.integers(1, HORIZON - 1))
def test_current_history_keeps_the_present_exact(spark, conf, tmp_path_factory, stream,
                                                  spark_steps, resume_at):
    """Random steps (negative diffs, nulls), each on the driver or on Spark, the runner
    resumed from its durable state midway: after every step each output's log sums to the
    reference's present, and holds the newest step's changes exactly."""
    f = flow()
    expected = reference(spark, f.outputs, {"s": stream})
    state = str(tmp_path_factory.mktemp("history"))
    runner = Runner(f, conf=conf | CURRENT, spark=spark, state=state)
    for t in range(HORIZON):
        if t == resume_at:
            runner.release_state()
            runner = Runner(f, conf=conf | CURRENT, spark=spark, state=state)
        feed = {"s": updates_table(DDL, [u for u in stream if u[1] == t])}
        runner._on_driver = t not in spark_steps
        assert runner.step(feed, upto=t + 1).host == runner._on_driver
        for name in f.outputs:
            log = rows_of(runner.output(name))
            want = [u for u in expected[name] if u[1] <= t]
            assert present(log) == present(want), (name, t)
            assert sorted((u for u in log if u[1] == t), key=repr) == \
                sorted((u for u in want if u[1] == t), key=repr), (name, t, "newest step")
    runner.release_state()


def test_an_unknown_history_is_refused(spark, conf):
    with pytest.raises(ConfigError, match="diffspark.output.history must be one of all, "
                                          "current, got 'some'"):
        Runner(flow(), conf=conf | {"diffspark.output.history": "some"}, spark=spark)


FLOATS = "k BIGINT, g STRING, x DOUBLE, d DATE"
special = st.sampled_from([0.0, -0.0, float("nan"), 1.5, -2.25, None])
fl_update = st.tuples(st.tuples(st.integers(0, 2), st.sampled_from(["a", "é", None]), special,
                                st.sampled_from([None, __import__("datetime").date(2024, 2, 29)])),
                      st.integers(0, 3), st.sampled_from([-1, 1, 1, 2]))


@settings(max_examples=examples(3, 5), deadline=None, suppress_health_check=list(HealthCheck))
@given(stream=st.lists(fl_update, max_size=14))
@example(stream=[((0, "a", 0.0, None), 0, 1), ((0, "a", -0.0, None), 1, 1),
                 ((1, None, float("nan"), None), 1, 2), ((1, None, float("nan"), None), 2, -1)])
def test_snapshots_of_driver_steps_are_summed_on_arrow_as_spark_sums_them(spark, conf, stream):
    """A snapshot of an output whose log holds only the driver's steps is summed on Arrow,
    no Spark job; it equals the Spark placement's snapshot (Spark's grouping: -0.0 and 0.0
    one key, NaN one key, null its own) at every time."""
    import math

    f = Dataflow()
    s = f.input("s", FLOATS)
    f.output("rows", s.map("g", "x", "d"))
    ours = Runner(f, conf=conf, spark=spark)
    theirs = Runner(f, conf=conf | {"diffspark.host.step_rows": "0"}, spark=spark)
    tracker = spark.sparkContext.statusTracker()

    def rows(df):
        return Counter(tuple("NaN" if isinstance(v, float) and math.isnan(v) else v
                             for v in r) for r in df.collect())

    for t in range(4):
        feed = {"s": updates_table(FLOATS, [u for u in stream if u[1] == t])}
        assert ours.step(feed, upto=t + 1).host and not theirs.step(feed, upto=t + 1).host
        for at in range(t + 1):
            before = set(tracker.getJobIdsForGroup(None))
            mine = rows(ours.snapshot("rows", at))
            assert set(tracker.getJobIdsForGroup(None)) == before, "a job for a snapshot"
            assert mine == rows(theirs.snapshot("rows", at)), at
