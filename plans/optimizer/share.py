"""Arrangements that hold the same records under other column names, kept once.

Structurally equal Arrange nodes are already one trace. But the SQL front end names every
table reference's columns afresh, so TPC-H q18's join and its IN subquery arrange the same
(l_orderkey, l_quantity) of lineitem twice, as (`_10_k`, `_8_l_quantity`) and as
(`_13_g`, `_14_agg`), and q17's correlated subquery arranges (l_partkey, l_quantity) beside
the outer query's (l_partkey, l_quantity, l_extendedprice): twice the sorting in the first
step, twice the state, two updates per refresh. This pass, run on the extracted plan like
prune.py, finds arrangements of the same node, through the same filters, whose keys are the
same expressions of it position by position, and lets the one whose columns cover the most
expressions serve each other whose columns it covers:
- a count, sum, min, max or aggregate reads it under its names (its keys and columns
  renamed; a map after it restores the reader's names): extra columns change none of them;
- a join reads it too, its other side's key renamed to the serving keys' names where they
  differ (when nothing else reads that side), and a map after the join restores the
  written columns;
- a linear reader reads a map of it.
The expressions are compared as sqlglot trees with every column replaced by what it
stands for in the arrangement's input (a rename or a computed column), so a rename is seen
through; any stage or expression the comparison cannot follow (a kernel, a lambda, a `*`,
a lateral alias) leaves the arrangement as it is. Plans with scopes, queries or imported
traces are left as they are (as prune.py leaves them).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import sqlglot
from sqlglot import exp

from .. import ir
from .columns import columns
from .prune import _opaque
from .rules import WHY

WHY["share"] = ("an arrangement is its input's records indexed by key: another of the same "
                "records, keys and filters under other column names, or of a projection of "
                "them, is read from it under its readers' names (arrangements shared)")

# reductions whose result a key's extra columns do not change (each record counts once per
# multiplicity); distinct, top_k and threshold see whole records, a kernel reads by name
_BLIND = ("count", "sum", "min", "max", "aggregate")


@dataclass(frozen=True)
class Form:
    """What an arrangement holds, names aside: `group` its input, filters and key
    expressions; `of` each of its columns' expression over the input; `names` its columns
    in order and `keys` its key columns."""

    group: tuple
    names: tuple[str, ...]
    keys: tuple[str, ...]
    of: dict

    def values(self) -> list[str]:
        return [c for c in self.names if c not in self.keys]

    def covers(self, other: "Form") -> bool:
        return {other.of[c] for c in other.values()} <= set(self.of.values())


@dataclass
class _Plan:
    """The plan's shape as this pass reads it."""

    roots: list
    parents: dict
    uses: dict
    forms: dict
    memo: dict
    readers: set = frozenset()  # the joins and reductions of moved arrangements


def shared(outputs: dict[str, ir.Node]) -> tuple[dict[str, ir.Node], int]:
    """(the plan with each arrangement that another covers read through that one, how many
    arrangements were dropped)."""
    roots = list(outputs.values())
    nodes = ir.topological(roots)
    if _opaque(nodes):
        return outputs, 0
    memo: dict = {}
    forms = {n: f for n in nodes if isinstance(n, ir.Arrange) and n.keys is not None
             and (f := _form(n, memo)) is not None}
    groups: dict[tuple, list[ir.Arrange]] = {}
    for n, f in forms.items():
        groups.setdefault(f.group, []).append(n)
    parents: dict = {n: [] for n in nodes}
    for n in nodes:
        for c in set(n.children()):
            parents[c].append(n)
    plan = _Plan(roots, parents, ir.consumers(roots), forms, memo)
    grouped = {m for members in groups.values() if len(members) > 1 for m in members}
    moved: dict = {}  # arrangement -> (the one that serves it, its name -> that one's)
    renamed: dict = {}  # a join's other side -> the serving keys' names for its keys
    for members in groups.values():
        if len(members) < 2:
            continue
        serving = max(members, key=lambda m: len(set(forms[m].of.values())))
        for b in members:
            if b is serving or b in roots or not forms[serving].covers(forms[b]):
                continue
            sigma = _renaming(forms[b], forms[serving])
            sides = [_reads(p, b, serving, sigma, plan, grouped) for p in parents[b]]
            if all(side is not None for side in sides):
                moved[b] = (serving, sigma)
                renamed |= {o: keys for side in sides for o, keys in side.items()}
    if not moved:
        return outputs, 0
    plan.readers = {p for b in moved for p in plan.parents[b]
                    if isinstance(p, (ir.Reduce, ir.Join))}
    return _rebuilt(outputs, moved, renamed, plan), len(moved)


def _form(node: ir.Arrange, memo: dict) -> Optional[Form]:
    """The arrangement's Form, or None where its input's stages are not all maps whose
    outputs are named and filters over known columns."""
    source, stages = (node.input.input, node.input.stages) \
        if isinstance(node.input, ir.Linear) else (node.input, ())
    cols = columns(source, memo)
    if cols is None or len({c.lower() for c in cols}) != len(cols):
        return None
    env = {c.lower(): (c, exp.column(c, quoted=True)) for c in cols}
    filters = []
    for stage in stages:
        if isinstance(stage, ir.Filter):
            tree = _over(stage.expr, env)
            if tree is None:
                return None
            filters.append(_text(tree))
        elif isinstance(stage, ir.Map):
            out: dict = {}
            for text in stage.exprs:
                parsed = _parse(text)
                if isinstance(parsed, exp.Alias):
                    name, body = parsed.alias, parsed.this
                elif isinstance(parsed, exp.Column) and not parsed.table:
                    name, body = parsed.name, parsed
                else:
                    return None
                tree = _over(body, env)
                if tree is None or not name or name.lower() in out:
                    return None
                out[name.lower()] = (name, tree)
            env = out
        else:
            return None
    names = tuple(name for name, _ in env.values())
    if list(names) != list(columns(node, memo) or ()) or \
            any(k not in names for k in node.keys):
        return None
    of = {name: _text(tree) for name, tree in env.values()}
    return Form((source, tuple(filters), tuple(of[k] for k in node.keys)), names,
                tuple(node.keys), of)


def _parse(text) -> Optional[exp.Expression]:
    if not isinstance(text, str) or "\\" in text:  # escapes: read as Spark reads them only
        return None
    try:
        return sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.ParseError:
        return None


def _over(expr, env: dict) -> Optional[exp.Expression]:
    """`expr` (text or a tree) with each column replaced by its tree over the arrangement's
    input; None where it reads a column not in `env` (a lateral alias, a field), binds names
    or reads every column."""
    tree = _parse(expr) if isinstance(expr, str) else expr
    if tree is None or tree.find(exp.Star, exp.Lambda, exp.Subquery, exp.Select):
        return None
    for col in tree.find_all(exp.Column):
        if col.table or not isinstance(col.this, exp.Identifier) or \
                col.name.lower() not in env:
            return None
    return tree.transform(lambda n: env[n.name.lower()][1].copy()
                          if isinstance(n, exp.Column) else n, copy=True)


def _text(tree: exp.Expression) -> str:
    return tree.sql(dialect="spark")


def _renaming(b: Form, a: Form) -> dict[str, str]:
    """b's column -> a's column holding the same expression: keys by position, the others
    by expression, each to a column of a not yet taken where there is one (so that equal
    forms pair one to one), else to any (a key, or a column taken already)."""
    sigma = dict(zip(b.keys, a.keys))
    free: dict = {}
    for c in a.values():
        free.setdefault(a.of[c], []).append(c)
    for c in b.values():
        left = free.get(b.of[c])
        sigma[c] = left.pop(0) if left else next(x for x in a.names if a.of[x] == b.of[c])
    return sigma


def _reads(parent: ir.Node, b: ir.Arrange, a: ir.Arrange, sigma: dict, plan: _Plan,
           grouped: set) -> Optional[dict]:
    """Whether `parent` can read `a` in place of `b` through `sigma`: None where not, else
    the join's other side whose keys it renames ({side: the new key names}; {} for none)."""
    form, memo = plan.forms[a], plan.memo
    if isinstance(parent, ir.Reduce):
        if parent.reduction.kind not in _BLIND:
            return None
        out = [c.lower() for c, _ in _reduced(parent, _reduction(parent.reduction, sigma),
                                              sigma)]
        return {} if len(set(out)) == len(out) else None  # a value named as a's key: clash
    if isinstance(parent, ir.Join):
        if parent.band is not None or parent.left is parent.right:
            return None
        other = parent.right if parent.left is b else parent.left
        cols = columns(other, memo)
        if cols is None:
            return None
        if other in grouped:  # its own columns may move too: leave the pair as it is
            return None
        keys = tuple(sigma[k] for k in parent.on)
        theirs = {c.lower() for c in cols if c not in parent.on}
        if parent.left_order and parent.right is b:
            mine = set()  # a semijoin outputs only its left's columns
        else:
            mine = {c.lower() for c in form.values()}
        if keys == parent.on:
            return {} if not mine & theirs else None
        # the other side must answer to a's key names: rename its keys, if only this reads it
        if not (isinstance(other, ir.Arrange) and other.keys == parent.on and
                plan.uses[other] == 1 and other not in plan.roots):
            return None
        if (mine | {k.lower() for k in keys}) & theirs:
            return None
        return {other: keys}
    return {} if isinstance(parent, (ir.Linear, ir.Concat, ir.Consolidate)) else None


def _renames(pairs) -> ir.Map:
    return ir.Map(tuple(f"`{src}`" if src == out else f"`{src}` AS `{out}`"
                        for src, out in pairs))


def _rebuilt(outputs: dict, moved: dict, renamed: dict, plan: _Plan) -> dict:
    """The plan with each moved arrangement's readers reading the one that serves it; a
    chain right after a reader that only it reads takes the reader's renaming map first."""
    memo = plan.memo
    new: dict = {}
    after: set = set()  # the renaming chains this pass put after a reader

    def view(b: ir.Arrange) -> ir.Node:  # b's collection, for readers of records
        a, sigma = moved[b]
        return ir.Linear(build(a), (_renames((sigma[c], c) for c in columns(b, memo)),))

    def build(n: ir.Node) -> ir.Node:  # a server may sit in a branch not built yet
        if n not in new:
            new[n] = _reader(n) if n in plan.readers else _copy(n)
        return new[n]

    def _reader(n: ir.Node) -> ir.Node:
        if isinstance(n, ir.Reduce):
            a, sigma = moved[n.input]
            red = _reduction(n.reduction, sigma)
            node = ir.Reduce(build(a), tuple(sigma[c] for c in n.by), red)
            node = ir.Linear(node, (_renames(_reduced(n, red, sigma)),))
        else:
            back, on, kids = {}, n.on, []
            for c in n.children():
                if c in moved:
                    a, sigma = moved[c]
                    kids.append(build(a))
                    on = tuple(sigma[k] for k in n.on)
                    if c is n.left or not n.left_order:
                        back |= sigma
                elif c in renamed:  # its keys answer to the serving keys' names
                    names = dict(zip(c.keys, renamed[c]))
                    stages = (_renames((x, names.get(x, x)) for x in columns(c, memo)),)
                    source = build(c.input)
                    if isinstance(source, ir.Linear) and plan.uses[c.input] == 1:
                        source, stages = source.input, source.stages + stages
                    kids.append(ir.Arrange(ir.Linear(source, stages), renamed[c]))
                else:
                    kids.append(build(c))
            back |= dict(zip(n.on, on))
            node = ir.Join(kids[0], kids[1], on, n.left_order, n.band)
            node = ir.Linear(node, (_renames((back.get(c, c), c) for c in columns(n, memo)),))
        after.add(node)
        return node

    def _copy(n: ir.Node) -> ir.Node:
        kids = tuple(view(c) if c in moved else build(c) for c in n.children())
        if isinstance(n, ir.Linear) and kids[0] in after and plan.uses[n.input] == 1:
            return ir.Linear(kids[0].input, kids[0].stages + n.stages)
        return n.with_children(kids) if kids != n.children() else n

    for n in ir.topological(list(outputs.values())):  # children first: shallow recursion
        build(n)
    return {name: new[node] for name, node in outputs.items()}


def _reduced(n: ir.Reduce, red: ir.Reduction, sigma: dict) -> list[tuple[str, str]]:
    """(column of the reduction over the serving arrangement, n's column) per n's column:
    the keys renamed; the values keep their names, but a sum, min or max is named after
    the column it reads."""
    return [(sigma[c], c) for c in n.by] + list(zip(red.values(), n.reduction.values()))


def _reduction(red: ir.Reduction, sigma: dict) -> ir.Reduction:
    """The reduction reading columns under the serving arrangement's names."""
    if red.kind == "aggregate":
        return replace(red, parts=tuple((name, kind, None if c is None else sigma[c])
                                        for name, kind, c in red.parts))
    return replace(red, column=None if red.column is None else sigma[red.column])
