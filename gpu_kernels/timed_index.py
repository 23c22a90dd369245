"""An as-of index over one relation's updates, for delta queries (DESIGN §6).

A delta rule reads the atoms before its seed as of `time <= t` and those after it as of
`time < t`, where t is each prefix's own time. The index keeps the updates (key, value,
time, diff) sorted by (key, value, time) with running diff sums, so the multiplicity of
(key, value) as of t is two binary searches and a subtraction, and a key's candidate values
are one contiguous range (CSR over the key). Memory is linear in the updates indexed.

Where (key rank, value) packs into one int64 (`codes`, ascending: node ids and other dense
integers do), a (key, value) pair is found by `searchsorted` over the whole index, and only
its few times are searched step by step; otherwise the lockstep search compares (value,
time) pairs within the key's range.

A `settled` index holds updates that every reader sees (a big step's own updates read as of
`time <= t`, or any step with one time reading the older history): times then do not
matter, so each (key, value) is summed into one row and a multiplicity is one search.
"""
from typing import NamedTuple, Optional

from .consolidate import consolidate, group_starts, sort_by
from .csr import CSR, row_ranges
from .diffs import multiply_diffs
from .expand import parents
from .intersect import lower_bound


class TimedIndex(NamedTuple):
    csr: CSR  # keys; offsets; targets = values, ascending within a key
    times: object  # int64, ascending within each (key, value)
    diffs: object  # int64
    running: object  # int64, len n + 1: running[i] = sum(diffs[:i])
    codes: Optional[object] = None  # key rank * span + (value - low), ascending; or None
    pack: Optional[tuple] = None  # (low, span) of the values, when codes exist
    settled: bool = False  # one row per (key, value), visible to every reader


_PACKED = 2 ** 62  # key ranks x value span below this pack without overflow


def build_timed_index(xp, key, value, time, diff, settled: bool = False):
    """The index of updates (key[i], value[i], time[i], diff[i]), in any order. `settled`:
    the caller knows every reader sees every update, so (key, value) pairs are summed (their
    time becomes the least, still visible to all) and zero sums dropped."""
    if settled:
        first = int(xp.min(time)) if time.shape[0] else 0
        (key, value), diff = consolidate(xp, [key, value], diff)
        time = xp.full_like(diff, first)
    else:
        perm = sort_by(xp, [key, value, time])
        key, value, time, diff = (xp.take(a, perm) for a in (key, value, time, diff))
    starts = group_starts(xp, [key])
    end = xp.asarray([key.shape[0]], dtype=xp.int64)
    offsets = xp.concat([starts, end])
    csr = CSR(xp.take(key, starts), offsets, value)
    running = xp.cumulative_sum(diff, include_initial=True)
    if value.shape[0] == 0:
        return TimedIndex(csr, time, diff, running, settled=settled)
    low, high = int(xp.min(value)), int(xp.max(value))
    span = high - low + 1
    if starts.shape[0] * span >= _PACKED:
        return TimedIndex(csr, time, diff, running, settled=settled)
    rank = parents(xp, offsets[1:] - offsets[:-1])
    return TimedIndex(csr, time, diff, running, rank * span + (value - low), (low, span),
                      settled)


def visible(xp, times, t, reads):
    """Whether updates at `times` are read by prefixes at `t`: "new" reads time <= t,
    "old" reads time < t."""
    return times <= t if reads == "new" else times < t


def multiplicity(xp, index, lo, hi, value, t, reads, rank=None):
    """For each query j: the summed diffs of the updates (key_j, value[j]) with a time
    visible at t[j], where [lo[j], hi[j]) is key_j's range (row_ranges). `rank`, if given,
    is each query's key's position among the index's keys (key_ranks)."""
    cut = t + 1 if reads == "new" else t  # first invisible time; t < 2**63 - 1 (finite)
    if index.codes is not None and index.settled:
        return _settled_multiplicity(xp, index, lo, hi, value, rank)
    if index.codes is not None:
        first, last = _pair_range(xp, index, lo, hi, value, rank)
        _, stop = lower_bound(xp, index.times, first, last, cut)
        return xp.take(index.running, stop) - xp.take(index.running, first)
    low = xp.full_like(t, -(2**63))
    pair = (index.csr.targets, index.times)
    _, first = lower_bound(xp, pair, lo, hi, (value, low))
    _, stop = lower_bound(xp, pair, lo, hi, (value, cut))
    return xp.take(index.running, stop) - xp.take(index.running, first)


def key_ranks(xp, index, lo):
    """Each query's key's position among the index's keys, from its range's start (only
    meaningful where the range is not empty)."""
    return xp.searchsorted(index.csr.offsets, lo, side="right") - 1


def _codes(xp, index, base, value, present=None):
    """(inside, code): whether each query's (key, value) can be in the packed index (its
    value in range, and where `present` is given, its key there), and its code, the key's
    base (_base) plus the value (-1 where it cannot be in)."""
    low, span = index.pack
    inside = xp.logical_and(value >= low, value <= low + (span - 1))
    inside = inside if present is None else xp.logical_and(inside, present)
    return inside, xp.where(inside, base + value, xp.full_like(value, -1))


def _pair_range(xp, index, lo, hi, value, rank=None):
    """The rows [first, last) of each query's (key, value) pair (empty: first = last), by
    searchsorted over the packed codes."""
    rank = key_ranks(xp, index, lo) if rank is None else rank
    inside, code = _codes(xp, index, _base(xp, index, rank), value, hi > lo)
    first = xp.where(inside, xp.searchsorted(index.codes, code, side="left"), lo)
    last = xp.where(inside, xp.searchsorted(index.codes, code, side="right"), lo)
    return first, last


def _settled_multiplicity(xp, index, lo, hi, value, rank):
    """A settled index has at most one row per pair: one search, its diff or 0."""
    rank = key_ranks(xp, index, lo) if rank is None else rank
    return _settled_lookup(xp, index, _base(xp, index, rank), value, hi > lo)


def _base(xp, index, rank):
    """rank * span - low: a pair's code is its key's base plus its value."""
    low, span = index.pack
    return rank * span - low


def _settled_lookup(xp, index, base, value, present=None):
    """The diff of each (key, value) in a settled packed index, 0 where absent; `base` is
    the key's (_base), `present` whether the index has the key (None: all do)."""
    _, code = _codes(xp, index, base, value, present)
    n = index.codes.shape[0]
    at = xp.minimum(xp.searchsorted(index.codes, code, side="left"),
                    xp.asarray(n - 1, dtype=xp.int64))
    found = xp.logical_and(code >= 0, xp.take(index.codes, at) == code)
    return xp.where(found, xp.take(index.diffs, at), xp.zeros_like(at))


def extend_as_of(xp, keys, t, diff, indices, reads, ranges=None):
    """Bind one variable for n prefixes (prefix r at time t[r] with diff[r]) through k
    extenders: extender j's updates are indices[j], its key for prefix r is keys[j][r], and
    it reads as of reads[j] ("new" or "old").

    Count: each extender's number of updates under the key (an upper bound on its
    candidates; 0 rules the prefix out). Propose: the smallest, ties to the lowest j, emits
    its visible updates. Validate: every other extender multiplies by its multiplicity of
    the proposed value as of t. Returns (parent, value, diff) with zero diffs dropped; the
    same (parent, value) may occur several times (one per proposing update): summing them
    (consolidation) gives prefix diff x the product of the multiplicities.

    `ranges`, if given, are the per-extender (lo, hi) of row_ranges for the keys (then
    `keys` is not read), for callers that already looked them up.
    """
    if not indices:
        raise ValueError("extend_as_of needs at least one extender")
    if ranges is None:
        ranges = [row_ranges(xp, ix.csr, k) for ix, k in zip(indices, keys)]
    counts = xp.stack([hi - lo for lo, hi in ranges], axis=1)
    live = xp.nonzero(xp.min(counts, axis=1) > 0)[0]
    winner = xp.argmin(xp.take(counts, live, axis=0), axis=1)
    # per packed validator, each prefix's key rank (or a settled one's code base), found
    # once rather than per candidate
    ranks = [key_ranks(xp, ix, lo) if ix.codes is not None else None
             for ix, (lo, _) in zip(indices, ranges)]
    bases = [_base(xp, ix, r) if r is not None and ix.settled else None
             for ix, r in zip(indices, ranks)]
    out = [[], [], []]
    for j, ix in enumerate(indices):
        rows = xp.take(live, xp.nonzero(winner == j)[0])
        lo, hi = (xp.take(a, rows) for a in ranges[j])
        local = parents(xp, hi - lo)
        first_out = xp.cumulative_sum(hi - lo, include_initial=True)[:-1]
        pos = xp.take(lo - first_out, local) + xp.arange(local.shape[0], dtype=xp.int64)
        parent = xp.take(rows, local)
        keep = xp.nonzero(visible(xp, xp.take(ix.times, pos), xp.take(t, parent), reads[j]))[0]
        parent, pos = xp.take(parent, keep), xp.take(pos, keep)
        value = xp.take(ix.csr.targets, pos)
        d = multiply_diffs(xp, xp.take(diff, parent), xp.take(ix.diffs, pos))
        for i, other in enumerate(indices):
            if i == j:
                continue
            if bases[i] is not None:  # a live prefix's key is in every extender's index
                m = _settled_lookup(xp, other, xp.take(bases[i], parent), value)
            else:
                lo_i, hi_i = (xp.take(a, parent) for a in ranges[i])
                rank = None if ranks[i] is None else xp.take(ranks[i], parent)
                m = multiplicity(xp, other, lo_i, hi_i, value, xp.take(t, parent), reads[i],
                                 rank)
            d = multiply_diffs(xp, d, m)
            keep = xp.nonzero(d != 0)[0]  # shrink before the next validator
            parent, value, d = (xp.take(a, keep) for a in (parent, value, d))
        for col, a in zip(out, (parent, value, d)):
            col.append(a)
    return tuple(xp.concat(col) for col in out)
