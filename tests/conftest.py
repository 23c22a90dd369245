"""One SparkSession for the whole test run (local[2], two partitions, UI off), plus helpers
that build update DataFrames and compare a Runner with the reference interpreter."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared"

# Tests run thousands of tiny jobs, so the JVM's fixed costs per job dominate: whole-stage
# and expression code generation compile Java for each new plan, and interpreted evaluation
# is faster on a few rows. Measured here: the WCOJ property test 82 s -> 71 s. Answers do not
# depend on it (Spark's interpreted and generated paths give the same results). Tried and
# dropped: C1-only JIT, faster on a 40 s test but slower on the long ones.
TEST_OVERRIDES = ["spark.master=local[2]", "diffspark.partitions=2",
                  "spark.driver.memory=3g",
                  "spark.sql.codegen.wholeStage=false",
                  "spark.sql.codegen.factoryMode=NO_CODEGEN"]
# `python -m executor` in a subprocess: a JVM that lives seconds on tiny data, where the
# server compiler's work and a parallel collector's threads cost more CPU than they return on
# two cores (unlike the session of the whole run, above). Measured here: a `run` of
# plans/examples/linear_events.py 21 s -> 16 s.
CLI_SPARK = ["--conf", "spark.master=local[2]", "--conf", "diffspark.partitions=2",
             "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"]

# Hypothesis profiles: "dev" (random examples, remembered failures) by default; "ci" (the same
# examples on every run, each failure printed with its reproduction blob) where the CI runner
# sets CI=true. HYPOTHESIS_PROFILE names either one. No deadline in either: a step's time on a
# shared 2-core machine says nothing about its correctness.
settings.register_profile("dev", settings.get_profile("default"), deadline=None)
settings.register_profile("ci", settings.get_profile("default"), deadline=None,
                          derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI", "").lower() in ("1", "true") else "dev"))


# CI's deadline: .ci/run sets DIFFSPARK_TEST_DEADLINE (epoch seconds) so that a run whose
# machine is slower than the one the suite was timed on still ends inside CI's 90 minutes.
# Then the slow tests run after all the fast ones, and a slow test that would start past the
# deadline is skipped with that reason (the summary counts them); the fast suite always runs.
DEADLINE = float(os.environ.get("DIFFSPARK_TEST_DEADLINE") or 0)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if DEADLINE:
        items.sort(key=lambda item: item.get_closest_marker("slow") is not None)


def pytest_runtest_setup(item):
    import time

    if DEADLINE and item.get_closest_marker("slow") and time.time() > DEADLINE:
        pytest.skip("CI's time budget is spent (DIFFSPARK_TEST_DEADLINE): slow test not run")


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "DIFFSPARK_TEST_DEADLINE" in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} slow tests skipped: CI's time budget "
                                    "was spent (DIFFSPARK_TEST_DEADLINE)")


def examples(dev: int, ci: int) -> int:
    """max_examples for a Spark-backed property test: few while developing (each example is
    several Spark steps), more in CI's one run of the whole suite."""
    return ci if settings.get_current_profile_name() == "ci" else dev


@pytest.fixture(scope="session")
def conf():
    from executor.runtime.config import load_conf
    return load_conf("cpu", TEST_OVERRIDES)


@pytest.fixture(scope="session")
def spark(conf):
    from executor.runtime.session import spark_session

    # Python workers unpickle test-module kernels by reference: let them import tests/.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    session = spark_session(conf)
    yield session
    session.stop()


@pytest.fixture(autouse=True, scope="module")
def _release_blocks():
    """After each test module, drop every cached table and persisted RDD (checkpointed
    traces of runners that are gone): otherwise they pile up in the one session's heap over
    the whole run and later modules crawl under garbage collection. Where pyspark was never
    imported (the kernel suites on a GPU machine without it) there is no session to clean."""
    yield
    if "pyspark.sql" not in sys.modules:
        return
    from pyspark.sql import SparkSession
    session = SparkSession.getActiveSession()
    if session is not None:
        session.catalog.clearCache()
        for rdd in session.sparkContext._jsc.getPersistentRDDs().values():
            rdd.unpersist(False)


def updates_table(ddl: str, updates):
    """An Arrow table of (record..., time, diff) rows with schema `ddl` + time + diff."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(f"{ddl}, time BIGINT, diff BIGINT")
    rows = [tuple(r) + (t, d) for r, t, d in updates]
    cols = list(zip(*rows)) if rows else [[] for _ in schema.fields]
    arrow = pa.schema(to_arrow_schema(schema))
    return pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, arrow)],
                                schema=arrow)


def updates_df(spark, ddl: str, updates):
    """updates_table as a DataFrame (via Arrow, so no Python worker is involved in reading
    it)."""
    return spark.createDataFrame(updates_table(ddl, updates))


def outputs_rows(runner, names):
    """executor.reference.rows_of for several outputs in ONE Spark job (records travel as JSON)."""
    import json
    from decimal import Decimal
    from functools import reduce

    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    from plans.semantics import consolidate

    frames, exact = [], []
    for i, name in enumerate(names):
        df = runner.output(name)
        recs = [f for f in df.schema.fields if f.name not in ("time", "diff")]
        # a DECIMAL travels as text: as a JSON number it would come back a float, and two
        # values that differ past the 17th digit would cancel in consolidation
        exact.append([isinstance(f.dataType, DecimalType) for f in recs])
        frames.append(df.select(F.lit(i).alias("o"), F.to_json(F.struct(*[
            F.col(f"`{f.name}`").cast("string").alias(f.name) if dec else F.col(f"`{f.name}`")
            for f, dec in zip(recs, exact[-1])]), {"ignoreNullFields": "false"}).alias("r"),
            "time", "diff"))
    out = {name: [] for name in names}
    for o, r, t, d in reduce(lambda a, b: a.unionByName(b), frames).collect():
        rec = tuple(Decimal(v) if dec and v is not None else v
                    for v, dec in zip(_from_json(json.loads(r)), exact[o]))
        out[names[o]].append((rec, t, d))
    return {name: consolidate(ups) for name, ups in out.items()}


def _from_json(v):
    """JSON records back to the interpreter's shape: structs as tuples, arrays as lists."""
    if isinstance(v, dict):
        return tuple(_from_json(x) for x in v.values())
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    return v


def assert_consolidated(df):
    """No two rows with the same (record, time) and no zero diff."""
    from executor.reference import plain
    rows = [tuple(plain(v) for v in r) for r in df.collect()]
    keys = [r[:-1] for r in rows]
    assert len(keys) == len(set(map(repr, keys))), "duplicate (record, time) rows"
    assert all(r[-1] != 0 for r in rows), "zero diff in output"


def run_against_reference(spark, conf, flow, inputs, cuts, optimize=True):
    """Feed `inputs` ({name: (ddl, updates)}) to a Runner in steps ending at each of `cuts`,
    then close; after every step each output must equal the reference below the frontier."""
    from executor import Runner
    from executor.reference import reference

    expected = reference(spark, flow.outputs, {n: ups for n, (_, ups) in inputs.items()})
    runner = Runner(flow, conf=conf, spark=spark, optimize=optimize)
    lo = 0
    for upto in list(cuts) + [None]:
        if upto is None:
            runner.close()
        else:
            batch = {n: updates_df(spark, ddl, [u for u in ups if lo <= u[1] < upto])
                     for n, (ddl, ups) in inputs.items()}
            runner.step(batch, upto=upto)
            lo = upto
        got = outputs_rows(runner, list(flow.outputs))
        for name in flow.outputs:
            want = [u for u in expected[name] if upto is None or u[1] < upto]
            assert got[name] == want, f"output {name} after step to {upto}"
    for name in flow.outputs:
        assert_consolidated(runner.output(name))
    return runner


# --------------------------------------------------------------------------- array backends
# The kernel suites run on numpy and array_api_strict (pinned to the 2023.12 standard, so a
# kernel that passes uses nothing cupy may lack); DIFFSPARK_KERNEL_BACKENDS=cupy (a
# comma-separated list) re-runs them on a GPU.
KERNEL_BACKENDS = os.environ.get("DIFFSPARK_KERNEL_BACKENDS", "numpy,strict").split(",")


@pytest.fixture(scope="module", params=KERNEL_BACKENDS)
def xp(request):
    import array_api_strict

    import gpu_kernels as gk

    if request.param == "strict":
        with array_api_strict.ArrayAPIStrictFlags(api_version="2023.12"):
            yield gk.namespace("strict")
    else:
        yield gk.namespace(request.param)


def i64(xp, values):
    return xp.asarray(values, dtype=xp.int64)


def host(xp, arr):
    import gpu_kernels as gk

    return gk.to_numpy(xp, arr).tolist()


def three_ways(spark, conf, flow, ddl: str, stream: list, cuts: list, driver_conf=None,
               spark_runner: bool = True) -> list:
    """Step a driver runner and a Spark runner through `stream` (updates of the flow's one
    input `s`, schema `ddl`) in steps ending at `cuts`: after each step both outputs equal
    the reference below the frontier. Returns which steps ran on the driver.
    `spark_runner=False` leaves the Spark runner out (a test of `driver_conf`'s placement
    whose Spark placement another test already checks on the same flow)."""
    from executor import Runner
    from executor.reference import reference

    expected = reference(spark, flow.outputs, {"s": stream})
    runners = {"driver": Runner(flow, conf=conf | (driver_conf or {}), spark=spark)}
    if spark_runner:
        runners["spark"] = Runner(flow, conf=conf | {"diffspark.host.step_rows": "0"},
                                  spark=spark)
    lo, ran = 0, []
    for upto in cuts:
        feed = {"s": updates_table(ddl, [u for u in stream if lo <= u[1] < upto])}
        ran.append(runners["driver"].step(feed, upto=upto).host)
        if spark_runner:
            assert not runners["spark"].step(feed, upto=upto).host
        lo = upto
        for placement, runner in runners.items():
            got = outputs_rows(runner, list(flow.outputs))
            for name in flow.outputs:
                want = [(as_json(r), t, d) for r, t, d in expected[name] if t < upto]
                assert got[name] == want, (name, upto, placement)
    for name in flow.outputs:  # the driver's outputs as Arrow, read without Spark: its rows
        from executor.arrange.spine import local_rows
        ours = runners["driver"].output_arrow(name, collect=False)
        assert ours is not None or not all(ran), name
        if ours is not None:
            theirs = local_rows(runners["driver"].output(name)).cast(ours.schema)
            assert sorted(map(repr, ours.to_pylist())) == sorted(map(repr, theirs.to_pylist()))
    return ran


def as_json(record: tuple) -> tuple:
    """A record as outputs_rows reads it back: a DATE as its ISO text (a DECIMAL stays a
    Decimal, equal and hashed as its value whatever its scale)."""
    import datetime as dt

    return tuple(v.isoformat() if isinstance(v, dt.date) else v for v in record)
