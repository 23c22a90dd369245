"""Sort-based consolidation of update batches: one row per distinct (record, time), diffs
summed, zero sums dropped (DESIGN §2, consolidated outputs). Also the sort and run-boundary
kernels that arrangements and the reduce family reuse.

Floating keys group as in Spark: all NaNs are one value (sorted last), and -0.0 and 0.0 are
one value (the output keeps whichever came first in the input).
"""
from .diffs import segment_ids, sum_segments


def _sortable(xp, key):
    if key.dtype == xp.int64:  # codes, times and diffs: the common case, decided at once
        return key
    return xp.astype(key, xp.uint8) if xp.isdtype(key.dtype, "bool") else key


def sort_by(xp, keys):
    """Permutation sorting rows lexicographically by `keys` (keys[0] most significant), stable.

    The standard has no lexsort: stable argsorts run from the least significant key. Runs of
    adjacent integer keys whose value ranges multiply to less than 2**63 are first packed
    into one int64 each (`_words`), so a record of nine columns (codes, dates, scaled
    decimals, a time) usually sorts in two passes, not nine, and node ids with values and
    times in one.
    """
    return _permutation(xp, _words(xp, keys))


def _permutation(xp, words):
    """The stable permutation sorting rows by `words` ((array, span) each, most significant
    first; see _words): by the first word, then only the rows that tie on it by the others.
    The first word usually packs the keys and decides almost every row, so one full sort
    suffices where a sort per word (least significant first) took one each. Where most rows
    tie, a sort per word from the least significant (`_by_each`)."""
    (first, span), rest = words[0], words[1:]
    n = first.shape[0]
    if rest and span is not None and 2 * span < n:  # most rows tie on the first word
        return _by_each(xp, words)
    perm = _argsort(xp, first, span)
    if not rest or n < 2:
        return perm
    ordered = xp.take(first, perm)
    new = ordered[1:] != ordered[:-1]  # a row starting a run of equal first words
    tied = xp.logical_or(xp.concat([xp.zeros(1, dtype=xp.bool), xp.logical_not(new)]),
                         xp.concat([xp.logical_not(new), xp.zeros(1, dtype=xp.bool)]))
    rows = xp.nonzero(tied)[0]
    if not rows.shape[0]:
        return perm
    if 2 * rows.shape[0] > n:
        return _by_each(xp, words)
    group = xp.take(xp.cumulative_sum(xp.astype(new, xp.int64), include_initial=True), rows)
    among = xp.take(perm, rows)  # the tied rows, by first word (stably)
    order = _by_each(xp, [(group, int(group[-1]) + 1)] +
                     [(xp.take(word, among), span) for word, span in rest])
    # the tied positions take the tied rows in their order (a gather: no scatter in the
    # array API)
    rank = xp.cumulative_sum(xp.astype(tied, xp.int64)) - 1
    return xp.where(tied, xp.take(xp.take(among, order), xp.clip(rank, min=0)), perm)


def _by_each(xp, words):
    """The stable permutation sorting rows by `words`, a stable sort per word from the least
    significant."""
    perm = None
    for word, span in reversed(words):
        perm = _argsort(xp, word, span) if perm is None else \
            xp.take(perm, _argsort(xp, xp.take(word, perm), span))
    return perm


# Fewer descents than this and a word is a few sorted runs (a trace's compaction concatenates
# them): numpy's stable sort of an int64, a timsort, merges them in about linear time, 4-9x
# faster than any full sort of a big run and a small one
RUNS = 4


def _argsort(xp, word, span):
    """Stable argsort of one word (`span` bounds its offsets; None: a raw key).

    Each form is the fastest measured for its case (numpy 2.3 with AVX-512, 2,000 to 6M
    rows): offsets below 2**16 sort by one radix pass over uint16; a few sorted runs by
    the stable sort (a timsort merges them); other offsets with the row number packed into
    their low bits sort by value, a sort that breaks ties by position and so is stable, and
    numpy's vectorised sort of int64 values beats its stable argsort 2-8x (cupy's radix sort
    of keys alone moves half the bytes of a sort of pairs)."""
    n = word.shape[0]
    if span is not None and span <= 2**16:
        return xp.argsort(xp.astype(word, xp.uint16), stable=True)
    bits = max(1, (n - 1).bit_length())
    if span is None or span > 2 ** (63 - bits) or \
            int(xp.sum(xp.astype(word[1:] < word[:-1], xp.int64))) < RUNS:
        return xp.argsort(word, stable=True)
    packed = word * xp.asarray(2**bits, dtype=xp.int64) + xp.arange(n, dtype=xp.int64)
    return xp.sort(packed, stable=False) & xp.asarray(2**bits - 1, dtype=xp.int64)


def _packable(xp, key) -> bool:
    return key.dtype == xp.int64 or xp.isdtype(key.dtype, "signed integer") or (
        xp.isdtype(key.dtype, "unsigned integer") and xp.iinfo(key.dtype).bits < 64)


def _words(xp, keys) -> list:
    """(array, span) pairs that order rows as `keys` do (most significant first), equal
    exactly where the keys are: each maximal run of adjacent integer keys whose ranges
    multiply to less than 2**63 packed into one int64 of offsets from each key's least value
    (mixed radix), `span` its bound (a lone key too: its offsets sort faster, `_argsort`);
    a key whose range is 2**63 or wider, or one that cannot pack (floating, uint64), stays
    itself (span None)."""
    if not keys:
        raise ValueError("sorting needs at least one key")
    keys = [_sortable(xp, k) for k in keys]
    if keys[0].shape[0] == 0:  # nothing to pack
        return [(k, None) for k in keys]
    words, run, total = [], [], 1

    def close():
        nonlocal total
        if len(run) == 1 and total >= 2**63:
            words.append((run[0][0], None))
        elif run:
            packed = None
            for key, lo, span in run:
                offset = xp.astype(key, xp.int64) - xp.asarray(lo, dtype=xp.int64)
                packed = offset if packed is None else \
                    packed * xp.asarray(span, dtype=xp.int64) + offset
            words.append((packed, total))
        run.clear()
        total = 1

    for key in keys:
        if not _packable(xp, key):
            close()
            words.append((key, None))
            continue
        lo = int(xp.min(key))
        span = int(xp.max(key)) - lo + 1
        if total * span >= 2**63:
            close()
        run.append((key, lo, span))
        total *= span
    close()
    return words


def group_starts(xp, sorted_keys):
    """int64 index of the first row of each run of equal rows in rows sorted by `sorted_keys`."""
    n = sorted_keys[0].shape[0]
    if n == 0:
        return xp.zeros(0, dtype=xp.int64)
    new = xp.zeros(n - 1, dtype=xp.bool)
    for key in sorted_keys:
        prev, cur = key[:-1], key[1:]
        differs = prev != cur
        if key.dtype != xp.int64 and xp.isdtype(key.dtype, "real floating"):
            differs = xp.logical_and(differs, xp.logical_not(xp.isnan(prev) & xp.isnan(cur)))
        new = xp.logical_or(new, differs)
    first = xp.ones(1, dtype=xp.bool)
    return xp.astype(xp.nonzero(xp.concat([first, new]))[0], xp.int64)


def group_ids(xp, keys):
    """A dense int64 id per row (0, 1, ... in key order), equal exactly where the rows'
    `keys` are: the rank of the row's group among the sorted groups."""
    perm = sort_by(xp, keys)
    starts = group_starts(xp, [xp.take(k, perm) for k in keys])
    ids = segment_ids(xp, starts, perm.shape[0])
    return xp.take(ids, xp.argsort(perm, stable=False))  # back in row order


def distinct(xp, key):
    """The distinct values of an integer column, sorted: a sort and a comparison of
    neighbours. numpy 2.3's `unique` (array_api_compat's `unique_values`) took 7x as long
    on 2,000 int64 and 20x on 100,000."""
    if key.shape[0] < 2:
        return key
    ordered = xp.sort(key, stable=False)
    return ordered[xp.concat([xp.ones(1, dtype=xp.bool), ordered[1:] != ordered[:-1]])]


def consolidate(xp, keys, diff):
    """(keys, diff) with one row per distinct key tuple, summed diffs, no zeros, sorted by keys.

    `keys` lists the record columns then the time coordinates. Sums are exact; one that does
    not fit in int64 raises DiffOverflow.
    """
    if not diff.shape[0]:  # most operators' batches in a small step: nothing to sort
        return list(keys), diff
    rows, sums = consolidation(xp, keys, diff)
    return [xp.take(k, rows) for k in keys], sums


def consolidation(xp, keys, diff):
    """(rows, sums): the input row that stands for each distinct key tuple with a non-zero
    summed diff, in key order, and that sum. Callers whose columns are not all keys (an
    Arrow batch of any types, ordered by int64 words) gather every column at `rows`."""
    words = _words(xp, keys)  # rows are equal exactly where their words are
    perm = _permutation(xp, words)
    starts = group_starts(xp, [xp.take(w, perm) for w, _ in words])
    sums = sum_segments(xp, xp.take(diff, perm), starts)
    keep = xp.nonzero(sums != 0)[0]
    # each column gathered once, at its groups' first rows (all rows: the permutation)
    rows = perm if keep.shape[0] == perm.shape[0] else xp.take(perm, xp.take(starts, keep))
    return rows, xp.take(sums, keep)
