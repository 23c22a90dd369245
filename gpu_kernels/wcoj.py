"""Worst-case optimal join kernels: batched prefix extension (count, propose, validate) and
static triangle counting (DESIGN §6, the dogsdogsdogs design; §7, written once against `xp`).

`extend` is the step of a delta query: every relation that binds the next variable counts
each prefix's candidates, the smallest proposes, the others validate. Only CSR indices of the
inputs are read, so memory is linear in the inputs plus the batch of prefixes and its output,
never in the intermediate results a pairwise join would build.

`count_triangles` is the static special case, run without `extend` because its shape allows
more: with edges oriented from lower to higher (degree, id) rank every triangle u < v < w has
exactly one wedge (u, v) + (u, w) with v < w both in N+(u), and each N+(u) has at most
sqrt(2|E|) entries. The wedges are enumerated in chunks of at most `chunk_rows` rows, so
memory is O(|E| + chunk_rows + table_bytes) whatever the wedge count. Each wedge asks "is
(v, w) an edge?": a dense table among the hubs answers most, a binary search the rest.

Roofline per wedge: generating it and reading the table streams ~120 bytes (repeat, arange,
gather of w, cell index, table gather, count) for ~8 integer operations, ~0.07 op/byte: memory
bound on any CPU or GPU (numpy, 2 cores: ~15 ns per table wedge). A searched wedge adds
log2|E| dependent probes, latency bound (numpy: ~70 ns). 5M R-MAT edges: 135M wedges, 82%
by table.
"""
from math import isqrt

from .consolidate import distinct, sort_by
from .csr import row_ranges, spans
from .expand import dense
from .intersect import contains, lower_bound

_MAX_COMPOSITE = 3037000499  # largest n with n * n < 2**63: composite keys a * n + b fit int64


def extend(xp, prefix_keys, indices, candidates_of=None):
    """Extend n prefixes by one variable bound by k relations (extenders), each a CSR index.

    Extender j looks up prefix_keys[j][r] in indices[j]; its candidates for prefix r are the
    targets of that key. Count: hi - lo per extender. Propose: the extender with the fewest
    candidates (ties: lowest j). Validate: every other extender keeps a candidate only if it
    is among its own targets for the prefix. Prefixes with a zero count anywhere yield nothing.

    `candidates_of`, if given, is a list of per-extender (lo, hi) ranges into
    indices[j].targets that replaces the key lookup (prefix_keys is then ignored), for callers
    that already hold the ranges.

    Returns (parent, value, position): parent (int64) indexes the prefixes, value is the
    extension, position[j] (int64) is where (key, value) sits in indices[j].targets, so a
    caller can gather per-edge times and diffs. Rows are grouped by proposing extender, with
    parents ascending within each group.
    """
    if not indices:
        raise ValueError("extend needs at least one extender")
    if candidates_of is None:
        ranges = [row_ranges(xp, csr, keys) for csr, keys in zip(indices, prefix_keys)]
    else:
        ranges = list(candidates_of)
    counts = xp.stack([hi - lo for lo, hi in ranges], axis=1)
    live = xp.nonzero(xp.min(counts, axis=1) > 0)[0]  # skip prefixes some extender rules out
    winner = xp.argmin(xp.take(counts, live, axis=0), axis=1)  # first minimum: lowest j
    k = len(indices)
    out = [[] for _ in range(k + 2)]  # parent, value, position per extender
    for j in range(k):
        rows = xp.take(live, xp.nonzero(winner == j)[0])
        lo, hi = (xp.take(a, rows) for a in ranges[j])
        pos = [None] * k
        local, pos[j] = spans(xp, lo, hi)
        parent = xp.take(rows, local)
        value = xp.take(indices[j].targets, pos[j])
        for i in range(k):
            if i == j:
                continue
            found, at = lower_bound(xp, indices[i].targets, xp.take(ranges[i][0], parent),
                                     xp.take(ranges[i][1], parent), value)
            keep = xp.nonzero(found)[0]  # shrink before the next validator
            parent, value, pos[i] = (xp.take(a, keep) for a in (parent, value, at))
            pos = [p if p is None or i2 == i else xp.take(p, keep) for i2, p in enumerate(pos)]
        for col, a in zip(out, [parent, value, *pos]):
            col.append(a)
    parent, value, *position = (xp.concat(col) for col in out)
    return parent, value, position


def _oriented(xp, src, dst):
    """(vertex, u, v, key) of the simple undirected graph behind the edges: loops dropped,
    duplicates and both directions merged. Vertices are renumbered by rank (degree, id):
    vertex[r] is the id of rank r. Edges are oriented u < v in ranks and sorted by (u, v);
    key = u * n + v (n = number of vertices), ascending. Temporaries die as soon as they
    are used: the peak is ~6 int64 arrays of the edge count.
    """
    vertex, key = _pair_keys(xp, src, dst)
    n = vertex.shape[0]
    every = xp.arange(n + 1, dtype=xp.int64)
    degree = _run_lengths(xp, key // n, every) + \
        _run_lengths(xp, xp.sort(key % n, stable=False), every)
    by_rank = xp.argsort(degree, stable=True)  # ties keep index order, i.e. id order
    rank = xp.argsort(by_rank, stable=False)  # inverse permutation
    a, b = xp.take(rank, key // n), xp.take(rank, key % n)
    key = xp.sort(xp.minimum(a, b) * n + xp.maximum(a, b), stable=False)
    return xp.take(vertex, by_rank), key // n, key % n, key


def _pair_keys(xp, src, dst):
    """(vertex, key): vertex ids ascending; key = i * n + j for each distinct undirected
    non-loop edge between vertex[i] < vertex[j], ascending. When the ids span less than
    twice the edge count they index themselves (vertex = min..max, absent ids have degree
    0), which saves the lookups."""
    keep = xp.nonzero(src != dst)[0]
    a, b = xp.take(src, keep), xp.take(dst, keep)
    if a.shape[0] == 0:
        return xp.zeros(0, dtype=src.dtype), xp.zeros(0, dtype=xp.int64)
    first, last = min(int(xp.min(a)), int(xp.min(b))), max(int(xp.max(a)), int(xp.max(b)))
    dense = last - first < 2 * a.shape[0]
    vertex = (xp.arange(first, last + 1, dtype=src.dtype) if dense
              else distinct(xp, xp.concat([a, b])))
    n = vertex.shape[0]
    if n > _MAX_COMPOSITE:
        raise ValueError(f"{n} vertices: composite edge keys would overflow int64")
    if dense:
        return vertex, _distinct(xp, (xp.minimum(a, b) - first) * n + xp.maximum(a, b) - first)
    lo, hi = xp.searchsorted(vertex, xp.minimum(a, b)), xp.searchsorted(vertex, xp.maximum(a, b))
    return vertex, _distinct(xp, lo * n + hi)


def _distinct(xp, x):
    x = xp.sort(x, stable=False)
    if x.shape[0] < 2:
        return x
    new = xp.concat([xp.ones(1, dtype=xp.bool), x[1:] != x[:-1]])
    return xp.take(x, xp.nonzero(new)[0])


def _run_lengths(xp, sorted_x, every):
    """How often each of 0..n-1 occurs in sorted_x (every = arange(n + 1))."""
    starts = xp.searchsorted(sorted_x, every)
    return starts[1:] - starts[:-1]


def orient(xp, src, dst):
    """(u, v): the simple undirected graph of the edges (loops dropped, duplicates and both
    directions merged), each edge oriented from lower to higher rank (degree, id), sorted
    by (u, v). Ids are any int64 values."""
    vertex, u, v, _ = _oriented(xp, src, dst)
    u, v = xp.take(vertex, u), xp.take(vertex, v)
    perm = sort_by(xp, [u, v])
    return xp.take(u, perm), xp.take(v, perm)


def _closing_wedges(xp, u, v, key, n, chunk_rows, table_bytes, method, with_edge=False):
    """Yield (closed, w, edge) per chunk of at most chunk_rows wedges of the oriented graph
    (u, v, key) from `_oriented`: wedge i is an edge (u, v) plus w in N+(u) after v, closed[i]
    says (v, w) is an edge too; edge (the index of (u, v)) only if with_edge, else None.

    (v, w) is looked up in a dense bool table when v is among the k = isqrt(table_bytes)
    highest ranks (then so is w > v): degree order puts the hubs there, and most wedges meet
    in them (82% for 5M R-MAT edges, k = 8192). The other wedges, grouped by v so that
    consecutive searches share their path through the keys in cache, use `method`:
    "searchsorted" finds v * n + w in the sorted edge keys, one compiled binary search per
    wedge; "ranges" binary-searches w in N+(v) with intersect.contains in lockstep
    whole-array steps, ~2x slower on numpy.
    """
    if method not in ("searchsorted", "ranges"):
        raise ValueError(f"unknown method {method!r}: expected 'searchsorted' or 'ranges'")
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be positive")
    m = key.shape[0]
    offsets = xp.searchsorted(u, xp.arange(n + 1, dtype=xp.int64))  # N+(x) = v[off[x]:off[x+1]]
    wedges = xp.take(offsets, u + 1) - xp.arange(m, dtype=xp.int64) - 1  # w in v[e+1:off[u+1]]
    k = min(n, isqrt(table_bytes))
    hub = n - k  # the k highest ranks are hubs
    table = _hub_table(xp, u, v, int(offsets[hub]), hub, k)
    last = xp.asarray(m - 1, dtype=xp.int64)
    for in_table in (True, False):
        sel = xp.nonzero((v >= hub) == in_table)[0]  # edges whose middle vertex is a hub, or not
        mid = xp.take(v, sel)
        if not in_table:
            by_mid = xp.argsort(mid, stable=False)  # any order of equal ones counts the same
            sel, mid = xp.take(sel, by_mid), xp.take(mid, by_mid)
        # per edge, what plus w gives: the table cell / the composite key / v (ranges)
        base = (mid - hub) * k - hub if in_table else mid * n if method == "searchsorted" else mid
        per_edge = [base, sel] if with_edge else [base]
        for w, base, *edge in _wedges(xp, v, sel, xp.take(wedges, sel), chunk_rows, per_edge):
            if in_table:
                closed = xp.take(table, base + w)
            elif method == "searchsorted":
                want = base + w
                closed = xp.take(key, xp.minimum(xp.searchsorted(key, want), last)) == want
            else:
                closed = contains(xp, v, xp.take(offsets, base), xp.take(offsets, base + 1), w)
            yield closed, w, edge[0] if with_edge else None


def _hub_table(xp, u, v, start, hub, k):
    """Flat k * k bool adjacency of the oriented edges among ranks >= hub: cell
    (a - hub) * k + (b - hub). Those edges are the suffix from `start` of the sorted edges,
    so their cells ascend."""
    cells = (u[start:] - hub) * k + (v[start:] - hub)
    return dense(xp, cells, xp.ones(cells.shape[0], dtype=xp.bool), k * k)


def _wedges(xp, v, sel, counts, chunk_rows, per_edge):
    """Yield (w, *per_edge repeated) in chunks of at most chunk_rows wedges: edge sel[i]
    contributes counts[i] wedges, w running over v[sel[i] + 1 : sel[i] + 1 + counts[i]]."""
    cum = xp.cumulative_sum(counts, include_initial=True)  # sel[i] owns wedges cum[i]:cum[i+1]
    total = int(cum[-1])
    shift = sel + 1 - cum[:-1]  # position of w in v = shift + global wedge index
    starts = xp.arange(0, total, chunk_rows, dtype=xp.int64)
    first = [int(i) for i in xp.searchsorted(cum, starts, side="right") - 1]  # host: per chunk
    first.append(sel.shape[0] - 1)
    for c in range(len(first) - 1):
        x0, x1 = c * chunk_rows, min((c + 1) * chunk_rows, total)
        s, t = first[c], first[c + 1] + 1  # sel[s:t] own the wedges x0 .. x1-1
        lo = xp.maximum(cum[s:t], xp.asarray(x0, dtype=xp.int64))
        hi = xp.minimum(cum[s + 1:t + 1], xp.asarray(x1, dtype=xp.int64))
        w = xp.take(v, xp.repeat(shift[s:t], hi - lo) + xp.arange(x0, x1, dtype=xp.int64))
        yield w, *(xp.repeat(a[s:t], hi - lo) for a in per_edge)


def count_triangles(xp, src, dst, chunk_rows=1 << 18, table_bytes=1 << 26,
                    method="searchsorted"):
    """Exact number of triangles of the simple undirected graph of the edges (src[i], dst[i]):
    direction, duplicates and self loops are ignored. Memory O(|E| + chunk_rows + table_bytes);
    see the module docstring and `_closing_wedges` for the method. Returns an int.
    """
    vertex, u, v, key = _oriented(xp, src, dst)
    chunks = _closing_wedges(xp, u, v, key, vertex.shape[0], chunk_rows, table_bytes, method)
    return sum(int(xp.sum(xp.astype(closed, xp.int8), dtype=xp.int64)) for closed, _, _ in chunks)


def list_triangles(xp, src, dst, chunk_rows=1 << 18, table_bytes=1 << 26,
                   method="searchsorted"):
    """(a, b, c): every triangle of the graph as in count_triangles, ids a < b < c, sorted."""
    vertex, u, v, key = _oriented(xp, src, dst)
    parts = []
    for closed, w, edge in _closing_wedges(xp, u, v, key, vertex.shape[0], chunk_rows,
                                           table_bytes, method, with_edge=True):
        hit = xp.nonzero(closed)[0]
        edge = xp.take(edge, hit)
        ranks = (xp.take(u, edge), xp.take(v, edge), xp.take(w, hit))
        parts.append([xp.take(vertex, r) for r in ranks])
    if not parts:
        return tuple(xp.zeros(0, dtype=src.dtype) for _ in range(3))
    x, y, z = (xp.concat(col) for col in zip(*parts))
    a, c = xp.minimum(xp.minimum(x, y), z), xp.maximum(xp.maximum(x, y), z)
    b = xp.maximum(xp.minimum(x, y), xp.minimum(xp.maximum(x, y), z))  # median of three
    perm = sort_by(xp, [a, b, c])
    return tuple(xp.take(col, perm) for col in (a, b, c))
