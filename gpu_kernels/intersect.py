"""Batched sorted-list membership: for query j, is candidates[j] among targets[lo[j]:hi[j]]?

This is how a worst-case-optimal join's non-proposing relations validate proposed extensions:
one binary search per query, run in lockstep as whole-array steps (log2 of the longest range).
"""


def contains(xp, targets, lo, hi, candidates):
    """Boolean mask over queries; each range of `targets` must be sorted ascending."""
    return lower_bound(xp, targets, lo, hi, candidates)[0]


def lower_bound(xp, targets, lo, hi, candidates):
    """(found, position): the first index in targets[lo[j]:hi[j]] not below candidates[j],
    and whether it holds the candidate; the position lets a caller read what is stored
    beside the match (a multiplicity, a time).

    `targets` and `candidates` may also be tuples of arrays, compared lexicographically
    (each range sorted by them): an as-of read looks for (value, time) pairs."""
    tuples = isinstance(targets, tuple)
    targets, candidates = (targets, candidates) if tuples else ((targets,), (candidates,))
    if targets[0].shape[0] == 0 or lo.shape[0] == 0:
        return xp.zeros(lo.shape[0], dtype=xp.bool), lo
    first = _search(xp, targets, lo, hi, candidates, _less)
    at = xp.minimum(first, xp.asarray(targets[0].shape[0] - 1, dtype=first.dtype))
    equal = xp.take(targets[0], at) == candidates[0]
    for t, c in zip(targets[1:], candidates[1:]):
        equal = xp.logical_and(equal, xp.take(t, at) == c)
    return xp.logical_and(first < hi, equal), first


def equal_range(xp, targets, lo, hi, candidates):
    """(first, stop): the rows of targets[lo[j]:hi[j]] equal to candidates[j] are
    first[j]:stop[j]. `targets` and `candidates` are tuples of arrays compared
    lexicographically, each range sorted by them: rows sorted by more columns than are
    asked (a prefix of an arrangement's columns) are found by that prefix."""
    return between(xp, targets, lo, hi, candidates, candidates)


def between(xp, targets, lo, hi, low, high):
    """(first, stop): the rows of targets[lo[j]:hi[j]] (each range sorted ascending) whose
    values lie in [low[j], high[j]] are first[j]:stop[j] (first == stop: none); a band
    join's range lookup. Arrays, or tuples of arrays compared lexicographically."""
    tuples = isinstance(targets, tuple)
    targets, low, high = (targets, low, high) if tuples else ((targets,), (low,), (high,))
    if targets[0].shape[0] == 0 or lo.shape[0] == 0:
        return lo, lo
    first = _search(xp, targets, lo, hi, low, _less)
    return first, xp.maximum(first, _search(xp, targets, lo, hi, high, _less_equal))


def _search(xp, targets, lo, hi, candidates, before):
    """Per query, the first index in [lo, hi) whose row is not `before` the candidate."""
    first, last = lo, hi
    zero = xp.zeros_like(lo)
    for _ in range(int(xp.max(hi - lo)).bit_length()):
        active = first < last
        mid = xp.where(active, (first + last) // 2, zero)
        below = xp.logical_and(active, before(xp, [xp.take(t, mid) for t in targets],
                                              candidates))
        first = xp.where(below, mid + 1, first)
        last = xp.where(xp.logical_and(active, xp.logical_not(below)), mid, last)
    return first


def _less(xp, a, b):
    """Lexicographic a < b over tuples of arrays."""
    return _compare(xp, a, b, a[-1] < b[-1])


def _less_equal(xp, a, b):
    """Lexicographic a <= b over tuples of arrays."""
    return _compare(xp, a, b, a[-1] <= b[-1])


def _compare(xp, a, b, last):
    """Lexicographic order of tuples of arrays, `last` deciding ties of all but the last."""
    for x, y in zip(reversed(a[:-1]), reversed(b[:-1])):
        last = xp.logical_or(x < y, xp.logical_and(x == y, last))
    return last
