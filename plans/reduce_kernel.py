"""Calling a user's reduce kernel (`Collection.reduce(kernel=...)`) and checking what it
returns. The executor's reduce family calls kernels through it at run time, and the reference
interpreter does too, so both hold a kernel to the same contract; it lives here, not in the
oracle (semantics.py), so the runtime path never imports the oracle.
"""
from __future__ import annotations

from . import ir
from .schema import ddl_names


def call_reduce_kernel(red: ir.Reduction, xp, group, cols, count, n_groups: int):
    """Run a user reduction kernel and check what it returns: (group, {column: array},
    count) with one entry per output row, groups in range, every schema column present.
    The reference interpreter calls it with one group per call, the executor with many."""
    res = red.fn(xp, group, cols, count)
    where = f"reduce kernel {getattr(red.fn, '__name__', red.fn)!r}"
    if not isinstance(res, tuple) or len(res) not in (2, 3) or not isinstance(res[1], dict):
        raise ValueError(f"{where}: must return (group, cols) or (group, cols, count), "
                         f"got {type(res).__name__}")
    out_group, out = xp.astype(xp.asarray(res[0]), xp.int64), res[1]
    n = out_group.shape[0]
    missing = [c for c in ddl_names(red.schema) if c not in out]
    if missing:
        raise ValueError(f"{where}: no column {missing} in its result (schema {red.schema})")
    mult = xp.ones(n, dtype=xp.int64) if len(res) == 2 else xp.astype(xp.asarray(res[2]),
                                                                        xp.int64)
    if any(out[c].shape[0] != n for c in ddl_names(red.schema)) or mult.shape[0] != n:
        raise ValueError(f"{where}: group, columns and count must have one length")
    if n and (int(xp.min(out_group)) < 0 or int(xp.max(out_group)) >= n_groups):
        raise ValueError(f"{where}: group ids must be in [0, {n_groups})")
    return out_group, out, mult
