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

A big settled packed index also keeps presence bits for the pairs of its heaviest keys
(`hubs`). In a skewed relation the proposing extender is the one with fewer candidates, so
the validating one is mostly a heavy key: on a 1M-edge R-MAT graph the 4,096 heaviest keys
take 97% of a triangle query's validations. A bit is one gather where a search over the whole
index is ~20 dependent probes (~40 ns each on numpy). The proposing prefixes are split by
whether their key is such a hub before their candidates are made, so each candidate is
either a bit test or a search, never asked which; a candidate's diff is gathered only once
the validators have kept it (a unit index proposes diff 1).
"""
from typing import NamedTuple, Optional

from .consolidate import consolidate, group_starts, sort_by
from .csr import CSR, row_ranges
from .diffs import multiply_diffs
from .diffs import parents
from .expand import dense
from .intersect import lower_bound


class TimedIndex(NamedTuple):
    csr: CSR  # keys; offsets; targets = values, ascending within a key
    times: object  # int64, ascending within each (key, value)
    diffs: object  # int64
    running: object  # int64, len n + 1: running[i] = sum(diffs[:i])
    codes: Optional[object] = None  # key rank * span + (value - low), ascending; or None
    pack: Optional[tuple] = None  # (low, span) of the values, when codes exist
    settled: bool = False  # one row per (key, value), visible to every reader
    hubs: Optional[tuple] = None  # settled and packed: (per key rank, where its pairs' bits
    #                               start; the bits as bytes; the start of a non-hub's)
    unit: bool = False  # settled, every diff 1: a present pair's multiplicity is 1


_PACKED = 2 ** 62  # key ranks x value span below this pack without overflow
_HUB_ROWS = 1 << 16  # below this, a search over the whole index is cheap
_HUB_BITS = 1 << 29  # presence bits at most (64 MiB), and at most 256 per indexed row


def build_timed_index(xp, key, value, time, diff, settled: bool = False, hub_bits=None):
    """The index of updates (key[i], value[i], time[i], diff[i]), in any order. `settled`:
    the caller knows every reader sees every update, so (key, value) pairs are summed (their
    time becomes the least, still visible to all) and zero sums dropped. `hub_bits` bounds
    the presence bits of a settled packed index (None: by its size; 0: none)."""
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
    counts = offsets[1:] - offsets[:-1]
    rank = parents(xp, counts)
    offset = value - low
    hubs = unit = None
    if settled:
        if hub_bits is None:
            hub_bits = min(_HUB_BITS, 256 * value.shape[0]) if value.shape[0] >= _HUB_ROWS else 0
        hubs = _hub_bits(xp, counts, rank, offset, span, low, hub_bits)
        unit = bool(xp.all(diff == 1))
    return TimedIndex(csr, time, diff, running, rank * span + offset, (low, span), settled,
                      hubs, bool(unit))


def _hub_bits(xp, counts, rank, offset, span, low, bits):
    """(row, table, other): presence bits of the pairs of the k = bits // span keys with the most
    rows (ties to the lowest rank). Pair (key rank r, value v) is bit row[r] + v of the table;
    row[r] is slot * span - low for the slot-th hub and `other` = k * span - low for every
    other key, whose bits (one more row, all zero) are never set. None when not even one
    key fits."""
    k = min(counts.shape[0], bits // span)
    if k < 1:
        return None
    least = xp.sort(counts, descending=True, stable=False)[k - 1]  # the k-th heaviest count
    above = counts > least
    tied = xp.logical_and(counts == least, xp.cumulative_sum(
        xp.astype(counts == least, xp.int64)) <= k - int(xp.sum(xp.astype(above, xp.int64))))
    hub = xp.logical_or(above, tied)
    slot = xp.cumulative_sum(xp.astype(hub, xp.int64)) - 1  # hubs in rank order
    row = xp.where(hub, slot * span, xp.full_like(slot, k * span)) - low
    at = xp.nonzero(xp.take(hub, rank))[0]
    cells = xp.take(xp.take(row, rank), at) + xp.take(offset, at) + low  # ascending
    byte = cells >> 3
    starts = group_starts(xp, [byte])
    bit = xp.ones_like(cells) << (cells & 7)
    total = xp.cumulative_sum(bit, include_initial=True)  # a byte's bits are distinct
    ends = xp.concat([starts[1:], xp.asarray([cells.shape[0]], dtype=xp.int64)])
    values = xp.astype(xp.take(total, ends) - xp.take(total, starts), xp.uint8)
    table = dense(xp, xp.take(byte, starts), values, ((k + 1) * span + 7) // 8)
    return row, table, k * span - low


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
    # per packed validator, each prefix's key rank (or a settled one's code base and row of
    # presence bits), found once rather than per candidate
    ranks = [key_ranks(xp, ix, lo) if ix.codes is not None else None
             for ix, (lo, _) in zip(indices, ranges)]
    bases = [_base(xp, ix, r) if r is not None and ix.settled else None
             for ix, r in zip(indices, ranks)]
    rows_of_bits = [xp.take(ix.hubs[0], r) if b is not None and ix.hubs is not None else None
                    for ix, r, b in zip(indices, ranks, bases)]
    out = [[], [], []]
    for j, ix in enumerate(indices):
        rows = xp.take(live, xp.nonzero(winner == j)[0])
        bounded = [_bounded(ix, other) for other in indices]
        for rows, hub in _by_hub(xp, indices, j, rows, rows_of_bits):
            parent, value, d = _proposed(xp, ix, rows, ranges[j], t, diff, reads[j])
            for i, other in enumerate(indices):
                if i == j:
                    continue
                if bases[i] is not None:  # a live prefix's key is in every extender's index
                    found, m = _settled_found(xp, other, parent, bases[i], rows_of_bits[i],
                                              value, hub.get(i), bounded[i])
                    parent, value = xp.take(parent, found), xp.take(value, found)
                    d = None if d is None else xp.take(d, found)
                    if m is not None:  # no zero in m, and products are exact
                        d = multiply_diffs(xp, xp.take(diff, parent) if d is None else d, m)
                    continue
                d = xp.take(diff, parent) if d is None else d
                lo_i, hi_i = (xp.take(a, parent) for a in ranges[i])
                rank = None if ranks[i] is None else xp.take(ranks[i], parent)
                m = multiplicity(xp, other, lo_i, hi_i, value, xp.take(t, parent), reads[i],
                                 rank)
                d = multiply_diffs(xp, d, m)
                keep = xp.nonzero(d != 0)[0]  # shrink before the next validator
                parent, value, d = (xp.take(a, keep) for a in (parent, value, d))
            d = xp.take(diff, parent) if d is None else d
            for col, a in zip(out, (parent, value, d)):
                col.append(a)
    return tuple(xp.concat(col) for col in out)


def _by_hub(xp, indices, j, rows, rows_of_bits):
    """The proposing prefixes `rows` in groups (rows, {validator: whether its key is a
    hub}): split by the first validator with presence bits, so that each group's candidates
    are all bit lookups or all searches there (no per-candidate test of which)."""
    split = next((i for i, bits in enumerate(rows_of_bits) if i != j and bits is not None),
                 None)
    if split is None:
        return [(rows, {})]
    hub = xp.take(rows_of_bits[split], rows) != indices[split].hubs[2]
    return [(xp.take(rows, xp.nonzero(hub)[0]), {split: True}),
            (xp.take(rows, xp.nonzero(xp.logical_not(hub))[0]), {split: False})]


def _proposed(xp, ix, rows, bounds, t, diff, reads):
    """(parent, value, diff) of every candidate the prefixes `rows` propose from index `ix`
    (their ranges `bounds`) and see as of their times; diff None for a settled index of unit
    diffs, where it is the parent's (gathered once the validators have shrunk the rows)."""
    lo, hi = (xp.take(a, rows) for a in bounds)
    n = hi - lo  # candidates of each proposing prefix, in order: repeats, not gathers
    first_out = xp.cumulative_sum(n, include_initial=True)[:-1]
    pos = xp.repeat(lo - first_out, n) + xp.arange(int(xp.sum(n)), dtype=xp.int64)
    parent = xp.repeat(rows, n)
    if not ix.settled:  # a settled index's rows are visible to every prefix
        keep = xp.nonzero(visible(xp, xp.take(ix.times, pos), xp.take(t, parent), reads))[0]
        parent, pos = xp.take(parent, keep), xp.take(pos, keep)
        d = multiply_diffs(xp, xp.take(diff, parent), xp.take(ix.diffs, pos))
    else:
        d = None if ix.unit else multiply_diffs(xp, xp.repeat(xp.take(diff, rows), n),
                                                xp.take(ix.diffs, pos))
    return parent, xp.take(ix.csr.targets, pos), d


def _bounded(proposer, validator) -> bool:
    """Whether every value `proposer` can propose lies in `validator`'s packed range (its
    own packed range does), so that no candidate needs the range test."""
    if proposer.pack is None or validator.pack is None:
        return False
    (low, span), (at, width) = proposer.pack, validator.pack
    return low >= at and low + span <= at + width


def _settled_found(xp, index, parent, base, bits, value, hub=None, bounded=False):
    """(rows, m): the queries whose (key, value) pair the settled packed index holds, in no
    particular order, and each pair's diff (never 0; m None where all are 1). Query j asks
    for prefix parent[j]'s key: `base` is each prefix's key's code base (_base), `bits` its
    key's row of presence bits (index.hubs), or None. `hub`: whether every query's key is a hub (True),
    none is (False), or either (None). `bounded`: every value is within the index's packed
    range. A hub pair is one bit; its diff is then 1 (index.unit) or one search. The other
    keys' pairs are searched."""
    if bits is None or hub is False:
        m = _settled_lookup(xp, index, xp.take(base, parent), value)
        found = xp.nonzero(m != 0)[0]
        return found, xp.take(m, found)
    low, span = index.pack
    _, table, other = index.hubs
    inside = None
    if not bounded and value.shape[0] and (int(xp.min(value)) < low or
                                           int(xp.max(value)) >= low + span):
        inside = xp.logical_and(value >= low, value <= low + (span - 1))
        value = xp.where(inside, value, xp.full_like(value, low))
    bits = xp.take(bits, parent)
    cell = bits + value
    byte = xp.take(table, cell >> 3)  # uint8 from here: an eighth of the bytes moved
    hit = (byte >> xp.astype(cell & 7, xp.uint8)) & 1
    hit = hit == 1 if inside is None else xp.logical_and(hit == 1, inside)
    hit = xp.nonzero(hit)[0]
    m_hit = None if index.unit else _settled_lookup(
        xp, index, xp.take(base, xp.take(parent, hit)), xp.take(value, hit))
    if hub:
        return hit, m_hit
    searched = bits == other
    if inside is not None:
        searched = xp.logical_and(searched, inside)
    rest = xp.nonzero(searched)[0]
    m = _settled_lookup(xp, index, xp.take(base, xp.take(parent, rest)), xp.take(value, rest))
    kept = xp.nonzero(m != 0)[0]
    m_hit = xp.ones(hit.shape[0], dtype=xp.int64) if m_hit is None else m_hit
    return xp.concat([hit, xp.take(rest, kept)]), xp.concat([m_hit, xp.take(m, kept)])
