"""The tiered spine's merge policy (few merges, each one Spark job) and the merges a Spark
step defers to its end (executor/arrange/spine.py)."""
from __future__ import annotations

import random
from contextlib import contextmanager

import pytest

from executor.arrange.spine import (Estimate, Spine, _checkpointed, checkpoint,
                                    compute_deferred, deferred, deferring, is_computed, projected)
from executor.runner import Runner
from plans import Dataflow
from tests.conftest import updates_df


def _appended(sizes: list[int], slack: int) -> tuple[Spine, list[int]]:
    """A spine of tuples (a batch: the units appended, in order) after appending one batch
    per size, and the number of units each merge took."""
    merges: list[int] = []

    def merge(units: tuple, size: int):
        merges.append(len(units))
        return units, size

    spine = Spine(merge, slack=slack, combine=lambda a, b: a + b, tiered=True)
    for i, size in enumerate(sizes):
        spine = spine.appended((i,), size)
    return spine, merges


def test_tiered_merges_keep_every_unit_in_order_with_few_merges_and_batches():
    rng = random.Random(3)
    for slack in (4, 8):
        sizes = [1_000_000] + [rng.randint(500, 1500) for _ in range(1000)]
        spine, merges = _appended(sizes, slack)
        assert [u for _, b in spine.batches for u in b] == list(range(len(sizes)))
        assert sum(s for s, _ in spine.batches) == sum(sizes)  # sizes sum up through merges
        assert len(merges) <= len(sizes) / (slack - 1), (slack, len(merges))
        assert len(spine.batches) <= 3 * slack, spine.batches  # O(slack log n / log slack)


def test_small_batches_under_a_bigger_one_do_not_keep_the_tail_merging():
    """The former rule (merge the last two while the older is at most twice the newer)
    merged 60 times in 100 appends of one unit after a big batch."""
    _, merges = _appended([1000] + [1] * 100, slack=4)
    assert len(merges) <= 34, merges


def test_a_cascade_through_tiers_is_one_merge():
    spine, merges = _appended([64, 16, 16, 16, 4, 4, 4, 1, 1, 1, 1], slack=4)
    assert merges == [10] and [s for s, _ in spine.batches] == [64, 64]


def test_deferred_frames_are_computed_by_the_steps_end_in_one_job_and_at_once_outside_one(
        spark):
    from pyspark.sql import functions as F

    outside = deferred(spark.range(5).repartition(2))
    assert _checkpointed(outside)
    tracker = spark.sparkContext.statusTracker()
    with deferring() as later:
        frames = [deferred(spark.range(7).repartition(2)),
                  deferred(spark.range(3).select(F.col("id").cast("string").alias("s"))
                           .repartition(3, "s"))]
        read = deferred(spark.range(4).repartition(2))
        assert read.count() == 4 and _checkpointed(read)  # a job that read it computed it
        assert later == [*frames, read] and not any(map(_checkpointed, frames))
        jobs = set(tracker.getJobIdsForGroup(None))
        compute_deferred(later)
        assert len(set(tracker.getJobIdsForGroup(None)) - jobs) == 1
        assert all(map(_checkpointed, frames))
        assert [f.count() for f in frames] == [7, 3]
        assert sorted(r.s for r in frames[1].collect()) == ["0", "1", "2"]
        jobs = set(tracker.getJobIdsForGroup(None))
        compute_deferred(later)  # nothing left to compute: no job
        assert set(tracker.getJobIdsForGroup(None)) == jobs


def test_a_merge_of_computed_batches_waits_for_its_first_reader(spark, conf):
    """On the Spark placement a tiered merge of computed batches runs no job of its own: the
    orders' trace of a join whose other side is not changing merges while no step reads it,
    and the first step that does (the customers change) computes it; a merge over one still
    waiting is computed by its step's end, so no more than one level waits. Every step's
    join output stays the oracle's."""
    from executor.arrange import spine as spine_module
    from executor.arrange.trace import Trace

    flow = Dataflow()
    xs, ys = flow.input("xs", "k BIGINT, v BIGINT"), flow.input("ys", "k BIGINT, w STRING")
    flow.output("j", xs.arrange_by_key("k").join(ys.arrange_by_key("k"), on=["k"]))
    runner = Runner(flow, conf=conf | {"diffspark.host.step_rows": "0"}, spark=spark)
    present = {"xs": {}, "ys": {}}
    waited, merged_over_waiting, before = 0, 0, []
    for t in range(20):
        steps = {"xs": [((t % 5, t), t, 1)] + ([(((t - 3) % 5, t - 3), t, -1)] if t >= 3
                                                else [])}
        if t == 0:
            steps["ys"] = [((k, f"w{k}"), t, 1) for k in range(4)]
        elif t in (9, 17):
            steps["ys"] = [((t % 4, f"w{t % 4}"), t, -1), ((t % 4, f"w{t % 4}"), t, 1),
                           ((t % 4, f"x{t}"), t, 1)]
        for name, rows in steps.items():
            for r, _, d in rows:
                present[name][r] = present[name].get(r, 0) + d
        runner.step({name: updates_df(spark, {"xs": "k BIGINT, v BIGINT",
                                              "ys": "k BIGINT, w STRING"}[name], rows)
                     for name, rows in steps.items()}, upto=t + 1)
        xtrace = next(v for n, v in runner._state.items() if isinstance(v, Trace)
                      and getattr(getattr(n, "input", None), "name", None) == "xs")
        batches = [b for _, b in xtrace.spine.batches]
        waiting = [b for b in batches if b in spine_module._unread and not _checkpointed(b)]
        waited += bool(waiting)
        if "ys" in steps and t:  # this step read the orders' trace: none of it waits now
            assert not waiting, t
        if any(not any(b is w for b in batches) for w in before):  # a waiting one merged
            merged_over_waiting += 1
            assert not waiting, t  # ... by a merge the step computed, below it too
        before = waiting
        got = {(r["k"], r["v"], r["w"]) for r in runner.snapshot("j", t).collect()}
        want = {(k, v, w) for (k, v), m in present["xs"].items() if m
                for (k2, w), n in present["ys"].items() if n and k2 == k}
        assert got == want, t
    assert waited >= 3 and merged_over_waiting >= 1, (waited, merged_over_waiting)


def test_a_projection_of_a_checkpoint_is_computed_once_a_job_computed_it(spark):
    """A reduction's changes are projected from its running totals' checkpoint: marked so,
    they need no job of their own once a job of the step has computed it, and one while it
    is lazy. An unmarked projection (an output's map, which can fail) still needs one."""
    from pyspark.sql import functions as F

    lazy = checkpoint(spark.range(6).repartition(2).withColumn("x", F.col("id") * 2),
                      eager=False)

    def pairs_of(frame):
        return frame.select("id", F.inline(F.array(F.struct(F.col("x").alias("y"), F.lit(1)
                                                            .alias("d"))))).select(
            "id", (F.col("y") + 1).alias("y"), "d")

    pairs, unmarked = projected(pairs_of(lazy)), pairs_of(lazy)
    assert is_computed(lazy) and not is_computed(pairs)  # nothing has computed it yet
    assert lazy.where("x > 4").count() == 3
    assert is_computed(pairs) and not is_computed(unmarked)
    assert sorted(r["y"] for r in pairs.collect()) == [1, 3, 5, 7, 9, 11]
    assert not is_computed(projected(spark.range(3).select((F.col("id") + 1).alias("y"))))
    assert not is_computed(projected(pairs.groupBy("d").count()))  # a pass that shuffles


def test_a_sums_changes_come_from_its_totals_job(spark, conf):
    """On the Spark placement, a step of one time computes a sum's changes with its
    running totals, in one job: the output is a projection of that job's checkpoint (no
    job materialises it) unless a group's totals cannot decide it (a group emptied: it is
    regrouped), and stays the oracle's either way."""
    from decimal import Decimal

    flow = Dataflow()
    xs = flow.input("xs", "k BIGINT, v DECIMAL(10,2)")
    flow.output("s", xs.arrange_by_key("k").sum("v", by=["k"]))
    runner = Runner(flow, conf=conf | {"diffspark.host.step_rows": "0"}, spark=spark)
    present: dict = {}
    for t in range(5):
        # key 7 comes at the first step and goes at the second (its group empties)
        rows = [((t % 3, Decimal(f"{t}.25")), t, 1)] + \
            ([((7, Decimal("1.00")), t, 1 - 2 * t)] if t < 2 else [])
        for (k, v), _, d in rows:
            present[(k, v)] = present.get((k, v), 0) + d
        result = runner.step({"xs": updates_df(spark, "k BIGINT, v DECIMAL(10,2)", rows)},
                             upto=t + 1)
        assert result.placement == "spark"
        plan = result.changes["s"]._jdf.queryExecution().analyzed()
        if t > 1:  # totals kept, no group emptied
            assert plan.getClass().getSimpleName() == "Project" and \
                is_computed(result.changes["s"]), (t, plan.toString())
        sums: dict = {}
        for (k, v), m in present.items():
            if m:
                sums[k] = sums.get(k, Decimal(0)) + v * m
        got = {(r["k"], r["v"]) for r in runner.snapshot("s", t).collect()}
        assert got == set(sums.items()), t


def test_a_sum_past_its_type_fails_its_step_not_a_later_read(spark, conf):
    """A sum's changes are read from its totals' checkpoint, so the casts to the output's
    type run in the step's job: a total past DECIMAL(20, 2) (ANSI: an error, as in Spark)
    refuses the step and changes nothing, rather than committing it and failing whoever
    reads the changes later (it did, once the output needed no job of its own)."""
    from decimal import Decimal

    from executor import StepError

    flow = Dataflow()
    xs = flow.input("xs", "k BIGINT, v DECIMAL(10,2)")
    flow.output("s", xs.arrange_by_key("k").sum("v", by=["k"]))
    runner = Runner(flow, conf=conf | {"diffspark.host.step_rows": "0"}, spark=spark)
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    schema = "k BIGINT, v DECIMAL(10,2)"
    runner.step({"xs": updates_df(spark, schema, [((1, Decimal("5.00")), 0, 1)])}, upto=1)
    huge = [((1, Decimal("99999999.99")), 1, 10 ** 11)]
    with pytest.raises(StepError, match="NUMERIC_VALUE_OUT_OF_RANGE"):
        runner.step({"xs": updates_df(spark, schema, huge)}, upto=2)
    assert runner.frontier == 1
    result = runner.step({"xs": updates_df(spark, schema, [((1, Decimal("1.50")), 1, 1)])},
                         upto=2)
    assert result.placement == "spark"
    assert {(r["k"], r["v"]) for r in runner.snapshot("s", 1).collect()} == \
        {(1, Decimal("6.50"))}


def test_a_spark_steps_batches_are_not_counted_and_the_stats_are_exact(spark, conf,
                                                                      monkeypatch):
    """A Spark step's new arranged batch is computed by the operators that read it, its size
    an Estimate (no job counts it); what a step defers (merges) is computed by its end;
    stats count the batches exactly; the answers stay the oracle's."""
    import executor.runner as runner_module

    deferred_lists: list[list] = []

    @contextmanager
    def recording():
        with deferring() as later:
            deferred_lists.append(later)
            yield later

    monkeypatch.setattr(runner_module, "deferring", recording)
    flow = Dataflow()
    xs = flow.input("xs", "k BIGINT, v BIGINT")
    flow.output("n", xs.arrange_by_key("k").count(by=["k"]))
    flow.output("s", xs.arrange_by_key("k").join(
        flow.input("ys", "k BIGINT, w BIGINT").arrange_by_key("k"), on=["k"]).sum(
        "v", by=["w"]))
    runner = Runner(flow, conf=conf | {"diffspark.host.step_rows": "0"}, spark=spark)
    present: dict = {}
    ys = updates_df(spark, "k BIGINT, w BIGINT", [((k, k % 3), 0, 1) for k in range(6)])
    estimated = False
    for t in range(12):
        rows = [((t % 6, t), t, 1), ((t % 4, 1), t, 1)] + \
            ([((t % 4, 1), t, -1)] if t % 3 == 0 else [])
        for r, _, d in rows:
            present[r] = present.get(r, 0) + d
        result = runner.step({"xs": updates_df(spark, "k BIGINT, v BIGINT", rows),
                              **({"ys": ys} if t == 0 else {})}, upto=t + 1)
        assert result.placement == "spark"
        assert all(_checkpointed(f) for f in deferred_lists[-1]), t
        estimated |= any(isinstance(s, Estimate) for tr in _traces(runner)
                         for s, _ in tr.spine.batches)
    assert estimated and sum(map(len, deferred_lists)) > 0  # merges were deferred
    stats = runner.stats()
    for trace in _traces(runner):
        assert not any(isinstance(s, Estimate) for s, _ in trace.spine.batches)
    for label, st in stats.items():
        assert st["records"] == sum(b.count() for b in _traces_by_label(runner)[label].batches)
    counts: dict = {}
    for (k, _), m in present.items():
        counts[k] = counts.get(k, 0) + m
    got = {(r["k"], r["count"]) for r in runner.snapshot("n", 11).collect()}
    assert got == {(k, m) for k, m in counts.items() if m}


def _traces(runner) -> list:
    from executor.arrange.trace import Trace
    return [v for v in runner._state.values() if isinstance(v, Trace)]


def _traces_by_label(runner) -> dict:
    from executor.arrange.trace import Trace
    from executor.walk import operator_name
    return {operator_name(node): v for node, v in runner._state.items()
            if isinstance(v, Trace)}


def test_a_step_whose_size_is_not_known_keeps_its_batches(spark, conf):
    """Inputs whose size Spark does not know (rows from a Python list: an RDD) estimate a
    step at 0 rows; the batches they arrange are not taken as empty on that estimate (they
    were, and the join's and the count's changes came out empty)."""
    from executor.spark import expected_rows

    flow = Dataflow()
    a = flow.input("a", "k BIGINT, v BIGINT")
    b = flow.input("b", "k BIGINT, w STRING")
    flow.output("n", a.arrange_by_key("k").join(b.arrange_by_key("k"), on=["k"]).count(
        by=["w"]))
    runner = Runner(flow, conf=conf | {"diffspark.host.step_rows": "0"}, spark=spark)
    for t, (rows_a, rows_b) in enumerate([([(1, 5), (2, 6), (1, 7)], [(1, "x"), (2, "y")]),
                                          ([(2, 8)], [])]):
        a_df = spark.createDataFrame([(k, v, t, 1) for k, v in rows_a],
                                     "k BIGINT, v BIGINT, time BIGINT, diff BIGINT")
        b_df = spark.createDataFrame([(k, w, t, 1) for k, w in rows_b],
                                     "k BIGINT, w STRING, time BIGINT, diff BIGINT")
        assert expected_rows(a_df) is None  # what the step estimates as 0
        result = runner.step({"a": a_df, "b": b_df}, upto=t + 1)
        assert result.placement == "spark"
    got = sorted(tuple(r) for r in runner.snapshot("n", 1).collect())
    assert got == [("x", 2, 1), ("y", 2, 1)]


def test_an_output_logs_spark_frames_merge_tiered_and_its_tables_geometrically(spark,
                                                                                monkeypatch):
    """Each merge of an output log's Spark frames is a job: tiered, one per about slack - 1
    steps, where the geometric rule merged about once a step (a job a step for an output
    of a few rows). Tables (driver steps) concatenate: the geometric rule stays."""
    import pyarrow as pa

    from executor.arrange import spine as module

    merges = []
    def counted(batch, size):
        merges.append(size)
        return batch, size

    monkeypatch.setattr(module, "_log_merge", counted)
    log = module.output_log()
    for i in range(40):
        log = log.appended(spark.range(i, i + 1))
    assert len(merges) <= 40 / (log.slack - 1), merges
    assert sorted(r.id for r in log.union().collect()) == list(range(40))
    tables, merges[:] = module.output_log(), []
    for i in range(40):
        tables = tables.appended(pa.table({"id": [i]}))
    assert len(merges) > 40 / (log.slack - 1) and len(tables.batches) <= log.slack + 6
    assert tables.table().column("id").to_pylist() == list(range(40))
