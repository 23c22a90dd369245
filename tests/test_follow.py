"""`follow` (executor/apps/follow.py): files dropped into input folders become steps, each
step's output changes are written once, across a crash between commit and write and a
restart; in-process (fast) and as a subprocess killed with SIGKILL and restarted (slow)."""
from __future__ import annotations

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

from conftest import CLI_SPARK, updates_table
from executor import Runner
from executor.apps.cli import load_plan
from executor.apps.follow import Follower
from executor.reference import reference
from plans.semantics import consolidate

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "plans" / "examples" / "join_count.py"
ORDERS, PRICES = "user BIGINT, item BIGINT", "item BIGINT, price BIGINT"


def make_files(n: int, seed: int = 3) -> list:
    """n files [(input, rows)] at times 0..n-1 (prices first), orders with retractions."""
    rng = random.Random(seed)
    files = [("prices", [((i, 10 + i), 0, 1) for i in range(4)])]
    live = []
    for t in range(1, n):
        if rng.random() < 0.3:
            files.append(("prices", [((1, 10 + t), t, 1)]))
            continue
        rows = [((rng.randrange(5), rng.randrange(4)), t, 1) for _ in range(rng.randrange(1, 4))]
        if live and rng.random() < 0.5:
            rows.append((live.pop(rng.randrange(len(live))), t, -1))
        live += [r for r, _, d in rows if d == 1]
        files.append(("orders", rows))
    return files


def drop(folder: Path, i: int, name: str, rows) -> None:
    """Write a file hidden, then rename it in (as writers must)."""
    tmp = folder / name / f".{i:04d}.parquet"
    pq.write_table(updates_table(ORDERS if name == "orders" else PRICES, rows), tmp)
    os.replace(tmp, folder / name / f"{i:04d}.parquet")


def output_union(out: Path) -> dict:
    rows = {}
    for name in ("priced", "per_user"):
        folder = out / name
        files = sorted(os.listdir(folder)) if folder.exists() else []
        assert all(re.fullmatch(r"step-\d{12}\.parquet", f) for f in files), files
        table = [r for f in files for r in pq.read_table(folder / f).to_pylist()]
        rows[name] = consolidate([(tuple(v for c, v in r.items() if c not in ("time", "diff")),
                                   r["time"], r["diff"]) for r in table])
    return rows


def expected(spark, files) -> dict:
    inputs = {"orders": [], "prices": []}
    for name, rows in files:
        inputs[name] += rows
    return reference(spark, load_plan(str(PLAN)).outputs, inputs)


def test_follow_steps_files_once_across_a_lost_write(spark, conf, tmp_path):
    """Files become steps (hidden and `_` names ignored); after a crash between a step's
    commit and its output files, a restarted follower writes them from the committed log and
    reads no file twice; the outputs' union is the reference answer."""
    for name in ("orders", "prices"):
        (tmp_path / name).mkdir()
    (tmp_path / "orders" / "_SUCCESS").write_text("")
    files = make_files(9)
    state, out = str(tmp_path / "state"), tmp_path / "out"
    folders = {n: str(tmp_path / n) for n in ("orders", "prices")}
    quiet = lambda *a, **k: None  # noqa: E731
    follower = Follower(Runner(load_plan(str(PLAN)), conf=conf, spark=spark, state=state),
                        folders, str(out), say=quiet)
    for i, (name, rows) in enumerate(files[:5]):
        drop(tmp_path, i, name, rows)
        if i in (0, 2):
            follower.step(follower.new_files())
    last = follower.step(follower.new_files())
    assert follower.new_files() == {}
    lost = [out / n / f"step-{last.step:012d}.parquet" for n in ("priced", "per_user")]
    lost = [p for p in lost if p.exists()]
    assert lost  # the crash: committed, its files never renamed in
    for p in lost:
        p.unlink()
    follower.runner.release_state()

    follower = Follower(Runner(load_plan(str(PLAN)), conf=conf, spark=spark, state=state),
                        folders, str(out), say=quiet)
    follower.recover()
    assert all(p.exists() for p in lost)
    assert follower.new_files() == {}
    for i, (name, rows) in enumerate(files[5:], start=5):
        drop(tmp_path, i, name, rows)
    follower.step(follower.new_files())
    follower.runner.release_state()
    assert output_union(out) == expected(spark, files)


# ---------------------------------------------------------------------------- subprocess
def start(tmp: Path, idle: float):
    argv = [sys.executable, "-m", "executor", "follow", str(PLAN),
            "--input", f"orders={tmp / 'orders'}", "--input", f"prices={tmp / 'prices'}",
            "--output", str(tmp / "out"), "--state", str(tmp / "state"), "--poll", "0.1",
            "--until-idle", str(idle), "--spark-log", str(tmp / "spark.log"),
            *CLI_SPARK]
    return subprocess.Popen(argv, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


@pytest.mark.slow
def test_follow_killed_and_restarted_writes_each_change_once(spark, tmp_path):
    """A follow process fed files while it runs is SIGKILLed at a random moment after some
    steps, restarted, fed the rest, stopped by SIGTERM (finishing its step), restarted
    again until idle: the output files' union is the reference answer, no duplicates."""
    for name in ("orders", "prices"):
        (tmp_path / name).mkdir()
    files = make_files(14)
    rng = random.Random(1)
    proc = start(tmp_path, 600)
    for i, (name, rows) in enumerate(files[:7]):
        drop(tmp_path, i, name, rows)
        time.sleep(rng.uniform(0, 0.4))
    for line in proc.stdout:  # killed after its first step, at a random moment
        if line.startswith("step "):
            time.sleep(rng.uniform(0, 1.0))
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    proc = start(tmp_path, 600)
    for i, (name, rows) in enumerate(files[7:11], start=7):
        drop(tmp_path, i, name, rows)
    for line in proc.stdout:
        if line.startswith("step "):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None

    for i, (name, rows) in enumerate(files[11:], start=11):
        drop(tmp_path, i, name, rows)
    proc = start(tmp_path, 2)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert "idle for 2 seconds: stopping" in out
    assert output_union(tmp_path / "out") == expected(spark, files)
