"""The crash test: `python -m executor run ... --state DIR` killed with SIGKILL at many points
(inside the commit protocol through DIFFSPARK_CRASH_AT, and from outside at moments chosen
at random), then started again until it finishes: the output directory has the rows of an
uninterrupted run, which are the reference interpreter's answer.

Every run starts a JVM (10-20 s on an idle machine, 30-50 s on CI's two busy cores), so the
test is slow (CI runs it; tests/test_state.py dies at every commit point in-process, on
several steps and at the close, without a JVM start each): it kills at each kind of point
(before and after the data, after the rename, the close's commit before its rename, an
output file, and from outside) over twenty steps, seven JVM starts in all. (A second test
that killed twice over three steps, before a rename and from outside, was dropped: three
more JVM starts for two kinds of point this one has.)
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import CLI_SPARK
from executor.apps.cli import load_plan
from executor.reference import reference
from plans.semantics import consolidate

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "plans" / "examples" / "join_count.py"
SPARK = CLI_SPARK
TIMES = 20


def make_data(tmp: Path):
    """orders (user, item) at times 0..19 with retractions, prices (item, price) at time 0
    with later price changes; as CSV files; and the same as update lists."""
    rng = random.Random(5)
    orders = [((rng.randrange(6), rng.randrange(5)), t, 1) for t in range(TIMES)
              for _ in range(rng.randrange(1, 4))]
    orders += [(rec, rng.randrange(t, TIMES), -1) for rec, t, _ in rng.sample(orders, 12)]
    prices = [((i, 10 + i), 0, 1) for i in range(5)]
    prices += [((1, 11), 7, -1), ((1, 30), 7, 1), ((3, 13), 13, -1), ((3, 5), 13, 1)]
    for name, ups in (("orders", orders), ("prices", prices)):
        cols = ["user", "item"] if name == "orders" else ["item", "price"]
        with open(tmp / f"{name}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(cols + ["time", "diff"])
            w.writerows(list(rec) + [t, d] for rec, t, d in ups)
    return {"orders": orders, "prices": prices}


def start(tmp: Path, out: Path, state: Path | None, steps: int, crash: str | None = None):
    argv = [sys.executable, "-m", "executor", "run", str(PLAN),
            "--input", f"orders={tmp / 'orders.csv'}", "--input", f"prices={tmp / 'prices.csv'}",
            "--output", str(out), "--steps", str(steps), "--spark-log", str(tmp / "spark.log"),
            *SPARK] + (["--state", str(state), "--close"] if state else [])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("DIFFSPARK_CRASH_AT", None)
    if crash:
        env["DIFFSPARK_CRASH_AT"] = crash
    # a session of its own: a kill takes the driver and its JVM together, like a lost machine
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc, kill_after: str | None = None, delay: float = 0.0) -> tuple[int, str]:
    """Wait for the run; with `kill_after`, SIGKILL it `delay` seconds after a stdout line
    starting so. Returns (exit status, stdout)."""
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if kill_after and line.startswith(kill_after):
                time.sleep(delay)
                os.killpg(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=900)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of this run is left (its JVM)
        proc.wait()
    return proc.returncode, "".join(lines) + proc.stdout.read() + proc.stderr.read()


def output_rows(out: Path) -> dict:
    rows = {}
    for name in ("priced", "per_user"):
        table = pq.read_table(out / name).to_pylist()
        rows[name] = consolidate([(tuple(r[c] for c in r if c not in ("time", "diff")),
                                   r["time"], r["diff"]) for r in table])
    return rows


def committed_steps(state: Path) -> int:
    try:
        with open(state / "manifest.json") as f:
            return json.load(f)["steps"]
    except FileNotFoundError:
        return 0


def crash_and_resume(spark, tmp: Path, steps: int, kills: list):
    inputs = make_data(tmp)
    state, out = tmp / "state", tmp / "out"
    committed = []  # steps committed after each kill
    for kill in kills:
        if kill.startswith("after "):  # from outside: a random moment after a progress line
            delay = random.Random(kill).uniform(0, 1.5)
            rc, log = finish(start(tmp, out, state, steps), kill[len("after "):], delay)
        else:
            rc, log = finish(start(tmp, out, state, steps, crash=kill))
        assert rc == -signal.SIGKILL, f"{kill}: status {rc}, not killed\n{log}"
        committed.append(committed_steps(state))
        point, _, at = kill.partition("@")
        if point.startswith("commit:"):  # exactly the steps before it, and its own after the rename
            assert committed[-1] == int(at) - (point != "commit:after-rename"), (kill, committed)
    assert committed == sorted(committed), committed
    rc, log = finish(start(tmp, out, state, steps))
    assert rc == 0, log
    assert re.search(r"step 1/\d+ upto=\d+ seconds=[\d.]+ skipped \(committed\)", log), log
    got = output_rows(out)
    flow = load_plan(str(PLAN))
    want = reference(spark, flow.outputs, inputs)
    assert got == {name: want[name] for name in got}
    with open(state / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["closed"] and set(os.listdir(state / "data")) == set(manifest["frames"])


@pytest.mark.slow  # seven JVM starts
def test_killed_at_each_kind_of_point_over_twenty_steps(spark, tmp_path):
    kills = ["commit:before-data@2", "commit:after-data@4", "commit:after-rename@8",
             "after step 10/", "commit:before-rename@21",  # the close
             "output:after-write@1"]
    crash_and_resume(spark, tmp_path, TIMES, kills)
