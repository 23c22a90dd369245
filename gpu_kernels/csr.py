"""CSR index over an edge list sorted by (src, dst): the distinct sources, each one's range of
rows, and the targets. Worst-case-optimal joins count, propose and validate through it
(DESIGN §6): the index is linear in the input, never in the intermediate results.
"""
from typing import NamedTuple

from .consolidate import group_starts
from .expand import parents


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
