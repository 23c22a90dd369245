"""Durable state (executor/durability/state.py): a runner on a state directory that is dropped,
or dies at any point of a commit, and is resumed gives the reference interpreter's answer; the lock
refuses a second runner; garbage collection keeps exactly what the manifest names."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import ROOT, examples, outputs_rows, updates_df
from executor import InputError, Runner, StateError
from executor.arrange.trace import arrange
from executor.durability import state as durable
from executor.reference import reference
from plans import Dataflow

E, N = "src BIGINT, dst BIGINT", "node BIGINT, w BIGINT"
HORIZON = 6
OUTPUTS = ["join", "live", "window"]
SPARK_ONLY = {"diffspark.host.step_rows": "0"}


def flow() -> Dataflow:
    """Traces (join), a reduction with pending future updates (live) and an output with
    pending future changes (window)."""
    f = Dataflow()
    e, n = f.input("e", E), f.input("n", N)
    f.output("join", e.arrange_by_key("src").join(n.map("node AS src", "w"), on=["src"]))
    f.output("live", e.temporal_filter(lower="src", upper="dst").count(by=["src"]))
    f.output("window", e.temporal_filter(lower="src", upper="dst"))
    return f


def feed(spark, runner, inputs, cuts):
    """Step to each of `cuts` (from time 0, as a restarted driver does), then close."""
    lo, results = 0, []
    for upto in cuts:
        batch = {n: updates_df(spark, ddl, [u for u in ups if lo <= u[1] < upto])
                 for n, (ddl, ups) in inputs.items()}
        results.append(runner.step(batch, upto=upto))
        lo = upto
    results.append(runner.close())
    return results


def expected(spark, inputs):
    return reference(spark, flow().outputs, {n: ups for n, (_, ups) in inputs.items()})


def data_files(state_dir):
    return set(os.listdir(os.path.join(state_dir, "data")))


def manifest(state_dir):
    with open(os.path.join(state_dir, "manifest.json")) as f:
        return json.load(f)


node = st.integers(0, 3)
edge = st.tuples(st.tuples(node, st.integers(0, HORIZON)), st.integers(0, HORIZON - 1),
                 st.sampled_from([-1, 1, 1, 2]))
weight = st.tuples(st.tuples(node, st.integers(-3, 3)), st.integers(0, HORIZON - 1),
                   st.sampled_from([-1, 1, 2]))


@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(edge, min_size=1, max_size=10), weights=st.lists(weight, max_size=6),
       cuts=st.sets(st.integers(1, HORIZON - 1), min_size=1, max_size=1),
       data=st.data())
def test_resume_equals_reference(spark, conf, tmp_path_factory, edges, weights, cuts, data):
    """Drop the runner after k committed steps, resume on the same directory and repeat the
    driver from the start: committed steps are skipped, the rest run, the answer is the
    reference's (so the same as an uninterrupted run's)."""
    cuts = sorted(cuts) + [HORIZON]
    k = data.draw(st.integers(1, len(cuts)))
    inputs = {"e": (E, edges), "n": (N, weights)}
    where = str(tmp_path_factory.mktemp("state"))
    first = Runner(flow(), conf=conf, spark=spark, state=where)
    lo = 0
    for upto in cuts[:k]:
        first.step({n: updates_df(spark, ddl, [u for u in ups if lo <= u[1] < upto])
                    for n, (ddl, ups) in inputs.items()}, upto=upto)
        lo = upto
    first.release_state()

    again = Runner(flow(), conf=conf, spark=spark, state=where)
    assert (again.steps, again.frontier) == (k, cuts[k - 1])
    results = feed(spark, again, inputs, cuts)
    assert [r.skipped for r in results] == [i < k for i in range(len(cuts) + 1)]
    assert [r.step for r in results] == list(range(1, len(cuts) + 2))
    assert outputs_rows(again, OUTPUTS) == expected(spark, inputs)
    assert data_files(where) == set(manifest(where)["frames"])
    again.release_state()


EDGES = [((0, 3), 0, 1), ((1, 4), 0, 1), ((2, 5), 1, 2), ((1, 4), 2, -1), ((0, 2), 3, 1),
         ((3, 5), 3, -1), ((2, 6), 4, 1), ((0, 3), 5, -1)]
WEIGHTS = [((0, 5), 0, 1), ((1, -2), 1, 1), ((2, 7), 2, 1), ((0, 5), 4, -1), ((3, 1), 5, 2)]
INPUTS = {"e": (E, EDGES), "n": (N, WEIGHTS)}
CUTS = [1, 2, 3, 4, HORIZON]


class Crash(BaseException):
    """What the crash hook raises in-process instead of SIGKILL (nothing catches it)."""


CRASHES = {  # cuts, crash points (POINT@STEP; the close is the last step), committed after each
    "default": ([3, HORIZON], ["commit:after-data@2", "commit:after-rename@3"], [1, 3]),
    "every point": (CUTS, ["commit:before-data@2", "commit:after-data@3",
                           "commit:before-rename@4", "commit:after-rename@5",
                           "commit:before-rename@6"], [1, 2, 3, 5, 5]),
}


@pytest.mark.parametrize("case", [
    "default", pytest.param("every point", marks=pytest.mark.slow)])
def test_dies_at_commit_points_and_resumes(spark, conf, tmp_path, monkeypatch, case):
    """The driver dies (in-process stand-in for SIGKILL) at points of the commit protocol in
    turn, on different steps; each time a new runner resumes from the directory and repeats
    the driver from the start. Final outputs equal the reference; every crash left the last
    committed step intact and its leftovers were collected."""
    def die():
        raise Crash()

    cuts, points, want = CRASHES[case]
    monkeypatch.setattr(durable, "_die", die)
    where = str(tmp_path / "state")
    committed = []
    for point in points + [None]:
        if point:
            monkeypatch.setenv(durable.CRASH_ENV, point)
        else:
            monkeypatch.delenv(durable.CRASH_ENV)
        runner = Runner(flow(), conf=conf, spark=spark, state=where)
        assert runner.steps == (committed[-1] if committed else 0)
        assert data_files(where) == (set(manifest(where)["frames"]) if committed else set())
        try:
            feed(spark, runner, INPUTS, cuts)
        except Crash:
            step = int(point.rsplit("@", 1)[1])
            assert runner.steps == step - 1  # the runner's own fields never moved
            committed.append(step if point.startswith("commit:after-rename") else step - 1)
            runner.release_state()
            continue
        assert outputs_rows(runner, OUTPUTS) == expected(spark, INPUTS)
        runner.release_state()
    assert committed == want


def test_lock_refuses_a_second_runner(spark, conf, tmp_path):
    where = str(tmp_path / "state")
    first = Runner(flow(), conf=conf, spark=spark, state=where)
    with pytest.raises(StateError, match=rf"locked by pid {os.getpid()} on host \S+.*one runner"):
        Runner(flow(), conf=conf, spark=spark, state=where)
    first.release_state()
    Runner(flow(), conf=conf, spark=spark, state=where).release_state()

    # another process holds it; once that process is dead (SIGKILL), its lock is taken over
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from executor.durability.state import Lock; "
         f"Lock({where!r}); print('held', flush=True); time.sleep(600)"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StateError, match=f"locked by pid {holder.pid}"):
            Runner(flow(), conf=conf, spark=spark, state=where)
    finally:
        holder.kill()
        holder.wait()
    Runner(flow(), conf=conf, spark=spark, state=where).release_state()


def test_gc_keeps_what_the_manifest_names(spark, conf, tmp_path, monkeypatch):
    where = str(tmp_path / "state")
    runner = Runner(flow(), conf=conf, spark=spark, state=where)
    lo = 0
    for upto in CUTS[:3]:
        runner.step({n: updates_df(spark, ddl, [u for u in ups if lo <= u[1] < upto])
                     for n, (ddl, ups) in INPUTS.items()}, upto=upto)
        lo = upto
        assert data_files(where) == set(manifest(where)["frames"])
    runner.release_state()
    stray = os.path.join(where, "data", "0123456789abcdef")
    os.makedirs(stray)
    open(os.path.join(stray, "part-0.parquet"), "w").close()
    open(os.path.join(where, "manifest.json.tmp"), "w").close()
    before = manifest(where)
    again = Runner(flow(), conf=conf, spark=spark, state=where)
    assert not os.path.exists(stray) and not os.path.exists(where + "/manifest.json.tmp")
    assert manifest(where) == before and data_files(where) == set(before["frames"])
    again.release_state()


def test_resume_refuses_other_inputs_plans_and_steps(spark, conf, tmp_path):
    where = str(tmp_path / "state")
    runner = Runner(flow(), conf=conf, spark=spark, state=where)
    runner.step({"e": updates_df(spark, E, [((1, 2), 0, 1)])}, upto=2)
    runner.release_state()
    before = (manifest(where), data_files(where))

    again = Runner(flow(), conf=conf, spark=spark, state=where)
    with pytest.raises(InputError, match="input 'e', column '-': differs from the input "
                                         "committed at step 1"):
        again.step({"e": updates_df(spark, E, [((1, 3), 0, 1)])}, upto=2)
    with pytest.raises(StateError, match="step 1 was committed with upto=2"):
        again.step({"e": updates_df(spark, E, [((1, 2), 0, 1)])}, upto=1)
    assert again.step({"e": updates_df(spark, E, [((1, 2), 0, 1)]),  # an empty input: as absent
                       "n": updates_df(spark, N, [])}, upto=2).skipped
    again.release_state()
    other = Dataflow()
    other.output("e", other.input("e", E).map("src"))
    with pytest.raises(StateError, match="different plan"):
        Runner(other, conf=conf, spark=spark, state=where)
    assert (manifest(where), data_files(where)) == before


def test_history_is_appended_and_version_1_manifests_resume(spark, conf, tmp_path):
    """The step history lies in history.jsonl, cut to the manifest's committed bytes (a
    crashed commit's line is dropped); a version-1 manifest (history inside) still resumes,
    its records moving to the file at the next commit."""
    where = str(tmp_path / "state")
    steps = [({"e": updates_df(spark, E, [((1, 2), 0, 1)])}, 2),
             ({"e": updates_df(spark, E, [((2, 3), 2, 1)])}, 4)]
    runner = Runner(flow(), conf=conf, spark=spark, state=where)
    runner.step(steps[0][0], upto=steps[0][1])
    records = runner._store.history()
    runner.release_state()
    assert [r["step"] for r in records] == [1]
    old = {**manifest(where), "version": 1, "history": records}
    with open(os.path.join(where, "manifest.json"), "w") as f:
        json.dump(old, f)
    with open(os.path.join(where, "history.jsonl"), "w") as f:
        f.write('{"step": 9, "torn')  # what a crashed commit might leave: ignored
    again = Runner(flow(), conf=conf, spark=spark, state=where)
    assert again.step(steps[0][0], upto=steps[0][1]).skipped
    again.step(steps[1][0], upto=steps[1][1])
    assert manifest(where)["version"] == durable.VERSION
    assert [r["step"] for r in again._store.history()] == [1, 2]
    with open(os.path.join(where, "history.jsonl")) as f:
        assert [json.loads(line)["upto"] for line in f] == [2, 4]
    again.release_state()


def test_restored_traces_keep_their_partitioning(spark, conf, tmp_path):
    """Trace batches Spark steps write are bucketed by their key and restored with their partitioning
    (a join with a live arrangement adds no Exchange and no Sort); a manifest written before
    buckets and time columns were recorded (plain Parquet, one time) still resumes."""
    where = str(tmp_path / "state")
    runner = Runner(flow(), conf=conf | SPARK_ONLY, spark=spark, state=where)
    for lo, upto in ((0, 2), (2, 3)):
        runner.step({n: updates_df(spark, ddl, [u for u in ups if lo <= u[1] < upto])
                     for n, (ddl, ups) in INPUTS.items()}, upto=upto)
    runner.release_state()
    traces = [r for r in manifest(where)["state"].values() if r["kind"] == "trace"]
    assert traces and all(r["time_cols"] == ["time"] for r in traces)
    assert all(b[2] == runner.partitions for r in traces for b in r["batches"])

    again = Runner(flow(), conf=conf, spark=spark, state=where)
    for record in traces:
        trace = again._store.load_entry(record)
        live = arrange(updates_df(spark, E, EDGES).withColumnRenamed("src", record["keys"][0]),
                       trace.keys, ["time"], again.partitions)[0]
        for batch in trace.batches:
            joined = batch.join(live.hint("merge"), trace.keys)
            plan = joined._jdf.queryExecution().executedPlan().toString()
            assert "SortMergeJoin" in plan, plan
            assert "Exchange" not in plan and "Sort [" not in plan, plan
    again.release_state()

    old = manifest(where)
    for record in old["state"].values():
        if record["kind"] == "trace":
            del record["time_cols"]
            record["batches"] = [b[:2] for b in record["batches"]]
    with open(os.path.join(where, "manifest.json"), "w") as f:
        json.dump(old, f)
    resumed = Runner(flow(), conf=conf, spark=spark, state=where)
    feed(spark, resumed, INPUTS, [2, 3, HORIZON])
    assert outputs_rows(resumed, OUTPUTS) == expected(spark, INPUTS)
    resumed.release_state()


# ---------------------------------------------------------------------------- the driver
D, M = "src BIGINT, tag STRING", "node BIGINT, w BIGINT"


def driver_flow() -> Dataflow:
    """Operators with a driver form: an arrangement read by a join, a count by a STRING key
    (nulls included), a sum."""
    f = Dataflow()
    e, n = f.input("e", D), f.input("n", M)
    f.output("join", e.arrange_by_key("src").join(n.map("node AS src", "w"), on=["src"]))
    f.output("tags", e.count(by=["tag"]))
    f.output("sum", n.sum("w", by=["node"]))
    return f


def placed(tmp, ddl, ups, driver: bool):
    """Updates as a pyarrow Table (for a driver step) or as a Parquet file (for a Spark
    step: Spark reads it and digests it as it reads, feed_placed pins the placement)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    schema = pa.schema(to_arrow_schema(StructType.fromDDL(f"{ddl}, time BIGINT, diff BIGINT")))
    rows = [tuple(r) + (t, d) for r, t, d in ups]
    cols = list(zip(*rows)) if rows else [[] for _ in schema]
    table = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, schema)],
                                 schema=schema)
    if driver:
        return table
    path = os.path.join(tmp, f"{len(os.listdir(tmp))}.parquet")
    pq.write_table(table, path)
    return path


def feed_placed(runner, inputs, cuts, driver: list, tmp) -> list:
    """Step to each of `cuts` from time 0, step i on the driver where driver[i] (the
    runner's placement is restored after)."""
    lo, results, hosted = 0, [], runner._on_driver
    for i, upto in enumerate(cuts):
        batch = {n: placed(tmp, ddl, [u for u in ups if lo <= u[1] < upto], driver[i])
                 for n, (ddl, ups) in inputs.items()}
        runner._on_driver = hosted and driver[i]
        results.append(runner.step(batch, upto=upto))
        lo = upto
    runner._on_driver = hosted
    return results


tagged = st.tuples(st.tuples(node, st.sampled_from(["a", "bb", "é", None])),
                   st.integers(0, HORIZON - 1), st.sampled_from([-1, 1, 1, 2]))
POINTS = ["commit:before-data", "commit:after-data", "commit:before-rename",
          "commit:after-rename"]


def die_and_resume(spark, conf, make_flow, inputs, cuts, where, monkeypatch, data, feed,
                   places: int, close=lambda runner, placed: runner.close()):
    """The crash scaffold of the placement tests: a step and a commit point are drawn, and
    a placement per step (`places` booleans, True: the driver) for each of two runs; the
    first runner, fed by `feed(runner, placed)`, dies there, a second resumes, is fed again
    and closed. The second run skips exactly the committed steps, and its outputs are the
    reference's, with the state holding just the manifest's files. Returns the second run's
    results and placements."""
    def die():
        raise Crash()

    at = data.draw(st.integers(1, len(cuts)), label="crash step")
    point = data.draw(st.sampled_from(POINTS), label="crash point")
    first, second = (data.draw(st.lists(st.booleans(), min_size=places, max_size=places),
                               label=label) for label in ("first run", "second run"))
    monkeypatch.setattr(durable, "_die", die)
    monkeypatch.setenv(durable.CRASH_ENV, f"{point}@{at}")
    runner = Runner(make_flow(), conf=conf, spark=spark, state=where)
    with pytest.raises(Crash):
        feed(runner, first)
    assert runner.steps == at - 1
    runner.release_state()
    monkeypatch.delenv(durable.CRASH_ENV)

    committed = at if point == "commit:after-rename" else at - 1
    again = Runner(make_flow(), conf=conf, spark=spark, state=where)
    assert again.steps == committed
    results = feed(again, second) + [close(again, second)]
    assert [r.skipped for r in results] == [i < committed for i in range(len(cuts) + 1)]
    assert outputs_rows(again, list(make_flow().outputs)) == reference(
        spark, make_flow().outputs, {n: ups for n, (_, ups) in inputs.items()})
    assert data_files(where) == set(manifest(where)["frames"])
    again.release_state()
    return results, second


@pytest.mark.parametrize("traces", ["mirrored", "left_on_spark"])
@settings(max_examples=examples(2, 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(tagged, min_size=1, max_size=10), weights=st.lists(weight, max_size=6),
       cuts=st.sets(st.integers(1, HORIZON - 1), min_size=1, max_size=2), data=st.data())
def test_driver_steps_die_resume_and_switch_placement(spark, conf, tmp_path_factory, monkeypatch,
                                                      traces, edges, weights, cuts, data):
    """A durable runner steps on the driver or on Spark (random per step), dies at a random
    commit point of a random step, and a new runner resumes, repeating the driver from the
    start with the steps placed at random again: driver steps commit without Spark into the
    same manifest, either placement resumes from either's steps, replays are recognised
    whichever placement committed them, and the outputs are the reference's. With
    `lookup_rows=0` a driver step after a Spark step reads the traces Spark arranged by key
    (executor/arrange/remote.py) and commits only its own updates."""
    cuts = sorted(cuts) + [HORIZON]
    inputs = {"e": (D, edges), "n": (M, weights)}
    tmp = str(tmp_path_factory.mktemp("inputs"))
    conf = conf | ({"diffspark.host.lookup_rows": "0"} if traces == "left_on_spark" else {})
    results, second = die_and_resume(
        spark, conf, driver_flow, inputs, cuts, str(tmp_path_factory.mktemp("state")),
        monkeypatch, data, lambda runner, placed: feed_placed(runner, inputs, cuts, placed, tmp),
        places=len(cuts))
    assert [r.host for r in results] == [not r.skipped and d for r, d in  # close: driver
                                         zip(results, second + [True])]


def test_driver_and_spark_runners_take_turns_on_one_state(spark, conf, tmp_path):
    """A runner on the driver, one with `diffspark.host.step_rows=0` (every step on Spark),
    then one on the driver again, each resuming the last: each repeats the committed steps
    (recognised, skipped) and runs the next in its placement; a driver step and its commit
    run no Spark job (but the first after a resume, which reads the committed traces back
    through Spark); the outputs are the reference's."""
    where, tmp = str(tmp_path / "state"), str(tmp_path)
    edges = [((0, "a"), 0, 1), ((1, None), 0, 2), ((0, "bb"), 1, 1), ((1, None), 2, -1),
             ((2, "a"), 3, 1), ((0, "a"), 3, -1), ((2, "é"), 4, 1)]
    weights = [((0, 5), 0, 1), ((1, -2), 1, 1), ((2, 7), 2, 1), ((0, 5), 3, -1), ((2, 1), 4, 2)]
    inputs = {"e": (D, edges), "n": (M, weights)}
    cuts = [1, 2, 3, 4, 5]
    tracker = spark.sparkContext.statusTracker()
    done = 0
    for overrides, until in (({}, 2), (SPARK_ONLY, 3), ({}, 5)):
        runner = Runner(driver_flow(), conf=conf | overrides, spark=spark, state=where)
        assert runner.steps == done
        lo = 0
        for i, upto in enumerate(cuts[:until]):
            batch = {n: placed(tmp, ddl, [u for u in ups if lo <= u[1] < upto], True)
                     for n, (ddl, ups) in inputs.items()}
            before = set(tracker.getJobIdsForGroup(None))
            result = runner.step(batch, upto=upto)
            lo = upto
            assert result.skipped == (i < done)
            assert result.host == (i >= done and not overrides)
            if result.host and (i > done or not done):
                assert set(tracker.getJobIdsForGroup(None)) == before, f"a job in step {i + 1}"
        done = until
        runner.release_state()
        assert data_files(where) == set(manifest(where)["frames"])
    final = Runner(driver_flow(), conf=conf, spark=spark, state=where)
    assert all(r.skipped for r in feed_placed(final, inputs, cuts, [False] * len(cuts), tmp))
    final.close()
    assert outputs_rows(final, list(driver_flow().outputs)) == reference(
        spark, driver_flow().outputs, {n: ups for n, (_, ups) in inputs.items()})
    final.release_state()


def test_a_closed_state_refuses_a_step_saying_it_is_closed(spark, conf, tmp_path):
    """A close is committed: a resumed runner repeats it (skipped), and a new step is refused
    by a message that names the closed state, not `upto`; nothing changes."""
    where = str(tmp_path / "state")
    ups = updates_df(spark, E, [((1, 2), 0, 1)])
    runner = Runner(flow(), conf=conf, spark=spark, state=where)
    runner.step({"e": ups}, upto=2)
    runner.close()
    runner.release_state()
    before = (manifest(where), data_files(where))
    again = Runner(flow(), conf=conf, spark=spark, state=where)
    assert again.closed
    with pytest.raises(StateError, match=r"the state is closed \(step 2 closed it.*--close"):
        again.step({"e": ups}, upto=5)
    assert again.step({"e": ups}, upto=2).skipped and again.close().skipped
    with pytest.raises(StateError, match="the state is closed"):
        again.step({}, upto=9)
    again.release_state()
    assert (manifest(where), data_files(where)) == before
