"""Arrangements, joins and the reduce family against the reference interpreter; importing a
live arrangement; compaction; and the shuffle-free physical plan of arranged joins."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import examples, outputs_rows, run_against_reference, updates_df
from executor import PlanError, Runner
from plans import Dataflow

E, N = "src BIGINT, dst BIGINT", "node BIGINT, w BIGINT"
HORIZON = 8


def spread(xp, group, cols, count):
    """Per group: the multiplicity-weighted sum of dst and the number of distinct records,
    with multiplicity 2 where the sum is negative: a user reduction over many groups."""
    from gpu_kernels import group_starts, sum_segments

    starts = group_starts(xp, [group])
    total = sum_segments(xp, cols["dst"] * count, starts)
    values = sum_segments(xp, xp.ones_like(count), starts)
    mult = xp.where(total < 0, xp.asarray(2, dtype=xp.int64), xp.asarray(1, dtype=xp.int64))
    return xp.take(group, starts), {"total": total, "values": values}, mult


def stateful_flow() -> Dataflow:
    flow = Dataflow()
    e = flow.input("e", E)
    n = flow.input("n", N)
    by_src = e.arrange_by_key("src")
    weights = n.map("node AS src", "w")
    flow.output("join", by_src.join(weights, on=["src"]))
    flow.output("two_hop", by_src.join(e.map("dst AS src", "src AS mid"), on=["src"]))
    flow.output("semijoin", e.semijoin(weights, on=["src"]))
    flow.output("antijoin", e.antijoin(weights, on=["src"]))
    flow.output("count", e.count(by=["src"]))
    flow.output("count_all", e.count())
    flow.output("sum", n.sum("w", by=["node"]))
    flow.output("min", n.min("w", by=["node"]))
    flow.output("max", n.max("w", by=["node"]))
    flow.output("distinct", e.map("dst").distinct())
    flow.output("threshold", e.threshold("CASE WHEN count >= 2 THEN 1 ELSE 0 END"))
    flow.output("top_k", e.top_k(2, order_by="-dst", by=["src"]))
    flow.output("reduce", e.reduce(by=["src"], kernel=spread, schema="total BIGINT, values BIGINT"))
    return flow


node = st.integers(0, 3)
edge = st.tuples(st.tuples(node, node), st.integers(0, HORIZON - 1), st.sampled_from([-1, 1, 1, 2]))
weight = st.tuples(st.tuples(node, st.one_of(st.none(), st.integers(-3, 3))),
                   st.integers(0, HORIZON - 1), st.sampled_from([-1, 1, 2]))
cuts = st.sets(st.integers(1, HORIZON - 1), max_size=2).map(lambda s: sorted(s) + [HORIZON])


@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(edge, max_size=14), weights=st.lists(weight, max_size=8), cuts=cuts)
def test_joins_and_reductions_match_reference(spark, conf, edges, weights, cuts):
    run_against_reference(spark, conf, stateful_flow(), {"e": (E, edges), "n": (N, weights)},
                          cuts)


def test_fixed_stream_with_negative_multiplicities(spark, conf):
    """Retractions below zero: join and count see negative multiplicities; min/max/distinct
    only positive ones; top_k keeps k copies."""
    edges = [((1, 2), 0, 1), ((1, 3), 1, 1), ((2, 3), 1, 1), ((1, 2), 3, -2), ((2, 3), 2, 1),
             ((3, 1), 4, 1), ((1, 0), 5, 3), ((1, 3), 6, -1), ((0, 0), 6, -1)]
    weights = [((1, 5), 0, 1), ((2, 7), 2, 1), ((1, 5), 4, -1), ((3, None), 1, 1),
               ((1, -9), 5, 1), ((0, 2), 7, -1)]
    run_against_reference(spark, conf, stateful_flow(), {"e": (E, edges), "n": (N, weights)},
                          [2, 4, 7, HORIZON])


@pytest.mark.slow
def test_history_in_one_step_or_many_gives_one_answer(spark, conf):
    edges = [((i % 4, (i * 3) % 5), i % HORIZON, 1 if i % 3 else -1) for i in range(30)]
    finals = []
    for cuts in ([HORIZON], list(range(1, HORIZON + 1))):
        runner = run_against_reference(spark, conf, stateful_flow(), {"e": (E, edges),
                                       "n": (N, [])}, cuts)
        finals.append(outputs_rows(runner, ["count", "two_hop", "top_k"]))
    assert finals[0] == finals[1]


def test_arranged_join_has_no_exchange_and_no_sort(spark):
    """Both sides hash-partitioned into P parts by the key and sorted: a SortMergeJoin reads
    them as they are."""
    from executor.arrange.trace import arrange
    from executor.operators.join import spark as join
    from plans import ir

    a, _ = arrange(updates_df(spark, "k BIGINT, x BIGINT", [((i % 7, i), i % 3, 1)
                                                            for i in range(50)]), ["k"], ["time"], 2)
    b, _ = arrange(updates_df(spark, "k BIGINT, y BIGINT", [((i % 5, i), i % 4, 1)
                                                            for i in range(50)]), ["k"], ["time"], 2)
    j = ir.Join(ir.Input("a", "k BIGINT"), ir.Input("b", "k BIGINT"), ("k",))
    df = join.pair(j, a, b, ["time"], join.output_columns(j, ["k", "x"], ["k", "y"]))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "SortMergeJoin" in plan
    assert "Exchange" not in plan and "Sort [" not in plan, plan
    assert df.count() == sum(1 for i in range(50) for i2 in range(50) if i % 7 == i2 % 5)


def test_an_arranged_join_output_keeps_its_partitioning(spark):
    """A join's output names its columns by aliases (`l.x AS x`) that the optimizer drops as
    redundant; a checkpoint of it, arranged by another column, declared its partitioning in
    the dropped attributes, so every reader (a reduction by that key) shuffled it again.
    With RemoveRedundantAliases excluded (configs/*.conf) it is read as it lies."""
    from pyspark.sql import functions as F

    from executor.arrange.trace import arrange
    from executor.operators.join import spark as join
    from plans import ir

    a, _ = arrange(updates_df(spark, "k BIGINT, x BIGINT", [((i % 7, i % 4), 0, 1)
                                                            for i in range(50)]), ["k"], ["time"], 2)
    b, _ = arrange(updates_df(spark, "k BIGINT, y BIGINT", [((i % 5, i), 0, 1)
                                                            for i in range(50)]), ["k"], ["time"], 2)
    j = ir.Join(ir.Input("a", "k BIGINT"), ir.Input("b", "k BIGINT"), ("k",))
    joined = join.pair(j, a, b, ["time"], join.output_columns(j, ["k", "x"], ["k", "y"]))
    by_x, _ = arrange(joined, ["x"], ["time"], 2)
    counted = by_x.groupBy("x").agg(F.sum("diff").alias("n"))
    plan = counted._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan, plan
    expected = {}
    for i in range(50):
        for i2 in range(50):
            if i % 7 == i2 % 5:
                expected[i % 4] = expected.get(i % 4, 0) + 1
    assert {r["x"]: r["n"] for r in counted.collect()} == expected


def test_arranged_batches_are_kept_serialized(spark):
    """A trace's checkpointed batch sits in the block manager serialized (Kryo, spilling to
    disk), a fraction of the size of row objects, and keeps the partitioning joins use."""
    from executor.arrange.trace import arrange

    a, _ = arrange(updates_df(spark, "k BIGINT, x BIGINT", [((i % 7, i), 0, 1)
                                                            for i in range(500)]), ["k"], ["time"], 2)
    assert a.count() == 500
    rdd = a._jdf.queryExecution().analyzed().rdd()
    held = {r.id(): r for r in spark.sparkContext._jsc.sc().getRDDStorageInfo()}
    level = held[rdd.id()].storageLevel() if rdd.id() in held else rdd.getStorageLevel()
    assert level.useMemory() and level.useDisk() and not level.deserialized()
    assert spark.conf.get("spark.serializer") == "org.apache.spark.serializer.KryoSerializer"
    assert "Exchange" not in a.groupBy("k").count()._jdf.queryExecution().executedPlan().toString()


def test_import_matches_a_dataflow_that_saw_everything(spark, conf):
    """differential-dataflow's tests/import.rs: six epochs of (src, dst, +/-1) arranged in one
    dataflow; a second imports the live arrangement mid-way and counts per key; from the
    import on, its collection equals a dataflow computed from scratch."""
    epochs = [[((1, 2), 0, 1), ((2, 3), 0, 1)], [((1, 3), 1, 1), ((2, 3), 1, -1)],
              [((3, 1), 2, 1), ((1, 2), 2, -1)], [((1, 4), 3, 1), ((2, 1), 3, 1)],
              [((1, 3), 4, -1), ((4, 4), 4, 1)], [((2, 2), 5, 1), ((1, 4), 5, -1)]]
    source = Dataflow()
    edges = source.input("edges", E)
    source.output("by_src", edges.arrange_by_key("src"))
    owner = Runner(source, conf=conf, spark=spark)
    scratch = Dataflow()
    scratch.output("counts", scratch.input("edges", E).count(by=["src"]))
    reference = Runner(scratch, conf=conf, spark=spark)
    for t in range(3):
        for r in (owner, reference):
            r.step({"edges": updates_df(spark, E, epochs[t])}, upto=t + 1)
    attached = Dataflow()
    arr = attached.import_trace("by_src", owner.arrangement("by_src"))
    attached.output("counts", arr.count(by=["src"]))
    importer = Runner(attached, conf=conf, spark=spark)
    for t in range(3, 6):
        for r in (owner, reference):
            r.step({"edges": updates_df(spark, E, epochs[t])}, upto=t + 1)
        importer.step({}, upto=t + 1)
        for at in range(2, t + 1):
            assert sorted(map(tuple, importer.snapshot("counts", at).collect())) == \
                sorted(map(tuple, reference.snapshot("counts", at).collect()))
    with pytest.raises(PlanError, match="beyond the source"):
        importer.step({}, upto=9)


def _churn(spark, conf, steps):
    flow = Dataflow()
    flow.output("by_k", flow.input("xs", "k BIGINT, v BIGINT").arrange_by_key("k"))
    runner = Runner(flow, conf=conf, spark=spark)
    records = [(k, k * 10) for k in range(20)]
    sizes = []
    for s in range(steps):
        sign = 1 if s % 2 == 0 else -1
        runner.step({"xs": updates_df(spark, "k BIGINT, v BIGINT",
                                      [(r, s, sign) for r in records])}, upto=s + 1)
        stats = next(iter(runner.stats().values()))
        assert (stats["bytes"] > 0) == (stats["records"] > 0), stats  # what Spark holds
        sizes.append(stats["records"])
    return sizes


def test_stats_tell_an_inputs_arrangements_from_derived_state(spark, conf):
    """An arrangement of an input through a filter indexes that input; the count's
    arrangement of the join's output is state derived by the query (what TPC-H's table
    reports beside Materialize's figures)."""
    flow = Dataflow()
    a = flow.input("a", "k BIGINT, v BIGINT").filter("v > 0")
    b = flow.input("b", "k BIGINT, w BIGINT")
    flow.output("n", a.join(b, on=["k"]).count(by=["w"]))
    runner = Runner(flow, conf=conf, spark=spark)
    runner.step({"a": updates_df(spark, "k BIGINT, v BIGINT", [((1, 5), 0, 1), ((2, -1), 0, 1)]),
                 "b": updates_df(spark, "k BIGINT, w BIGINT", [((1, 7), 0, 1), ((2, 8), 0, 1)])},
                upto=1)
    stats = list(runner.stats().values())
    assert sorted((s["input"], s["records"]) for s in stats if s["input"]) == [("a", 1),
                                                                             ("b", 2)]
    assert [s["records"] for s in stats if s["input"] is None] == [1]  # the joined (1, 5, 7)


def test_compaction_keeps_the_trace_bounded(spark, conf):
    sizes = _churn(spark, conf, 24)
    assert max(sizes[12:]) <= max(sizes[:12]), sizes
    assert sizes[-1] <= 20 * 6, sizes  # a handful of batches, not one per step


@pytest.mark.slow
def test_compaction_over_100_steps(spark, conf):
    sizes = _churn(spark, conf, 100)
    assert max(sizes[50:]) <= max(sizes[:50]), sizes


def test_join_name_clash_is_an_error(spark, conf):
    flow = Dataflow()
    a = flow.input("a", "k BIGINT, x BIGINT")
    b = flow.input("b", "k BIGINT, x BIGINT")
    flow.output("j", a.join(b, on=["k"]))
    with pytest.raises(PlanError, match="rename one side"):
        Runner(flow, conf=conf, spark=spark)


T = "g BIGINT, total BIGINT, name STRING"
ORDERS = ["total DESC", "total DESC, name", "total NULLS LAST, name DESC",
          "total DESC NULLS FIRST, name ASC NULLS LAST", "name desc nulls last, -total"]


def ordered_flow() -> Dataflow:
    flow = Dataflow()
    t = flow.input("t", T)
    for i, order in enumerate(ORDERS):
        flow.output(f"top{i}", t.top_k(2, order_by=order, by=["g"]))
    flow.output("top_all", t.top_k(3, order_by="total DESC"))
    return flow


scored = st.tuples(st.tuples(st.integers(0, 1), st.one_of(st.none(), st.integers(-2, 2)),
                             st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))),
                   st.integers(0, HORIZON - 1), st.sampled_from([-1, 1, 1, 2]))


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(scored, max_size=16), cuts=cuts)
def test_top_k_orders_match_reference(spark, conf, rows, cuts):
    """DESC, NULLS FIRST/LAST and several keys, on streams with nulls and negative diffs."""
    run_against_reference(spark, conf, ordered_flow(), {"t": (T, rows)}, cuts)


def test_top_k_desc_keeps_the_largest(spark, conf):
    rows = [((0, v, "x"), 0, 1) for v in (5, 1, 9, None, 7)]
    runner = run_against_reference(spark, conf, ordered_flow(), {"t": (T, rows)}, [1])
    assert sorted(r[0][1] for r in outputs_rows(runner, ["top_all"])["top_all"]) == [5, 7, 9]


def test_top_k_refuses_what_is_not_a_direction():
    t = Dataflow().input("t", T)
    for bad in ("total DSC", "total AS x", "total DESC NULLS"):
        with pytest.raises(PlanError, match="not ASC, DESC, NULLS FIRST or NULLS LAST"):
            t.top_k(1, order_by=bad)


S, Q = "name STRING, v BIGINT", "name STRING, k BIGINT"
SPARK_ONLY = {"diffspark.host.step_rows": "0"}


def importing_flow(handle=None) -> Dataflow:
    """A join on the imported arrangement's STRING key (codes shared with the source) and a
    count of it; without a handle, the same over the source's input (the reference's)."""
    flow = Dataflow()
    arr = flow.import_trace("by_name", handle) if handle else \
        flow.input("s", S).arrange_by_key("name")
    flow.output("joined", arr.join(flow.input("q", Q), on=["name"]))
    flow.output("counts", arr.count(by=["name"]))
    return flow


def snapshot(rows, at: int) -> list:
    """A consolidated output's collection at time `at`: (record, multiplicity) sorted."""
    totals: dict = {}
    for record, t, d in rows:
        if t <= at:
            totals[record] = totals.get(record, 0) + d
    return sorted((r, m) for r, m in totals.items() if m)


word = st.sampled_from(["a", "bb", "é"])
named = st.tuples(st.tuples(word, st.integers(0, 3)), st.integers(0, HORIZON - 1),
                  st.sampled_from([-1, 1, 1, 2]))
keyed = st.tuples(st.tuples(word, st.integers(0, 2)), st.integers(0, HORIZON - 1),
                  st.sampled_from([-1, 1, 2]))


@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(source=st.lists(named, min_size=1, max_size=14), probes=st.lists(keyed, max_size=8),
       start=st.integers(1, HORIZON - 4))
def test_import_on_the_driver_matches_spark_and_reference(spark, conf, source, probes, start):
    """A source runner steps on the driver; from step `start` on, two runners import its
    arrangement, one on the driver (it reads the source's mirror) and one on Spark. After
    each step both importers' collections equal the reference's from the import on. Then
    the importers lag: the source compacts only to their holds, and past them once the
    handles are released."""
    from executor.reference import reference

    owner_flow = Dataflow()
    owner_flow.output("by_name", owner_flow.input("s", S).arrange_by_key("name"))
    owner = Runner(owner_flow, conf=conf, spark=spark)

    def feed(runner, ddl, name, t):
        ups = [u for u in (source if name == "s" else probes) if u[1] == t]
        return runner.step({name: updates_df(spark, ddl, ups)}, upto=t + 1)

    for t in range(start):
        assert feed(owner, S, "s", t).host
    handles = [owner.arrangement("by_name") for _ in range(2)]
    on_driver = Runner(importing_flow(handles[0]), conf=conf, spark=spark)
    on_spark = Runner(importing_flow(handles[1]), conf=conf | SPARK_ONLY, spark=spark)
    assert on_driver.encoder is owner.encoder
    want = reference(spark, importing_flow().outputs,
                     {"q": [u for u in probes if u[1] >= start], "s": source})
    lag = HORIZON - 2
    for t in range(start, HORIZON):
        assert feed(owner, S, "s", t).host
        if t >= lag:
            continue
        assert feed(on_driver, Q, "q", t).host
        assert not feed(on_spark, Q, "q", t).host
        got = [outputs_rows(r, ["joined", "counts"]) for r in (on_driver, on_spark)]
        for name in ("joined", "counts"):
            for at in range(start - 1, t + 1):
                assert snapshot(got[0][name], at) == snapshot(got[1][name], at) == \
                    snapshot(want[name], at), (name, at)
    trace = owner._state[owner.plan["by_name"]]
    assert trace.since == lag - 1 and trace.holds
    for handle in handles:
        handle.release()
    assert feed(owner, S, "s", HORIZON).host
    assert owner._state[owner.plan["by_name"]].since == HORIZON
