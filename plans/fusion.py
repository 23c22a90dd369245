"""Linear fusion: adjacent Linear nodes compose into one (`followed_by`).

Correct because join_function composes: for stages f then g, each update (d, t, r) becomes
(d3, t v t2 v t3, r * r2 * r3) either way (lattice join and product are associative). A node
read by several consumers is not swallowed, so shared work is not duplicated.
"""
from __future__ import annotations

from . import ir


def fuse(outputs: dict[str, ir.Node]) -> dict[str, ir.Node]:
    uses = ir.consumers(list(outputs.values()))
    memo: dict[ir.Node, ir.Node] = {}

    def rebuild(n: ir.Node) -> ir.Node:
        if n in memo:
            return memo[n]
        if isinstance(n, ir.Linear):
            inner = rebuild(n.input)
            if isinstance(inner, ir.Linear) and uses.get(n.input, 0) == 1:
                out = inner.followed_by(n.stages)
            else:
                out = ir.Linear(inner, n.stages)
        else:
            out = n.with_children(tuple(rebuild(c) for c in n.children()))
        memo[n] = out
        return out

    return {name: rebuild(node) for name, node in outputs.items()}
