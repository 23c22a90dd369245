"""Sort-based consolidation of update batches: one row per distinct (record, time), diffs
summed, zero sums dropped (DESIGN §2, consolidated outputs). Also the sort and run-boundary
kernels that arrangements and the reduce family reuse.

Floating keys group as in Spark: all NaNs are one value (sorted last), and -0.0 and 0.0 are
one value (the output keeps whichever came first in the input).
"""
from .diffs import sum_segments


def _sortable(xp, key):
    return xp.astype(key, xp.uint8) if xp.isdtype(key.dtype, "bool") else key


def sort_by(xp, keys):
    """Permutation sorting rows lexicographically by `keys` (keys[0] most significant), stable.

    The standard has no lexsort: stable argsorts run from the least significant key, unless
    the keys are integers whose ranges fit in 63 bits together: then one argsort of the
    packed key does (node ids, values and a step's times usually do).
    """
    if not keys:
        raise ValueError("sort_by needs at least one key")
    packed = _packed(xp, keys)
    if packed is not None:
        return xp.argsort(packed, stable=True)
    perm = xp.argsort(_sortable(xp, keys[-1]), stable=True)
    for key in reversed(keys[:-1]):
        perm = xp.take(perm, xp.argsort(xp.take(_sortable(xp, key), perm), stable=True))
    return perm


def _packed(xp, keys):
    """One int64 per row that orders rows as `keys` do, when there are several integer keys
    whose value ranges multiply to less than 2**63; else None."""
    if len(keys) < 2 or keys[0].shape[0] == 0:
        return None
    spans, total = [], 1
    for key in keys:
        if not (xp.isdtype(key.dtype, "signed integer") or (
                xp.isdtype(key.dtype, "unsigned integer") and xp.iinfo(key.dtype).bits < 64)):
            return None
        lo, hi = int(xp.min(key)), int(xp.max(key))
        total *= hi - lo + 1
        if total >= 2**63:
            return None
        spans.append((lo, hi - lo + 1))
    packed = xp.zeros(keys[0].shape[0], dtype=xp.int64)
    for key, (lo, span) in zip(keys, spans):
        offset = xp.astype(key, xp.int64) - xp.asarray(lo, dtype=xp.int64)
        packed = packed * xp.asarray(span, dtype=xp.int64) + offset
    return packed


def group_starts(xp, sorted_keys):
    """int64 index of the first row of each run of equal rows in rows sorted by `sorted_keys`."""
    n = sorted_keys[0].shape[0]
    if n == 0:
        return xp.zeros(0, dtype=xp.int64)
    new = xp.zeros(n - 1, dtype=xp.bool)
    for key in sorted_keys:
        prev, cur = key[:-1], key[1:]
        differs = prev != cur
        if xp.isdtype(key.dtype, "real floating"):
            differs = xp.logical_and(differs, xp.logical_not(xp.isnan(prev) & xp.isnan(cur)))
        new = xp.logical_or(new, differs)
    first = xp.ones(1, dtype=xp.bool)
    return xp.astype(xp.nonzero(xp.concat([first, new]))[0], xp.int64)


def consolidate(xp, keys, diff):
    """(keys, diff) with one row per distinct key tuple, summed diffs, no zeros, sorted by keys.

    `keys` lists the record columns then the time coordinates. Sums are exact; one that does
    not fit in int64 raises DiffOverflow.
    """
    perm = sort_by(xp, keys)
    sorted_keys = [xp.take(k, perm) for k in keys]
    starts = group_starts(xp, sorted_keys)
    sums = sum_segments(xp, xp.take(diff, perm), starts)
    keep = xp.nonzero(sums != 0)[0]
    rows = xp.take(starts, keep)
    return [xp.take(k, rows) for k in sorted_keys], xp.take(sums, keep)
