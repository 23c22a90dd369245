"""Which operators can see updates at or after a step's `upto` (DESIGN.md section 4).

A step's input updates all lie before `upto` (executor/inputs/updates.py checks it), and most
operators keep times or join them (the greatest of times below `upto` is below it); only
stages that set times (temporal filters, join functions and kernels with element times) move
updates past it. Reductions and queries hold such updates back in `pending`, and outputs
keep their own; where nothing upstream can move a time, that pending part is known to be
empty, so the runner neither computes nor stores it (a Spark job per stateful operator and
step saved).
"""
from __future__ import annotations

from plans import ir

_KEEP = (ir.Map, ir.Filter, ir.FlatMap, ir.Explode, ir.Negate)  # stages that keep times
_HOLD = (ir.Reduce, ir.Query)  # emit only below upto, whatever their inputs


def late(plan: dict) -> set:
    """The nodes whose changes in a step may lie at or after its `upto` (any node kind not
    known to keep times counts as one that may)."""
    out: set = set()
    for n in ir.topological(plan.values()):
        if isinstance(n, (ir.Input, ir.Imported)) or isinstance(n, _HOLD):
            continue
        keeps = isinstance(n, (ir.Concat, ir.Consolidate, ir.Arrange, ir.Join, ir.Iterate)) or (
            isinstance(n, ir.Linear) and all(isinstance(s, _KEEP) for s in n.stages))
        if not keeps or any(c in out for c in n.children()):
            out.add(n)
    return out


def holds_back(node: ir.Node, late_nodes: set) -> bool:
    """Whether a reduction or query may have updates to hold back (an input that is late)."""
    return any(c in late_nodes for c in node.children())


def holding(plan: dict, late_nodes: set) -> list:
    """The keys of a runner's state under which reductions and queries may hold updates
    for later times: the Reduce, or (Query, relation), of each that holds back, in plan
    order. Worked out once per plan: a driver step asks for each entry by its key (a resumed
    runner's state reads an entry when asked, executor/durability/state.py `_LazyState`)."""
    keys = []
    for node in ir.topological(plan.values()):
        if isinstance(node, ir.Reduce) and holds_back(node, late_nodes):
            keys.append(node)
        elif isinstance(node, ir.Query) and holds_back(node, late_nodes):
            keys += [(node, r) for r in node.relations]
    return keys
