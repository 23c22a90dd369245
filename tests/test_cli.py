"""`python -m executor run|explain` end to end, in subprocesses, on plans/examples/linear_events.py.

Expected outputs come from a plain-Python model of the example plan written from the
definitional semantics (accumulate the inputs at every interesting time, evaluate the static
query, diff consecutive results), not from the executor. Five runs start Spark (a JVM each:
10 s to start on an idle machine, 20-30 s a run; 1-2 minutes each on a loaded 2-core one),
three of them marked slow; the error cases that need no Spark fail before a JVM starts
(about 1 s each).
"""
from __future__ import annotations

import csv
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import CLI_SPARK

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "plans" / "examples" / "linear_events.py"
SPARK = CLI_SPARK
COLUMNS = ["user", "item", "lo", "hi", "tags"]
STEP_LINE = re.compile(r"step (\d+)/(\d+) upto=(\d+) seconds=\d+\.\d+")


def cli(*args, tmp: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "executor", *map(str, args)]
    if tmp is not None and args[0] == "run":
        argv += ["--spark-log", str(tmp / "spark.log"), *SPARK]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------------------- data
def make_data():
    """(history records, event updates): small, with null bounds, empty and missing tags,
    weights, negative users, and retractions of earlier events at later times."""
    rng = random.Random(11)
    history = [(rng.randrange(-1, 5), rng.randrange(4), rng.choice([None, rng.randrange(5)]),
                rng.choice([None, rng.randrange(2, 12)]), rng.choice(["a;promo", "c", None]))
               for _ in range(8)]
    events = []
    for _ in range(40):
        rec = (rng.randrange(-2, 6), rng.randrange(4), rng.choice([None, rng.randrange(10)]),
               rng.choice([None, rng.randrange(14)]),
               rng.choice(["a", "a;b", "promo;c", "promo", "b;;c", None]))
        events.append((rec, rng.randrange(10), rng.choice([1, 1, 2])))
    for rec, t, d in rng.sample(events, 10):
        events.append((rec, rng.randrange(t, 12), -d))
    events.append((history[0], 7, -1))  # retract a history event
    return history, events


def expected(history, events, below=None):
    """The example plan's output changes by the definition: at every time where an input
    changes or an interval starts or ends, evaluate the static query on the accumulated
    inputs and emit the difference from the previous result."""
    ups = [(r, 0, 1) for r in history] + list(events)
    times = sorted({t for _, t, _ in ups} |
                   {b for r, _, _ in ups for b in (r[2], r[3]) if b is not None})
    out = {"user_tags": [], "active": []}
    prev = {"user_tags": Counter(), "active": Counter()}
    for t in times:
        acc = Counter()
        for rec, when, diff in ups:
            if when <= t:
                acc[rec] += diff
        now = {"user_tags": Counter(), "active": Counter()}
        for (user, item, lo, hi, tags), m in acc.items():
            if m == 0 or user < 0:
                continue
            if (lo is not None and t < lo) or (hi is not None and t >= hi):
                continue
            now["active"][(user, item)] += m
            for tag in (tags or "").split(";"):
                if tag:
                    now["user_tags"][(user, tag)] += m * (2 if tag == "promo" else 1)
        for name in out:
            for rec in now[name].keys() | prev[name].keys():
                if now[name][rec] != prev[name][rec]:
                    out[name].append(rec + (t, now[name][rec] - prev[name][rec]))
        prev = now
    return {name: sorted(r for r in rows if below is None or r[-2] < below)
            for name, rows in out.items()}


def write_history_csv(path: Path, history) -> Path:
    """The record columns only: every row is one event at time 0."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows([["" if v is None else v for v in rec] for rec in history])
    return path


def write_events(path: Path, events, fmt: str) -> Path:
    rows = [rec + (t, d) for rec, t, d in events]
    names = COLUMNS + ["time", "diff"]
    if fmt == "csv":
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(names)
            w.writerows([["" if v is None else v for v in row] for row in rows])
        return path
    schema = pa.schema([(n, pa.string() if n == "tags" else pa.int64()) for n in names])
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}, schema=schema)
    if fmt == "parquet":
        pq.write_table(table, path)
    else:  # a folder of Parquet files
        path.mkdir()
        half = table.num_rows // 2
        pq.write_table(table.slice(0, half), path / "part-0.parquet")
        pq.write_table(table.slice(half), path / "part-1.parquet")
    return path


def read_output(folder: Path) -> list[tuple]:
    table = pq.read_table(folder)
    assert table.column_names[-2:] == ["time", "diff"]
    return sorted(tuple(r.values()) for r in table.to_pylist())


def assert_ok(done: subprocess.CompletedProcess):
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stderr == "", done.stderr


# ---------------------------------------------------------------------------- runs with Spark
@pytest.mark.parametrize("steps, fmt", [
    pytest.param(1, "parquet", marks=pytest.mark.slow),
    (2, "csv"),
    pytest.param(5, "folder", marks=pytest.mark.slow)])
def test_run_steps_give_the_definitional_output(tmp_path, steps, fmt):
    """--steps 1, 2 and 5 (with the events as a Parquet file, a CSV file and a folder of
    Parquet files, and the history as CSV without time/diff) all write the same changes,
    the ones the definition gives."""
    history, events = make_data()
    hist = write_history_csv(tmp_path / "history.csv", history)
    ev = write_events(tmp_path / ("events." + {"folder": "d"}.get(fmt, fmt)), events, fmt)
    done = cli("run", PLAN, "--input", f"events={ev}", "--input", f"history={hist}",
               "--output", tmp_path / "out", "--steps", steps, tmp=tmp_path)
    assert_ok(done)
    lines = done.stdout.splitlines()
    step_lines = [m.groups() for m in map(STEP_LINE.fullmatch, lines) if m]
    assert [(int(i), int(k)) for i, k, _ in step_lines] == [(i, steps) for i in range(1, steps + 1)]
    assert int(step_lines[-1][2]) == max(t for _, t, _ in events) + 1
    assert any(line.startswith("close upto=inf") for line in lines)

    want = expected(history, events)
    for name in ("user_tags", "active"):
        assert read_output(tmp_path / "out" / name) == want[name], name
    assert pq.read_table(tmp_path / "out" / "user_tags").column_names == \
        ["user", "tag", "time", "diff"]


@pytest.mark.slow
def test_run_upto_leaves_inputs_open(tmp_path):
    """--upto 6 feeds times < 6 only, does not close, writes the changes at times < 6; an
    input without --input is empty (with a note)."""
    _, events = make_data()
    ev = write_events(tmp_path / "events.parquet", events, "parquet")
    done = cli("run", PLAN, "--input", f"events={ev}", "--output", tmp_path / "out",
               "--steps", 2, "--upto", 6, tmp=tmp_path)
    assert_ok(done)
    assert "note: input 'history' has no --input; it is empty" in done.stdout
    step_lines = [m.groups() for m in map(STEP_LINE.fullmatch, done.stdout.splitlines()) if m]
    assert [int(k) for _, k, _ in step_lines] == [2, 2] and step_lines[-1][2] == "6"
    assert "close" not in done.stdout
    want = expected([], events, below=6)
    assert want["user_tags"] and want["active"]
    for name in ("user_tags", "active"):
        assert read_output(tmp_path / "out" / name) == want[name], name


def test_bad_column_is_one_line_naming_input_and_column(tmp_path):
    history, events = make_data()
    bad = tmp_path / "events.csv"
    write_events(bad, events, "csv")
    text = bad.read_text().splitlines()
    text[3] = "x1" + text[3][text[3].index(","):]  # user is not a BIGINT
    bad.write_text("\n".join(text) + "\n")
    done = cli("run", PLAN, "--input", f"events={bad}", "--output", tmp_path / "out", tmp=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "input 'events'" in done.stderr and "column 'user'" in done.stderr
    assert "BIGINT" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- no Spark
def test_explain_shows_the_fused_chain():
    done = cli("explain", PLAN)
    assert_ok(done)
    written, optimized = done.stdout.split("== optimized ==")
    assert "Linear[map(user, tag)]" in written  # one node per operator as written
    # the shared filter fuses into both chains (cheaper than a pass of its own)
    assert "Linear[filter(user >= 0) -> temporal_filter(lower=lo, upper=hi) -> map(user, item)]" \
        in optimized
    fused = [line.strip() for line in optimized.splitlines() if "explode(" in line]
    assert len(fused) == 1 and fused[0].startswith("Linear[filter(user >= 0) -> map(") and \
        fused[0].endswith("temporal_filter(lower=lo, upper=hi) -> map(user, tag)]")
    assert "Concat  [shared]" in optimized
    assert "== rules fired ==" in optimized and "fuse x" in optimized and "== cost ==" in optimized

    plain = cli("explain", PLAN, "--no-optimize")
    assert_ok(plain)
    assert "== optimized ==" not in plain.stdout and plain.stdout.strip() == written.strip()


def _plan(tmp_path, text):
    path = tmp_path / "plan.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", ["plan raises", "no build", "unknown input", "not parquet",
                                  "missing file", "two profiles", "csv option", "csv option input"])
def test_errors_before_spark_are_one_line(tmp_path, case):
    data = tmp_path / "events.json"
    data.write_text("{}\n")
    text = tmp_path / "events.csv"
    text.write_text("user\n1\n")
    plans = {"plan raises": "def build(flow):\n    raise KeyError('boom')\n", "no build": "x = 1\n"}
    args = {
        "plan raises": [_plan(tmp_path, plans.get(case, ""))],
        "no build": [_plan(tmp_path, plans.get(case, ""))],
        "unknown input": [PLAN, "--input", f"evnts={data}"],
        "not parquet": [PLAN, "--input", f"events={data}"],
        "missing file": [PLAN, "--input", f"events={tmp_path / 'nope.csv'}"],
        "two profiles": [PLAN, "--conf", "cpu", "--conf", "gpu"],
        "csv option": [PLAN, "--input", f"events={text}", "--csv-option", "events.sep=;"],
        "csv option input": [PLAN, "--input", f"events={text}", "--csv-option",
                             "history.delimiter=;"],
    }[case]
    done = cli("run", *args, "--output", tmp_path / "out")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    message = done.stderr
    assert {
        "plan raises": "build(flow) raised KeyError: 'boom'",
        "no build": "defines no build(flow) function",
        "unknown input": "no input 'evnts' (its inputs: events, history)",
        "not parquet": "input 'events', column '-': input files must be Parquet",
        "missing file": "input 'events', column '-': file not found",
        "two profiles": "at most one profile",
        "csv option": "unknown option 'sep' (options: delimiter, header, null_value",
        "csv option input": "'history.delimiter=;': no --input history",
    }[case] in message
    assert "spark log" not in done.stdout  # failed before a JVM started


def test_step_bounds():
    from executor.apps.steps import step_bounds
    times = [0, 1, 3, 4, 7, 9, 11]
    assert step_bounds(times, 1, None) == [(0, 12)]
    assert step_bounds(times, 2, None) == [(0, 4), (4, 12)]
    assert step_bounds(times, 3, None) == [(0, 3), (3, 7), (7, 12)]
    assert step_bounds(times, 100, None) == [(0, 1), (1, 3), (3, 4), (4, 7), (7, 9),
                                              (9, 11), (11, 12)]
    assert step_bounds(times, 2, 20) == [(0, 4), (4, 20)]
    assert step_bounds([], 3, None) == []
    assert step_bounds([], 3, 5) == [(0, 5)]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_run_over_small_files_runs_no_spark_job(spark, conf, tmp_path, fmt):
    """`run`'s work over inputs the driver may hold (executor/apps/steps.py Tables) on a plan
    whose operators all run on the driver's arrays (a join and a count): reading and
    checking the files, five steps, the close and writing the outputs run no Spark job.
    The files written are the reference interpreter's changes, as the Spark path writes
    them (every input read by Spark's reader, every step on Spark: step_rows 0)."""
    from test_crash import PLAN as JOIN_COUNT, make_data as orders_and_prices

    from executor import Runner
    from executor.apps.cli import load_plan, run_plan
    from executor.reference import reference
    from plans.semantics import consolidate

    inputs = orders_and_prices(tmp_path)  # as CSV
    paths = {name: str(tmp_path / f"{name}.csv") for name in inputs}
    if fmt == "parquet":
        import pyarrow.csv as pcsv
        for name in inputs:
            pq.write_table(pcsv.read_csv(paths[name]), tmp_path / f"{name}.parquet")
            paths[name] = str(tmp_path / f"{name}.parquet")
    flow, tracker = load_plan(str(JOIN_COUNT)), spark.sparkContext.statusTracker()
    want = reference(spark, flow.outputs, inputs)
    for out, extra in (("driver", {}), ("spark", {"diffspark.host.step_rows": "0"})):
        runner = Runner(flow, conf=conf | extra, spark=spark)
        before = set(tracker.getJobIdsForGroup(None))
        run_plan(runner, paths, str(tmp_path / out), steps=5)
        assert (set(tracker.getJobIdsForGroup(None)) == before) == (out == "driver"), out
        for name in flow.outputs:
            got = consolidate([(tuple(r[c] for c in r if c not in ("time", "diff")),
                                r["time"], r["diff"])
                               for r in pq.read_table(tmp_path / out / name).to_pylist()])
            assert got == want[name], (name, out)


# ---------------------------------------------------------------------------- the demo
def test_demo_small_matches_a_direct_count(spark, conf):
    """The demo's pipeline on 3,000 events in 3 steps (in this process, on the shared
    session): its final snapshot equals a direct numpy count over the same updates."""
    import numpy as np

    from executor.apps import demo

    lines = []
    report = demo.run_demo(spark, conf, events=3_000, steps=3, seed=1,
                           out=lines.append)
    assert [s["updates"] for s in report["steps"]][0] == 1_500
    assert all(s["plus"] > 0 and s["seconds"] > 0 for s in report["steps"])
    assert sum(1 for line in lines if line.startswith("step ")) == 3

    at = report["snapshot"]["at"]
    assert at == 3 * demo.STEP_LENGTH - 1
    total = 0
    for _, table in demo.batches(3_000, 3, 1):
        cols = table.to_pydict()
        for user, lo, hi, tags, t, d in zip(cols["user"], cols["lo"], cols["hi"], cols["tags"],
                                            cols["time"], cols["diff"]):
            if t <= at and user % 97 != 0 and lo <= at < hi:
                total += d * len(np.unique(tags))
    assert report["snapshot"]["total"] == total > 0


def test_triangles_verb_counts_a_snap_text_file(tmp_path):
    """The pinned output line of `python -m executor triangles` on a static SNAP file: two
    triangles sharing an edge, given in both directions, with a loop and a duplicate."""
    path = tmp_path / "g.txt"
    path.write_text("# a SNAP-style edge list\n0 1\n1 2\n2\t0\n1 0\n2 3\n3 1\n3 3\n0 1\n")
    proc = cli("triangles", "--edges", path, "--spark-log", tmp_path / "spark.log", *SPARK)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "triangles=2"
    missing = cli("triangles", "--edges", tmp_path / "none.txt")
    assert missing.returncode == 2 and "file not found" in missing.stderr
    both = cli("triangles", "--edges", path, "--stream", "2", "--steps", "3")
    assert both.returncode == 2 and "give --steps or --stream, not both" in both.stderr


def test_csv_option_reads_another_dialect(tmp_path):
    """`--csv-option NAME.delimiter=;` with RFC 4180 quoting (a doubled quote inside a
    quoted field) through `run`, and the hint when the option is missing."""
    plan = _plan(tmp_path, 'def build(flow):\n'
                           '    flow.output("out", flow.input("xs", "k BIGINT, s STRING"))\n')
    data = tmp_path / "xs.csv"
    data.write_text('k;s\n1;"a; ""b"""\n2;NA\n')
    hint = cli("run", plan, "--input", f"xs={data}", "--output", tmp_path / "o1", tmp=tmp_path)
    assert hint.returncode == 2 and "--csv-option xs.delimiter=';'" in hint.stderr, hint.stderr
    done = cli("run", plan, "--input", f"xs={data}", "--csv-option", "xs.delimiter=;",
               "--csv-option", "xs.null_value=NA", "--output", tmp_path / "out", tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    got = pq.read_table(tmp_path / "out" / "out").to_pydict()
    assert sorted(zip(got["k"], got["s"])) == [(1, 'a; "b"'), (2, None)]


@pytest.mark.slow
def test_durable_run_stays_open_until_close(tmp_path):
    """`run --state` leaves the state open (no close line, manifest not closed); the same run
    again with --close repeats the committed step and closes; a later run with a new step is
    refused, one line saying the state is closed."""
    _, events = make_data()
    ev = write_events(tmp_path / "events.parquet", events, "parquet")
    args = ["run", PLAN, "--input", f"events={ev}", "--output", tmp_path / "out",
            "--state", tmp_path / "state"]
    first = cli(*args, tmp=tmp_path)
    assert_ok(first)
    assert "close" not in first.stdout
    manifest = (tmp_path / "state" / "manifest.json").read_text()
    assert '"closed": false' in manifest
    closing = cli(*args, "--close", tmp=tmp_path)
    assert_ok(closing)
    assert "skipped (committed)" in closing.stdout and "close upto=inf" in closing.stdout
    want = expected([], events)
    for name in ("user_tags", "active"):
        assert read_output(tmp_path / "out" / name) == want[name], name
    refused = cli(*args, "--steps", 2, tmp=tmp_path)
    assert refused.returncode == 2
    assert re.fullmatch(r"error: state \S+: the state is closed \(step 2 closed it.*\)\n",
                        refused.stderr), refused.stderr
