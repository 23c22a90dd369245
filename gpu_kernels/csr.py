"""CSR index over an edge list sorted by (src, dst): the distinct sources, each one's range of
rows, and the targets. Worst-case-optimal joins count, propose and validate through it
(DESIGN §6): the index is linear in the input, never in the intermediate results.

A Directory is the same row pointer over a sorted column's whole range of values, so that a
lookup is two gathers: a binary search in a column of millions of rows misses the cache at
most of its ~23 steps (~0.7 us a key on numpy), a directory's gathers cost ~40 ns.
"""
from typing import NamedTuple

from .consolidate import group_starts
from .diffs import parents


class CSR(NamedTuple):
    keys: object  # distinct sources, ascending
    offsets: object  # int64, len(keys) + 1: targets of keys[i] are targets[offsets[i]:offsets[i+1]]
    targets: object  # dst, ascending within each source


def build_csr(xp, src, dst):
    """CSR of the edges (src[i], dst[i]), which must be sorted by (src, dst)."""
    starts = group_starts(xp, [src])
    end = xp.asarray([src.shape[0]], dtype=xp.int64)
    return CSR(xp.take(src, starts), xp.concat([starts, end]), dst)


def row_ranges(xp, csr, keys):
    """(lo, hi): the targets of each query key are csr.targets[lo:hi]; empty for unknown keys.

    hi - lo is the candidate count a relation reports when deciding who proposes.
    """
    m = csr.keys.shape[0]
    if m == 0:
        empty = xp.zeros(keys.shape[0], dtype=xp.int64)
        return empty, empty
    i = xp.searchsorted(csr.keys, keys)
    row = xp.minimum(i, xp.asarray(m - 1, dtype=i.dtype))
    found = xp.take(csr.keys, row) == keys
    zero = xp.zeros_like(row)
    lo = xp.where(found, xp.take(csr.offsets, row), zero)
    hi = xp.where(found, xp.take(csr.offsets, row + 1), zero)
    return lo, hi


def spans(xp, lo, hi):
    """(parent, position): every position in lo[j]:hi[j], tagged with its query j. Costs the
    positions listed, not the length of what they index."""
    counts = hi - lo
    parent = parents(xp, counts)
    first_out = xp.cumulative_sum(counts, include_initial=True)[:-1]  # first output row of j
    return parent, xp.take(lo - first_out, parent) + xp.arange(parent.shape[0], dtype=xp.int64)


def neighbours(xp, targets, lo, hi):
    """(parent, candidate): every target in targets[lo[j]:hi[j]], tagged with its query j."""
    parent, position = spans(xp, lo, hi)
    return parent, xp.take(targets, position)


class Directory(NamedTuple):
    low: int  # the column's least value
    starts: object  # int64, span + 1: the rows holding low + i are starts[i]:starts[i + 1]


def build_directory(xp, values):
    """The Directory of a sorted, non-empty int64 column, in O(rows + span) where span is
    max - min + 1 (a caller keeps it near the rows)."""
    low = int(values[0])
    span = int(values[-1]) - low + 1
    if hasattr(xp, "bincount"):  # numpy, cupy: one counting pass
        counts = xp.bincount(values - low, minlength=span)
        return Directory(low, xp.cumulative_sum(xp.astype(counts, xp.int64),
                                                include_initial=True))
    # the standard has no bincount: a search per value (low + i never passes the last value)
    firsts = xp.searchsorted(values, xp.arange(span, dtype=xp.int64) + low)
    return Directory(low, xp.concat([firsts, xp.asarray([values.shape[0]], dtype=xp.int64)]))


def directory_ranges(xp, directory, keys):
    """(lo, hi): the column's rows equal to each key are lo:hi; empty outside its range."""
    span = directory.starts.shape[0] - 1
    low = xp.asarray(directory.low, dtype=xp.int64)
    inside = xp.logical_and(keys >= low, keys <= low + (span - 1))
    offset = xp.where(inside, keys - low, xp.zeros_like(keys))
    lo = xp.take(directory.starts, offset)
    return lo, xp.where(inside, xp.take(directory.starts, offset + 1), lo)
