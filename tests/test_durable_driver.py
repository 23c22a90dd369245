"""Durable runners on the driver placement (executor/driver.py, executor/durability/state.py):
driver steps commit an iterate scope's traces (two time columns) and the updates held for later
times (an output's, a reduction's by a STRING key, a query relation's) as Arrow into the manifest;
the runner dies at a commit point, a new one resumes and repeats the driver from the start, each
step placed on the driver or on Spark as drawn. The outputs are the reference interpreter's."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import examples, updates_df
from plans import Dataflow
from plans.examples import graphs
from test_state import die_and_resume

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
        runner._on_driver = on_driver
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
    cuts = sorted(cuts) + [HORIZON]
    inputs = {"edges": (EDGE, edges), "roots": (ROOT, roots), "ev": (EV, events)}

    def close(runner, placed):
        runner._on_driver = placed[-1]
        return runner.close()
    results, second = die_and_resume(
        spark, conf, flow, inputs, cuts, str(tmp_path_factory.mktemp("state")), monkeypatch,
        data, lambda runner, placed: feed(spark, runner, inputs, cuts, placed),
        places=len(cuts) + 1, close=close)
    assert results[-1].host == second[-1]
