"""The naive plan of a conjunctive query (seed 001), kept for comparison with delta queries.

It runs the same count / propose / validate steps as dataflow operators over whole
collections: the prefixes are a collection; each extender's candidate counts are a `count`
of its present records;
the winner is chosen by a projection over the joined counts; proposals are a `join`, and the
other extenders validate by `join` on key and value (equal to a semijoin on sets, and exact
on multisets: multiplicities multiply). Every operator keeps its incremental state, so the
plan is correct under any change, but it arranges every prefix and proposal: memory is
proportional to the work, where the delta-query plan keeps only the inputs' indices.
"""
from __future__ import annotations

from . import query as cq
from .errors import PlanError


def naive_query(query: cq.Query, order, relations: dict, columns: dict):
    """The query's Collection built from `relations` (name -> Collection) whose columns are
    `columns` (name -> names), binding variables in `order` as atom 0's delta rule does."""
    rule = cq.delta_rules(query, order)[0]
    prefix = _atom(relations, columns, query.atoms[rule.seed], rule.comparisons)
    for val in rule.validators:
        other = _atom(relations, columns, query.atoms[val.atom], ())
        prefix = prefix.join(other, on=list(query.atoms[val.atom].vars()))
    bound = list(rule.prefix)
    for step in rule.steps:
        prefix = _extend(relations, columns, query, prefix, bound, step)
        bound.append(step.var)
        if step.comparisons:
            prefix = prefix.filter(" AND ".join(c.sql() for c in step.comparisons))
    return prefix.map(*(_q(v) for v in query.head))


def _extend(relations, columns, query, prefix, bound, step):
    atoms = [_atom(relations, columns, query.atoms[e.atom], ()) for e in step.extenders]
    keys = [list(dict.fromkeys(v for _, v in e.key)) for e in step.extenders]
    if len(atoms) == 1:
        return _propose(prefix, atoms[0], keys[0], bound, step.var)
    counted = prefix
    for j, (atom, key) in enumerate(zip(atoms, keys)):
        # candidates, not multiplicities: with negative ones a key's sum can be 0
        support = atom.threshold("1")
        counts = support.count(by=key).map(*map(_q, key), f"count AS __c{j}")
        counted = counted.join(counts, on=key)
    least = f"least({', '.join(f'__c{j}' for j in range(len(atoms)))})"
    winner = "CASE " + " ".join(f"WHEN __c{j} = {least} THEN {j}"
                                for j in range(len(atoms))) + " END"
    counted = counted.map(*map(_q, bound), f"{winner} AS __w")
    grown = []
    for j, (atom, key) in enumerate(zip(atoms, keys)):
        mine = counted.filter(f"__w = {j}").map(*map(_q, bound))
        out = _propose(mine, atom, key, bound, step.var)
        for i, (other, key_i) in enumerate(zip(atoms, keys)):
            if i != j:
                out = out.join(other, on=key_i + [step.var]).map(*map(_q, bound + [step.var]))
        grown.append(out)
    return grown[0].concat(*grown[1:])


def _propose(prefix, atom, key, bound, var):
    if not key:
        raise PlanError("naive plan: an extender without key columns is not supported")
    return prefix.join(atom, on=key).map(*map(_q, bound + [var]))


def _atom(relations, columns, atom: cq.Atom, comparisons):
    """The relation's records matching the atom, one column per variable."""
    cols = columns[atom.relation]
    c = relations[atom.relation]
    conds, first = [], {}
    for k, t in enumerate(atom.terms):
        if isinstance(t, cq.Const):
            conds.append(f"{_q(cols[k])} = {cq.sql(t)}")
        elif t.name in first:
            conds.append(f"{_q(cols[k])} = {_q(cols[first[t.name]])}")
        else:
            first[t.name] = k
    if conds:
        c = c.filter(" AND ".join(conds))
    c = c.map(*(f"{_q(cols[k])} AS {_q(v)}" for v, k in first.items()))
    return c.filter(" AND ".join(c.sql() for c in comparisons)) if comparisons else c


def _q(name: str) -> str:
    return f"`{name}`"
