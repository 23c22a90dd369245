"""Batched sorted-list membership: for query j, is candidates[j] among targets[lo[j]:hi[j]]?

This is how a worst-case-optimal join's non-proposing relations validate proposed extensions:
one binary search per query, run in lockstep as whole-array steps (log2 of the longest range).
Where the ranges are short (a lookup of a group's few rows by the columns left after a packed
prefix), every row of every range is compared with its query at once instead (`_scanned`):
a few array operations over all the columns left, not two searches per column.
"""
from .csr import spans

SCAN = 2  # scan where the ranges' rows are at most SCAN x queries x rounds of a search
ONE_ROW, SCANNED = "one row", "scanned"  # how a search finishes (_form)


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
    first = _search(xp, targets, lo, hi, candidates)
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
    tuples, same = isinstance(targets, tuple), low is high
    targets, low, high = (targets, low, high) if tuples else ((targets,), (low,), (high,))
    if targets[0].shape[0] == 0 or lo.shape[0] == 0:
        return lo, lo
    if same:  # equal_range: both ends narrow the leading columns alike, once here
        lo, hi, i, form = _narrowed(xp, targets, lo, hi, low)
        targets, low = targets[i:], low[i:]
        high = low
        if form == SCANNED:
            before, through = _scanned(xp, targets, lo, hi, low)
            return lo + before, lo + through
        if form == ONE_ROW:  # decided: not again by each end's search
            first = _one_row(xp, targets, lo, hi, low, False)
            return first, xp.maximum(first, _one_row(xp, targets, lo, hi, low, True))
    first = _search(xp, targets, lo, hi, low)
    return first, xp.maximum(first, _search(xp, targets, lo, hi, high, inclusive=True))


def _search(xp, targets, lo, hi, candidates, inclusive: bool = False):
    """Per query, the first index in [lo, hi) whose row is not before the candidate (not
    at or before it where `inclusive`), rows and candidates compared lexicographically.
    Column by column: each column is searched within the rows equal to the candidate in
    the columns before it, which after a column or two is mostly a row or none, so a
    search of many columns costs about one column's rounds, not rounds of every column."""
    lo, hi, i, form = _narrowed(xp, targets, lo, hi, candidates)
    if form == ONE_ROW:  # a row or none each: compared whole, at once
        return _one_row(xp, targets[i:], lo, hi, candidates[i:], inclusive)
    if form == SCANNED:
        return lo + _scanned(xp, targets[i:], lo, hi, candidates[i:])[int(inclusive)]
    return _column(xp, targets[-1], lo, hi, candidates[-1], inclusive)


def _narrowed(xp, targets, lo, hi, candidates):
    """(lo, hi, i, form): each range narrowed to its rows equal to the candidate in the
    first i columns, i at most all but the last, stopping once `_form` says how to finish;
    the form of the ranges left."""
    for i, (t, c) in enumerate(zip(targets[:-1], candidates[:-1])):
        form = _form(xp, lo, hi)
        if form is not None:
            return lo, hi, i, form
        lo, hi = _column(xp, t, lo, hi, c, False), _column(xp, t, lo, hi, c, True)
    return lo, hi, len(targets) - 1, _form(xp, lo, hi)


def _form(xp, lo, hi):
    """How a search of the ranges finishes: ONE_ROW where each is a row or none, SCANNED
    where scanning every row costs less than searching column by column (their rows number
    at most SCAN x queries x the rounds of one search), None: by binary search."""
    counts = hi - lo
    longest = int(xp.max(counts))
    if longest <= 1:
        return ONE_ROW
    if int(xp.sum(counts)) <= SCAN * counts.shape[0] * longest.bit_length():
        return SCANNED
    return None


def _scanned(xp, targets, lo, hi, candidates):
    """(before, through): per query, how many rows of its range come before its candidate,
    and how many at or before it, rows and candidates compared lexicographically. A range is
    sorted, so these are the offsets of its lower and upper bound."""
    parent, rows = spans(xp, lo, hi)
    values = [xp.take(t, rows) for t in targets]
    asked = [xp.take(c, parent) for c in candidates]
    before, through = values[-1] < asked[-1], values[-1] <= asked[-1]
    for x, y in zip(reversed(values[:-1]), reversed(asked[:-1])):
        less, equal = x < y, x == y
        before = xp.logical_or(less, xp.logical_and(equal, before))
        through = xp.logical_or(less, xp.logical_and(equal, through))
    bounds = xp.cumulative_sum(hi - lo, include_initial=True)

    def per_query(mask):
        at = xp.take(xp.cumulative_sum(xp.astype(mask, xp.int64), include_initial=True), bounds)
        return at[1:] - at[:-1]
    return per_query(before), per_query(through)


def _one_row(xp, targets, lo, hi, candidates, inclusive: bool):
    """_search where each range holds at most one row."""
    at = xp.minimum(lo, xp.asarray(targets[0].shape[0] - 1, dtype=lo.dtype))
    rows = [xp.take(t, at) for t in targets]
    before = rows[-1] <= candidates[-1] if inclusive else rows[-1] < candidates[-1]
    for x, y in zip(reversed(rows[:-1]), reversed(candidates[:-1])):
        before = xp.logical_or(x < y, xp.logical_and(x == y, before))
    return xp.where(xp.logical_and(lo < hi, before), lo + 1, lo)


def _column(xp, target, lo, hi, candidate, inclusive: bool):
    """Per query, the first index in [lo, hi) (each range of `target` sorted) whose value is
    above the candidate (`inclusive`) or not below it: one binary search per query, in
    lockstep; a search of the whole array (every range all of it) is the sorted search's."""
    n = target.shape[0]
    if int(xp.max(lo)) == 0 and int(xp.min(hi)) == n:
        return xp.searchsorted(target, candidate, side="right" if inclusive else "left")
    first, last = lo, hi
    zero = xp.zeros_like(lo)
    for _ in range(int(xp.max(hi - lo)).bit_length()):
        active = first < last
        mid = xp.where(active, (first + last) // 2, zero)
        value = xp.take(target, mid)
        below = xp.logical_and(active, value <= candidate if inclusive else value < candidate)
        first = xp.where(below, mid + 1, first)
        last = xp.where(xp.logical_and(active, xp.logical_not(below)), mid, last)
    return first
