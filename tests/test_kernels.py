"""gpu_kernels against plain-Python oracles, on numpy and on array_api_strict (pinned to the
2023.12 standard, so a kernel that passes uses nothing cupy may lack). Set
DIFFSPARK_KERNEL_BACKENDS=cupy (comma-separated list) to re-run the suite on a GPU.
"""
import bisect
import math
from collections import defaultdict

import array_api_strict
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_kernels as gk
from gpu_kernels import intersect
from conftest import host, i64

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EDGE = [INT64_MIN, INT64_MIN + 1, -(2**32), -3037000500, -3037000499, -2, -1, 0, 1, 2,
        3037000499, 3037000500, 2**31, 2**32, 2**62, INT64_MAX - 1, INT64_MAX]
int64s = st.one_of(st.sampled_from(EDGE), st.integers(INT64_MIN, INT64_MAX))

examples = settings(max_examples=60)



def stage(xp, counts, times, diffs):
    """A stage whose input row i yields counts[i] outputs with the given times and diffs."""
    parent = gk.parents(xp, i64(xp, counts))
    time = None if times is None else tuple(i64(xp, c) for c in times)
    return parent, time, None if diffs is None else i64(xp, diffs)


@st.composite
def stages(draw, n_in, k=2, absent=True):
    """(counts, times, diffs) for a stage over n_in input rows; times/diffs may be None."""
    counts = draw(st.lists(st.integers(0, 3), min_size=n_in, max_size=n_in))
    n = sum(counts)
    small = st.lists(st.integers(0, 5), min_size=n, max_size=n)
    times = None if absent and draw(st.booleans()) else [draw(small) for _ in range(k)]
    diff = st.lists(st.integers(-3, 3), min_size=n, max_size=n)
    diffs = None if absent and draw(st.booleans()) else draw(diff)
    return counts, times, diffs


def sequential(updates, spec):
    """Oracle: apply a stage spec to [(time tuple, diff)] row by row in Python."""
    counts, times, diffs = spec
    out, j = [], 0
    for (t, d), c in zip(updates, counts):
        for _ in range(c):
            t2 = t if times is None else tuple(max(a, col[j]) for a, col in zip(t, times))
            out.append((t2, d * (1 if diffs is None else diffs[j])))
            j += 1
    return out


# backend -------------------------------------------------------------------------------------

def test_namespace_names():
    assert gk.namespace("numpy").__name__ == "array_api_compat.numpy"
    assert gk.namespace("strict") is array_api_strict
    assert set(gk.BACKENDS) == {"numpy", "cupy", "auto"}
    with pytest.raises(ValueError, match="unknown array backend 'torch'"):
        gk.namespace("torch")


def test_host_namespace_skips_only_wrappers_numpy_does_not_need():
    """The driver's numpy namespace calls numpy directly where array_api_compat's wrapper only
    checks: every such function gives the wrapper's values and dtypes, and the sorts keep the
    standard's stable default (numpy's own is not)."""
    import array_api_compat.numpy as compat

    from gpu_kernels.backend import _NATIVE

    xp = gk.namespace("numpy")
    assert {n for n in _NATIVE if getattr(xp, n) is getattr(np, n)} == set(_NATIVE)
    assert xp.argsort is compat.argsort and xp.sort is compat.sort
    assert xp.unique_values is compat.unique_values
    ints, flags = np.array([3, -1, 3, 0, -1], dtype=np.int32), np.array([True, False, True])
    calls = [("arange", (5,), {}), ("arange", (2, 9, 3), {"dtype": np.int64}),
             ("asarray", ([1, 2],), {}), ("asarray", (ints,), {"copy": True}),
             ("asarray", ([1.5, None],), {"dtype": np.float64}),
             ("astype", (ints, np.int64), {}), ("astype", (flags, np.int8), {"copy": False}),
             ("cumulative_sum", (ints,), {}), ("cumulative_sum", (flags,), {}),
             ("cumulative_sum", (ints,), {"include_initial": True, "dtype": np.int64}),
             ("empty", (0,), {"dtype": np.int64}), ("full", (3, 7), {}),
             ("full", ((2,), -1), {"dtype": np.int8}), ("full_like", (ints, 2), {}),
             ("nonzero", (flags,), {}), ("ones", (2,), {"dtype": np.bool_}),
             ("ones_like", (flags,), {}), ("unique_values", (ints,), {}),
             ("zeros", (3,), {"dtype": np.int64}), ("zeros_like", (ints,), {})]
    for name, args, kwargs in calls:
        mine, theirs = getattr(xp, name)(*args, **kwargs), getattr(compat, name)(*args, **kwargs)
        for a, b in zip(*(v if isinstance(v, tuple) else (v,) for v in (mine, theirs))):
            if name != "empty":
                assert a.dtype == b.dtype, (name, args, kwargs)
                assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), (name, args)
    assert xp.iinfo(np.int32).max == compat.iinfo(np.int32).max
    ties = np.array([1, 0, 1, 0, 1] * 40)
    assert xp.argsort(ties).tolist() == np.argsort(ties, kind="stable").tolist()


def test_cupy_missing_is_a_clear_import_error():
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="needs the cupy package"):
            gk.namespace("cupy")
        assert gk.namespace("auto") is gk.namespace("numpy")
    else:
        pytest.skip("cupy is installed")


def test_to_numpy(xp):
    out = gk.to_numpy(xp, xp.asarray([True, False]))
    assert type(out) is np.ndarray and out.dtype == np.bool_ and out.tolist() == [True, False]


# expand --------------------------------------------------------------------------------------

@examples
@given(st.lists(st.integers(0, 4), max_size=8))
def test_parents(xp, counts):
    expected = [i for i, c in enumerate(counts) for _ in range(c)]
    parent = gk.parents(xp, i64(xp, counts))
    assert parent.dtype == xp.int64 and host(xp, parent) == expected


@examples
@given(st.data())
def test_expand_matches_row_by_row(xp, data):
    n = data.draw(st.integers(0, 6))
    updates = [((data.draw(st.integers(0, 5)), data.draw(st.integers(0, 5))),
                data.draw(st.integers(-3, 3))) for _ in range(n)]
    spec = data.draw(stages(n))
    time = tuple(i64(xp, [t[c] for t, _ in updates]) for c in range(2))
    time2, diff2 = gk.expand(xp, time, i64(xp, [d for _, d in updates]), stage(xp, *spec))
    got = list(zip(zip(*(host(xp, c) for c in time2)), host(xp, diff2)))
    assert got == sequential(updates, spec)


@examples
@given(st.data())
def test_compose_is_sequential_and_associative(xp, data):
    n = data.draw(st.integers(0, 4))
    s1 = data.draw(stages(n))
    s2 = data.draw(stages(sum(s1[0])))
    s3 = data.draw(stages(sum(s2[0])))
    a, b, c = (stage(xp, *s) for s in (s1, s2, s3))

    def rows(st_):
        parent, time, diff = st_
        return (host(xp, parent), None if time is None else [host(xp, t) for t in time],
                None if diff is None else host(xp, diff))

    left = gk.compose(xp, gk.compose(xp, a, b), c)
    right = gk.compose(xp, a, gk.compose(xp, b, c))
    assert rows(left) == rows(right)
    # Sequential: feed unit updates at time (0, 0) through the three stages one at a time.
    updates = [((0, 0), 1)] * n
    expected = sequential(sequential(sequential(updates, s1), s2), s3)
    parent, time, diff = left
    m = parent.shape[0]
    got_t = [(0, 0)] * m if time is None else list(zip(*(host(xp, t) for t in time)))
    got_d = [1] * m if diff is None else host(xp, diff)
    assert list(zip(got_t, got_d)) == expected


# times ---------------------------------------------------------------------------------------

coords = st.lists(st.integers(-5, 5), min_size=4, max_size=4)


@examples
@given(st.lists(coords, min_size=1, max_size=3), st.lists(coords, min_size=1, max_size=3))
def test_time_lattice(xp, a, b):
    k = min(len(a), len(b))
    a, b = a[:k], b[:k]
    ta, tb = tuple(i64(xp, c) for c in a), tuple(i64(xp, c) for c in b)
    cols = lambda batch: [host(xp, c) for c in batch]  # noqa: E731
    assert cols(gk.join_times(xp, ta, tb)) == [list(map(max, x, y)) for x, y in zip(a, b)]
    assert cols(gk.meet_times(xp, ta, tb)) == [list(map(min, x, y)) for x, y in zip(a, b)]
    assert gk.join_times(xp, ta, None) is ta and gk.join_times(xp, None, tb) is tb
    since = tuple(c[0] for c in b)
    assert cols(gk.advance_by(xp, ta, since)) == [[max(v, s) for v in c] for c, s in zip(a, since)]
    expected = [all(x[i] <= y[i] for x, y in zip(a, b)) for i in range(4)]
    assert host(xp, gk.less_equal(xp, ta, tb)) == expected


def test_time_coordinate_mismatch(xp):
    with pytest.raises(ValueError, match="1 and 2 coordinates"):
        gk.join_times(xp, (i64(xp, [1]),), (i64(xp, [1]), i64(xp, [2])))


# diffs ---------------------------------------------------------------------------------------

pairs = st.lists(st.tuples(int64s, int64s), min_size=1, max_size=5)


def check_elementwise(xp, fn, op, pairs_):
    a, b = i64(xp, [p[0] for p in pairs_]), i64(xp, [p[1] for p in pairs_])
    exact = [op(x, y) for x, y in pairs_]
    if all(INT64_MIN <= v <= INT64_MAX for v in exact):
        assert host(xp, fn(xp, a, b)) == exact
    else:
        with pytest.raises(gk.DiffOverflow, match="overflows int64"):
            fn(xp, a, b)


@examples
@given(pairs)
def test_multiply_diffs_exact_overflow(xp, pairs_):
    check_elementwise(xp, gk.multiply_diffs, lambda x, y: x * y, pairs_)


@pytest.mark.parametrize("a", EDGE)
def test_multiply_diffs_edges(xp, a):
    for b in EDGE:
        check_elementwise(xp, gk.multiply_diffs, lambda x, y: x * y, [(a, b)])


def test_multiply_diffs_message_and_types(xp):
    with pytest.raises(gk.DiffOverflow, match=r"diff product overflows int64 \(row 1: -1 \*"):
        gk.multiply_diffs(xp, i64(xp, [2, -1]), i64(xp, [3, INT64_MIN]))
    assert issubclass(gk.DiffOverflow, ArithmeticError)
    with pytest.raises(TypeError, match="int64"):
        gk.multiply_diffs(xp, xp.asarray([1], dtype=xp.int32), xp.asarray([1], dtype=xp.int32))
    d = i64(xp, [4])
    assert gk.multiply_diffs(xp, d, None) is d and gk.multiply_diffs(xp, None, d) is d


@examples
@given(pairs)
def test_add_diffs_exact_overflow(xp, pairs_):
    check_elementwise(xp, gk.add_diffs, lambda x, y: x + y, pairs_)


@examples
@given(st.lists(st.lists(int64s, min_size=1, max_size=4), max_size=4))
def test_sum_segments(xp, segments):
    starts = list(np.cumsum([0] + [len(s) for s in segments[:-1]]).tolist()) if segments else []
    diff, starts_ = i64(xp, [v for s in segments for v in s]), i64(xp, starts)
    exact = [sum(s) for s in segments]
    if all(INT64_MIN <= v <= INT64_MAX for v in exact):
        assert host(xp, gk.sum_segments(xp, diff, starts_)) == exact
    else:
        with pytest.raises(gk.DiffOverflow, match="diff sum overflows int64"):
            gk.sum_segments(xp, diff, starts_)


@examples
@given(st.lists(st.integers(0, 12), max_size=8), st.integers(0, 14))
def test_segment_ids_are_what_a_search_of_each_row_finds(xp, cuts, n):
    """Each row's segment is the last start at or before it (-1 before the first), as
    bisection finds it, whatever the starts: repeated (empty segments), after row 0, or
    none."""
    starts = sorted(c for c in cuts if c <= n)
    got = host(xp, gk.segment_ids(xp, i64(xp, starts), n))
    assert got == [bisect.bisect_right(starts, i) - 1 for i in range(n)]


# consolidate ---------------------------------------------------------------------------------

def nan_key(v):
    """Sort/group key matching the kernels: NaN is one value, sorted after every number."""
    return (1, 0.0) if isinstance(v, float) and math.isnan(v) else (0, v)


row = st.tuples(st.integers(-2, 2), st.sampled_from([0.5, -0.0, 0.0, -1.5, math.nan]),
                st.booleans(), st.integers(0, 2), st.integers(-2, 2))


@examples
@given(st.lists(row, max_size=40))
def test_consolidate_matches_dict_oracle(xp, rows):
    totals = defaultdict(int)
    for *rec, d in rows:
        totals[tuple(nan_key(v) for v in rec)] += d
    expected = sorted((k, d) for k, d in totals.items() if d)
    dtypes = [xp.int64, xp.float64, xp.bool, xp.int32]
    keys = [xp.asarray([r[c] for r in rows], dtype=dt) for c, dt in enumerate(dtypes)]
    keys_out, diff_out = gk.consolidate(xp, keys, i64(xp, [r[-1] for r in rows]))
    got_keys = [tuple(nan_key(v) for v in r) for r in zip(*(host(xp, k) for k in keys_out))]
    assert list(zip(got_keys, host(xp, diff_out))) == expected
    assert [k.dtype for k in keys_out] == dtypes and diff_out.dtype == xp.int64


small = st.integers(-3, 3)
huge = st.sampled_from([-(2**63), -(2**40), 0, 2**40, 2**63 - 1])


@examples
@given(st.lists(st.tuples(small, small, st.one_of(small, huge)), max_size=20))
def test_sort_by_is_stable_lexicographic(xp, rows):
    """Packed into one key when the ranges allow (small values), lexicographic passes when
    they do not (a huge value in the last column): the same stable order."""
    keys = [i64(xp, [r[j] for r in rows]) for j in range(3)]
    assert host(xp, gk.sort_by(xp, keys)) == sorted(range(len(rows)), key=lambda i: rows[i])
    assert host(xp, gk.sort_by(xp, keys[:2])) == sorted(range(len(rows)),
                                                         key=lambda i: rows[i][:2])


wide = st.tuples(small, st.one_of(small, huge), st.sampled_from([0.5, -0.0, 0.0, math.nan]),
                 st.booleans(), st.integers(0, 2**31 - 1), st.sampled_from([0, 7, 2**63 + 5]),
                 small, st.one_of(small, huge))


@examples
@given(st.lists(wide, max_size=30))
def test_sort_by_packs_runs_of_columns_between_the_ones_that_cannot_pack(xp, rows):
    """A record of many columns: runs of integer keys pack into words, split where a range is
    huge, a float (NaN last, -0.0 equal to 0.0) or a uint64 stands alone; the order is
    the stable lexicographic one."""
    dtypes = [xp.int64, xp.int64, xp.float64, xp.bool, xp.int32, xp.uint64, xp.int8, xp.int64]
    keys = [xp.asarray([r[j] for r in rows], dtype=dt) for j, dt in enumerate(dtypes)]
    expected = sorted(range(len(rows)), key=lambda i: tuple(nan_key(v) for v in rows[i]))
    assert host(xp, gk.sort_by(xp, keys)) == expected


runs = st.lists(st.lists(st.tuples(st.one_of(st.integers(-(2**40), 2**40), st.sampled_from([5, 7])),
                                   st.one_of(small, huge)), max_size=25), min_size=1, max_size=3)


@examples
@given(runs)
def test_sort_by_orders_the_rows_that_tie_on_the_first_word_by_the_rest(xp, runs):
    """Sorted runs one after another (a trace's merge), their first word (a wide column
    alone) deciding most rows: the rows tying on it (5s and 7s), sorted by the next word
    among themselves, or every word in turn where most rows tie; the stable order."""
    rows = [r for run in runs for r in sorted(run)]
    keys = [i64(xp, [r[j] for r in rows]) for j in range(2)]
    assert host(xp, gk.sort_by(xp, keys)) == sorted(range(len(rows)), key=lambda i: rows[i])


spans = st.sampled_from([2, 2**16 - 1, 2**16, 2**16 + 1, 2**32 - 1, 2**32, 2**32 + 1, 2**40,
                         2**57, 2**57 + 1, 2**58, 2**58 + 1, 2**62])
ranged = st.tuples(spans, st.integers(-(2**40), 2**40)).flatmap(
    lambda s: st.lists(st.tuples(st.integers(s[1], s[1] + s[0] - 1), small), max_size=60))


@pytest.mark.parametrize("rows", [32, 33, 64, 65, 3000])
def test_a_sort_by_value_leaves_room_for_the_row_number(xp, rows):
    """Offsets whose range leaves exactly the bits the row number needs sort by value with
    it packed in (a bit more range, by a comparison sort): at the bound and past it, values
    drawn across the whole range, the stable order (many rows share a value)."""
    bits = (rows - 1).bit_length()
    rng = np.random.default_rng(rows)
    for span in (2 ** (63 - bits), 2 ** (63 - bits) + 1):
        values = rng.integers(0, span, rows, dtype=np.int64)
        values[::3] = values[0]  # ties, broken by position
        values[1], values[-1] = 0, span - 1  # the range is span, its top at the bound
        keys = [xp.asarray(values - 2**62)]
        assert host(xp, gk.sort_by(xp, keys)) == \
            np.argsort(values, kind="stable").tolist(), span


@examples
@given(ranged)
def test_sort_by_sorts_offsets_by_16_bit_digits_or_by_value_with_the_row_packed(xp, rows):
    """A key alone, or packed with a small one, whose range needs one 16-bit digit, leaves
    room for the row number in its low bits (a sort by value), or needs a comparison sort
    (spans at each bound, for up to 32 and up to 64 rows): the stable order, and
    consolidate's groups."""
    keys = [i64(xp, [r[j] for r in rows]) for j in range(2)]
    assert host(xp, gk.sort_by(xp, keys[:1])) == sorted(range(len(rows)),
                                                         key=lambda i: rows[i][0])
    assert host(xp, gk.sort_by(xp, keys)) == sorted(range(len(rows)), key=lambda i: rows[i])
    totals = defaultdict(int)
    for r in rows:
        totals[r] += 1
    out, d = gk.consolidate(xp, keys, i64(xp, [1] * len(rows)))
    assert list(zip(zip(*(host(xp, k) for k in out)), host(xp, d))) == sorted(totals.items())


def test_consolidate_refuses_overflowing_sum(xp):
    keys = [i64(xp, [7, 7, 8])]
    with pytest.raises(gk.DiffOverflow, match=r"diff sum overflows int64 \(segment 0"):
        gk.consolidate(xp, keys, i64(xp, [INT64_MAX, 1, 5]))
    # Partial sums may leave int64 when the total fits: that is not an overflow.
    keys_out, diff_out = gk.consolidate(xp, [i64(xp, [1, 1, 1])], i64(xp, [INT64_MAX, 5, -6]))
    assert host(xp, keys_out[0]) == [1] and host(xp, diff_out) == [INT64_MAX - 1]


@examples
@given(st.lists(st.one_of(small, huge), max_size=40))
def test_distinct_is_the_sorted_set(xp, values):
    assert host(xp, gk.distinct(xp, i64(xp, values))) == sorted(set(values))


def test_consolidate_empty(xp):
    keys_out, diff_out = gk.consolidate(xp, [i64(xp, []), xp.asarray([], dtype=xp.float64)],
                                        i64(xp, []))
    assert [k.shape[0] for k in keys_out] == [0, 0] and diff_out.shape[0] == 0


# csr and intersect ---------------------------------------------------------------------------

edges = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=25, unique=True)


@examples
@given(edges, st.lists(st.tuples(st.integers(-1, 7), st.integers(-1, 7)), max_size=12))
def test_csr_ranges_neighbours_contains(xp, edge_list, queries):
    edge_list = sorted(edge_list)
    adj = defaultdict(list)
    for s, d in edge_list:
        adj[s].append(d)
    csr = gk.build_csr(xp, i64(xp, [e[0] for e in edge_list]), i64(xp, [e[1] for e in edge_list]))
    assert host(xp, csr.keys) == sorted(adj)
    q, cand = i64(xp, [p[0] for p in queries]), i64(xp, [p[1] for p in queries])
    lo, hi = gk.row_ranges(xp, csr, q)
    assert host(xp, hi - lo) == [len(adj.get(s, [])) for s, _ in queries]
    parent, found = gk.neighbours(xp, csr.targets, lo, hi)
    expected = [(j, d) for j, (s, _) in enumerate(queries) for d in adj.get(s, [])]
    assert list(zip(host(xp, parent), host(xp, found))) == expected
    parent, at = gk.spans(xp, lo, hi)
    assert list(zip(host(xp, parent), host(xp, at))) == [
        (j, i) for j, (a, b) in enumerate(zip(host(xp, lo), host(xp, hi))) for i in range(a, b)]
    mask = gk.contains(xp, csr.targets, lo, hi, cand)
    assert host(xp, mask) == [c in adj.get(s, []) for s, c in queries]


@examples
@given(st.sampled_from([0, -5, 2 ** 62, INT64_MIN, INT64_MAX - 12]),
       st.lists(st.integers(0, 12), min_size=1, max_size=30), st.lists(int64s, max_size=8))
def test_directory_ranges_equal_searches(xp, base, offsets, far):
    """A directory over a sorted column (its range at int64's ends too) finds each key's
    rows as a binary search does; keys outside its range, anywhere in int64, find none."""
    values = sorted(base + o for o in offsets)
    keys = [min(max(base + o, INT64_MIN), INT64_MAX) for o in range(-2, 15)] + far
    directory = gk.build_directory(xp, i64(xp, values))
    assert directory.low == values[0]
    lo, hi = gk.directory_ranges(xp, directory, i64(xp, keys))
    for k, a, b in zip(keys, host(xp, lo), host(xp, hi)):  # an absent key: any empty range
        assert (a, b) == (values.index(k), values.index(k) + values.count(k)) if k in values \
            else a == b


@examples
@given(segments=st.lists(st.lists(st.tuples(*[st.integers(0, 2)] * 3), max_size=7),
                         min_size=1, max_size=3),
       width=st.integers(1, 3),
       asks=st.lists(st.tuples(st.integers(0, 3), st.tuples(*[st.integers(-1, 3)] * 3)),
                     max_size=8))
@pytest.mark.parametrize("scan", [0, intersect.SCAN, 10 ** 9])
def test_tuple_searches_equal_bisection(xp, scan, segments, width, asks):
    """lower_bound and equal_range over tuples of columns (few values each, so rows tie on
    leading columns and ranges narrow column by column) agree with Python's bisection of
    tuples in each sorted range; ask 3 searches the whole array, sorted as one range. Each
    search runs column by column (scan 0: never scan), as by default, and by scanning every
    row of the ranges as soon as they are found."""
    default, intersect.SCAN = intersect.SCAN, scan
    try:
        _tuple_searches_equal_bisection(xp, segments, width, asks)
    finally:
        intersect.SCAN = default


def _tuple_searches_equal_bisection(xp, segments, width, asks):
    rows, starts = [], [0]
    for seg in segments:
        rows += sorted(r[:width] for r in seg)
        starts.append(len(rows))
    if not rows:
        return
    whole = len(segments) == 1
    ranges = [(0, len(rows)) if i == 3 and whole else (starts[i % len(segments)],
              starts[i % len(segments) + 1]) for i, _ in asks]
    cands = [c[:width] for _, c in asks]
    cols = tuple(i64(xp, [r[j] for r in rows]) for j in range(width))
    lo, hi = i64(xp, [a for a, _ in ranges]), i64(xp, [b for _, b in ranges])
    asked = tuple(i64(xp, [c[j] for c in cands]) for j in range(width))
    found, at = gk.intersect.lower_bound(xp, cols, lo, hi, asked)
    first, stop = gk.equal_range(xp, cols, lo, hi, asked)
    for (a, b), c, f, p, e0, e1 in zip(ranges, cands, host(xp, found), host(xp, at),
                                       host(xp, first), host(xp, stop)):
        left = bisect.bisect_left(rows, c, a, b)
        right = bisect.bisect_right(rows, c, a, b)
        assert (p, bool(f)) == (left, left < b and rows[left] == c)
        assert (e0, e1) == (left, right)


# band ----------------------------------------------------------------------------------------

@examples
@given(ranges=st.lists(st.lists(st.integers(-5, 5), max_size=6), min_size=1, max_size=4),
       asks=st.lists(st.tuples(st.integers(0, 3), st.integers(-6, 6), st.integers(-1, 4)),
                     max_size=8))
def test_between_finds_the_rows_of_a_range_within_bounds(xp, ranges, asks):
    """Each ask (range, low, width) finds the rows of its sorted range whose values lie in
    [low, low + width]: first:stop, empty (first == stop) where none or low > high."""
    targets, starts = [], [0]
    for r in ranges:
        targets += sorted(r)
        starts.append(len(targets))
    asks = [(i % len(ranges), low, low + width) for i, low, width in asks]
    lo = [starts[i] for i, _, _ in asks]
    hi = [starts[i + 1] for i, _, _ in asks]
    first, stop = gk.between(xp, i64(xp, targets), i64(xp, lo), i64(xp, hi),
                             i64(xp, [a[1] for a in asks]), i64(xp, [a[2] for a in asks]))
    for (i, low, high), a, b, f, e in zip(asks, lo, hi, host(xp, first), host(xp, stop)):
        rows = [j for j in range(a, b) if low <= targets[j] <= high]
        assert list(range(f, e)) == rows


@examples
@given(bands=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(-2, 6),
                                st.sampled_from([-2, -1, 1, 2])), max_size=10))
def test_band_segments_weigh_each_row_by_the_bands_covering_it(xp, bands):
    """Per group, the segments cover exactly the rows whose summed band weight is non-zero,
    each with that weight, maximal and disjoint: bands of opposite weight cancel."""
    g, first, stop, w = (list(c) for c in zip(*bands)) if bands else ([], [], [], [])
    stop = [f + n for f, n in zip(first, stop)]
    sg, sf, ss, sw = gk.band_segments(xp, [i64(xp, g)], i64(xp, first), i64(xp, stop),
                                      i64(xp, w))
    want = defaultdict(int)
    for gi, f, e, wi in zip(g, first, stop, w):
        for r in range(f, e):
            want[(gi, r)] += wi
    got = defaultdict(int)
    segments = list(zip(host(xp, sg[0]), host(xp, sf), host(xp, ss), host(xp, sw)))
    for gi, f, e, wi in segments:
        assert f < e and wi != 0
        for r in range(f, e):
            assert (gi, r) not in got, "segments overlap"
            got[(gi, r)] = wi
    assert got == {k: v for k, v in want.items() if v}
    ends = {(gi, e): wi for gi, _, e, wi in segments}
    assert not any(ends.get((gi, f)) == wi for gi, f, _, wi in segments), "not maximal"


# arrow ---------------------------------------------------------------------------------------

def test_arrow_round_trip(xp):
    batch = pa.RecordBatch.from_pydict({
        "a": pa.array([1, -2, 3], pa.int8()), "b": pa.array([10, 20, 30], pa.uint16()),
        "c": pa.array([1, 2, INT64_MIN], pa.int64()), "d": pa.array([0.5, -1.0, 2.0], pa.float32()),
        "e": pa.array([math.nan, 1.5, -0.0], pa.float64()), "f": pa.array([True, False, True]),
    })
    cols = gk.batch_to_arrays(batch, xp)
    assert list(cols) == list("abcdef") and cols["c"].dtype == xp.int64
    back = gk.arrays_to_batch(cols, batch.schema, xp)
    assert back.schema == batch.schema
    for got, want in zip(back.columns, batch.columns):  # NaN-aware: Arrow's equals is not
        np.testing.assert_array_equal(got.to_numpy(False), want.to_numpy(False), strict=True)
    wide = pa.schema([("b", pa.float64()), ("a", pa.int64())])  # cast to the schema's types
    out = gk.arrays_to_batch({"a": cols["a"] * 2, "b": cols["b"]}, wide, xp)
    assert out.schema == wide and out.to_pydict() == {"a": [2, -4, 6], "b": [10.0, 20.0, 30.0]}


def test_arrow_refusals(xp):
    with pytest.raises(TypeError, match="column 'name' has type string"):
        gk.batch_to_arrays(pa.RecordBatch.from_pydict({"name": ["x"]}), xp)
    with pytest.raises(TypeError, match="column 'k' has 1 nulls"):
        gk.batch_to_arrays(pa.RecordBatch.from_pydict({"k": pa.array([1, None], pa.int64())}), xp)
    schema = pa.schema([("k", pa.int64())])
    with pytest.raises(ValueError, match=r"missing \['k'\], unexpected \['j'\]"):
        gk.arrays_to_batch({"j": i64(xp, [1])}, schema, xp)
    with pytest.raises(pa.ArrowInvalid):
        gk.arrays_to_batch({"k": i64(xp, [300])}, pa.schema([("k", pa.int8())]), xp)
