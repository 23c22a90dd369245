"""Batched join_function expansion: every input update (d, t, r) becomes one output per
(d2, t2, r2) in logic(d), with time join(t, t2) and diff r * r2 (DESIGN §6, linear operators).

A stage is (parent, time, diff): for each output row, the index of the input row it came from,
its time t2 and its diff r2 (None for "unchanged"). Stages compose, so adjacent linear
operators fuse into one kernel call per partition.
"""
from .diffs import multiply_diffs, parents
from .times import join_times

# parents lives in diffs.py (segment_ids is one); user kernels import it from here too
__all__ = ["compose", "dense", "expand", "gather", "parents"]


def gather(xp, x, parent):
    """Rows `parent` of an array, of each array of a time batch (tuple), or None for None."""
    if x is None:
        return None
    if isinstance(x, tuple):
        return tuple(xp.take(c, parent, axis=0) for c in x)
    return xp.take(x, parent, axis=0)


def expand(xp, time, diff, stage):
    """(time, diff) of the outputs of `stage` applied to input updates with `time` and `diff`."""
    parent, time2, diff2 = stage
    return (
        join_times(xp, gather(xp, time, parent), time2),
        multiply_diffs(xp, gather(xp, diff, parent), diff2),
    )


def compose(xp, first, second):
    """The single stage equal to `first` followed by `second` (whose parents index first's rows)."""
    return (gather(xp, first[0], second[0]), *expand(xp, first[1], first[2], second))


def dense(xp, positions, values, size):
    """An array of `size` zeros of values' dtype holding values[i] at positions[i] (ascending,
    distinct, below size): one repeat of alternating zero gaps and values, since the standard
    has no scatter. Lookup tables (presence bits, adjacency among hubs) are built so."""
    if positions.shape[0] == 0:
        return xp.zeros(size, dtype=values.dtype)
    before = xp.concat([xp.asarray([-1], dtype=xp.int64), positions[:-1]])
    ones = xp.ones_like(positions)
    counts = xp.reshape(xp.stack([positions - before - 1, ones], axis=1), (-1,))
    tail = xp.asarray([size - 1], dtype=xp.int64) - positions[-1:]
    cells = xp.reshape(xp.stack([xp.zeros_like(values), values], axis=1), (-1,))
    return xp.repeat(xp.concat([cells, xp.zeros(1, dtype=values.dtype)]),
                     xp.concat([counts, tail]))
