"""Column names of a Spark DDL schema string, without Spark: enough for the builder to
refuse reserved or duplicate names at plan time. Types are resolved later by the executor."""
from __future__ import annotations

import re

from .errors import RESERVED, PlanError

# An SQL expression's tokens: quoted strings, backquoted names, words, numbers, symbols
SQL_TOKEN = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]+`|[A-Za-z_][A-Za-z0-9_]*"
                       r"|[0-9][0-9A-Za-z_.]*|->|\.|\S")


def _reserved_read(tokens: list[str]):
    """The first of an update's own columns (`time`, `diff`) that an expression's `tokens`
    read as a column, or None: a field (`e.time`), a string ('time'), an alias (`AS time`),
    a function name or a lambda's parameter of that name is not one."""
    bound = set()  # lambda parameters: `x ->` and `(a, b) ->`
    for j, tok in enumerate(tokens):
        if tok != "->" or not j:
            continue
        if tokens[j - 1] != ")":
            bound.add(tokens[j - 1].strip("`").lower())
            continue
        i = j - 2
        while i >= 0 and tokens[i] != "(":
            bound.add(tokens[i].strip("`").lower())
            i -= 1
    for i, tok in enumerate(tokens):
        name = tok.strip("`").lower()
        if name in RESERVED and name not in bound and tok[0] not in "'\"" \
                and (i == 0 or tokens[i - 1] != "." and tokens[i - 1].upper() != "AS") \
                and (i + 1 == len(tokens) or tokens[i + 1] != "("):
            return name
    return None


# Spark functions whose value does not follow from their arguments (the SQL front end
# refuses them too, plans/sql.py); the current_* ones need no parentheses
NON_DETERMINISTIC = {"rand", "random", "randn", "uuid", "shuffle", "now", "current_date",
                     "current_timestamp", "current_time", "localtimestamp", "curdate",
                     "monotonically_increasing_id", "spark_partition_id", "input_file_name",
                     "unix_timestamp", "current_timezone", "try_reflect", "reflect",
                     "java_method"}
_BARE = {"current_date", "current_timestamp", "current_time", "localtimestamp"}
_OF_NOW = {"unix_timestamp"}  # the current time only without arguments


def _non_deterministic(tokens: list[str]):
    """The first function an expression's `tokens` call whose value does not follow from
    its arguments, or None."""
    for i, tok in enumerate(tokens):
        name = tok.lower()
        call = i + 1 < len(tokens) and tokens[i + 1] == "("
        empty = call and i + 2 < len(tokens) and tokens[i + 2] == ")"
        if name in _OF_NOW and not empty:  # unix_timestamp(ts) reads its argument
            continue
        if (i == 0 or tokens[i - 1] != ".") and (
                name in NON_DETERMINISTIC and call or name in _BARE):
            return name
    return None


def check_expression(expr: str, where: str) -> None:
    """Refuse an expression that reads an update's time or diff, is a window function, or
    calls a function whose value changes between calls: an operator over collections maps
    records to records, and a retraction must meet what its insertion made (a filter on
    `diff > 0` would keep an insertion and drop its retraction; `rand()` would give the
    retraction another record); join_function sets times and diffs through its elements'
    fields."""
    tokens = SQL_TOKEN.findall(expr)
    name = _reserved_read(tokens)
    if name is not None:
        raise PlanError(f"{where}: {expr!r} reads the column '{name}' (rule: expressions read "
                        f"the record's columns; 'time' and 'diff' belong to the update, and "
                        f"join_function sets them through its elements' fields)")
    if any(tok.upper() == "OVER" for tok in tokens):
        raise PlanError(f"{where}: {expr!r} is a window function (rule: an expression maps "
                        f"one record; Spark would rank the rows of a step's changes, not of "
                        f"the collection: use top_k or reduce)")
    call = _non_deterministic(tokens)
    if call is not None:
        raise PlanError(f"{where}: {expr!r} calls {call}, whose value changes between calls "
                        f"(rule: an expression's value follows from the record, so that a "
                        f"retraction meets what its insertion made)")


def _stars(expr: str) -> list:
    """The `*` tokens of `expr` that stand for every column (`struct(*)`, `hash(a, *)`, a
    bare `*`), not a product: each comes after `(`, `,` or nothing and before `)`, `,` or
    nothing."""
    tokens = list(SQL_TOKEN.finditer(expr))
    return [m for i, m in enumerate(tokens) if m.group() == "*"
            and (i == 0 or tokens[i - 1].group() in ("(", ","))
            and (i + 1 == len(tokens) or tokens[i + 1].group() in (")", ","))]


def has_star(expr: str) -> bool:
    """Whether `expr` reads every column through a `*`."""
    return bool(_stars(expr))


def expand_stars(exprs, records: list[str]) -> list[str]:
    """`exprs` with every `*` that stands for every column replaced by the record columns
    (a bare `*` becomes one expression per column). A star means the record's columns in
    every placement and in the reference interpreter: Spark would expand it to whatever
    frame evaluates the expression, an update's time and diff included (so `struct(*)`
    made an insertion and its retraction different records)."""
    quoted = ["`" + c.replace("`", "``") + "`" for c in records]
    named = ", ".join(quoted)
    out = []
    for e in exprs:
        stars = _stars(e)
        if not stars:
            out.append(e)
        elif e.strip() == "*":
            out += quoted
        else:
            text, last = [], 0
            for m in stars:
                text += [e[last:m.start()], named]
                last = m.end()
            out.append("".join(text) + e[last:])
    return out


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
