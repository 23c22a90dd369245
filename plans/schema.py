"""Column names of a Spark DDL schema string, without Spark: enough for the builder to
refuse reserved or duplicate names at plan time. Types are resolved later by the executor."""
from __future__ import annotations

from .errors import RESERVED, PlanError


def split_top_level(text: str, sep: str = ",", brackets: str = "<(") -> list[str]:
    """Split on `sep` outside brackets (`brackets` opens, its mirror closes: DDL nests
    <...> and (...); SQL expressions, where `<` compares, only (...)), backticks and
    quotes ('...', "...", a doubled or backslashed quote stays inside)."""
    closing = {"<": ">", "(": ")", "[": "]"}
    ends = "".join(closing[b] for b in brackets)
    parts, depth, quote, cur, escaped = [], 0, None, [], False
    for ch in text:
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\" and quote != "`":
                escaped = True
            elif ch == quote:
                quote = None  # a doubled quote closes and reopens: same result
        elif ch in "`'\"":
            quote = ch
        elif ch in brackets:
            depth += 1
        elif ch in ends:
            depth -= 1
        if ch == sep and depth == 0 and quote is None:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def ddl_names(ddl: str) -> list[str]:
    """Names of `ddl`'s columns, unchecked: the first word of each, backticks stripped."""
    return [c.split()[0].strip("`") for c in split_top_level(ddl)]


def column_names(ddl: str, where: str) -> list[str]:
    """Names declared by `ddl`; `where` names the input or operator for error messages."""
    names = []
    for col in split_top_level(ddl):
        if col.startswith("`"):
            name = col[1:col.index("`", 1)]
        else:
            name = col.split()[0].rstrip(":")
        names.append(name)
    check_names(names, where)
    return names


def check_names(names, where: str) -> None:
    if not names:
        raise PlanError(f"{where}: schema declares no columns (rule: at least one record column)")
    seen = set()
    for n in names:
        if n.lower() in RESERVED:
            raise PlanError(f"{where}: column '{n}' uses a reserved name "
                            f"(rule: 'time' and 'diff' are reserved for update triples)")
        if n.lower() in seen:
            raise PlanError(f"{where}: column '{n}' is declared twice (rule: unique column names)")
        seen.add(n.lower())
