"""The e-graph's sorts: collections (`Coll`, one constructor per IR node kind), lists of them
(`Colls`), and change streams (`Stream`), kept apart so that rules about changes (delta,
prev, delta joins) can never equate two collections by accident.

Payloads the e-graph need not look into (stages, keys, reductions, queries, whole opaque
nodes) are i64 ids into the encoding's table (plans/optimizer/encode.py); a chain of linear
stages is a `Vec[i64]`, so fusing two chains is one append and every chain has one term.
"""
from __future__ import annotations

from egglog import Expr, StringLike, Vec, i64, i64Like, relation  # noqa: F401


class Coll(Expr):
    """A changing collection: what an IR node denotes."""

    @classmethod
    def leaf(cls, node: i64Like) -> Coll:
        """An input, an imported trace, or any node the optimizer does not model (opaque)."""

    @classmethod
    def linear(cls, input: Coll, stages: Vec[i64]) -> Coll: ...

    @classmethod
    def concat(cls, inputs: Colls) -> Coll: ...

    @classmethod
    def consolidate(cls, input: Coll) -> Coll: ...

    @classmethod
    def arrange(cls, input: Coll, keys: i64Like) -> Coll: ...

    @classmethod
    def join(cls, left: Coll, right: Coll, on: i64Like, semi: i64Like) -> Coll: ...

    @classmethod
    def reduce(cls, input: Coll, reduction: i64Like) -> Coll: ...

    @classmethod
    def query(cls, query: i64Like, inputs: Colls) -> Coll: ...

    @classmethod
    def prev(cls, c: Coll) -> Coll:
        """The collection as of times < t ("old"); the collection itself is as of <= t."""


class Colls(Expr):
    @classmethod
    def nil(cls) -> Colls: ...

    @classmethod
    def cons(cls, head: Coll, tail: Colls) -> Colls: ...

    @classmethod
    def linear_each(cls, items: Colls, stages: Vec[i64]) -> Colls:
        """The same stages applied to every item (pushdown below concat)."""


class Stream(Expr):
    """A change stream: at each time t, the updates at exactly t."""

    @classmethod
    def delta(cls, c: Coll) -> Stream: ...

    @classmethod
    def plus(cls, a: Stream, b: Stream) -> Stream: ...

    @classmethod
    def join(cls, changes: Stream, c: Coll) -> Stream:
        """The changes at t joined (natural join on shared column names) with `c` as of t."""

    @classmethod
    def delta_query(cls, query: i64Like) -> Stream:
        """The sum of a conjunctive query's delta rules (plans/query.py)."""


class Root(Expr):
    @classmethod
    def outputs(cls, items: Colls) -> Root: ...


# A pushable stage (a one-stage chain) may move into a join's left / right / both sides, or
# below a reduction's arrangement; computed from column names at encode time.
push_left = relation("push_left", Vec[i64], Coll)
push_right = relation("push_right", Vec[i64], Coll)
push_key = relation("push_key", Vec[i64], Coll)
# (projection P, join J, stages L, R): P over J reads only what L and R keep of J's sides.
narrow_sides = relation("narrow_sides", Vec[i64], Coll, Vec[i64], Vec[i64])
# A stage that keeps its input's columns (a filter): facts about a join's sides carry over.
keeps_columns = relation("keeps_columns", Vec[i64])
# (join tree J, its delta-query collection Q, Q's delta rules D): J is Q once delta(J) = D.
query_of = relation("query_of", Coll, Coll, Stream)


def colls(items) -> Colls:
    out = Colls.nil()
    for c in reversed(list(items)):
        out = Colls.cons(c, out)
    return out
