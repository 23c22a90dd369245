"""The rewrite rules, in named rulesets; `WHY[name]` states in one line why each is correct.

Every rule is local: it equates two forms of one collection (or one change stream) and the
e-graph keeps both, so rules compose freely and extraction (cost.py) picks the cheapest plan.
A collection is an IR node's meaning (a multiset over time, columns in order); a stream is
the changes at each time, joined on shared column names (column order is not tracked there,
and no rule turns a stream fact into a collection fact except `delta_query`, whose query
lists the tree's columns in the tree's order).
"""
from __future__ import annotations

from egglog import Vec, eq, i64, rule, ruleset, union, var

from .terms import (Coll, Colls, Stream, keeps_columns, narrow_sides, push_key, push_left,
                    push_right, query_of)

WHY: dict[str, str] = {}


def _rewrite(name: str, why: str, lhs, rhs, *conditions):
    WHY[name] = why
    return rule(lhs, *conditions, name=name).then(union(lhs).with_(rhs))


def _fact(name: str, why: str, *conditions, then):
    WHY[name] = why
    return rule(*conditions, name=name).then(then)


x, y, a, b, left, right = (var(n, Coll) for n in ("x", "y", "a", "b", "left", "right"))
rest = var("rest", Colls)
s, t = var("s", Vec[i64]), var("t", Vec[i64])
k, k2, on, red, q, semi = (var(n, i64) for n in ("k", "k2", "on", "red", "q", "semi"))
ls, rs = var("ls", Vec[i64]), var("rs", Vec[i64])
ch, ch2 = var("ch", Stream), var("ch2", Stream)
d = var("d", Stream)
j = var("j", Coll)

fusion = ruleset(
    _rewrite("fuse", "join_function composes: f then g maps each update to the same "
             "(record, time join, diff product) as f;g (both operations are associative)",
             Coll.linear(Coll.linear(x, s), t), Coll.linear(x, s.append(t))),
    name="fusion")

pushdown = ruleset(
    _rewrite("linear_below_concat", "a linear operator distributes over concat: "
             "f(a + b) = f(a) + f(b)",
             Coll.linear(Coll.concat(rest), s), Coll.concat(Colls.linear_each(rest, s))),
    _rewrite("linear_each_nil", "(definition of linear_each)",
             Colls.linear_each(Colls.nil(), s), Colls.nil()),
    _rewrite("linear_each_cons", "(definition of linear_each)",
             Colls.linear_each(Colls.cons(x, rest), s),
             Colls.cons(Coll.linear(x, s), Colls.linear_each(rest, s))),
    _rewrite("read_arrangement", "an arrangement read as a collection is its input "
             "(arranging indexes records, it does not change them)",
             Coll.linear(Coll.arrange(x, k), s), Coll.linear(x, s)),
    _rewrite("filter_below_join_left", "a predicate reading only the left side's columns "
             "holds of a joined record iff it holds of its left part",
             Coll.linear(Coll.join(Coll.arrange(a, k), y, on, i64(0)), s),
             Coll.join(Coll.arrange(Coll.linear(a, s), k), y, on, i64(0)),
             push_left(s, Coll.join(Coll.arrange(a, k), y, on, i64(0)))),
    _rewrite("filter_below_semijoin", "a semijoin keeps left records unchanged, so a "
             "predicate on them can be applied first",
             Coll.linear(Coll.join(Coll.arrange(a, k), y, on, i64(1)), s),
             Coll.join(Coll.arrange(Coll.linear(a, s), k), y, on, i64(1)),
             push_left(s, Coll.join(Coll.arrange(a, k), y, on, i64(1)))),
    _rewrite("filter_below_join_right", "a predicate reading only the right side's columns "
             "holds of a joined record iff it holds of its right part",
             Coll.linear(Coll.join(x, Coll.arrange(b, k), on, i64(0)), s),
             Coll.join(x, Coll.arrange(Coll.linear(b, s), k), on, i64(0)),
             push_right(s, Coll.join(x, Coll.arrange(b, k), on, i64(0)))),
    _rewrite("filter_below_join_key", "joined records have equal keys on both sides, so a "
             "predicate on the key can drop non-matching records from both first",
             Coll.linear(Coll.join(Coll.arrange(a, k), Coll.arrange(b, k2), on, i64(0)), s),
             Coll.join(Coll.arrange(Coll.linear(a, s), k), Coll.arrange(Coll.linear(b, s), k2),
                       on, i64(0)),
             push_key(s, Coll.join(Coll.arrange(a, k), Coll.arrange(b, k2), on, i64(0)))),
    _rewrite("filter_below_reduce_key", "a predicate on the grouping key keeps or drops "
             "whole groups, before or after the per-key reduction alike",
             Coll.linear(Coll.reduce(Coll.arrange(a, k), red), s),
             Coll.reduce(Coll.arrange(Coll.linear(a, s), k), red),
             push_key(s, Coll.reduce(Coll.arrange(a, k), red))),
    _rewrite("project_below_join", "a projection reads only the columns it names, and a "
             "joined record's key and other columns come from its sides unchanged, so the sides "
             "may drop the rest first",
             Coll.linear(Coll.join(Coll.arrange(a, k), Coll.arrange(b, k2), on, semi), s),
             Coll.linear(Coll.join(Coll.arrange(Coll.linear(a, ls), k),
                                   Coll.arrange(Coll.linear(b, rs), k2), on, semi), s),
             narrow_sides(s, Coll.join(Coll.arrange(a, k), Coll.arrange(b, k2), on, semi),
                          ls, rs)),
    _rewrite("no_stages", "an empty chain of stages is the identity",
             Coll.linear(x, Vec[i64].empty()), x),
    _fact("narrow_below_filter", "a filter keeps its input's columns, so a projection that "
          "may narrow a join's sides may narrow them under the filter pushed into them too",
          narrow_sides(s, j, ls, rs), eq(y).to(Coll.linear(j, t)), keeps_columns(t),
          then=narrow_sides(s, y, ls, rs)),
    name="pushdown")

sharing = ruleset(
    _rewrite("arrange_consolidated", "consolidate is the identity on collections and an "
             "arrangement consolidates its batches itself",
             Coll.arrange(Coll.consolidate(x), k), Coll.arrange(x, k)),
    name="sharing")  # identical arrangements are one term already: the e-graph hash-conses

_natural = Coll.join(left, right, on, i64(0))
incremental = ruleset(
    _rewrite("delta_join", "product rule: d(A join B) at t = dA join B(<t) + dB join A(<=t); "
             "dA join dB is counted once, in the second term",
             Stream.delta(_natural),
             Stream.plus(Stream.join(Stream.delta(left), Coll.prev(right)),
                         Stream.join(Stream.delta(right), left))),
    _rewrite("delta_arrange", "an arrangement has its input's changes",
             Stream.delta(Coll.arrange(x, k)), Stream.delta(x)),
    _rewrite("prev_arrange", "an arrangement holds its input's records at every time",
             Coll.prev(Coll.arrange(x, k)), Coll.prev(x)),
    _rewrite("join_arrange", "joining with an arrangement reads its input's records",
             Stream.join(ch, Coll.arrange(x, k)), Stream.join(ch, x)),
    _rewrite("join_over_plus", "join distributes over the sum of streams",
             Stream.join(Stream.plus(ch, ch2), x),
             Stream.plus(Stream.join(ch, x), Stream.join(ch2, x))),
    _rewrite("join_assoc", "natural join is associative: c join (A join B) = (c join A) join B",
             Stream.join(ch, _natural), Stream.join(Stream.join(ch, left), right)),
    _rewrite("join_assoc_prev", "prev of a join is the join of prevs (the join at a time is "
             "the static join of the inputs accumulated to that time)",
             Stream.join(ch, Coll.prev(_natural)),
             Stream.join(Stream.join(ch, Coll.prev(left)), Coll.prev(right))),
    _rewrite("join_commute", "natural join is commutative: (c join A) join B = (c join B) join A",
             Stream.join(Stream.join(ch, a), b), Stream.join(Stream.join(ch, b), a)),
    _rewrite("plus_commute", "the sum of streams is commutative",
             Stream.plus(ch, ch2), Stream.plus(ch2, ch)),
    _rewrite("plus_assoc", "the sum of streams is associative",
             Stream.plus(Stream.plus(ch, ch2), d), Stream.plus(ch, Stream.plus(ch2, d))),
    name="incremental")
WHY["delta_query"] = ("a collection is the sum of its changes: when the join tree's changes "
                      "equal the query's delta rules, the tree is the query (same columns, "
                      "same order)")
incremental.append(rule(query_of(j, y, d), eq(d).to(Stream.delta(j)), name="delta_query")
                   .then(union(j).with_(y)))

RULESETS = {"fusion": fusion, "pushdown": pushdown, "sharing": sharing,
            "incremental": incremental}
