"""`runner.subscribe` (executor/subscriptions.py): callbacks see each committed step's final
changes; their union over several steps is the reference interpreter's answer on both
placements; a raising callback surfaces after the step committed and the others ran;
cancel stops delivery; a resumed runner's repeated step is delivered again, marked skipped."""
from __future__ import annotations

import json
import os

import pytest

from conftest import updates_table
from executor import Runner, SubscriberError
from executor.apps.cli import load_plan
from plans.semantics import consolidate
from test_follow import ORDERS, PLAN, PRICES, expected, make_files

SPARK_ONLY = {"diffspark.host.step_rows": "0"}


def step_tables(files, t):
    """The updates of make_files' file at time t as Arrow, per input."""
    name, rows = files[t]
    return {name: updates_table(ORDERS if name == "orders" else PRICES, rows)}


def collector(seen: dict, name: str):
    def callback(table, result):
        assert set(table.column_names) >= {"time", "diff"}
        assert all(result.lower <= t < result.upper for t in table.column("time").to_pylist())
        seen.setdefault(name, []).append((result.step, table.to_pylist()))
    return callback


def union(seen: dict, name: str) -> list:
    return consolidate([(tuple(v for c, v in r.items() if c not in ("time", "diff")),
                         r["time"], r["diff"]) for _, rows in seen.get(name, []) for r in rows])


@pytest.mark.parametrize("overrides", [{}, SPARK_ONLY], ids=["driver", "spark"])
def test_subscribers_see_every_step_as_the_reference(spark, conf, overrides):
    files = make_files(6)
    runner = Runner(load_plan(str(PLAN)), conf=conf | overrides, spark=spark)
    seen: dict = {}
    subs = [runner.subscribe(n, collector(seen, n)) for n in ("priced", "per_user")]
    for t in range(len(files)):
        runner.step(step_tables(files, t), upto=t + 1)
    assert [s for s, _ in seen["priced"]] == list(range(1, len(files) + 1))  # empty ones too
    want = expected(spark, files)
    assert {n: union(seen, n) for n in want} == want
    subs[0].cancel()
    subs[0].cancel()  # idempotent
    runner.step({}, upto=len(files) + 1)
    assert len(seen["priced"]) == len(files) and len(seen["per_user"]) == len(files) + 1


def test_a_raising_callback_surfaces_after_the_step_committed(spark, conf, tmp_path):
    files = make_files(4)
    state = str(tmp_path / "state")
    runner = Runner(load_plan(str(PLAN)), conf=conf, spark=spark, state=state)
    seen: dict = {}

    def boom(table, result):
        if result.step == 2:
            raise ValueError("sink down")

    runner.subscribe("priced", boom)
    runner.subscribe("priced", collector(seen, "priced"))  # subscribed after: still called
    runner.step(step_tables(files, 0), upto=1)
    with pytest.raises(SubscriberError, match=r"step 2 committed, but 1 subscriber callback"
                                              r"\(s\) raised; first, on output 'priced': "
                                              r"ValueError: sink down") as info:
        runner.step(step_tables(files, 1), upto=2)
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.result.step == 2 and [s for s, _ in seen["priced"]] == [1, 2]
    assert runner.frontier == 2
    with open(os.path.join(state, "manifest.json")) as f:
        assert json.load(f)["steps"] == 2  # committed before the callbacks ran
    with pytest.raises(Exception, match="callable"):
        runner.subscribe("priced", 42)
    with pytest.raises(Exception, match="unknown output 'nope'"):
        runner.subscribe("nope", print)

    # a resumed runner repeating steps 1-2 delivers them again, marked skipped
    runner.release_state()
    again = Runner(load_plan(str(PLAN)), conf=conf, spark=spark, state=state)
    replayed: list = []
    again.subscribe("priced", lambda table, r: replayed.append((r.step, r.skipped,
                                                                table.num_rows)))
    for t in range(len(files)):
        again.step(step_tables(files, t), upto=t + 1)
    again.release_state()
    assert [(s, k) for s, k, _ in replayed] == [(1, True), (2, True), (3, False), (4, False)]
    assert replayed[1][2] == len(seen["priced"][1][1])
