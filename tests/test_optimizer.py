"""The e-graph optimizer (plans/optimizer): every IR node survives encode/decode, each rule
fires on a plan made for it, and the optimized plan equals the plan as written on random
multi-step update streams (negative diffs included) through the reference interpreter, and
for a few plans through Spark. The triangle derivation, termination on 50 operators."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from conftest import run_against_reference
from plans import Dataflow, ir
from plans.optimizer import DEFAULT, optimize
from plans.optimizer.cost import plan_cost

E, W = "src BIGINT, dst BIGINT", "node BIGINT, w BIGINT"
HORIZON = 6

small = st.integers(0, 3)
edge = st.tuples(st.tuples(small, small), st.integers(0, HORIZON - 1),
                 st.sampled_from([-1, 1, 1, 2]))
weight = st.tuples(st.tuples(small, st.one_of(st.none(), st.integers(-3, 3))),
                   st.integers(0, HORIZON - 1), st.sampled_from([-2, -1, 1, 2]))
streams = st.fixed_dictionaries({"e": st.lists(edge, max_size=10),
                                 "f": st.lists(edge, max_size=6),
                                 "w": st.lists(weight, max_size=6)})


def agree(spark, flows: list[Dataflow], inputs: dict) -> None:
    """Each flow's optimized outputs equal its written ones, through the interpreter (one
    evaluation for all, so equal sub-plans are evaluated once)."""
    from executor.reference import reference
    both = {}
    for i, flow in enumerate(flows):
        for name, node in optimize(flow.outputs).plan.items():
            both[f"{i}.{name}.optimized"] = node
            both[f"{i}.{name}.written"] = flow.outputs[name]
    got = reference(spark, both, inputs)
    for key in both:
        if key.endswith(".written"):
            assert got[key.replace(".written", ".optimized")] == got[key], key


def nodes(plan, kind):
    return [n for n in ir.topological(list(plan.values())) if isinstance(n, kind)]


def double(xp, cols):
    return {"src": cols["src"] * 2, "dst": cols["dst"]}


class Iterate(ir.Node):
    """A node kind the optimizer does not know (as iteration will add): it must pass
    through unchanged, with its sub-plan."""

    def __init__(self, body):
        object.__setattr__(self, "body", body)

    def children(self):
        return (self.body,)

    def label(self):
        return "Iterate"

    def __eq__(self, other):
        return isinstance(other, Iterate) and other.body == self.body

    def __hash__(self):
        return hash(("iterate", self.body))


class Handle:
    keys, schema = ("src",), None


# --------------------------------------------------------------------------- encode/decode
def every_node_flow() -> Dataflow:
    flow = Dataflow()
    e, w = flow.input("e", E), flow.input("w", W)
    lin = (e.map("src", "dst", "src + dst AS s").filter("s > 0").flat_map("array(struct(src, dst))")
           .explode("array(named_struct('src', src, 'dst', dst, 'diff', 2L))")
           .temporal_filter(lower="src").join_function("array(named_struct('src', src, 'dst', dst))")
           .negate().join_function(kernel=double, schema=E))
    flow.output("linear", lin)
    flow.output("concat", e.concat(lin).consolidate())
    flow.output("self", e.arrange_by_self())
    flow.output("join", e.join(w.map("node AS src", "w"), on=["src"]))
    flow.output("semi", e.antijoin(w.map("node AS src"), on=["src"]))
    flow.output("reduce", w.count(by=["node"]))
    flow.output("distinct", w.distinct())
    flow.output("query", flow.query("t(x, y, z) :- e(x, y), e(y, z), e(x, z)"))
    flow.outputs["imported"] = ir.Imported("other", Handle())
    flow.outputs["opaque"] = Iterate(ir.Linear(flow.inputs["e"], (ir.Filter("src > 1"),)))
    return flow


def test_every_node_round_trips_unchanged():
    flow = every_node_flow()
    kinds = {type(n) for n in ir.topological(list(flow.outputs.values()))}
    assert kinds >= {ir.Input, ir.Linear, ir.Concat, ir.Consolidate, ir.Arrange, ir.Join,
                     ir.Reduce, ir.Query, ir.Imported, Iterate}
    done = optimize(flow.outputs, rulesets=())
    assert done.plan == flow.outputs and not done.fired


def test_unknown_nodes_pass_through_all_rules():
    flow = every_node_flow()
    plan = optimize(flow.outputs).plan
    assert plan["opaque"] is flow.outputs["opaque"] and plan["imported"] is flow.outputs["imported"]
    assert set(plan) == set(flow.outputs)


def test_unknown_ruleset_is_refused():
    with pytest.raises(ValueError, match="unknown rulesets"):
        optimize(every_node_flow().outputs, rulesets=("nope",))


# --------------------------------------------------------------------------- rules
def fused_flow() -> Dataflow:
    flow = Dataflow()
    e = flow.input("e", E)
    chain = (e.filter("src <= dst").map("src", "dst", "dst - src AS len").negate()
             .explode("array(named_struct('src', src, 'len', len, 'diff', 2L))")
             .temporal_filter(lower="src", upper="len + 3").map("src"))
    flow.output("chain", chain)
    return flow


def test_fusion_makes_one_linear_operator():
    done = optimize(fused_flow().outputs)
    assert done.fired["fuse"] > 0
    assert [len(n.stages) for n in nodes(done.plan, ir.Linear)] == [6]
    assert done.after.total < done.before.total


def _flows(makers: dict) -> dict[str, Dataflow]:
    """Per name, a one-output plan `make(e, f, w)` over edges e, f and weights w keyed by src."""
    def flow_of(make):
        flow = Dataflow()
        e, f, w = flow.input("e", E), flow.input("f", E), flow.input("w", W)
        flow.output("out", make(e, f, w.map("node AS src", "w")))
        return flow

    return {name: flow_of(make) for name, make in makers.items()}


def pushdown_flows() -> dict[str, Dataflow]:
    """Per pushdown rule, a one-output plan where it fires and pays off."""
    return _flows({
        "linear_below_concat": lambda e, f, w: e.concat(f.map("dst AS src", "src AS dst"))
        .filter("dst > 0").map("src", "dst + 1 AS d"),
        "filter_below_join_left": lambda e, f, w: e.join(w, on=["src"]).filter("dst >= 1"),
        "filter_below_join_right": lambda e, f, w: e.join(w, on=["src"])
        .filter("w IS NOT NULL AND w > -2"),
        "filter_below_join_key": lambda e, f, w: f.join(w, on=["src"]).filter("src != 2"),
        "filter_below_semijoin": lambda e, f, w: f.semijoin(w, on=["src"]).filter("dst < 3"),
        "temporal_filter_below_join": lambda e, f, w: f.join(w, on=["src"])
        .temporal_filter(lower="dst"),
        "filter_below_reduce_key": lambda e, f, w: e.count(by=["src"]).filter("src > 0"),
        "read_arrangement": lambda e, f, w: e.arrange_by_key("dst").filter("src < 3"),
    })


@pytest.mark.parametrize("rule", sorted(pushdown_flows()))
def test_pushdown_rule_fires_and_the_predicate_moves_below(rule):
    flow = pushdown_flows()[rule]
    done = optimize(flow.outputs)
    fired = "filter_below_join_left" if rule == "temporal_filter_below_join" else rule
    assert done.fired.get(fired, 0) > 0
    out = done.plan["out"]
    below = {"linear_below_concat": ir.Concat, "read_arrangement": ir.Linear,
             "filter_below_reduce_key": ir.Reduce}.get(rule, ir.Join)
    assert isinstance(out, below)  # the predicate now runs first
    if rule == "filter_below_join_key":
        assert all(isinstance(side.input, ir.Linear) for side in (out.left, out.right))
    if rule == "read_arrangement":
        assert out == ir.Linear(flow.inputs["e"], (ir.Filter("src < 3"),))
    assert done.after.total < done.before.total


def projection_flows() -> dict[str, Dataflow]:
    """One-output plans where a projection of a join's output narrows the join's sides (key
    columns kept; the projection itself stays on top), named by the rule that fires."""
    return _flows({
        "project_below_join": lambda e, f, w: e.join(w, on=["src"]).map("w AS weight", "src"),
        "project_below_join (semijoin)": lambda e, f, w: e.map("dst", "src", "src + dst AS s")
        .semijoin(w, on=["src"]).map("s", "s AS t"),
        "narrow_below_filter": lambda e, f, w: f.join(w, on=["src"]).filter("w > 0")
        .map("dst", "src"),
    })


@pytest.mark.parametrize("rule", sorted(projection_flows()))
def test_projection_narrows_the_sides_of_a_join(rule):
    from plans.optimizer.columns import columns
    flow = projection_flows()[rule]
    done = optimize(flow.outputs)
    assert done.fired.get(rule.split()[0], 0) > 0 and done.fired.get("project_below_join", 0) > 0
    out = done.plan["out"]
    assert isinstance(out, ir.Linear) and out.stages == flow.outputs["out"].stages
    [before], [after] = nodes(flow.outputs, ir.Join), nodes(done.plan, ir.Join)
    width = [len(columns(side, {})) for j in (before, after) for side in (j.left, j.right)]
    assert width[2] + width[3] < width[0] + width[1]  # fewer columns arranged
    assert done.after.cells < done.before.cells and done.after.total < done.before.total


def test_projections_reading_computed_or_every_column_stay():
    flow = Dataflow()
    e, w = flow.input("e", E), flow.input("w", W)
    j = e.join(w.map("node AS src", "w"), on=["src"])
    flow.output("computed", j.map("src", "dst + w AS s"))
    flow.output("every", j.map("w", "dst", "src AS key"))
    plan = optimize(flow.outputs).plan
    assert plan == flow.outputs


def test_filters_over_a_shared_join_stay_above_it():
    """Moving both filters below would arrange both inputs twice: the cost keeps one join."""
    flow = Dataflow()
    e, w = flow.input("e", E), flow.input("w", W)
    j = e.join(w.map("node AS src", "w"), on=["src"])
    flow.output("a", j.filter("dst >= 1"))
    flow.output("b", j.filter("w > 0"))
    assert optimize(flow.outputs).plan == flow.outputs


def test_predicates_over_both_sides_or_expressions_stay():
    flow = Dataflow()
    e, w = flow.input("e", E), flow.input("w", W)
    j = e.join(w.map("node AS src", "w"), on=["src"])
    flow.output("both", j.filter("dst < w"))
    flow.output("lambda", j.filter("exists(array(dst), v -> v > 1)"))
    flow.output("reduce", e.count(by=["src"]).filter("count > 1"))
    plan = optimize(flow.outputs).plan
    assert plan["both"] == flow.outputs["both"] and plan["lambda"] == flow.outputs["lambda"]
    assert plan["reduce"] == flow.outputs["reduce"]


def sharing_flow() -> Dataflow:
    """The diamond: two outputs arrange what becomes one collection by one key."""
    flow = Dataflow()
    e, f, w = flow.input("e", E), flow.input("f", E), flow.input("w", W)
    flow.output("count", e.concat(f).filter("dst > 0").consolidate().count(by=["src"]))
    flow.output("join", e.filter("dst > 0").concat(f.filter("dst > 0"))
                .join(w.map("node AS src", "w"), on=["src"]))
    return flow


def test_identical_arrangements_are_shared_across_outputs():
    flow = sharing_flow()
    done = optimize(flow.outputs)
    assert done.fired["arrange_consolidated"] > 0
    def by_src(plan):
        return {n for n in nodes(plan, ir.Arrange) if n.keys == ("src",)}

    assert len(by_src(flow.outputs)) == 3 and len(by_src(done.plan)) == 2
    assert done.after.state < done.before.state


def renamed_flow() -> Dataflow:
    """Readers of one arrangement of e under other names (SQL names each table reference's
    columns afresh): a join by `k` (values `v`), a join by `k` (values `d`, after a filter
    written above the rename), a sum and a max by other key names, and one that differs
    (a computed value) and so keeps its own."""
    flow = Dataflow()
    e, f, w = flow.input("e", E), flow.input("f", E), flow.input("w", W)
    weights = w.map("node AS k", "w")
    flow.output("join", e.filter("dst > 0").map("src AS k", "dst AS v").join(weights, on=["k"]))
    flow.output("again", e.map("dst AS d", "src AS k").filter("d > 0")
                .join(f.map("src AS k", "dst AS u"), on=["k"]))
    flow.output("sum", e.filter("dst > 0").map("src AS g", "dst AS x").sum("x", by=["g"]))
    flow.output("max", e.map("dst AS m", "src AS h").filter("m > 0").max("m", by=["h"])
                .map("h", "m AS top"))
    flow.output("own", e.filter("dst > 0").map("src AS g", "dst + 1 AS x").sum("x", by=["g"]))
    # a projection of those records (keys only), and joins keyed by other names (the other
    # side's keys are renamed): the same arrangement serves them too
    flow.output("count", e.filter("dst > 0").map("src AS p").count(by=["p"]))
    flow.output("renamed", e.filter("dst > 0").map("src AS j", "dst AS y")
                .join(w.filter("w > 0").map("node AS j", "w AS z"), on=["j"]))
    flow.output("semi", e.filter("dst > 0").map("dst AS t", "src AS s")
                .semijoin(w.filter("w < 0").map("node AS s"), on=["s"]))
    return flow


def pruning_flow(seen: bool = False) -> Dataflow:
    """A filter's column (`w`) and a second copy of the key (`node`), read by nothing above
    the joins: the maps choosing the output are a chain (as SQL's GROUP BY and outer joins
    lower), which the e-graph's project_below_join does not see through."""
    flow = Dataflow()
    e, w = flow.input("e", E), flow.input("w", W)
    side = w.filter("w > 0").map("node AS src", "w", "node")
    inner = e.join(side, on=["src"]).map("src AS g", "src", "dst", "w", "node")
    flow.output("inner", inner.map("g", "dst + 1 AS d"))
    outer = e.join(side, on=["src"], how="left").map("src AS g", "src", "dst", "w", "node")
    flow.output("outer", outer.map("g", "dst").count(by=["g"]))
    # a chain whose last map lists every column and the next key (SQL's joins lower so),
    # read only by the next join: it keeps what that join and the output read
    keyed = e.join(side, on=["src"]).map("src", "dst", "w", "node", "dst AS k")
    flow.output("chained", keyed.join(w.map("node AS k", "w AS v"), on=["k"]).map("src", "v"))
    if seen:  # a join whose output columns are the output's: nothing to narrow
        flow.output("seen", e.join(w.filter("w > 0").map("node AS src", "w"), on=["src"]))
    return flow


def test_columns_nothing_reads_above_a_join_are_not_arranged():
    from plans.optimizer.columns import columns
    flow = pruning_flow(seen=True)
    done = optimize(flow.outputs, tuple(r for r in DEFAULT if r != "share"))
    assert done.fired.get("prune", 0) > 0
    # with share, the narrowed sides read the arrangement `seen` keeps, (src, w)
    assert optimize(flow.outputs).fired["share"] > 0

    def arranged(plan, name):
        return {columns(n, {}) for n in nodes({name: plan[name]}, ir.Arrange)}

    for name in ("inner", "outer"):  # every join's right side keeps its key alone
        assert ("src", "w", "node") in arranged(flow.outputs, name)
        assert not any({"w", "node"} & set(cols) for cols in arranged(done.plan, name)), name
    # the pass alone (the e-graph's project_below_join narrows this plan too): the chain's
    # unread columns leave it, and so the arrangements of the join below it
    from plans.optimizer.prune import pruned
    narrowed = pruned({"chained": flow.outputs["chained"]})[0]
    assert [sorted(arranged(plan, "chained")) for plan in (flow.outputs, narrowed)] == [
        [("k", "v"), ("src", "dst"), ("src", "dst", "w", "node", "k"), ("src", "w", "node")],
        [("k", "v"), ("src",), ("src", "dst"), ("src", "k")]]
    assert ("src", "w") in arranged(done.plan, "seen")  # the join's output shows `w`


def test_chains_drop_only_renames_nothing_later_reads():
    from plans.optimizer.prune import trimmed
    m, f = ir.Map, ir.Filter
    assert trimmed((m(("a", "b AS c", "d")), f("c > 0"), m(("a AS x",)))) == \
        (m(("a", "b AS c")), f("c > 0"), m(("a AS x",)))
    # a later expression of the same map reads an alias (Spark's lateral alias)
    assert trimmed((m(("a", "b AS g", "to_json(struct(`g`)) AS k")), m(("k",))))[0] == \
        m(("b AS g", "to_json(struct(`g`)) AS k"))
    assert trimmed((m(("a", "b")), m(("1 AS one",))))[0] == m(("a",))  # never emptied
    for last in ("*", "a + b"):  # names Spark makes: nothing is known, nothing dropped
        assert trimmed((m(("a", "b")), m((last,)))) == (m(("a", "b")), m((last,)))
    # a map selecting exactly the previous map's columns, in order, is the same chain
    assert trimmed((m(("a", "b AS c")), m(("a", "c")))) == (m(("a", "b AS c")),)
    # narrower: the first map keeps what the selection reads, and then is the selection
    assert trimmed((m(("a", "b AS c")), m(("a",)))) == (m(("a",)),)
    for other in (("c", "a"), ("a", "c AS d")):  # reordered, renamed: both maps stay
        assert len(trimmed((m(("a", "b AS c")), m(other)))) == 2, other
    # a computed expression stays (it may raise under ANSI), a rename goes
    assert trimmed((m(("a", "b + 1 AS c", "d AS e")), m(("a AS x",)))) == \
        (m(("a", "b + 1 AS c")), m(("a AS x",)))


def test_arrangements_equal_up_to_names_are_one_trace(spark, conf):
    """share.py: the seven readers of e's (src, dst; dst > 0) under other names, or of its
    keys alone, read one arrangement (a join keyed by another name through its other side's
    keys renamed), in both placements and against the interpreter; a computed value keeps
    its own, and so do arrangements whose filters, keys or values differ."""
    from plans.optimizer.share import _form

    flow = renamed_flow()
    done = optimize(flow.outputs)
    assert done.fired["share"] == 6

    def of_e(plan):
        return [n for n in nodes(plan, ir.Arrange) if ir.arranged_input(n) == "e"]

    assert len(of_e(optimize(flow.outputs, tuple(r for r in DEFAULT if r != "share"))
                    .plan)) == 8
    assert len(of_e(done.plan)) == 2
    # the readers' output names and order are the written ones
    from plans.optimizer.columns import columns
    for name, node in done.plan.items():
        assert columns(node, {}) == columns(flow.outputs[name], {}), name

    def form(*stages, keys=("k",)):
        node = ir.Arrange(ir.Linear(ir.Input("e", E), tuple(stages)), keys)
        return _form(node, {})

    m, f = ir.Map, ir.Filter
    one = form(m(("src AS k", "dst AS v")), f("v > 1"))
    two = form(f("dst > 1"), m(("dst AS x", "src AS k")))
    assert one.group == two.group and one.covers(two) and two.covers(one)
    assert form(m(("src AS k", "dst AS v")), f("v > 2")).group != one.group  # another filter
    assert form(m(("dst AS k", "src AS v")), f("k > 1")).group != one.group  # another key
    other = form(f("dst > 1"), m(("src AS k", "dst + 0 AS v")))  # another value
    assert other.group == one.group and not one.covers(other) and not other.covers(one)
    keys = form(f("dst > 1"), m(("src AS k",)))  # a projection: covered
    assert one.covers(keys) and not keys.covers(one)
    for opaque in (m(("src AS k", "transform(array(dst), x -> x) AS v")),  # binds a name
                   m(("src AS k", "k AS v")),                             # a lateral alias
                   ir.Negate()):                                         # not a map/filter
        assert form(opaque) is None, opaque
    inputs = {"e": (E, SPARK_UPDATES["e"] + [((4, None), 1, 1), ((2, 3), 3, -2)]),
              "f": (E, SPARK_UPDATES["f"]), "w": (W, SPARK_UPDATES["w"])}
    for placement in ({}, {"diffspark.host.step_rows": "0"}):
        runner = run_against_reference(spark, conf | placement, flow, inputs, [1, 2, 3, 4])
        assert len([n for n in runner.stats().values() if n["input"] == "e"]) == 2


def every_rule_flows() -> list[Dataflow]:
    return [fused_flow(), sharing_flow(), *pushdown_flows().values(),
            *projection_flows().values(), naive_triangles(False), naive_triangles(True),
            pruning_flow(), renamed_flow()]


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(inputs=streams)
def test_optimized_plans_match_the_reference(spark, inputs):
    """A few flows, few examples (each costs Spark evaluations): the slow test runs all."""
    pushdown = pushdown_flows()
    flows = [fused_flow(), sharing_flow(), naive_triangles(True),
             pushdown["filter_below_join_key"], pushdown["filter_below_semijoin"],
             projection_flows()["narrow_below_filter"], pruning_flow(), renamed_flow()]
    agree(spark, flows, {**inputs, "g": inputs["e"] + inputs["f"]})


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(inputs=streams)
def test_optimized_plans_match_the_reference_long(spark, inputs):
    """Every rule's flow per example (an example took ~5 minutes on the shared machine, so
    4 examples: CI runs this)."""
    agree(spark, every_rule_flows(), {**inputs, "g": inputs["e"] + inputs["f"]})


SPARK_UPDATES = {"e": [((1, 2), 0, 1), ((2, 3), 1, 2), ((1, 2), 3, -1), ((3, 0), 2, 1)],
                 "f": [((2, 5), 0, 1), ((0, 1), 2, -1), ((0, 1), 1, 1)],
                 "w": [((1, 4), 0, 1), ((2, None), 2, 1), ((2, -3), 3, 1)]}


def on_spark(spark, conf, flow, cuts=(2, 4)):
    """Steps ending at each cut (the last past every update's time), then close."""
    return run_against_reference(spark, conf, flow, {n: (E if n != "w" else W, u)
                                                     for n, u in SPARK_UPDATES.items()
                                                     if n in flow.inputs}, cuts)


def test_optimized_plan_runs_on_spark(spark, conf):
    flow = Dataflow()
    e, w = flow.input("e", E), flow.input("w", W)
    weights = w.map("node AS src", "w")
    flow.output("key", e.join(weights, on=["src"]).filter("src != 2"))
    flow.output("left", e.join(weights.filter("w > 0"), on=["src"]).filter("dst > 2"))
    flow.output("narrow", flow.input("f", E).join(w.map("node AS src", "w AS v"), on=["src"])
                .map("v", "src"))
    runner = on_spark(spark, conf, flow)
    assert runner.plan == optimize(flow.outputs).plan != flow.outputs
    assert {"filter_below_join_key", "filter_below_join_left", "fuse", "project_below_join"} \
        <= set(optimize(flow.outputs).fired)
    assert len(nodes({"n": runner.plan["narrow"]}, ir.Join)[0].left.input.stages) == 1
    from executor import Runner
    assert Runner(flow, conf=conf, spark=spark, optimize=False).plan == flow.outputs


def runners_agree(spark, conf, flow, inputs: dict, cuts) -> None:
    """Runner(optimize=False) and Runner(optimize=True) fed the same steps (ending at each
    cut, then closed) have equal outputs after every step."""
    from conftest import outputs_rows, updates_df
    from executor import Runner
    runners = [Runner(flow, conf=conf, spark=spark, optimize=o) for o in (False, True)]
    assert runners[1].plan != runners[0].plan
    lo = 0
    for upto in list(cuts) + [None]:
        for runner in runners:
            if upto is None:
                runner.close()
            else:
                runner.step({n: updates_df(spark, W if n == "w" else E,
                                           [u for u in inputs[n] if lo <= u[1] < upto])
                             for n in flow.inputs}, upto=upto)
        lo = upto
        written, optimized = (outputs_rows(r, list(flow.outputs)) for r in runners)
        assert optimized == written, f"after the step to {upto}"


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(inputs=streams, data=st.data())
def test_optimized_runners_match_written_runners_long(spark, conf, inputs, data):
    """Through Spark: one rule's flow per example, random updates in three steps."""
    flows = every_rule_flows()
    flow = flows[data.draw(st.integers(0, len(flows) - 1), label="flow")]
    runners_agree(spark, conf, flow, {**inputs, "g": inputs["e"] + inputs["f"]}, cuts=(2, 4))


@pytest.mark.slow
def test_shared_and_pushed_down_plans_run_on_spark(spark, conf):
    for flow in (sharing_flow(), *pushdown_flows().values(), *projection_flows().values()):
        on_spark(spark, conf, flow, cuts=(1, 3, 4))


# --------------------------------------------------------------------------- delta queries
def naive_triangles(right_deep: bool = False) -> Dataflow:
    """delta(join(join(g1, g2), g3)): the triangle self-join as binary joins."""
    flow = Dataflow()
    g = flow.input("g", E)
    a, b = g.map("src AS x", "dst AS y"), g.map("src AS y", "dst AS z")
    c = g.map("src AS x", "dst AS z")
    if right_deep:
        tri = a.join(b.join(c, on=["z"]), on=["x", "y"])
    else:
        tri = a.join(b, on=["y"]).join(c, on=["x", "z"])
    flow.output("tri", tri.filter("x < y"))
    return flow


@pytest.mark.parametrize("right_deep", [False, True])
def test_naive_triangle_join_is_derived_into_delta_rules(right_deep):
    from plans import query as cq
    flow = naive_triangles(right_deep)
    done = optimize(flow.outputs)
    for rule in ("delta_join", "join_over_plus", "delta_query"):
        assert done.fired.get(rule, 0) > 0, rule
    assert done.fired.get("join_assoc", 0) + done.fired.get("join_assoc_prev", 0) > 0
    [query] = nodes(done.plan, ir.Query)
    assert query.inputs == (flow.inputs["g"],) and query.relations == ("g",)
    assert sorted(str(a) for a in query.query.atoms) == ["g(x, y)", "g(x, z)", "g(y, z)"]
    rules = cq.delta_rules(query.query, query.order)
    assert len(rules) == 3  # one delta rule per atom, earlier atoms new, later ones old
    assert {e.reads for r in rules for s in r.steps for e in s.extenders} == {"new", "old"}
    assert query.query.head == ir_columns(flow.outputs["tri"].input)
    # preferred by cost: fewer records kept (no intermediate join arranged)
    assert done.after.state < done.before.state and done.after.total < done.before.total
    without = optimize(flow.outputs, rulesets=("pushdown", "sharing", "fusion"))
    assert not nodes(without.plan, ir.Query)


def ir_columns(node):
    from plans.optimizer.columns import columns
    return columns(node, {})


def test_two_atom_joins_stay_joins_and_computed_atoms_are_relations():
    flow = Dataflow()
    g = flow.input("g", E)
    flow.output("two", g.map("src AS x", "dst AS y").join(g.map("src AS y", "dst AS z"), on=["y"]))
    flow.output("computed", g.map("src AS x", "dst + 1 AS y")
                .join(g.map("src AS y", "dst AS z"), on=["y"])
                .join(g.map("src AS z", "dst AS u"), on=["z"]))
    plan = optimize(flow.outputs).plan
    assert not nodes({"two": plan["two"]}, ir.Query)
    assert nodes({"c": plan["computed"]}, ir.Query)  # a computed column is a relation of its own


@pytest.mark.slow
def test_derived_triangles_run_on_spark(spark, conf):
    ups = [((1, 2), 0, 1), ((2, 3), 0, 1), ((1, 3), 1, 1), ((3, 4), 1, 1), ((2, 4), 2, 1),
           ((1, 3), 3, -1)]
    runner = run_against_reference(spark, conf, naive_triangles(), {"g": (E, ups)}, [2, 4])
    assert any(isinstance(n, ir.Query) for n in ir.topological(list(runner.plan.values())))


# --------------------------------------------------------------------------- bounds, cost
def fifty_operators() -> Dataflow:
    flow = Dataflow()
    e, f = flow.input("e", E), flow.input("f", E)
    c = e.concat(f)
    for i in range(20):
        c = c.filter(f"src > {i}") if i % 2 else c.map("src", "dst")
    g = c.map("src AS x", "dst AS y")
    tri = g.join(c.map("src AS y", "dst AS z"), on=["y"]).join(c.map("src AS x", "dst AS z"),
                                                                on=["x", "z"])
    flow.output("tri", tri.filter("x > 1"))
    for i in range(4):
        flow.output(f"count{i}", c.concat(e.negate()).filter(f"dst > {i}").count(by=["src"]))
    flow.output("pairs", c.join(f, on=["src"]).filter("src > 1").distinct())
    flow.output("narrow", c.join(f.map("src", "dst AS d"), on=["src"]).map("d", "src"))
    return flow


def test_optimizer_terminates_quickly_on_fifty_operators():
    flow = fifty_operators()
    assert len(ir.topological(list(flow.outputs.values()))) >= 50
    started = time.perf_counter()
    done = optimize(flow.outputs, rulesets=("pushdown", "sharing", "fusion", "incremental"))
    assert time.perf_counter() - started < 20
    assert done.after.total <= done.before.total


def test_cost_counts_shared_sub_plans_once():
    flow = Dataflow()
    e = flow.input("e", E)
    arranged = e.arrange_by_key("src")
    flow.output("a", arranged)
    one = plan_cost(flow.outputs)
    flow.output("b", arranged)
    assert plan_cost(flow.outputs) == one
    flow.output("c", e.arrange_by_key("dst"))
    assert plan_cost(flow.outputs).state == 2 * one.state


def test_results_are_cached_per_plan():
    flow = fused_flow()
    assert optimize(flow.outputs) is optimize(dict(flow.outputs))


def test_a_node_keeps_its_hash_but_a_pickle_does_not_carry_it():
    """Nodes cache their hash (plans/ir.py `_hashed_once`); a pickled node is hashed anew
    where it is loaded, since a string's hash differs from one process to the next."""
    import pickle

    flow = Dataflow()
    node = flow.input("e", "a BIGINT, b BIGINT").map("a AS b", "b AS a").distinct().node
    h = hash(node)
    assert node.__dict__["_hash"] == h and hash(node) == h
    copy = pickle.loads(pickle.dumps(node))
    assert "_hash" not in copy.__dict__ and copy == node and hash(copy) == h
    assert isinstance(copy, ir.Node)


def test_a_star_reads_every_record_column_in_every_placement(spark, conf):
    """`*` in an expression stands for the stage's record columns: the optimizer narrows no
    arrangement under it (prune and project_below_join read it as every column), and
    neither placement nor the interpreter lets it see an update's time and diff (an
    insertion and its retraction stay one record that cancels)."""
    from executor import Runner
    from plans.optimizer.columns import columns, refs
    from plans.schema import expand_stars

    assert refs("to_json(struct(*)) AS s") is None and {"a", "b"} <= refs("a * b AS c")
    assert expand_stars(["*", "hash(a, *) AS h", "a * 2 AS b", "'*' AS c"], ["a", "x`y"]) == \
        ["`a`", "`x``y`", "hash(a, `a`, `x``y`) AS h", "a * 2 AS b", "'*' AS c"]
    flow = Dataflow()
    e, w = flow.input("e", E), flow.input("w", W)
    j = e.join(w.map("node AS src", "w"), on=["src"])
    flow.output("json", j.map("src", "to_json(struct(*)) AS s").map("s"))
    flow.output("hashed", j.filter("hash(*) % 2 = 0").map("src", "dst"))
    flow.output("all", e.map("*", "src + dst AS total"))
    done = optimize(flow.outputs)
    for name in ("json", "hashed"):
        assert {columns(n, {}) for n in nodes({name: done.plan[name]}, ir.Arrange)} == \
            {("src", "dst"), ("src", "w")}, name
    inputs = {"e": (E, [((1, 2), 0, 1), ((1, 3), 0, 1), ((2, 5), 1, 1), ((1, 2), 2, -1),
                        ((1, 2), 3, 1)]),
              "w": (W, [((1, 7), 0, 1), ((2, None), 1, 1), ((1, 7), 3, -1), ((1, 8), 3, 1)])}
    for placement in ({}, {"diffspark.host.step_rows": "0"}):
        runner = run_against_reference(spark, conf | placement, flow, inputs, [1, 2, 3, 4])
        assert runner.steps == 5
    json = Runner(flow, conf=conf, spark=spark)
    from conftest import updates_df
    json.step({n: updates_df(spark, ddl, [u for u in ups if u[1] < 1])
               for n, (ddl, ups) in inputs.items()}, upto=1)
    assert sorted(r.s for r in json.output("json").collect()) == \
        ['{"src":1,"dst":2,"w":7}', '{"src":1,"dst":3,"w":7}']


def test_columns_no_output_or_state_reads_reach_spark_as_nulls(spark, conf):
    """input_reads: per input, the columns some output or some state depends on (an
    arrangement keeps all of its input's columns, a root input is read whole, a scope
    reads everything). A Spark step sends the others as typed NULLs (a scan converts every
    column from Arrow), and the outputs stay the interpreter's across placements, with
    retractions of what a Spark step inserted made by a driver step."""
    from executor.spark import arrow_frame
    from plans.optimizer.prune import input_reads

    ddl = "k BIGINT, v BIGINT, note STRING, day DATE"
    flow = Dataflow()
    s, t = flow.input("s", ddl), flow.input("t", "k BIGINT, w BIGINT")
    picked = s.filter("day IS NULL OR v > 0").map("k", "v")
    flow.output("sums", picked.join(t, on=["k"]).map("k", "v + w AS x").sum("x", by=["k"]))
    flow.output("whole", t.arrange_by_key("k"))
    reads = input_reads(optimize(flow.outputs).plan)
    assert reads["s"] == {"k", "v", "day"} and reads["t"] is None
    scoped = Dataflow()
    scoped.output("r", scoped.input("s", ddl).map("k").iterate(lambda x: x.distinct()))
    assert input_reads(scoped.outputs) == {"s": None}

    from conftest import updates_table
    table = updates_table(ddl, [((1, 2, "a", None), 0, 1)])
    frame = arrow_frame(spark, table, StructType.fromDDL(f"{ddl}, time BIGINT, diff BIGINT"),
                        {"k", "day"})
    assert frame.schema == spark.createDataFrame(table).schema
    assert [tuple(r) for r in frame.collect()] == [(1, None, None, None, 0, 1)]

    stream = {"s": (ddl, [((1, 2, "a", None), 0, 1), ((1, -1, "b", None), 0, 1),
                          ((2, 5, None, None), 0, 1), ((1, 2, "a", None), 1, -1),
                          ((2, 7, "c", None), 2, 1)]),
              "t": ("k BIGINT, w BIGINT", [((1, 10), 0, 1), ((2, 20), 0, 1), ((2, 20), 2, -1)])}
    from conftest import outputs_rows
    from executor import Runner
    from executor.reference import reference
    expected = reference(spark, flow.outputs, {n: ups for n, (_, ups) in stream.items()})
    # the first step (3 rows of s) runs on Spark, the others on the driver
    runner = Runner(flow, conf=conf | {"diffspark.host.step_rows": "2"}, spark=spark)
    for upto in (1, 2, 3):
        feed = {n: updates_table(d, [u for u in ups if u[1] == upto - 1])
                for n, (d, ups) in stream.items()}
        assert runner.step(feed, upto=upto).host == (upto > 1)
        got = outputs_rows(runner, list(flow.outputs))
        for name in flow.outputs:
            assert got[name] == [u for u in expected[name] if u[1] < upto], (name, upto)
