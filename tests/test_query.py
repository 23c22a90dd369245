"""The conjunctive-query front end (plans/query.py), without Spark: parsing and its errors,
the delta rules' structure, the reference interpreter against a brute-force recount over all
assignments, and the delta rules (run in plain Python) against the interpreter on random
update streams with many changes at one time."""
from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from plans import Dataflow, PlanError
from plans.query import (Atom, Comparison, Const, Query, Var, delta_rules, parse, plan_order,
                         run_rules_python, validate)
from plans.semantics import Interpreter, accumulate, consolidate

TRI = "tri(x, y, z) :- g(x, y), g(y, z), g(x, z)"
K4 = "k4(a,b,c,d) :- g(a,b), g(a,c), g(a,d), g(b,c), g(b,d), g(c,d)"
EDGES = "src BIGINT, dst BIGINT"
NODES = range(5)

QUERIES = [  # (text, order)
    (TRI, None),
    (K4, None),
    ("tri(x,y,z) :- g(x,y), g(y,z), g(x,z), x < y, y < z", ["x", "y", "z"]),
    ("t(x, z) :- g(x, y), g(y, z), g(x, z)", None),          # y projected out
    ("r(x, y) :- g(x, y), g(x, y), g(y, x), x != y", None),  # repeated atom, validators
    ("c(y) :- g(2, y), g(y, y), y >= 1", None),              # constant, repeated variable
    ("p(a, d) :- g(a, b), g(b, c), g(c, d)", None),           # needs a middle-out order
    ("n(x) :- g(x, y), g(y, z), g(x, z), y < z", None),       # y, z summed out as bound
]


def flow_of(text, order=None):
    flow = Dataflow()
    flow.input("g", EDGES)
    return flow, flow.query(text, order=order)


def interpret(node, updates):
    return consolidate(Interpreter({"g": updates}, evaluator=None).eval(node)[1])


def brute_force(q: Query, graph: Counter) -> Counter:
    """The query at one time, by enumerating every assignment of its variables."""
    names = q.variables()
    out = Counter()
    for values in itertools.product(NODES, repeat=len(names)):
        b = dict(zip(names, values))
        m = 1
        for a in q.atoms:
            m *= graph[tuple(b[t.name] if isinstance(t, Var) else t.value for t in a.terms)]
        if m and all(c.holds(b) for c in q.comparisons):
            out[tuple(b[v] for v in q.head)] += m
    return Counter({r: m for r, m in out.items() if m})


edge_updates = st.lists(st.tuples(st.tuples(st.sampled_from(NODES), st.sampled_from(NODES)),
                                  st.integers(0, 3), st.sampled_from([-2, -1, 1, 2])),
                        max_size=25)


# --------------------------------------------------------------------------- parsing
def test_parse_fields_and_round_trip():
    q = parse("q(x, s) :- r(x, 'it''s', -3, s), r(x, x, 0, s), x < 5, s != 'a'.")
    assert q.head_name == "q" and q.head == ("x", "s")
    assert q.atoms[0] == Atom("r", (Var("x"), Const("it's"), Const(-3), Var("s")))
    assert q.comparisons == (Comparison(Var("x"), "<", Const(5)),
                             Comparison(Var("s"), "!=", Const("a")))
    assert q.variables() == ("x", "s") and q.relations() == ("r",)
    assert parse(str(q)) == q
    assert parse(TRI) == parse(str(parse(TRI)))
    assert hash(parse(K4)) == hash(parse(K4))


@pytest.mark.parametrize("text, message", [
    ("tri(x, y) g(x, y)", r"expected ':-' after the head at column 11, got 'g'"),
    ("tri(x, y) :- g(x, y", r"expected ',' or '\)' closing g\(...\) at column 20, got the end"),
    ("tri(x) :- g(x, 'a)", r"unterminated string at column 16"),
    ("tri(x) :- g(x, y) & h(y)", r"unexpected character '&' at column 19"),
    ("tri(x) :- g(x, y) h(y)", r"expected ',' or the end of the query at column 19, got 'h'"),
    ("tri(x) :- g(x, y), x", r"expected a comparison operator .* got the end of the text"),
    ("tri(x, 1) :- g(x, y)", r"query 'tri': head term 1 is a constant"),
    ("tri() :- g(x, y)", r"expected a head variable at column 5, got '\)'"),
    ("tri(x) :- x < 1", r"no atom"),
])
def test_syntax_errors(text, message):
    with pytest.raises(PlanError, match=message):
        parse(text)


@pytest.mark.parametrize("text, message", [
    ("t(x) :- h(x, y)", r"query 't': unknown relation 'h' in atom h\(x, y\) .*known: g"),
    ("t(x) :- g(x, y, z)", (r"query 't': arity mismatch in atom g\(x, y, z\): relation 'g' "
                            r"\(src, dst\) expected 2 terms, got 3")),
    ("t(x, w) :- g(x, y)", r"query 't': head variable 'w' is unbound"),
    ("t(x, x) :- g(x, y)", r"query 't': head variable 'x' is repeated"),
    ("t(x) :- g(x, y), y < w", r"query 't': comparison y < w uses variable 'w' that no atom"),
    ("t(x) :- g(x, y), 1 < 2", r"query 't': comparison 1 < 2 has no variable"),
    ("t(time) :- g(time, y)", r"query 't': column 'time' uses a reserved name"),
])
def test_validation_errors(text, message):
    with pytest.raises(PlanError, match=message):
        flow_of(text)


def test_order_errors_and_suggestion():
    with pytest.raises(PlanError, match=r"order \['x', 'y'\] must list each variable once: "
                                        r"x, y, z"):
        flow_of(TRI, order=["x", "y"])
    with pytest.raises(PlanError, match="must list each variable once"):
        flow_of(TRI, order="xyz")
    with pytest.raises(PlanError, match=r"not extendable: the delta rule of atom #2 "
                                        r"g\(c, d\) cannot bind 'a'.*try order=\['b', "):
        flow_of("p(a, d) :- g(a, b), g(b, c), g(c, d)", order=["a", "b", "c", "d"])
    q = parse("q(x) :- g(x, y), h(y, z, w)")  # z and w only ever unbound together
    with pytest.raises(PlanError, match="no variable order lets every delta rule"):
        plan_order(q)


def test_relations_by_keyword():
    flow = Dataflow()
    g = flow.input("g", EDGES)
    h = flow.input("h", "a BIGINT, b BIGINT")
    tri = flow.query(TRI, g=h.consolidate())  # the keyword wins over the input g
    assert tri.node.relations == ("g",) and tri.node.inputs[0].input.name == "h"
    with pytest.raises(PlanError, match="query 'tri': g= must be a Collection of this"):
        flow.query(TRI, g=Dataflow().input("g", EDGES))
    with pytest.raises(PlanError, match="query 'tri': e= is given but no atom reads it"):
        flow.query(TRI, e=g)
    with pytest.raises(PlanError, match="arity mismatch"):
        flow.query("t(x) :- e(x, y, z)", e=g.concat(g))
    # a join's columns are decided by the executor: arity is checked at run time
    validate(parse("t(x) :- e(x, y)"), {"e": None})
    h2 = flow.input("h2", "src BIGINT, w BIGINT")
    bad = flow.query("t(x) :- e(x, y)", e=g.join(h2, on="src"))
    with pytest.raises(PlanError, match=r"relation 'e' \(src, dst, w\) expected 3 terms, got 2"):
        Interpreter({}, None).eval(bad.node)


def test_plan_node_and_explain():
    flow, tri = flow_of(TRI)
    flow.output("tri", tri)
    assert tri.node.order == ("x", "y", "z")
    assert "Query[tri(x, y, z) :- g(x, y), g(y, z), g(x, z); order x, y, z]" in flow.explain()
    assert tri.node.with_children((tri.node.inputs[0],)) == tri.node
    assert Interpreter({}, None).eval(tri.node)[0] == "x BIGINT, y BIGINT, z BIGINT"


# --------------------------------------------------------------------------- delta rules
def test_triangle_rules():
    rules = delta_rules(parse(TRI), ("x", "y", "z"))
    assert [r.label() for r in rules] == [
        "d g#0(x, y) -> z: count/propose/validate g#1[y] old, g#2[x] old",
        "d g#1(y, z) -> x: count/propose/validate g#0[y] new, g#2[z] old",
        "d g#2(x, z) -> y: count/propose/validate g#0[x] new, g#1[z] new"]
    r = rules[1]
    assert (r.seed, r.relation, r.prefix, r.columns) == (1, "g", ("y", "z"), ((0, "y"), (1, "z")))
    (step,) = r.steps
    assert step.var == "x"
    e0, e2 = step.extenders
    assert (e0.atom, e0.key, e0.value, e0.reads) == (0, ((1, "y"),), 0, "new")
    assert (e2.atom, e2.key, e2.value, e2.reads) == (2, ((1, "z"),), 0, "old")


def test_rule_filters_and_validators():
    q = parse("r(x, y) :- g(x, y), g(x, y), g(y, x), h(x, 7, z, z), x != y")
    r = delta_rules(q, plan_order(q))[0]
    assert r.label() == ("d g#0(x, y) where x != y validate g#1(x, y) old, g#2(y, x) old"
                         " -> z: propose h#3[x, c1=7] old")
    (h,) = r.steps[0].extenders
    assert (h.key, h.value, h.repeats, h.constants) == (((0, "x"),), 2, (3,), ((1, 7),))
    rule3 = delta_rules(q, plan_order(q))[3]
    assert rule3.constants == ((1, 7),) and rule3.columns == ((0, "x"), (2, "z"), (3, "z"))
    assert [e.atom for e in rule3.steps[0].extenders] == [0, 1, 2]  # all bind y


@pytest.mark.parametrize("text", [TRI, K4] + [t for t, _ in QUERIES])
def test_rules_use_every_atom_once(text):
    q = parse(text)
    for order in [plan_order(q)] + ([("d", "c", "b", "a")] if text == K4 else []):
        rules = delta_rules(q, order)
        assert [r.seed for r in rules] == list(range(len(q.atoms)))
        for r in rules:
            bound = set(r.prefix)
            used = [v.atom for v in r.validators]
            assert all(set(q.atoms[v.atom].vars()) <= bound for v in r.validators)
            for s in r.steps:
                assert s.extenders and s.var not in bound
                for e in s.extenders:
                    assert {v for _, v in e.key} <= bound
                    assert q.atoms[e.atom].terms[e.value] == Var(s.var)
                    used.append(e.atom)
                bound.add(s.var)
            assert sorted(used + [r.seed]) == list(range(len(q.atoms)))
            for e in [e for s in r.steps for e in s.extenders] + list(r.validators):
                assert e.reads == ("new" if e.atom < r.seed else "old")
            assert [s.var for s in r.steps] == [v for v in order if v not in r.prefix]


# --------------------------------------------------------------------------- the interpreter
@settings(max_examples=40, deadline=None)
@given(edge_updates, st.sampled_from(QUERIES))
def test_interpreter_equals_brute_force(updates, query):
    text, order = query
    _, c = flow_of(text, order)
    got = interpret(c.node, updates)
    for t in sorted({t for _, t, _ in updates}):
        assert accumulate(got, t) == brute_force(c.node.query, accumulate(updates, t)), t


def test_interpreter_nulls_match_nothing():
    ups = [((1, 2), 0, 1), ((2, 3), 0, 1), ((1, 3), 0, 1), ((1, None), 0, 1),
           ((None, 3), 0, 1)]
    _, tri = flow_of(TRI)
    assert interpret(tri.node, ups) == [((1, 2, 3), 0, 1)]
    _, src = flow_of("s(x) :- g(x, y)")  # y occurs once: a null y still counts
    assert interpret(src.node, ups) == [((1,), 0, 3), ((2,), 0, 1), ((None,), 0, 1)]


# --------------------------------------------------------------------------- rules vs interpreter
def check_rules(text, order, updates):
    _, c = flow_of(text, order)
    rules = delta_rules(c.node.query, c.node.order)
    got = consolidate(run_rules_python(c.node.query, rules, {"g": updates}))
    assert got == interpret(c.node, updates)


@settings(max_examples=40, deadline=None)
@given(edge_updates, st.sampled_from(QUERIES))
def test_rules_equal_interpreter(updates, query):
    check_rules(*query, updates)


def test_rules_with_whole_triangles_at_one_time():
    tri = [((0, 1), 0, 1), ((1, 2), 0, 1), ((0, 2), 0, 1)]
    later = [((0, 1), 1, -1), ((0, 2), 1, -1), ((0, 1), 2, 2), ((0, 2), 2, 1)]
    for text, order in QUERIES:
        check_rules(text, order, tri + later + [((0, 0), 2, 1), ((1, None), 2, 1)])
    _, c = flow_of(TRI)
    assert interpret(c.node, tri + later) == [((0, 1, 2), 0, 1), ((0, 1, 2), 1, -1),
                                              ((0, 1, 2), 2, 2)]



def test_naive_plan_errors():
    flow = Dataflow()
    g = flow.input("g", EDGES)
    with pytest.raises(PlanError, match="plan='naive' needs relations with known column"):
        flow.query(TRI, plan="naive", g=g.map("src + 1 AS src", "dst"))
    with pytest.raises(PlanError, match="must be 'delta' or 'naive'"):
        flow.query(TRI, plan="fast")
