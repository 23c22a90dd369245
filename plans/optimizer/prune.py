"""Columns that nothing above reads, dropped where a join arranges its inputs.

A join keeps each input's records whole in its arrangement. Where the columns above the join
are chosen by a map, some of those columns may never be read: a filter's column (TPC-H q13's
`o_comment`, read by `NOT LIKE` before the join and by nothing after it) or a second copy of
the key. Keeping them costs the trace's memory and, for a STRING, a dictionary code per
distinct value at every step. This pass runs on the extracted plan, since which columns are
read is a property of every consumer at once, not a local rewrite: it works out the columns
each node's consumers read (top down) and narrows an arrangement to its keys and the columns
read above it, and a chain's last map to the columns read above the chain (SQL's joins lower
to chains that list every column of both sides: TPC-H q21's last arrangement kept 38
columns, of which 5 are read). It narrows only where the narrower schema cannot be seen:
every path up from the node passes joins and arrangements until a map chooses the columns.
Plans with scopes, queries or imported traces are left as they are.
"""
from __future__ import annotations

from typing import Optional

from .. import ir
from .columns import _alias, columns, lower, refs, renames, stage_refs
from .rules import WHY

WHY["prune"] = ("a column that no consumer reads changes no output: an arrangement below a "
                "join keeps its keys and the columns read above the join (arrangements "
                "narrowed)")

_CHOOSING = (ir.Map, ir.Filter, ir.TemporalFilter, ir.Negate)


def pruned(outputs: dict[str, ir.Node]) -> tuple[dict[str, ir.Node], int]:
    """(the plan with arrangements narrowed, how many were)."""
    roots = list(outputs.values())
    nodes = ir.topological(roots)
    if _opaque(nodes):
        return outputs, 0
    memo: dict = {}
    read, hidden = _reads(roots, nodes, memo, stored=False)
    narrow = {n for n in nodes if isinstance(n, ir.Arrange) and n.keys is not None
              and hidden[n] and read[n] is not None
              and not lower(columns(n, memo)) <= read[n] and lower(columns(n, memo)) & read[n]
              and not any("`" in c for c in columns(n, memo))}
    # a chain whose output only choosing consumers see keeps, of its last map, what they read
    chains = {n: stages for n in nodes if isinstance(n, ir.Linear) and hidden[n]
              and read[n] is not None
              and (stages := _walk(n.stages, read[n], True)[0]) != n.stages}
    if not narrow and not chains:
        return outputs, 0
    uses = ir.consumers(roots)
    new: dict = {}
    for n in nodes:
        kids = tuple(new[c] for c in n.children())
        node = n.with_children(kids) if kids != n.children() else n
        if isinstance(node, ir.Linear):
            stages = chains.get(n) or trimmed(node.stages)
            node = node if stages == node.stages else ir.Linear(node.input, stages)
        if n in narrow:
            kept = tuple(f"`{c}`" for c in columns(n, memo) if c.lower() in read[n])
            source = node.input
            if isinstance(source, ir.Linear) and uses[n.input] == 1:
                source = ir.Linear(source.input, trimmed(source.stages + (ir.Map(kept),)))
            else:
                source = ir.Linear(source, (ir.Map(kept),))
            node = ir.Arrange(source, n.keys)
        new[n] = node
    return {name: new[node] for name, node in outputs.items()}, len(narrow) + len(chains)


def input_reads(outputs: dict[str, ir.Node]) -> dict[str, Optional[set]]:
    """Per input, the lower-cased columns that some output's value depends on (None: all
    of them, or not known). A column outside it changes no output and no state: every
    arrangement and reduction counts as reading all the columns it keeps, so a step may
    send Spark such a column as nulls (executor/runner.py: a big input's unread columns
    cost most of a scan, converted from Arrow row by row). Plans with scopes, queries or
    imported traces read every column."""
    roots = list(outputs.values())
    nodes = ir.topological(roots)
    inputs = [n for n in nodes if isinstance(n, ir.Input)]
    if _opaque(nodes):
        return {n.name: None for n in inputs}
    read, _ = _reads(roots, nodes, {}, stored=True)
    return {n.name: read[n] for n in inputs}


def _opaque(nodes: list) -> bool:
    """Whether the plan has nodes whose reads this pass does not follow."""
    return any(isinstance(n, (ir.Iterate, ir.Variable, ir.Query, ir.Imported)) for n in nodes)


def _reads(roots: list, nodes: list, memo: dict, stored: bool) -> tuple[dict, dict]:
    """(per node, the lower-cased columns its consumers read, None: all; per node, whether
    a narrower schema of it is invisible to the outputs). `stored`: an arrangement reads
    every column of its input (it keeps them), not only those read above it."""
    parents: dict = {n: [] for n in nodes}
    for n in nodes:
        for c in set(n.children()):
            parents[c].append(n)
    read: dict = {}
    hidden: dict = {}
    for n in reversed(nodes):  # consumers first
        outside = n in roots or columns(n, memo) is None
        read[n] = None if outside else _union(
            None if stored and isinstance(p, ir.Arrange) else
            _read(p, n, read[p], hidden[p], memo) for p in parents[n])
        hidden[n] = not outside and all(_chooses(p) or isinstance(p, (ir.Join, ir.Arrange))
                                        and hidden[p] for p in parents[n])
    return read, hidden


def trimmed(stages: tuple) -> tuple:
    """A chain's stages less the columns a map only renames and no later stage reads (the
    last map's columns are the chain's output and stay): a fused chain's first map lists
    every column of its input, and Spark would still ask its input for them all."""
    return _walk(stages, None, False)[0]


def _walk(stages: tuple, wanted: Optional[set], hidden: bool) -> tuple[tuple, Optional[set]]:
    """(the stages trimmed, the columns the chain reads of its input when `wanted` of its
    output are read; None: every column, or not known), walking the chain back from its
    output: a map keeps what the stages after it read (`_kept`); the last map keeps its
    columns unless the chain's output is `hidden` (only consumers that choose columns see
    it)."""
    out, last, known = [], True, wanted is not None
    for stage in reversed(stages):
        if isinstance(stage, ir.Map):
            if (hidden or not last) and wanted is not None:
                stage = _kept(stage, wanted)
            last, wanted = False, _map_reads(stage)
        elif wanted is not None and not isinstance(stage, ir.Negate):
            more = stage_refs(stage)  # None for a stage other than a filter
            wanted = None if more is None else wanted | more
        known = known and wanted is not None  # once not known, the input's reads are not
        out.append(stage)
    out.reverse()
    kept = tuple(s for i, s in enumerate(out) if not (i and _selects_all(out[i - 1], s)))
    return kept, wanted if known else None


def _selects_all(before: ir.Stage, stage: ir.Stage) -> bool:
    """Whether map `stage` selects exactly the columns map `before` outputs, in their order
    and names: a narrowed arrangement's selection over a chain already narrowed to it."""
    if not isinstance(before, ir.Map) or not isinstance(stage, ir.Map):
        return False
    pairs, names = renames(stage.exprs), [_alias(e) for e in before.exprs]
    return pairs is not None and None not in names and \
        [(src.lower(), out) for src, out in pairs] == [(n.lower(), n) for n in names]


def _kept(stage: ir.Map, wanted: set) -> ir.Map:
    """The map less the renames whose names neither later stages (`wanted`) nor the map's
    other expressions read (Spark resolves a later expression's name to an earlier alias of
    the same map, a lateral alias)."""
    keep = [(_alias(e) or "").lower() in wanted or not renames([e]) for e in stage.exprs]
    while True:
        read = set().union(*[refs(e) or set() for e, k in zip(stage.exprs, keep) if k])
        more = [k or (_alias(e) or "").lower() in read for e, k in zip(stage.exprs, keep)]
        if more == keep:
            break
        keep = more
    exprs = tuple(e for e, k in zip(stage.exprs, keep) if k) or stage.exprs[:1]  # never none
    return ir.Map(exprs) if exprs != stage.exprs else stage


def _map_reads(stage: ir.Map) -> Optional[set]:
    """The columns a map reads; None where an expression has no name of its own (`*`, a
    computed column Spark names) or its names are not known."""
    if any(_alias(e) is None for e in stage.exprs):
        return None
    reads = [refs(e) for e in stage.exprs]
    return None if None in reads else set().union(*reads)


def _union(sets) -> Optional[set]:
    out: set = set()
    for s in sets:
        if s is None:
            return None
        out |= s
    return out


def _chooses(node: ir.Node) -> bool:
    """A linear chain whose output columns a map names, whatever columns its input has."""
    return isinstance(node, ir.Linear) and all(isinstance(s, _CHOOSING) for s in node.stages) \
        and any(isinstance(s, ir.Map) for s in node.stages)


def _read(parent: ir.Node, child: ir.Node, wanted: Optional[set], hidden: bool,
          memo) -> Optional[set]:
    """The lower-cased columns of `child` that `parent` reads when its own consumers read
    `wanted` (None: all of them) and see only those if `hidden`; None where that is not
    known or is every column."""
    if wanted is None:
        cols = columns(parent, memo)
        if cols is None:
            return None
        wanted = lower(cols)
    if isinstance(parent, (ir.Concat, ir.Consolidate)):
        return set(wanted)
    if isinstance(parent, ir.Arrange):
        return None if parent.keys is None else wanted | lower(parent.keys)
    if isinstance(parent, ir.Join):
        side = columns(child, memo)
        if side is None:
            return None
        on, side = lower(parent.on), lower(side)
        if parent.band is not None:  # the band compares a column of each side
            on = on | {(parent.band.column if child is parent.left else parent.band.value).lower()}
        # a semijoin outputs the left's columns; its right side only matches keys
        out = child is parent.left or not parent.left_order
        return on | (wanted & side) if out else on
    if isinstance(parent, ir.Linear):
        return _walk(parent.stages, wanted, hidden)[1]
    return None
