"""Step a Runner through update streams and check, after every step, each output's collection
against the reference interpreter and against Spark's batch answer over the inputs
accumulated so far (the answer a user would get by recomputing the query)."""
from __future__ import annotations

from collections import Counter

from hypothesis import strategies as st

from conftest import updates_df

HORIZON = 6
SPARK_ONLY = {"diffspark.host.step_rows": "0"}


def lifetimes(record):
    """Updates that keep every multiplicity non-negative (Spark batch needs rows), with
    retractions: records inserted (multiplicity 1 or 2) at a time and some retracted later."""
    life = st.tuples(record, st.integers(0, HORIZON - 1), st.integers(1, HORIZON),
                     st.sampled_from([1, 1, 2]))
    return st.lists(life, max_size=10).map(
        lambda ls: [u for r, t0, dt, m in ls
                    for u in [(r, t0, m)] + ([(r, t0 + dt, -m)] if t0 + dt < HORIZON else [])])


cuts = st.sets(st.integers(1, HORIZON - 1), max_size=2).map(lambda s: sorted(s) + [HORIZON])


def collection(rows, at: int) -> list:
    """(record, multiplicity) at time `at` of (record, time, diff) rows, sorted."""
    acc: Counter = Counter()
    for rec, t, d in rows:
        if t <= at:
            acc[_plain(rec)] += d
    return sorted(((r, m) for r, m in acc.items() if m), key=repr)


NAN = float("nan")  # one object: dict keys find it (NaN != NaN, but `is` holds)


def _plain(rec):
    """Doubles rounded to 9 digits: Spark's batch sums in another order than a trace does;
    every NaN as one object, so that its record's updates meet in one key; -0.0 as 0.0 (they
    are one value to Spark, and which of them a group shows depends on the order it met
    them in), so that sorting by repr cannot part them."""
    return tuple((NAN if v != v else round(v, 9) + 0.0) if isinstance(v, float) else v
                 for v in rec)


def batch_frames(spark, inputs: dict, at: int) -> dict:
    """Each input's collection at `at` as a DataFrame, a record repeated by multiplicity."""
    out = {}
    for name, (ddl, ups) in inputs.items():
        rows = [(r, 0, 1) for r, m in collection(ups, at) for _ in range(m)]
        out[name] = updates_df(spark, ddl, rows).drop("time", "diff")
    return out


def output_rows(runner, name):
    from executor.reference import plain
    return [(tuple(plain(v) for v in r[:-2]), r[-2], r[-1])
            for r in runner.output(name).collect()]


def check_steps(spark, conf, flow, inputs: dict, cut_list, batch, optimize=True):
    """Feed `inputs` ({name: (ddl, updates)}) in steps ending at `cut_list`; after each step
    every output's collection at the last final time equals the reference interpreter's and
    (unless `batch` is None) `batch(frames)[name]`'s, a Spark DataFrame over the accumulated
    inputs."""
    from executor import Runner
    from executor.reference import plain, reference

    want = reference(spark, flow.outputs, {n: ups for n, (_, ups) in inputs.items()})
    runner = Runner(flow, conf=conf, spark=spark, optimize=optimize)
    lo = 0
    for upto in cut_list:
        runner.step({n: updates_df(spark, ddl, [u for u in ups if lo <= u[1] < upto])
                     for n, (ddl, ups) in inputs.items()}, upto=upto)
        lo = upto
        spark_answer = batch and batch(batch_frames(spark, inputs, upto - 1))
        for name in flow.outputs:
            got = collection(output_rows(runner, name), upto - 1)
            assert got == collection(want[name], upto - 1), (name, upto, "reference")
            if batch is None:
                continue
            rows = [(tuple(plain(v) for v in r), 0, 1) for r in spark_answer[name].collect()]
            assert got == collection(rows, 0), (name, upto, "Spark batch")
    return runner
