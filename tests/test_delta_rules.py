"""Delta rules on array kernels (executor/operators/query/delta_rules.py, gpu_kernels/timed_index.py) against
the delta rules in plain Python and the reference interpreter, without Spark: random update
streams with negative and repeated diffs, many changes at one time, on numpy and
array_api_strict."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from test_query import K4, QUERIES, edge_updates, flow_of, interpret

from conftest import host, i64
from executor.operators.query import delta_rules
from gpu_kernels import timed_index
from gpu_kernels.csr import row_ranges
from gpu_kernels.timed_index import build_timed_index, extend_as_of, multiplicity
from plans.query import delta_rules as rules_of, run_rules_python
from plans.semantics import consolidate


def lookup_in(xp, updates):
    """A lookup over in-memory updates {relation: [(record, time, diff)]}, as the Spark layer
    answers it: the rows of each request whose key tuple was asked for."""
    def lookup(wants):
        out = {}
        for req, tables in wants.items():
            keys = {tuple(row) for cols in tables
                    for row in zip(*[host(xp, c) for c in cols])} if req.key else None
            rows = [(r, t, d) for r, t, d in updates[req.relation]
                    if all(r[k] == x for k, x in req.constants)
                    and (req.value is None or all(r[k] == r[req.value] for k in req.repeats))
                    and (keys is None or tuple(r[k] for k in req.key) in keys)]
            out[req] = ([i64(xp, [r[k] for r, _, _ in rows]) for k in req.key],
                        i64(xp, [r[req.value] if req.value is not None else 0
                                 for r, _, _ in rows]),
                        i64(xp, [t for _, t, _ in rows]), i64(xp, [d for _, _, d in rows]))
        return out
    return lookup


def run_arrays(xp, text, order, updates, chunk_rows=1 << 21, threads=1, canonical=False):
    """The query's changes by the array rules; `canonical`: the seeds given consolidated
    and sorted, and said so (the rules may then skip consolidating them)."""
    _, c = flow_of(text, order)
    query = c.node.query
    rules = rules_of(query, c.node.order)
    given = sorted(consolidate(updates), key=lambda u: (u[0], u[1])) if canonical else updates
    seeds = {"g": ([i64(xp, [r[k] for r, _, _ in given]) for k in range(2)],
                   i64(xp, [t for _, t, _ in given]), i64(xp, [d for _, _, d in given]))}
    cols, t, d = delta_rules.run(xp, query, rules, seeds, lookup_in(xp, {"g": updates}),
                                 chunk_rows, threads=threads,
                                 canonical=frozenset({"g"} if canonical else ()))
    got = consolidate(list(zip(zip(*[host(xp, c) for c in cols]), host(xp, t), host(xp, d))))
    return got, c


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(updates=edge_updates, query=st.sampled_from(QUERIES), chunk=st.sampled_from([1, 3, 1 << 21]),
       threads=st.sampled_from([1, 2]), hubs=st.booleans(), canonical=st.booleans())
def test_array_rules_equal_python_rules_and_interpreter(xp, monkeypatch, updates, query, chunk,
                                                       threads, hubs, canonical):
    """Chunks on one thread or two; settled indexes with presence bits for their heaviest keys
    (hubs: as a big step builds them, here at any size) or without; seeds as given or
    consolidated and said so."""
    monkeypatch.setattr(timed_index, "_HUB_ROWS", 1 if hubs else 1 << 16)
    monkeypatch.setattr(delta_rules, "_ROWS_PER_PREFIX", 1 << 30 if hubs else 8)
    got, c = run_arrays(xp, *query, updates, chunk, threads, canonical)
    rules = rules_of(c.node.query, c.node.order)
    assert got == consolidate(run_rules_python(c.node.query, rules, {"g": updates}))
    assert got == interpret(c.node, updates)


def test_concurrent_changes_of_one_triangle(xp):
    """All three edges of a triangle at one time, retracted two at a time later: counted once."""
    ups = [((0, 1), 0, 1), ((1, 2), 0, 1), ((0, 2), 0, 1), ((0, 1), 1, -1), ((1, 2), 1, -1),
           ((0, 1), 2, 1), ((1, 2), 2, 1), ((2, 3), 2, 1), ((1, 3), 2, 1)]
    got, c = run_arrays(xp, "tri(x,y,z) :- g(x,y), g(y,z), g(x,z)", None, ups)
    assert got == [((0, 1, 2), 0, 1), ((0, 1, 2), 1, -1), ((0, 1, 2), 2, 1),
                   ((1, 2, 3), 2, 1)]
    k4 = [((a, b), 0, 1) for a in range(4) for b in range(a + 1, 4)]
    got, _ = run_arrays(xp, K4, None, k4 + [((0, 1), 1, -1)])
    assert got == [((0, 1, 2, 3), 0, 1), ((0, 1, 2, 3), 1, -1)]


def test_as_of_multiplicity_and_extension(xp):
    # updates of key 7: value 1 at times 0 (+2) and 2 (-1); value 4 at time 1 (+1)
    ix = build_timed_index(xp, i64(xp, [7, 7, 7, 9]), i64(xp, [4, 1, 1, 1]),
                           i64(xp, [1, 2, 0, 0]), i64(xp, [1, -1, 2, 5]))
    keys = i64(xp, [7, 7, 7, 7])
    lo, hi = row_ranges(xp, ix.csr, keys)
    m_new = multiplicity(xp, ix, lo, hi, i64(xp, [1, 1, 4, 5]), i64(xp, [1, 2, 1, 9]), "new")
    m_old = multiplicity(xp, ix, lo, hi, i64(xp, [1, 1, 4, 5]), i64(xp, [1, 2, 1, 9]), "old")
    assert host(xp, m_new) == [2, 1, 1, 0]
    assert host(xp, m_old) == [2, 2, 0, 0]
    # one prefix at time 1 with diff 3 extended through the index alone ("new" read)
    parent, value, d = extend_as_of(xp, [i64(xp, [7])], i64(xp, [1]), i64(xp, [3]), [ix], ["new"])
    assert sorted(zip(host(xp, value), host(xp, d))) == [(1, 6), (4, 3)]
    with pytest.raises(ValueError, match="at least one extender"):
        extend_as_of(xp, [], i64(xp, [1]), i64(xp, [1]), [], [])


@settings(max_examples=30, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(-3, 3), st.integers(0, 3),
                               st.sampled_from([-2, -1, 1, 2])), max_size=20),
       asked=st.lists(st.tuples(st.integers(0, 4), st.integers(-3, 3), st.integers(0, 4)),
                      min_size=1, max_size=10),
       reads=st.sampled_from(["new", "old"]), far=st.booleans())
def test_multiplicity_packed_and_lockstep_agree_with_brute_force(xp, rows, asked, reads, far):
    """The packed search (searchsorted over (key rank, value) codes) and the lockstep search
    over (value, time) pairs, which values too far apart to pack use, give the brute-force
    multiplicity of every asked (key, value) as of its time."""
    value_of = lambda v: v * 2 ** 61 if far else v  # noqa: E731  (far: often too wide to pack)
    cols = [i64(xp, [value_of(r[j]) if j == 1 else r[j] for r in rows]) for j in range(4)]
    ix = build_timed_index(xp, *cols)
    spread = [value_of(r[1]) for r in rows]
    packs = bool(rows) and len({r[0] for r in rows}) * (max(spread) - min(spread) + 1) < 2 ** 62
    assert (ix.codes is not None) == packs
    keys, values, times = (i64(xp, [value_of(a[j]) if j == 1 else a[j] for a in asked])
                           for j in range(3))
    lo, hi = row_ranges(xp, ix.csr, keys)
    visible = (lambda u, t: u <= t) if reads == "new" else (lambda u, t: u < t)
    want = [sum(d for k, v, u, d in rows if (k, value_of(v)) == (a[0], value_of(a[1]))
                and visible(u, a[2])) for a in asked]
    for index in (ix, ix._replace(codes=None, pack=None)):
        assert host(xp, multiplicity(xp, index, lo, hi, values, times, reads)) == want
    # asked after every row's time, a settled index (one row per pair) gives the same sums
    late = xp.full_like(times, 4)
    want = [sum(d for k, v, _, d in rows if (k, value_of(v)) == (a[0], value_of(a[1])))
            for a in asked]
    settled = build_timed_index(xp, *cols, settled=True)
    assert settled.settled
    for index in (ix, settled, settled._replace(codes=None, pack=None)):
        lo, hi = row_ranges(xp, index.csr, keys)
        assert host(xp, multiplicity(xp, index, lo, hi, values, late, reads)) == want


_PAIRS = st.lists(st.tuples(st.integers(0, 5), st.integers(-4, 9), st.integers(-2, 2)),
                 max_size=40)


@settings(max_examples=60, deadline=None)
@given(rows=_PAIRS, others=_PAIRS | st.none(),
       asked=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(-2, 2)),
                      min_size=1, max_size=8),
       bits=st.sampled_from([0, 1, 14, 40, 1 << 12]), unit=st.booleans())
def test_settled_extension_with_presence_bits_equals_brute_force(xp, rows, others, asked, bits,
                                                                 unit):
    """Two settled indexes over the same pairs, or over other pairs (values outside the
    first's range included), with any diffs or unit diffs (hub_bits: none, one key's row,
    some keys, every key): each prefix (key_a, key_b) extends to the values both hold, with
    the product of its diff and both multiplicities (a zero-sum pair is absent)."""
    def indexed(pairs):
        pairs = [(k, v, 1) for k, v, _ in pairs] if unit else pairs
        sums: dict = {}
        for k, v, d in pairs:
            sums[(k, v)] = sums.get((k, v), 0) + d
        cols = [i64(xp, [r[j] for r in pairs]) for j in range(2)]
        diff = i64(xp, [r[2] for r in pairs])
        index = build_timed_index(xp, *cols, xp.zeros_like(diff), diff, True, hub_bits=bits)
        if bits and pairs and any(sums.values()):
            assert index.hubs is not None or bits < index.pack[1]
        return index, sums

    (a, sums_a), (b, sums_b) = indexed(rows), indexed(rows if others is None else others)
    keys = [i64(xp, [q[j] for q in asked]) for j in range(2)]
    t, pd = xp.zeros_like(keys[0]), i64(xp, [q[2] for q in asked])
    parent, value, d = extend_as_of(xp, keys, t, pd, [a, b], ["new", "new"])
    got: dict = {}
    for p, v, x in zip(host(xp, parent), host(xp, value), host(xp, d)):
        got[(p, v)] = got.get((p, v), 0) + x
    want = {(j, v): q[2] * sums_a[(q[0], v)] * sums_b.get((q[1], v), 0)
            for j, q in enumerate(asked) for (k, v) in sums_a if k == q[0]}
    assert {k: x for k, x in got.items() if x} == {k: x for k, x in want.items() if x}
