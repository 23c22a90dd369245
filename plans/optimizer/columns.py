"""What the plan alone says about column names: a node's output columns (where SQL
expressions do not hide them) and the columns an SQL predicate reads.

Both answers are conservative: None means "not known", and a rule that needs them does not
fire. Spark resolves names case-insensitively, so names compare lower-cased.
"""
from __future__ import annotations

import re
from typing import Optional

from .. import ir
from ..errors import RESERVED
from ..schema import SQL_TOKEN, column_names, has_star

_NAME = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
_RENAME = re.compile(rf"\s*({_NAME})(?:\s+(?:AS\s+)?({_NAME}))?\s*$", re.I)
_ALIAS = re.compile(rf"\s+AS\s+({_NAME})\s*$", re.I)
_KEYWORDS = {"and", "or", "not", "is", "null", "true", "false", "in", "between", "like",
             "rlike", "case", "when", "then", "else", "end", "distinct", "div"}


def _unquote(name: str) -> str:
    return name[1:-1] if name.startswith("`") else name


def renames(exprs) -> Optional[list[tuple[str, str]]]:
    """(source column, output name) per expression when every one is a bare column,
    optionally renamed (`src AS x`); None otherwise."""
    out = []
    for e in exprs:
        m = _RENAME.match(e)
        if not m or m.group(1).upper() == "AS" or "(" in e:
            return None
        src = _unquote(m.group(1))
        out.append((src, _unquote(m.group(2)) if m.group(2) else src))
    return out


def _alias(expr: str) -> Optional[str]:
    """The output name of a map expression: a bare column, or `... AS name`."""
    r = renames([expr])
    if r:
        return r[0][1]
    m = _ALIAS.search(expr)
    return _unquote(m.group(1)) if m else None


def refs(expr: str) -> Optional[set[str]]:
    """Lower-cased names an SQL expression reads; None when it binds names (lambdas) or
    reads fields (`a.b`), where a name need not be a column, or reads every column (`*`)."""
    if has_star(expr):  # every column of the input
        return None
    names = set()
    tokens = SQL_TOKEN.findall(expr)
    for i, tok in enumerate(tokens):
        if tok in ("->", "."):
            return None
        if tok[0] in "'\"" or tok[0].isdigit():
            continue
        if tok[0] == "`" or tok[0].isalpha() or tok[0] == "_":
            is_call = i + 1 < len(tokens) and tokens[i + 1] == "("
            if tok.lower() in _KEYWORDS or (is_call and tok[0] != "`"):
                continue
            names.add(_unquote(tok).lower())
    return names


def stage_refs(stage: ir.Stage) -> Optional[set[str]]:
    """Columns a filter or temporal filter reads; None for other stages (not pushable)."""
    if isinstance(stage, ir.Filter):
        return refs(stage.expr)
    if isinstance(stage, ir.TemporalFilter):
        parts = [refs(e) for e in (stage.lower, stage.upper) if e is not None]
        return None if any(p is None for p in parts) else set().union(*parts)
    return None


def columns(node: ir.Node, memo: dict) -> Optional[tuple[str, ...]]:
    """The node's output column names, or None where an expression decides them."""
    if node not in memo:
        memo[node] = _columns(node, memo)
    return memo[node]


def _columns(node: ir.Node, memo: dict) -> Optional[tuple[str, ...]]:
    if isinstance(node, ir.Input):
        return tuple(column_names(node.schema, f"input '{node.name}'"))
    if isinstance(node, ir.Imported):
        schema = getattr(node.handle, "schema", None)
        names = getattr(schema, "names", None)
        return tuple(n for n in names if n not in RESERVED) if names else None
    if isinstance(node, (ir.Concat, ir.Consolidate, ir.Arrange)):
        return columns(node.children()[0], memo)
    if isinstance(node, ir.Linear):
        cols = columns(node.input, memo)
        for s in node.stages:
            if cols is None:
                return None
            if isinstance(s, ir.Map):
                names = [_alias(e) for e in s.exprs]
                cols = None if None in names else tuple(names)
            elif isinstance(s, ir.Kernel):
                cols = tuple(column_names(s.schema, "kernel schema"))
            elif not isinstance(s, (ir.Filter, ir.TemporalFilter, ir.Negate)):
                cols = None
        return cols
    if isinstance(node, ir.Join):
        left, right = columns(node.left, memo), columns(node.right, memo)
        if left is None or right is None:
            return None
        if node.left_order:
            return left
        return node.on + tuple(c for c in left if c not in node.on) + \
            tuple(c for c in right if c not in node.on)
    if isinstance(node, ir.Reduce):
        values = node.reduction.values()
        return node.by + values if values is not None else columns(node.input, memo)
    if isinstance(node, ir.Query):
        return tuple(node.query.head)
    return None


def lower(cols) -> set[str]:
    return {c.lower() for c in cols}
