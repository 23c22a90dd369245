"""Small steps on the driver (executor/driver.py) against Spark and the reference interpreter:
every hosted operator on random update streams with retractions over several steps, steps
that switch between the two paths, input errors, and host mirrors against brute force."""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pyspark.sql import functions as F

from conftest import examples, host, i64, outputs_rows, run_against_reference, updates_df
from executor import Runner
from executor.runtime.errors import InputError
from plans import Dataflow
from plans.semantics import consolidate

G, W = "src BIGINT, dst BIGINT", "node BIGINT, v BIGINT"
HORIZON = 6
SPARK_ONLY = {"diffspark.host.step_rows": "0"}


def hosted_flow() -> Dataflow:
    """Every operator with a host form: linear chains, concat, consolidate, arrangements,
    joins (semijoin, antijoin), distinct, keyed and global counts, queries with constants,
    comparisons and a derived relation."""
    flow = Dataflow()
    g = flow.input("g", G)
    w = flow.input("w", W)
    u = (g.map("least(src, dst) AS src", "greatest(src, dst) AS dst").filter("src <> dst")
         .distinct())
    flow.output("u", u)
    flow.output("degree", g.count(by=["src"]))
    flow.output("edges", g.count())
    flow.output("by_dst", g.arrange_by_key("dst"))
    flow.output("tri", flow.query("tri(x, y, z) :- u(x, y), u(y, z), u(x, z)", u=u).count())
    flow.output("paths", flow.query("p(x, z) :- g(x, y), g(y, z), h(z, 2), x < z", h=w))
    flow.output("both", g.map("src AS node", "dst AS v").concat(w).consolidate())
    flow.output("joined", g.join(w.map("node AS dst", "v"), on=["dst"]))
    flow.output("kept", g.semijoin(w.map("node AS src"), on=["src"]))
    flow.output("dropped", g.antijoin(w.map("node AS dst"), on=["dst"]).count(by=["src"]))
    return flow


node = st.integers(0, 3)
edge = st.tuples(st.tuples(node, node), st.integers(0, HORIZON - 1),
                 st.sampled_from([-1, 1, 1, 2]))
weight = st.tuples(st.tuples(node, st.integers(0, 3)), st.integers(0, HORIZON - 1),
                   st.sampled_from([-1, 1, 2]))
cuts = st.sets(st.integers(1, HORIZON - 1), min_size=1, max_size=3).map(
    lambda s: sorted(s) + [HORIZON])


@settings(max_examples=examples(3, 5), deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(edge, max_size=16), weights=st.lists(weight, max_size=8), cuts=cuts)
@pytest.mark.parametrize("path", [{}, pytest.param(SPARK_ONLY, marks=pytest.mark.slow)],
                         ids=["host", "spark"])
def test_hosted_operators_match_reference(spark, conf, path, edges, weights, cuts):
    run_against_reference(spark, conf | path, hosted_flow(), {"g": (G, edges), "w": (W, weights)},
                          cuts)


def _edges(t: int, pairs, diff=1):
    return [((a, b), t, diff) for a, b in pairs]


@pytest.mark.parametrize("traces", [{}, {"diffspark.host.lookup_rows": "0"}],
                         ids=["mirrored", "left_on_spark"])
def test_steps_switch_between_host_and_spark(spark, conf, traces):
    """Big steps run on Spark, small ones on the host (mirrors built from the traces, or with
    lookup_rows=0 the traces left in their Spark batches and read by the keys a step
    touches; the host's updates arranged into Spark batches when Spark next reads them):
    every step's outputs, and the state kept, equal a runner that only uses Spark."""
    flow = hosted_flow()
    small = conf | {"diffspark.host.step_rows": "6"} | traces
    ours, theirs = (Runner(flow, conf=c, spark=spark) for c in (small, conf | SPARK_ONLY))
    full = [(a, b) for a in range(5) for b in range(5) if a != b]
    steps = [_edges(0, full), _edges(1, [(0, 1), (2, 3)], -1), _edges(2, [(0, 1), (4, 0)]),
             _edges(3, full[:8], -1), _edges(4, [(1, 2)], -1), _edges(5, [(2, 1), (3, 3)])]
    weights = {0: [((n, 2), 0, 1) for n in range(5)], 4: [((3, 2), 4, -1)]}
    on_host = []
    for t, ups in enumerate(steps):
        feed = {"g": updates_df(spark, G, ups), "w": updates_df(spark, W, weights.get(t, []))}
        on_host.append(ours.step(feed, upto=t + 1).host)
        assert not theirs.step(feed, upto=t + 1).host
        if traces and on_host[-1]:  # read by lookups, the Spark batches stayed
            assert "spark+driver" in {s["stored"] for s in ours.stats().values()
                                      if s["remote_records"]}
        assert outputs_rows(ours, list(flow.outputs)) == outputs_rows(theirs, list(flow.outputs))
    assert on_host == [False, True, True, False, True, True]
    assert _traces(ours) == _traces(theirs)


def _traces(runner) -> dict:
    """Each trace's updates, times advanced to its since and consolidated: what it holds,
    whatever its batches."""
    from executor.arrange.trace import Trace

    out = {}
    for node, trace in runner._state.items():
        if isinstance(trace, Trace):
            rows = [tuple(r) for b in trace.batches for r in b.collect()]
            out[node.label()] = consolidate([(r[:-2], max(r[-2], trace.since), r[-1])
                                             for r in rows])
    return out


def test_local_rows_of_every_kind(spark, conf):
    """A pyarrow Table, an Arrow-backed frame, a Python list frame and a small computed plan
    all step on the host (the list and the plan cost one job to fetch their rows)."""
    flow = Dataflow()
    flow.output("c", flow.input("g", G).count(by=["src"]))
    runner = Runner(flow, conf=conf, spark=spark)
    table = pa.table({"src": [1, 1], "dst": [2, 3], "time": [0, 0], "diff": [1, 1]})
    assert runner.step({"g": table}, upto=1).host
    assert runner.step({"g": updates_df(spark, G, [((1, 4), 1, 1)])}, upto=2).host
    listed = spark.createDataFrame([(2, 5, 2, 1)], f"{G}, time BIGINT, diff BIGINT")
    assert runner.step({"g": listed}, upto=3).host
    assert runner.step({"g": spark.range(1).selectExpr(
        "1L AS src", "9L AS dst", "3L AS time", "-1L AS diff")}, upto=4).host
    assert outputs_rows(runner, ["c"])["c"] == consolidate(
        [((1, 2), 0, 1), ((1, 2), 1, -1), ((1, 3), 1, 1), ((2, 1), 2, 1), ((1, 3), 3, -1),
         ((1, 2), 3, 1)])


def test_explain_and_the_step_result_name_the_placement(spark, conf):
    """The placement is one word per step (StepResult.placement), and explain shows the rule
    and the last step's placement: a step above diffspark.host.step_rows runs on Spark, one
    below it on the driver, and a runner with step_rows=0 says every step runs on Spark."""
    flow = Dataflow()
    flow.output("c", flow.input("g", G).count(by=["src"]))
    runner = Runner(flow, conf=conf | {"diffspark.host.step_rows": "2"}, spark=spark)
    placement = runner.explain().split("== placement ==\n", 1)[1]
    assert placement.startswith("driver: a step whose inputs hold at most 2 rows each "
                                "(diffspark.host.step_rows)") and "last step: none yet" in placement
    big = pa.table({"src": [1, 1, 2], "dst": [2, 3, 4], "time": [0, 0, 0], "diff": [1, 1, 1]})
    result = runner.step({"g": big}, upto=1)
    assert result.placement == "spark" and not result.host
    assert runner.explain().endswith("last step: spark")
    result = runner.step({"g": pa.table({"src": [5], "dst": [6], "time": [1], "diff": [1]})},
                         upto=2)
    assert result.placement == "driver" and result.host
    assert runner.explain().endswith("last step: driver")
    spark_only = Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    assert "== placement ==\nspark: every step (diffspark.host.step_rows=0)" in \
        spark_only.explain()


def test_the_step_limit_follows_the_machine(spark, conf, monkeypatch):
    """In local mode a step may hold as many rows as a mirror (Spark's executors share the
    driver's machine); with a cluster's executors 5,000,000 unless set. A step whose inputs,
    driver.WORKING_SET times over, exceed the memory the machine has available runs on
    Spark, which spills, with the same answer; explain states the limit. A Spark frame is
    fetched to the driver only within the cluster's bound (it comes through the JVM's heap)."""
    from executor import driver
    from executor.runtime import config, limits

    assert limits.available_memory() > 0
    assert config.host_step_rows({}, local=True) == config.host_mirror_rows({}) == 20_000_000
    assert config.host_step_rows({"diffspark.host.mirror_rows": "7"}, local=True) == 7
    assert config.host_step_rows({}) == 5_000_000
    assert config.host_step_rows({"diffspark.host.step_rows": "9"}, local=True) == 9
    flow = Dataflow()
    flow.output("c", flow.input("g", G).count(by=["src"]))
    unset = {k: v for k, v in conf.items() if k != "diffspark.host.step_rows"}
    runner = Runner(flow, conf=unset, spark=spark)
    assert runner.step_rows == 20_000_000 and "at most 20,000,000 rows each" in runner.explain()
    table = pa.table({"src": [1, 1, 2], "dst": [2, 3, 4], "time": [0, 0, 0], "diff": [1, 1, 1]})
    need = driver.WORKING_SET * table.nbytes
    monkeypatch.setattr(limits, "available_memory", lambda: need - 1)
    monkeypatch.setattr(driver, "_ANY_MACHINE", 0)  # else a step this small never asks
    assert runner.step({"g": table}, upto=1).placement == "spark"
    monkeypatch.setattr(limits, "available_memory", lambda: need * 4)
    more = pa.table({"src": [2], "dst": [5], "time": [1], "diff": [1]})
    assert runner.step({"g": more}, upto=2).placement == "driver"
    assert sorted(map(tuple, runner.output("c").collect())) == [(1, 2, 0, 1), (2, 1, 0, 1),
                                                                (2, 1, 1, -1), (2, 2, 1, 1)]
    # a Spark frame comes through the JVM's heap: the cluster's bound holds in local mode
    monkeypatch.setattr(config, "DEFAULT_HOST_STEP_ROWS", 2)
    frame = spark.createDataFrame([(7, 8, 2, 1), (7, 9, 2, 1), (8, 9, 2, 1)],
                                  "src BIGINT, dst BIGINT, time BIGINT, diff BIGINT")
    assert runner.step({"g": frame}, upto=3).placement == "spark"
    assert runner.step({"g": frame.limit(2).withColumn("time", F.lit(3).cast("bigint"))},
                       upto=4).placement == "driver"


TYPED = ("k BIGINT, s STRING, d DATE, p DECIMAL(10,2), ts TIMESTAMP, x DOUBLE, "
         "b BOOLEAN")


def test_files_step_on_the_driver_as_spark_reads_them(spark, conf, tmp_path):
    """Parquet written by pyarrow (read by pyarrow, no job) and by Spark (INT96 timestamps:
    fetched through Spark's reader, one job), CSV, and a filtered scan all step on the
    driver, with Spark's reading of every column type and null, and agree with a runner
    that steps on Spark; a file above diffspark.host.step_rows steps on Spark; a bad CSV
    value is refused in the same words both ways."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow.parquet as pq

    from conftest import updates_table

    flow = Dataflow()
    o = flow.input("o", TYPED)
    flow.output("sums", o.sum("p", by=["s"]))
    flow.output("days", o.count(by=["d", "b"]))
    flow.output("kept", o.filter("x > 0 OR x IS NULL").map("k", "s", "ts"))
    rows = [((1, "a", dt.date(2024, 1, 2), Decimal("1.25"),
              dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), 0.5, True), 0, 1),
            ((2, None, None, None, None, None, None), 0, 1),
            ((3, "é,\"q\"", dt.date(1999, 12, 31), Decimal("-3.10"),
              dt.datetime(1999, 12, 31, 23, 59, 59, 123456, tzinfo=dt.timezone.utc), -1.0,
              False), 1, 2)]
    table = updates_table(TYPED, rows)
    pyarrow_file = tmp_path / "o.parquet"
    pq.write_table(table, pyarrow_file)
    spark_dir = str(tmp_path / "spark")
    spark.createDataFrame(table).where("time = 1").withColumn("diff", F.lit(-1).cast(
        "bigint")).withColumn("time", F.lit(2).cast("bigint")).write.parquet(spark_dir)
    csv_file = str(tmp_path / "o.csv")
    spark.createDataFrame(table).withColumn("time", F.col("time") + 3).toPandas().to_csv(
        csv_file, index=False)
    feeds = [(str(pyarrow_file), 2), (spark_dir, 3), (csv_file, 5),
             (spark.read.parquet(str(pyarrow_file)).where("k = 1").withColumn(
                 "time", F.lit(5).cast("bigint")), 6)]
    ours = Runner(flow, conf=conf, spark=spark)
    theirs = Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    small = Runner(flow, conf=conf | {"diffspark.host.step_rows": "2"}, spark=spark)
    names = list(flow.outputs)
    tracker = spark.sparkContext.statusTracker()
    for source, upto in feeds:
        before = set(tracker.getJobIdsForGroup(None))
        assert ours.step({"o": source}, upto=upto).host, source
        if source == str(pyarrow_file):  # read by pyarrow: not one Spark job
            assert set(tracker.getJobIdsForGroup(None)) == before
        assert not theirs.step({"o": source}, upto=upto).host
        # three rows in each file but Spark's, one in the filtered scan
        assert small.step({"o": source}, upto=upto).host == (upto in (3, 6)), source
        assert outputs_rows(ours, names) == outputs_rows(theirs, names) \
            == outputs_rows(small, names), source
    bad = tmp_path / "bad.csv"
    bad.write_text("k,s,d,p,ts,x,b,time\n7,z,2024-13-01,1.00,,,true,6\n")
    messages = []
    for runner in (ours, theirs):
        with pytest.raises(InputError) as e:
            runner.step({"o": str(bad)}, upto=7)
        messages.append(str(e.value))
        assert runner.frontier == 6
    assert messages[0] == messages[1] and "d" in messages[0] and "DATE" in messages[0]


@pytest.mark.parametrize("bad, column, rule", [
    ({"src": ["1", "x"]}, "src", "value is not a BIGINT"),
    ({"time": [0, None]}, "time", "null time"),
    ({"time": [0, 5]}, "time", "time outside the step's interval"),
])
def test_input_errors_on_the_host_match_spark(spark, conf, bad, column, rule):
    """The host checks the same rules with the same words, and a refused step changes
    nothing."""
    flow = Dataflow()
    flow.output("c", flow.input("g", G).count())
    table = pa.table({"src": [1, 1], "dst": [2, 3], "time": [0, 0], "diff": [1, 1]} | bad)
    messages = []
    for path in ({}, SPARK_ONLY):
        runner = Runner(flow, conf=conf | path, spark=spark)
        with pytest.raises(InputError) as e:
            runner.step({"g": table}, upto=1)
        assert column in str(e.value) and rule in str(e.value)
        messages.append(str(e.value))
        good = runner.step({"g": pa.table({"src": [1], "dst": [2], "time": [0], "diff": [1]})},
                           upto=1)
        assert good.host == (path == {}) and runner.frontier == 1
        assert outputs_rows(runner, ["c"])["c"] == [((1,), 0, 1)]
    assert messages[0] == messages[1]


def test_durable_plans_step_on_the_driver_unhosted_on_spark(spark, conf, tmp_path):
    flow = Dataflow()
    flow.output("c", flow.input("g", G).count())
    table = pa.table({"src": [1], "dst": [2], "time": [0], "diff": [1]})
    durable = Runner(flow, conf=conf, spark=spark, state=str(tmp_path / "state"))
    assert durable.step({"g": table}, upto=1).host  # committed with pyarrow (tests/test_state.py)
    durable.release_state()


# --------------------------------------------------------------------------- mirrors
runs = st.lists(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 5),
                                   st.sampled_from([-2, -1, 1, 1, 3])), max_size=12),
                min_size=1, max_size=7)


def searched(directory: bool):
    """Mirrors' runs searched by directories from their first lookup, or never."""
    from unittest import mock

    from executor.arrange import mirror
    return mock.patch.multiple(mirror, DIRECTORY_ROWS=0 if directory else 2 ** 62,
                               SEARCH_ROWS=2 ** 62)


@settings(max_examples=25, deadline=None)
@given(batches=runs, asked=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4)),
                                    max_size=6), nkeys=st.sampled_from([0, 1, 2]),
       directory=st.booleans())
def test_mirror_rows_equal_brute_force(xp, batches, asked, nkeys, directory):
    """Runs appended (merged geometrically, times advanced to `since`): every update under
    the asked keys, as brute force over the same updates finds them, by binary searches
    or by directories (twice: the second lookup reads the directories the first built)."""
    from executor.arrange.mirror import Mirror, run_of

    mirror, held, since = Mirror(xp, ["a", "b"], nkeys), [], -1
    for i, batch in enumerate(batches):
        since = max(since, i - 2)
        cols = [i64(xp, [r[j] for r in batch]) for j in range(4)]
        mirror = mirror.appended(run_of(xp, cols[:2], cols[2], cols[3]), since)
        held += batch
    with searched(directory):
        mirror.rows([i64(xp, [k[j] for k in asked[::-1]]) for j in range(nkeys)])
        got = mirror.rows([i64(xp, [k[j] for k in asked]) for j in range(nkeys)])
    rows = zip(*(host(xp, c) for c in (*got.cols, got.t, got.d)))
    wanted = {k[:nkeys] for k in asked} if nkeys else None

    def advanced(rs):  # times below the final since are only known up to it
        return consolidate([((a, b), max(t, since), d) for a, b, t, d in rs])

    assert advanced(rows) == advanced(r for r in held if wanted is None or r[:nkeys] in wanted)


EXTREME = [-2 ** 63, -2 ** 62, -1, 0, 2, 2 ** 62, 2 ** 63 - 1]
POOLS = (EXTREME, [0, 1, 2, 7], [-3, 40, 2 ** 40])  # ranges too wide to pack, narrow, wide


@settings(max_examples=40, deadline=None)
@given(data=st.data(), width=st.sampled_from([2, 3]), directory=st.booleans())
def test_mirror_rows_over_extreme_codes(xp, data, width, directory):
    """Lookups by two or three columns, each of codes from a pool whose range may or may not
    pack (the null code, int64's ends): by the longest prefix that packs into one word, then
    column by column, or column by column from the start, searched or through directories.
    Every lookup finds exactly the asked rows, an asked tuple outside a run's ranges none."""
    from executor.arrange.mirror import Mirror, run_of

    pools = [data.draw(st.sampled_from(POOLS)) for _ in range(3)]
    row = st.tuples(*(st.sampled_from(p) for p in pools), st.integers(0, 2), st.just(1))
    batches = data.draw(st.lists(st.lists(row, max_size=8), min_size=1, max_size=4))
    asked = data.draw(st.lists(st.tuples(*(st.sampled_from(p) for p in pools[:width])),
                               max_size=5))
    mirror, held = Mirror(xp, ["a", "b", "c"], width), []
    for batch in batches:
        cols = [i64(xp, [r[j] for r in batch]) for j in range(5)]
        mirror = mirror.appended(run_of(xp, cols[:3], cols[3], cols[4]), -1)
        held += batch
    with searched(directory):
        got = mirror.rows([i64(xp, [k[j] for k in asked]) for j in range(width)])
    rows = zip(*(host(xp, c) for c in (*got.cols, got.t, got.d)))
    wanted = set(asked)
    assert consolidate([(r[:3], r[3], r[4]) for r in rows]) == \
        consolidate([(r[:3], r[3], r[4]) for r in held if r[:width] in wanted])


def test_member(xp):
    from executor.operators.reduce.product import _member

    cols = [i64(xp, [1, 2, 2, 3, 1]), i64(xp, [5, 5, 6, 5, 5])]
    among = [i64(xp, [2, 1, 9]), i64(xp, [6, 5, 9])]
    assert host(xp, _member(xp, cols, among)) == [True, False, True, False, True]


def test_host_steps_keep_one_copy_and_spark_reads_the_mirror(spark, conf):
    """Driver steps keep their updates in the mirror alone (no second copy waiting for
    Spark, however many steps run); a Spark step then reads the mirror, decoded and
    arranged once, and agrees with a runner that stepped on Spark throughout."""
    from executor.arrange import trace as traces

    flow = Dataflow()
    g = flow.input("g", G)
    flow.output("c", g.count(by=["src"]))
    flow.output("j", g.join(g.map("dst AS src", "src AS x"), on=["src"]))
    ours = Runner(flow, conf=conf | {"diffspark.host.step_rows": "3"}, spark=spark)
    theirs = Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    for t in range(9):
        rows = [(t % 2, t, t, 1), (2, t, t, 1), (3, t - 1, t, -1)]
        if t == 6:  # a big step: on Spark, over the traces the driver kept
            rows += [(t, 7, t, 1)]
        table = pa.table(dict(zip(("src", "dst", "time", "diff"), map(list, zip(*rows)))))
        assert ours.step({"g": table}, upto=t + 1).host == (t != 6), t
        theirs.step({"g": table}, upto=t + 1)
        traces_held = [s for s in ours._state.values() if isinstance(s, traces.Trace)]
        assert all(tr.stale == (t != 6) for tr in traces_held), t
        assert all(tr.unsynced == () for tr in traces_held)  # kept for durable runners only
        if t != 6:  # the mirror is the storage: no Spark batch was added since the last sync
            assert all(tr.stats()["stored"] == "driver" for tr in traces_held)
    assert outputs_rows(ours, ["c", "j"]) == outputs_rows(theirs, ["c", "j"])


@pytest.mark.parametrize("odd, on_host", [(None, [False, True, True]),
                                           (-2**63, [False, False, False])])
def test_nulls_and_values_without_a_code(spark, conf, odd, on_host):
    """A trace loaded by a Spark step with a null key is mirrored (null has a code) and
    later small steps run on the driver; one holding a BIGINT equal to the null code is
    never mirrored (asked once) and its steps stay on Spark. Both agree with a Spark-only
    runner."""
    flow = Dataflow()
    g = flow.input("g", G)
    flow.output("c", g.count(by=["src"]))
    flow.output("j", g.join(g.map("dst AS src", "src AS x"), on=["src"]))
    ours = Runner(flow, conf=conf | {"diffspark.host.step_rows": "2"}, spark=spark)
    theirs = Runner(flow, conf=conf | SPARK_ONLY, spark=spark)
    load = updates_df(spark, G, [((odd, 1), 0, 1), ((1, 2), 0, 1), ((1, 3), 0, 1)])
    ran = []
    for t, feed in enumerate([load, updates_df(spark, G, [((1, 4), 1, 1)]),
                              updates_df(spark, G, [((None, 5), 2, -1)])]):
        ran.append(ours.step({"g": feed}, upto=t + 1).host)
        theirs.step({"g": feed}, upto=t + 1)
        assert outputs_rows(ours, ["c", "j"]) == outputs_rows(theirs, ["c", "j"])
    assert ran == on_host
