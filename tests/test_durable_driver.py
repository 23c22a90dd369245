"""Durable runners on the driver placement (executor/host.py, executor/state.py): driver steps
commit an iterate scope's traces (two time columns) and the updates held for later times (an
output's, a reduction's by a STRING key, a query relation's) as Arrow into the manifest; the
runner dies at a commit point, a new one resumes and repeats the driver from the start, each
step placed on the driver or on Spark as drawn. The outputs are the reference interpreter's."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples, outputs_rows, updates_df
from executor import Runner
from executor import state as durable
from executor.reference import reference
from plans import Dataflow
from plans.examples import graphs
from test_state import POINTS, Crash, data_files, manifest

EDGE, ROOT = "src BIGINT, dst BIGINT", "node BIGINT"
EV = "a BIGINT, tag STRING, lo BIGINT, hi BIGINT"
HORIZON = 6


def flow() -> Dataflow:
    f = Dataflow()
    edges, roots, ev = f.input("edges", EDGE), f.input("roots", ROOT), f.input("ev", EV)
    f.output("bfs", graphs.bfs(roots, graphs.out_edges(edges)))
    live = ev.temporal_filter(lower="lo", upper="hi")
    f.output("live", live)
    f.output("tags", live.count(by=["tag"]))
    f.output("paths", f.query("p(x, z) :- r(x, y), r(y, z)",
                              r=live.map("a AS x", "(a + 1) % 3 AS y")))
    return f


def feed(spark, runner, inputs: dict, cuts: list, driver: list) -> list:
    """Step to each of `cuts` from time 0, step i on the driver where driver[i] (else on
    Spark); a step the state recognises as committed is skipped wherever it was placed."""
    lo, results = 0, []
    for upto, on_driver in zip(cuts, driver):
        runner._hosted = on_driver
        result = runner.step({n: updates_df(spark, ddl, [u for u in ups if lo <= u[1] < upto])
                              for n, (ddl, ups) in inputs.items()}, upto=upto)
        assert result.host == (on_driver and not result.skipped), upto
        results.append(result)
        lo = upto
    return results


node = st.integers(0, 4)
times = st.integers(0, HORIZON - 1)
edge = st.tuples(st.tuples(node, node), times, st.sampled_from([-1, 1, 1]))
root = st.tuples(st.tuples(node), times, st.sampled_from([-1, 1, 1]))
bound = st.one_of(st.none(), st.integers(-1, HORIZON + 2))
event = st.tuples(st.tuples(st.integers(0, 3), st.sampled_from(["a", "é", None]), bound, bound),
                  times, st.sampled_from([-1, 1, 2]))


@settings(max_examples=examples(1, 2), deadline=None, suppress_health_check=list(HealthCheck))
@given(edges=st.lists(edge, min_size=1, max_size=10), roots=st.lists(root, min_size=1, max_size=3),
       events=st.lists(event, max_size=8),
       cuts=st.sets(st.integers(1, HORIZON - 1), min_size=1, max_size=2), data=st.data())
def test_durable_iterate_and_held_updates_die_resume_and_switch_placement(
        spark, conf, tmp_path_factory, monkeypatch, edges, roots, events, cuts, data):
    def die():
        raise Crash()

    cuts = sorted(cuts) + [HORIZON]
    inputs = {"edges": (EDGE, edges), "roots": (ROOT, roots), "ev": (EV, events)}
    at = data.draw(st.integers(1, len(cuts)), label="crash step")
    point = data.draw(st.sampled_from(POINTS), label="crash point")
    first, second = (data.draw(st.lists(st.booleans(), min_size=len(cuts) + 1,
                                        max_size=len(cuts) + 1), label=label)
                     for label in ("first run", "second run"))
    where = str(tmp_path_factory.mktemp("state"))
    monkeypatch.setattr(durable, "_die", die)
    monkeypatch.setenv(durable.CRASH_ENV, f"{point}@{at}")
    runner = Runner(flow(), conf=conf, spark=spark, state=where)
    with pytest.raises(Crash):
        feed(spark, runner, inputs, cuts, first)
    assert runner.steps == at - 1
    runner.release_state()
    monkeypatch.delenv(durable.CRASH_ENV)

    committed = at if point == "commit:after-rename" else at - 1
    again = Runner(flow(), conf=conf, spark=spark, state=where)
    assert again.steps == committed
    results = feed(spark, again, inputs, cuts, second)
    again._hosted = second[-1]
    results.append(again.close())
    assert results[-1].host == second[-1]
    assert [r.skipped for r in results] == [i < committed for i in range(len(cuts) + 1)]
    assert outputs_rows(again, list(flow().outputs)) == reference(
        spark, flow().outputs, {n: ups for n, (_, ups) in inputs.items()})
    assert data_files(where) == set(manifest(where)["frames"])
    again.release_state()
