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

    The standard has no lexsort: stable argsorts run from the least significant key. Runs of
    adjacent integer keys whose value ranges multiply to less than 2**63 are first packed
    into one int64 each (`_words`), so a record of nine columns (codes, dates, scaled
    decimals, a time) usually sorts in two passes, not nine, and node ids with values and
    times in one.
    """
    if not keys:
        raise ValueError("sort_by needs at least one key")
    words = _words(xp, keys)
    perm = xp.argsort(words[-1], stable=True)
    for word in reversed(words[:-1]):
        perm = xp.take(perm, xp.argsort(xp.take(word, perm), stable=True))
    return perm


def _packable(xp, key) -> bool:
    return xp.isdtype(key.dtype, "signed integer") or (
        xp.isdtype(key.dtype, "unsigned integer") and xp.iinfo(key.dtype).bits < 64)


def _words(xp, keys) -> list:
    """Arrays that order rows as `keys` do (most significant first): each maximal run of
    adjacent integer keys whose ranges multiply to less than 2**63 packed into one int64
    (offsets from each key's least value, mixed radix); a key that cannot pack (floating,
    uint64) stays itself."""
    keys = [_sortable(xp, k) for k in keys]
    if len(keys) == 1 or keys[0].shape[0] == 0:  # nothing to pack
        return keys
    words, run, total = [], [], 1

    def close():
        nonlocal total
        if len(run) == 1:
            words.append(run[0][0])
        elif run:
            packed = xp.zeros(run[0][0].shape[0], dtype=xp.int64)
            for key, lo, span in run:
                offset = xp.astype(key, xp.int64) - xp.asarray(lo, dtype=xp.int64)
                packed = packed * xp.asarray(span, dtype=xp.int64) + offset
            words.append(packed)
        run.clear()
        total = 1

    for key in keys:
        if not _packable(xp, key):
            close()
            words.append(key)
            continue
        lo = int(xp.min(key))
        span = int(xp.max(key)) - lo + 1
        if total * span >= 2**63:
            close()
        run.append((key, lo, span))
        total *= span
    close()
    return words


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
