"""Time lattice over k coordinates (outer epoch, then one counter per nested iterate).

A time batch is a tuple of k int64 arrays of equal length, one per coordinate; the order is
the product partial order, join is element-wise max and meet element-wise min (DESIGN §2).
"""


def _pairs(a, b):
    if len(a) != len(b):
        raise ValueError(f"time batches have {len(a)} and {len(b)} coordinates")
    return zip(a, b)


def join_times(xp, a, b):
    """Least upper bound, coordinate-wise max. None is an absent time (no change): the identity."""
    if a is None:
        return b
    if b is None:
        return a
    return tuple(xp.maximum(x, y) for x, y in _pairs(a, b))


def meet_times(xp, a, b):
    """Greatest lower bound, coordinate-wise min."""
    return tuple(xp.minimum(x, y) for x, y in _pairs(a, b))


def advance_by(xp, t, since):
    """Compact times to the single-element frontier `since` (a tuple of ints): max per coordinate.

    Two times that advance to the same value are indistinguishable to any reader at or beyond
    `since`, so a trace may consolidate after advancing.
    """
    return tuple(xp.maximum(x, xp.asarray(s, dtype=x.dtype)) for x, s in _pairs(t, since))


def less_equal(xp, a, b):
    """Boolean array: a <= b in the product order (every coordinate <=)."""
    pairs = list(_pairs(a, b))
    if not pairs:
        raise ValueError("a time batch needs at least one coordinate")
    out = pairs[0][0] <= pairs[0][1]
    for x, y in pairs[1:]:
        out = xp.logical_and(out, x <= y)
    return out
