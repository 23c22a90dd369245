"""IR -> e-graph terms, and the facts rules need that only Python can compute (which side of
a join a predicate reads, which join trees are conjunctive queries).

Every IR node has one term (decoding it gives the node back); nodes the optimizer does not
model become opaque leaves that decode to themselves, so a plan it does not understand still
runs unchanged. Predicates and projections move as one-stage Linear nodes (what the
builder makes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from egglog import EGraph, Vec, i64, union

from .. import ir
from . import conjunctive
from .columns import columns, lower, renames, stage_refs
from .terms import (Coll, Stream, colls, keeps_columns, narrow_sides, push_key, push_left,
                    push_right, query_of)


@dataclass
class Encoding:
    """The payload table (id -> object) shared by encode, cost and decode."""

    table: list = field(default_factory=list)
    ids: dict = field(default_factory=dict)
    terms: dict = field(default_factory=dict)   # IR node -> Coll term
    stages: dict = field(default_factory=dict)  # pushable stage -> (its refs, Vec term)
    projections: dict = field(default_factory=dict)  # renaming map -> (its sources, Vec)
    columns: dict = field(default_factory=dict)

    def payload(self, kind: str, obj) -> int:
        key = (kind, obj)
        if key not in self.ids:
            self.ids[key] = len(self.table)
            self.table.append(key)
        return self.ids[key]

    def coll(self, node: ir.Node) -> Coll:
        if node not in self.terms:
            self.terms[node] = self._coll(node)
        return self.terms[node]

    def _coll(self, n: ir.Node) -> Coll:
        if isinstance(n, ir.Linear):
            vec = Vec[i64](*(i64(self.payload("stage", s)) for s in n.stages))
            refs = stage_refs(n.stages[0]) if len(n.stages) == 1 else None
            if refs:
                self.stages[n.stages[0]] = (refs, vec)
            if len(n.stages) == 1 and isinstance(n.stages[0], ir.Map):
                pairs = renames(n.stages[0].exprs)
                if pairs:
                    self.projections[n.stages[0]] = (lower(s for s, _ in pairs), vec)
            return Coll.linear(self.coll(n.input), vec)
        if isinstance(n, ir.Concat):
            return Coll.concat(colls(self.coll(c) for c in n.inputs))
        if isinstance(n, ir.Consolidate):
            return Coll.consolidate(self.coll(n.input))
        if isinstance(n, ir.Arrange):
            return Coll.arrange(self.coll(n.input), self.payload("keys", n.keys))
        if isinstance(n, ir.Join):  # a band join is a semijoin of its own kind (2)
            if n.band is not None:
                return Coll.join(self.coll(n.left), self.coll(n.right),
                                 self.payload("band", (n.on, n.band)), 2)
            return Coll.join(self.coll(n.left), self.coll(n.right),
                             self.payload("on", n.on), int(n.left_order))
        if isinstance(n, ir.Reduce):
            return Coll.reduce(self.coll(n.input), self.payload("reduce", (n.by, n.reduction)))
        if isinstance(n, ir.Query):
            return self.query(n)
        return Coll.leaf(self.payload("leaf", n))  # Input, Imported, and what is not modelled

    def query(self, n: ir.Query) -> Coll:
        payload = (n.relations, n.query, n.order)
        return Coll.query(self.payload("query", payload), colls(self.coll(c) for c in n.inputs))


def encode(outputs: dict[str, ir.Node], egraph: EGraph, incremental: bool) -> tuple[Encoding, list]:
    """Register the outputs' terms and the facts in `egraph`; (encoding, output terms)."""
    enc = Encoding()
    roots = [enc.coll(n) for n in outputs.values()]
    nodes = ir.topological(list(outputs.values()))
    facts = []
    for n in nodes:
        if isinstance(n, ir.Join):
            facts += _join_facts(enc, n)
        elif isinstance(n, ir.Reduce):
            facts += _reduce_facts(enc, n)
    facts += [keeps_columns(vec) for _, vec in enc.stages.values()]
    if incremental:
        for n in nodes:
            facts += _query_facts(enc, n)
    egraph.register(*roots, *facts)
    return enc, roots


def _join_facts(enc: Encoding, n: ir.Join) -> list:
    """A filter reading only key columns goes to both sides; only one side's, to that side."""
    left, right = columns(n.left, enc.columns), columns(n.right, enc.columns)
    if left is None or right is None:
        return []
    out, term = [], enc.coll(n)
    for refs, vec in enc.stages.values():
        if not n.left_order and refs <= lower(n.on):
            out.append(push_key(vec, term))
        elif refs <= lower(left):
            out.append(push_left(vec, term))
        elif not n.left_order and refs <= lower(right):
            out.append(push_right(vec, term))
    return out + _narrow_facts(enc, n, left, right)


def _narrow_facts(enc: Encoding, n: ir.Join, left, right) -> list:
    """A projection of the join's output needs from each side only the join key and the
    columns it reads: a map keeping those (in the side's order), where that drops any."""
    key, out, term = lower(n.on), [], enc.coll(n)
    if n.band is not None:  # the band's columns are read like keys
        key = key | {n.band.column.lower(), n.band.value.lower()}
    joined = lower(left) | (set() if n.left_order else lower(right))
    for srcs, vec in enc.projections.values():
        if not srcs <= joined:
            continue
        sides = [[c for c in cols if c.lower() in key | srcs] for cols in (left, right)]
        if n.left_order:
            sides[1] = list(right)
        if sides != [list(left), list(right)]:
            out.append(narrow_sides(vec, term, *(_keep(enc, kept, cols)
                                                 for kept, cols in zip(sides, (left, right)))))
    return out


def _keep(enc: Encoding, kept: list, cols) -> Vec:
    """The stages keeping `kept` of `cols`: none when that is all of them."""
    if len(kept) == len(cols):
        return Vec[i64].empty()
    return Vec[i64](i64(enc.payload("stage", ir.Map(tuple(f"`{c}`" for c in kept)))))


def _reduce_facts(enc: Encoding, n: ir.Reduce) -> list:
    """A filter reading only the grouping key commutes with the per-key reduction; for
    distinct and threshold the key is the whole record."""
    whole = n.reduction.kind in ("distinct", "threshold")
    key = columns(n.input, enc.columns) if whole else n.by
    if not key:
        return []
    term = enc.coll(n)
    return [push_key(vec, term) for refs, vec in enc.stages.values() if refs <= lower(key)]


def _query_facts(enc: Encoding, n: ir.Node) -> list:
    """For a conjunctive join tree J: the seed term delta(J), the Query node Q it may become,
    and Q's delta rules D as the sum of one join chain per rule (the seed atom's changes,
    then each other atom read "new" (as of <= t) or "old" (prev: as of < t))."""
    found = conjunctive.as_query(n, enc.columns)
    if found is None:
        return []
    query, rules, leaves = found
    atoms = [enc.coll(leaf) for leaf in leaves]
    d = Stream.delta_query(enc.payload("query", (query.relations, query.query, query.order)))
    total = None
    for rule in rules:
        chain = Stream.delta(atoms[rule.seed])
        reads = [(v.atom, v.reads) for v in rule.validators] + \
            [(e.atom, e.reads) for s in rule.steps for e in s.extenders]
        for j, when in reads:
            chain = Stream.join(chain, atoms[j] if when == "new" else Coll.prev(atoms[j]))
        total = chain if total is None else Stream.plus(total, chain)
    return [Stream.delta(enc.coll(n)), union(d).with_(total),
            query_of(enc.coll(n), enc.query(query), d)]
