"""Binary join trees read as conjunctive queries: the naive form the incremental rules start
from (rules.py) and the `Query` node they may turn it into.

A tree of inner joins (`Join`, not semijoins) whose sides share exactly their `on` columns is
a natural join; each leaf is an atom: a relation whose columns a `map` only renames (or the
leaf itself, its columns as variables). The query's head lists the tree's columns in the
tree's order, so the Query node has the same records and column order as the tree.
"""
from __future__ import annotations

from typing import Optional

from .. import ir
from .. import query as cq
from ..errors import PlanError
from .columns import columns, renames

MIN_ATOMS = 3  # a two-atom join is already one delta-rule pair: nothing to gain


def leaves(node: ir.Node, memo: dict) -> Optional[list[ir.Node]]:
    """The leaves of a natural-join tree rooted at `node`, left to right; None if `node` is
    not an inner join whose sides share exactly its `on` columns."""
    if not isinstance(node, ir.Join) or node.left_order:
        return None
    sides = []
    for side in (node.left, node.right):
        if not isinstance(side, ir.Arrange):
            return None
        inner = leaves(side.input, memo)
        sides.append(inner if inner is not None else [side.input])
    left, right = columns(node.left, memo), columns(node.right, memo)
    if left is None or right is None or set(left) & set(right) != set(node.on):
        return None
    return sides[0] + sides[1]


def atom(leaf: ir.Node, memo: dict) -> Optional[tuple[ir.Node, tuple[str, ...]]]:
    """(relation node, variable per relation column) of a leaf."""
    if isinstance(leaf, ir.Linear) and len(leaf.stages) == 1 and \
            isinstance(leaf.stages[0], ir.Map):
        source = columns(leaf.input, memo)
        pairs = renames(leaf.stages[0].exprs)
        if source is not None and pairs and sorted(s for s, _ in pairs) == sorted(source):
            names = dict(pairs)
            return leaf.input, tuple(names[c] for c in source)
    cols = columns(leaf, memo)
    return (leaf, cols) if cols is not None else None


def as_query(node: ir.Node, memo: dict):
    """(ir.Query node, its delta rules, the leaf node of each atom) for a join tree of at
    least MIN_ATOMS atoms, or None."""
    found = leaves(node, memo)
    if found is None or len(found) < MIN_ATOMS:
        return None
    atoms = [atom(leaf, memo) for leaf in found]
    if any(a is None for a in atoms):
        return None
    names: dict[ir.Node, str] = {}
    for rel, _ in atoms:
        if rel not in names:
            names[rel] = rel.name if isinstance(rel, ir.Input) and rel.name not in \
                names.values() else f"rel{len(names)}"
    q = cq.Query("join", columns(node, memo),
                 tuple(cq.Atom(names[rel], tuple(cq.Var(v) for v in vs)) for rel, vs in atoms))
    try:
        cq.validate(q, {names[rel]: list(columns(rel, memo)) for rel, _ in atoms})
        order = cq.plan_order(q)
        rules = cq.delta_rules(q, order)
    except PlanError:
        return None
    rels = tuple(names)
    query = ir.Query(rels, tuple(names[r] for r in rels), q, order)
    return query, rules, found
