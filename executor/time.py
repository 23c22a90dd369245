"""Times on Spark: a time is k BIGINT columns (the outer epoch `time`, then one per nested
iteration scope), ordered as a product. Operators build their time expressions here instead of
assuming a single integer, so nested scopes need no operator changes. On arrays (the driver
placement, kernels) the same lattice ops are gpu_kernels/times.py's: a time is a tuple of k
int64 arrays."""
from __future__ import annotations

TIME = "time"
ITERATION = "__iteration"  # the coordinate an iterate scope adds (executor/operators/iterate/spark.py)
DIFF = "diff"
INFINITY = 2**63 - 1  # the frontier after close(): every time is below it


def join_expr(a: str, b: str) -> str:
    """Lattice join of one coordinate; a null element time leaves `a` unchanged."""
    return f"greatest({a}, {b})"


def element_time_exprs(time_cols: list[str], element: str, saved: list[str]) -> list[str]:
    """Times after a join_function stage: an element time joins the outer coordinate (the
    epoch); inner iteration coordinates pass through."""
    first = f"{join_expr(saved[0], element)} AS {time_cols[0]}"
    return [first] + [f"{s} AS {t}" for s, t in zip(saved[1:], time_cols[1:])]
