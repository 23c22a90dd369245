"""Iteration to a fixed point (executor/operators/iterate/, executor/operators/reduce/product.py;
both placements).

The harness of differential-dataflow's tests/bfs.rs and tests/scc.rs: random graphs whose
edges and roots come and go over many steps, every output compared at every time with a
plain recomputation; the reference interpreter on small cases; reductions at product times
checked at every grid time (the idea of tests/reduce_reference.rs); and the errors."""
from __future__ import annotations

import random
from collections import Counter, deque

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import examples, outputs_rows, run_against_reference, updates_df
from executor import PlanError, Runner
from executor.runtime.errors import StepError
from plans import Dataflow
from plans.examples import graphs
from plans.semantics import accumulate

EDGE, ROOT = "src BIGINT, dst BIGINT", "node BIGINT"
SPARK_ONLY = {"diffspark.host.step_rows": "0"}
PLACEMENTS = {"driver": {}, "spark": SPARK_ONLY}


# --------------------------------------------------------------------------- recomputation
def recompute(edges: set, roots: set) -> dict[str, set]:
    """reach, bfs and components of one graph by textbook traversals."""
    out = {}
    for s, d in edges:
        out.setdefault(s, []).append(d)
    dist = {r: 0 for r in roots}
    queue = deque(roots)
    while queue:
        n = queue.popleft()
        for m in out.get(n, []):
            if m not in dist:
                dist[m] = dist[n] + 1
                queue.append(m)
    parent = {n: n for e in edges for n in e}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for s, d in edges:
        a, b = find(s), find(d)
        parent[max(a, b)] = min(a, b)
    label = {n: min(m for m in parent if find(m) == find(n)) for n in parent}
    return {"reach": {(n,) for n in dist}, "bfs": set(dist.items()),
            "components": set(label.items())}


def random_stream(rng: random.Random, steps: int, nodes: int, start_edges: int):
    """Per step (one time each): edge and root updates, both inserted and retracted, plus
    the graph after it. A set of edges, so multiplicities stay 0 or 1."""
    edges, roots, out = set(), set(), []
    for t in range(steps):
        e_ups, r_ups = [], []
        for _ in range(start_edges if t == 0 else rng.randint(1, 4)):
            e = (rng.randrange(nodes), rng.randrange(nodes))
            e_ups.append((e, t, -1 if e in edges else 1))
            edges ^= {e}
        if t == 0 or rng.random() < 0.4:
            r = rng.randrange(nodes)
            r_ups.append(((r,), t, -1 if r in roots else 1))
            roots ^= {r}
        out.append((e_ups, r_ups, set(edges), set(roots)))
    return out


def snapshot(updates, t) -> set:
    acc = accumulate(updates, t)
    assert all(m == 1 for m in acc.values()), f"multiplicities at {t}: {acc}"
    return set(acc)


def run_graph_stream(spark, conf, stream, optimize=True, outputs=None, per_step=1):
    """Feed the stream's times `per_step` at a time (a step's epochs then iterate together);
    the runner, its outputs and where each step ran (StepResult.host)."""
    flow = Dataflow()
    graphs.build_all(flow)
    flow.outputs = {n: flow.outputs[n] for n in outputs or flow.outputs}
    runner = Runner(flow, conf=conf, spark=spark, optimize=optimize)
    hosted = []
    for t in range(0, len(stream), per_step):
        chunk = stream[t:t + per_step]
        hosted.append(runner.step(
            {"edges": updates_df(spark, EDGE, [u for c in chunk for u in c[0]]),
             "roots": updates_df(spark, ROOT, [u for c in chunk for u in c[1]])},
            upto=t + len(chunk)).host)
    return runner, outputs_rows(runner, list(flow.outputs)), hosted


def check_every_time(stream, got):
    for t, (_, _, edges, roots) in enumerate(stream):
        want = recompute(edges, roots)
        for name, rows in got.items():
            assert snapshot(rows, t) == {tuple(r) if not isinstance(r, tuple) else r
                                         for r in want[name]}, f"{name} at time {t}"


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_bfs_equals_recomputation_at_ten_times(spark, conf, placement):
    """Edges and roots inserted and retracted at 10 times, fed as 5 steps of two times each
    (a step's two epochs iterate together); bfs labels at every time equal a recomputation
    from scratch (the default suite's cut of the test below, which takes a step per time)."""
    stream = random_stream(random.Random(11), steps=10, nodes=6, start_edges=7)
    runner, got, hosted = run_graph_stream(spark, conf | PLACEMENTS[placement], stream,
                                           outputs=("bfs",), per_step=2)
    check_every_time(stream, got)
    assert any(len(s) > 1 for s in runner.rounds.values())
    assert hosted == [placement == "driver"] * 5


@pytest.mark.slow
def test_reach_bfs_components_equal_recomputation_over_ten_steps(spark, conf):
    """All three iterates, reading one arranged edges trace."""
    stream = random_stream(random.Random(7), steps=10, nodes=9, start_edges=12)
    _, got, hosted = run_graph_stream(spark, conf, stream)
    check_every_time(stream, got)
    assert all(hosted)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6))
def test_random_graph_streams(spark, conf, seed):
    stream = random_stream(random.Random(seed), steps=12, nodes=8, start_edges=10)
    _, got, _ = run_graph_stream(spark, conf, stream, optimize=seed % 2 == 0)
    check_every_time(stream, got)


def test_a_durable_iterate_resumes_from_its_state(spark, conf, tmp_path):
    """The scope's traces (two time columns) are committed with each step; a second runner
    on the state directory resumes and its next step reads them."""
    stream = random_stream(random.Random(3), steps=3, nodes=6, start_edges=7)

    def runner():
        flow = Dataflow()
        edges, roots = flow.input("edges", EDGE), flow.input("roots", ROOT)
        flow.output("bfs", graphs.bfs(roots, graphs.out_edges(edges)))
        return Runner(flow, conf=conf, spark=spark, state=str(tmp_path / "state"))

    def feed(r, t):
        e_ups, r_ups, _, _ = stream[t]
        r.step({"edges": updates_df(spark, EDGE, e_ups), "roots": updates_df(spark, ROOT, r_ups)},
               upto=t + 1)

    first = runner()
    feed(first, 0)
    feed(first, 1)
    first.release_state()
    second = runner()
    assert second.frontier == 2
    feed(second, 2)
    got = outputs_rows(second, ["bfs"])["bfs"]
    for t, (_, _, edges, roots) in enumerate(stream):
        assert snapshot(got, t) == recompute(edges, roots)["bfs"], f"bfs at time {t}"


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_reach_and_bfs_against_the_reference_interpreter(spark, conf, placement):
    """Several times in one step and across steps, a root and an edge retracted (close()
    runs on Spark: the driver's scope traces are read there)."""
    flow = Dataflow()
    edges, roots = flow.input("edges", EDGE), flow.input("roots", ROOT)
    arranged = graphs.out_edges(edges)
    flow.output("reach", graphs.reach(roots, arranged))
    flow.output("bfs", graphs.bfs(roots, arranged))
    inputs = {"edges": (EDGE, [((1, 2), 0, 1), ((2, 3), 0, 1), ((3, 1), 1, 1), ((1, 3), 2, 1),
                               ((2, 3), 3, -1), ((5, 6), 2, 1), ((6, 5), 3, 1)]),
              "roots": (ROOT, [((1,), 0, 1), ((5,), 1, 1), ((1,), 3, -1)])}
    run_against_reference(spark, conf | PLACEMENTS[placement], flow, inputs, cuts=[2, 4],
                          optimize=False)


def test_body_schema_must_match_the_variable(spark, conf):
    flow = Dataflow()
    roots = flow.input("roots", ROOT)
    flow.output("bad", roots.iterate(lambda r: r.map("node", "1L AS extra")))
    with pytest.raises(PlanError, match="body returns .* but the variable is"):
        Runner(flow, conf=conf, spark=spark)


def test_operators_that_set_times_are_refused_inside_the_body():
    flow = Dataflow()
    roots = flow.input("roots", ROOT)
    with pytest.raises(PlanError, match="temporal_filter.*inside the body"):
        roots.iterate(lambda r: r.temporal_filter(upper="node"))


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_divergence_is_refused_and_changes_nothing(spark, conf, placement):
    """A body with no fixed point hits diffspark.iterate.max_rounds; the step is refused
    whole and the runner goes on from where it was."""
    flow = Dataflow()
    xs = flow.input("xs", "n BIGINT")
    flow.output("up", xs.iterate(lambda v: xs.concat(v.map("n + 1 AS n")).distinct()
                                 .filter("n < 1000000")))
    runner = Runner(flow, conf={**conf, **PLACEMENTS[placement],
                                "diffspark.iterate.max_rounds": "4"}, spark=spark,
                    optimize=False)
    with pytest.raises(StepError, match=r"no fixed point in 4 rounds.*max_rounds=4"):
        runner.step({"xs": updates_df(spark, "n BIGINT", [((0,), 0, 1)])}, upto=1)
    assert runner.frontier == 0 and runner.output("up").count() == 0
    result = runner.step({"xs": updates_df(spark, "n BIGINT", [((999998,), 0, 1)])}, upto=1)
    assert sorted(r.n for r in runner.output("up").collect()) == [999998, 999999]
    assert result.host == (placement == "driver")


# --------------------------------------------------------------------------- three ways
def multiset_stream(rng: random.Random, steps: int, nodes: int, sizes: list[int]):
    """Inputs for run_three_ways: per step 1-2 times of edge and root updates; edges come
    with multiplicity 1 or 2 and go (negative diffs) whole or in part, some updates cancel
    within their time. Step k has about sizes[k] edge updates."""
    counts: Counter = Counter()
    roots: Counter = Counter()
    edges_up, roots_up, cuts, t = [], [], [], 0
    for k in range(steps):
        times = rng.choice([1, 2])
        for i in range(sizes[k]):
            at = t + i % times
            e = (rng.randrange(nodes), rng.randrange(nodes))
            if counts[e] and rng.random() < 0.6:
                d = -counts[e] if rng.random() < 0.5 else -1
            else:
                d = rng.choice([1, 2])
                if rng.random() < 0.2:  # +d and -1 in one time: the net survives
                    edges_up.append((e, at, d + 1))
                    d = -1
            edges_up.append((e, at, d))
            counts[e] += d
        if k == 0 or rng.random() < 0.5:
            r = (rng.randrange(nodes),)
            d = -roots[r] if roots[r] else 1
            roots_up.append((r, t, d))
            roots[r] += d
        t += times
        cuts.append(t)
    return {"edges": (EDGE, edges_up), "roots": (ROOT, roots_up)}, cuts


def run_three_ways(spark, conf, inputs, cuts, outputs, confs: dict):
    """Each runner (name -> conf overrides) fed `inputs` in steps ending at `cuts`, checked
    against the reference interpreter after every step; where each step ran, per runner."""
    from executor.reference import reference

    flow = Dataflow()
    graphs.build_all(flow)
    flow.outputs = {n: flow.outputs[n] for n in outputs}
    expected = reference(spark, flow.outputs, {n: ups for n, (_, ups) in inputs.items()})
    hosted = {}
    for name, overrides in confs.items():
        runner, lo, hosted[name] = Runner(flow, conf=conf | overrides, spark=spark), 0, []
        for upto in cuts:
            batch = {n: updates_df(spark, ddl, [u for u in ups if lo <= u[1] < upto])
                     for n, (ddl, ups) in inputs.items()}
            hosted[name].append(runner.step(batch, upto=upto).host)
            lo = upto
            got = outputs_rows(runner, outputs)
            for out in outputs:
                want = [u for u in expected[out] if u[1] < upto]
                assert got[out] == want, f"{name}: {out} after the step to {upto}"
    return hosted


# The mixed runner runs a step on Spark when an input has more than 5 updates: the stream's
# sizes switch it driver <-> Spark, each placement reading the scope traces the other wrote.
MIXED = {"diffspark.host.step_rows": "5"}
SIZES = [8, 2, 3, 7, 2]


def on_driver(inputs, cuts, limit: int = 5) -> list[bool]:
    """Per step: whether every input has at most `limit` updates (the mixed runner's rule)."""
    lows = [0] + cuts[:-1]
    return [all(sum(lo <= u[1] < hi for u in ups) <= limit for _, ups in inputs.values())
            for lo, hi in zip(lows, cuts)]


def test_graph_stream_three_ways_with_a_placement_switch(spark, conf):
    """reach and bfs over edges with multiplicities, deletions and cancelling updates: the
    driver placement and a runner switching placement mid-stream against the reference."""
    inputs, cuts = multiset_stream(random.Random(5), 5, 6, SIZES)
    hosted = run_three_ways(spark, conf, inputs, cuts, ["reach", "bfs"],
                            {"driver": {"diffspark.host.step_rows": "100"}, "mixed": MIXED})
    assert hosted == {"driver": [True] * 5, "mixed": on_driver(inputs, cuts)}
    assert len(set(hosted["mixed"])) == 2


@pytest.mark.slow
@settings(max_examples=examples(2, 1), deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6))
def test_graph_streams_three_ways(spark, conf, seed):
    """reach, bfs and components: driver, Spark and switching placements, each against the
    reference interpreter at every step."""
    inputs, cuts = multiset_stream(random.Random(seed), 5, 6, SIZES)
    hosted = run_three_ways(spark, conf, inputs, cuts, ["reach", "bfs", "components"],
                            {"driver": {"diffspark.host.step_rows": "100"},
                             "spark": SPARK_ONLY, "mixed": MIXED})
    assert hosted == {"driver": [True] * 5, "spark": [False] * 5,
                      "mixed": on_driver(inputs, cuts)}


def test_explain_shows_the_body(spark, conf):
    flow = Dataflow()
    graphs.build_all(flow)
    text = flow.explain()
    assert "Iterate[v1]" in text and "body:" in text and "Variable v1" in text


# --------------------------------------------------------------------------- product times
def reduce_at_grid(spark, conf, reduction, updates, cut):
    """Feed a reduction updates at product times (epoch, iteration) in two steps (epochs
    below / from `cut`), each round by round in the iteration coordinate, as an iterate's
    rounds do; return its emitted changes."""
    from executor.arrange.spine import materialise
    from executor.arrange.trace import Trace, View, arrange
    from executor.operators.iterate.spark import enter
    from executor.operators.reduce import product as reduce_product
    from executor.time import ITERATION

    cols = ["time", ITERATION]
    flow = Dataflow()
    node = reduction(flow.input("x", "k BIGINT, v BIGINT")).node
    keys = list(node.input.keys or ("k", "v"))
    empty = enter(updates_df(spark, "k BIGINT, v BIGINT", []), ["time"])
    frame = updates_df(spark, f"k BIGINT, v BIGINT, {ITERATION} BIGINT",
                       [((k, v, i), e, d) for (k, v), (e, i), d in updates])
    frame = frame.select("k", "v", "time", ITERATION, "diff")
    trace, out = Trace(keys, cols, 2), []
    for lower, upper in ((0, cut), (cut, 10)):
        emitted = []
        for round_ in range(6):
            ready = frame.where(f"time >= {lower} AND time < {upper} AND {ITERATION} = {round_}")
            batch, size = arrange(ready, keys, cols, 2)
            view = View(keys, trace.batches, [batch] if size else [])
            changes = materialise(reduce_product.delta(node, view, _union(emitted), lower,
                                                       round_, cols, empty, "numpy"))
            emitted.append(changes)
            out += [(tuple(r[:-3]), (r[-3], r[-2]), r[-1]) for r in changes.collect()]
            trace = trace.appended(batch, size, upper, lower - 1)
    return out


def _union(frames):
    from functools import reduce
    return reduce(lambda a, b: a.unionByName(b), frames) if frames else None


def at(updates, e, i) -> Counter:
    acc = Counter()
    for rec, (te, ti), d in updates:
        if te <= e and ti <= i:
            acc[rec] += d
    return Counter({r: m for r, m in acc.items() if m})


REDUCTIONS = {
    "count": (lambda x: x.count(by=["k"]),
              lambda acc: Counter({(k, s): 1 for k in {k for k, _ in acc}
                                   if (s := sum(m for (kk, _), m in acc.items() if kk == k))})),
    "min": (lambda x: x.min("v", by=["k"]),
            lambda acc: Counter({(k, min(v for (kk, v), m in acc.items() if kk == k and m > 0)): 1
                                 for k in {k for (k, _), m in acc.items() if m > 0}})),
    "aggregate": (lambda x: x.aggregate(by=["k"], n="count(*)", lo="min(v)", s="sum(v)"),
                  lambda acc: Counter({(k, sum(m for _, m in ms),
                                        min((v for v, m in ms if m > 0), default=None),
                                        sum(v * m for v, m in ms)): 1
                                       for k in {k for k, _ in acc}
                                       if (ms := [(v, m) for (kk, v), m in acc.items()
                                                  if kk == k])})),
    "distinct": (lambda x: x.distinct(),
                 lambda acc: Counter({r: 1 for r, m in acc.items() if m > 0})),
}

product_update = st.tuples(st.tuples(st.integers(0, 1), st.integers(0, 3)),
                           st.tuples(st.integers(0, 3), st.integers(0, 5)),
                           st.sampled_from([-1, 1, 1, 2]))


def check_grid(spark, conf, kind, updates, cut):
    reduction, static = REDUCTIONS[kind]
    out = reduce_at_grid(spark, conf, reduction, updates, cut)
    for e in range(4):
        for i in range(6):
            assert at(out, e, i) == static(at(updates, e, i)), f"{kind} at ({e}, {i})"


@pytest.mark.parametrize("kind", [pytest.param(k, marks=[] if k in ("min", "aggregate")
                                                else [pytest.mark.slow])
                                  for k in sorted(REDUCTIONS)])
@pytest.mark.parametrize("tasks", ["one task", "partitioned"])
def test_reductions_at_product_times_equal_recomputation_at_every_grid_time(spark, conf, kind,
                                                                            tasks, monkeypatch):
    """Small rounds run in one task; "partitioned" forces the shuffled plan big rounds use."""
    from executor.operators.reduce import product as reduce_product
    if tasks == "partitioned":
        monkeypatch.setattr(reduce_product, "SINGLE_TASK_ROWS", -1)
    rng = random.Random(kind)
    updates = [((rng.randrange(2), rng.randrange(4)), (rng.randrange(4), rng.randrange(6)),
                rng.choice([-1, 1, 1, 2])) for _ in range(14)]
    check_grid(spark, conf, kind, updates, cut=2)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(sorted(REDUCTIONS)), updates=st.lists(product_update, max_size=12),
       cut=st.integers(1, 3))
def test_reductions_at_product_times_hypothesis(spark, conf, kind, updates, cut):
    check_grid(spark, conf, kind, updates, cut)
