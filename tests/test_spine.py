"""The tiered spine's merge policy (few merges, each one Spark job) and the merges a Spark
step defers to its end (executor/arrange/spine.py)."""
from __future__ import annotations

import random
from contextlib import contextmanager

from executor.arrange.spine import (Estimate, Spine, _checkpointed, deferred, deferring,
                                    materialise_all)
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


def test_deferred_frames_are_computed_by_the_steps_end_and_at_once_outside_one(spark):
    outside = deferred(spark.range(5).repartition(2))
    assert _checkpointed(outside)
    with deferring() as later:
        frame = deferred(spark.range(7).repartition(2))
        assert later == [frame] and not _checkpointed(frame)
        assert materialise_all([], later=later) == []
        assert _checkpointed(frame) and frame.count() == 7


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
