"""The ranges of rows that a band join's weighted bounds cover, net of bounds that cancel
(the range lookup of one bound is intersect.between).

A scalar subquery's bound that moves from an old to a new value arrives as two bounds of
opposite weight: the rows both cover cancel, so a step reads only the rows between them.
"""
from .consolidate import consolidate
from .diffs import running_segments


def band_segments(xp, groups, first, stop, weight):
    """(groups, first, stop, weight) of the maximal row ranges of one non-zero weight, per
    group: row r's weight in group g is the sum of weight[j] over the bands j of g with
    first[j] <= r < stop[j]. `groups` is a list of arrays (a band's group: its times);
    bands of one group over rows of different keys never overlap, so one sort serves all."""
    live = xp.nonzero(stop > first)[0]
    groups = [xp.take(g, live) for g in groups]
    first, stop, weight = (xp.take(a, live) for a in (first, stop, weight))
    # +weight where a band opens, -weight where it closes: the running sum is the weight
    events, deltas = consolidate(xp, [*(xp.concat([g, g]) for g in groups),
                                      xp.concat([first, stop])],
                                 xp.concat([weight, -weight]))
    if deltas.shape[0] == 0:
        empty = xp.zeros(0, dtype=xp.int64)
        return [empty for _ in groups], empty, empty, empty
    # each group's events sum to zero, so a running sum over all of them restarts per group
    running = running_segments(xp, deltas, xp.zeros(1, dtype=xp.int64))
    open_ = xp.nonzero(running != 0)[0]  # never a group's last event, whose sum is zero
    at = events[-1]
    return ([xp.take(g, open_) for g in events[:-1]], xp.take(at, open_),
            xp.take(at, open_ + 1), xp.take(running, open_))
