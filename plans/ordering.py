"""top_k's `order_by` text ("total DESC, name NULLS LAST") as sort keys, parsed when the
plan is built: Spark would read a trailing DESC as an alias and sort ascending, silently.
"""
from __future__ import annotations

import re

from .errors import PlanError
from .schema import split_top_level

_SUFFIX = re.compile(r"^(?P<expr>.*?)(?:\s+(?P<dir>ASC|DESC))?"
                     r"(?:\s+NULLS\s+(?P<nulls>FIRST|LAST))?$", re.IGNORECASE | re.DOTALL)
# a direction word left over once a valid suffix is stripped ("x DESC NULLS")
_STRAY = re.compile(r"\s(?:ASC|DESC|NULLS)\b[\w\s]*$", re.IGNORECASE)


def sort_keys(order_by: str, where: str = "top_k") -> tuple[tuple[str, bool, bool], ...]:
    """(expression, descending, nulls_first) per comma-separated key, with Spark's defaults
    resolved (ASC: nulls first, DESC: nulls last). Anything else after an expression (a
    misspelt DESC, which Spark would take for an alias) is refused."""
    import sqlglot
    from sqlglot import exp

    if not isinstance(order_by, str) or not order_by.strip():
        raise PlanError(f"{where}: order_by must be a non-empty SQL expression, got {order_by!r}")
    keys = []
    for part in split_top_level(order_by, brackets="(["):
        m = _SUFFIX.match(part)
        expr, direction, nulls = m.group("expr").strip(), m.group("dir"), m.group("nulls")
        if not expr:
            raise PlanError(f"{where}: order_by key {part!r} has no expression")
        try:
            parsed = sqlglot.parse_one(expr, read="spark")
        except sqlglot.errors.ParseError:
            parsed = None  # Spark's own parser, which knows more syntax, judges it later
        stray = _STRAY.search(expr)
        if isinstance(parsed, exp.Alias) or stray:
            word = parsed.alias if isinstance(parsed, exp.Alias) else stray.group(0).strip()
            raise PlanError(f"{where}: order_by key {part!r}: {word!r} after the "
                            f"expression is not ASC, DESC, NULLS FIRST or NULLS LAST "
                            f"(rule: expression [ASC|DESC] [NULLS FIRST|LAST], keys "
                            f"separated by commas)")
        descending = (direction or "").upper() == "DESC"
        nulls_first = (nulls or ("LAST" if descending else "FIRST")).upper() == "FIRST"
        keys.append((expr, descending, nulls_first))
    return tuple(keys)
