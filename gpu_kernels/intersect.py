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
    beside the match (a multiplicity, a time)."""
    first, last = lo, hi
    if targets.shape[0] == 0 or lo.shape[0] == 0:
        return xp.zeros(lo.shape[0], dtype=xp.bool), first
    zero = xp.zeros_like(lo)
    for _ in range(int(xp.max(hi - lo)).bit_length()):  # lower bound in [first, last)
        active = first < last
        mid = (first + last) // 2
        below = xp.logical_and(active, xp.take(targets, xp.where(active, mid, zero)) < candidates)
        first = xp.where(below, mid + 1, first)
        last = xp.where(xp.logical_and(active, xp.logical_not(below)), mid, last)
    at = xp.take(targets, xp.minimum(first, xp.asarray(targets.shape[0] - 1, dtype=first.dtype)))
    return xp.logical_and(first < hi, at == candidates), first
