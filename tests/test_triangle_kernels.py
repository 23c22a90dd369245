"""Worst-case optimal join kernels (gpu_kernels/wcoj.py) and the R-MAT generator
(benchmarks/rmat.py) against brute force, on numpy and on array_api_strict (2023.12), plus
the known triangle counts of two SNAP graphs (numpy only). DIFFSPARK_KERNEL_BACKENDS=cupy
re-runs the kernel tests on a GPU, as in test_kernels.py.
"""
import itertools
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu_kernels as gk
from conftest import host, i64
from benchmarks import rmat

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
examples = settings(max_examples=60, deadline=None)



# extend ---------------------------------------------------------------------------------------

relation = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 7)), max_size=20, unique=True)


@examples
@given(st.lists(relation, min_size=1, max_size=3), st.data())
def test_extend_matches_brute_force(xp, relations, data):
    n = data.draw(st.integers(0, 12))
    keys = [data.draw(st.lists(st.integers(-1, 6), min_size=n, max_size=n)) for _ in relations]
    edges = [sorted(r) for r in relations]
    csrs = [gk.build_csr(xp, i64(xp, [s for s, _ in e]), i64(xp, [d for _, d in e])) for e in edges]
    prefix_keys = [i64(xp, k) for k in keys]
    parent, value, position = gk.extend(xp, prefix_keys, csrs)

    adj = [defaultdict(set) for _ in edges]
    for a, e in zip(adj, edges):
        for s, d in e:
            a[s].add(d)
    want = {(r, x) for r in range(n)
            for x in set.intersection(*(a[k[r]] for a, k in zip(adj, keys)))}
    got = list(zip(host(xp, parent), host(xp, value)))
    assert len(got) == len(set(got)) and set(got) == want
    for j, e in enumerate(edges):  # position j points at the edge (key of the prefix, value)
        assert [e[p] for p in host(xp, position[j])] == [(keys[j][r], x) for r, x in got]

    ranges = [gk.row_ranges(xp, c, k) for c, k in zip(csrs, prefix_keys)]
    again = gk.extend(xp, None, csrs, candidates_of=ranges)
    assert host(xp, again[0]) == host(xp, parent) and host(xp, again[1]) == host(xp, value)


def test_extend_proposer_and_edges(xp):
    small = gk.build_csr(xp, i64(xp, [0, 0]), i64(xp, [3, 5]))
    big = gk.build_csr(xp, i64(xp, [0, 0, 0, 1]), i64(xp, [1, 3, 5, 2]))
    # prefix 0: small proposes (2 < 3) and big validates; prefix 1: key 1 unknown to small
    parent, value, (p_small, p_big) = gk.extend(xp, [i64(xp, [0, 1])] * 2, [small, big])
    assert (host(xp, parent), host(xp, value)) == ([0, 0], [3, 5])
    assert (host(xp, p_small), host(xp, p_big)) == ([0, 1], [1, 2])
    parent, value, (pos,) = gk.extend(xp, [i64(xp, [])], [big])
    assert host(xp, parent) == host(xp, value) == host(xp, pos) == []
    empty = gk.build_csr(xp, i64(xp, []), i64(xp, []))
    assert host(xp, gk.extend(xp, [i64(xp, [0])] * 2, [big, empty])[0]) == []
    with pytest.raises(ValueError, match="at least one extender"):
        gk.extend(xp, [], [])


# orient / triangles ---------------------------------------------------------------------------

# dense ids (they index themselves) or sparse ones (looked up among the distinct ids)
ids = st.one_of(st.integers(0, 7), st.sampled_from([-(2**62), -5, 0, 3, 2**40, 2**62 + 1]))
graphs = st.lists(st.tuples(ids, ids), max_size=30)


def undirected(pairs):
    return {(min(a, b), max(a, b)) for a, b in pairs if a != b}


@examples
@given(graphs)
def test_orient_properties(xp, pairs):
    u, v = gk.orient(xp, i64(xp, [a for a, _ in pairs]), i64(xp, [b for _, b in pairs]))
    got = list(zip(host(xp, u), host(xp, v)))
    simple = undirected(pairs)
    degree = defaultdict(int)
    for a, b in simple:
        degree[a] += 1
        degree[b] += 1
    assert got == sorted(set(got)) and undirected(got) == simple and len(got) == len(simple)
    assert all((degree[a], a) < (degree[b], b) for a, b in got)


def brute_triangles(pairs):
    simple = undirected(pairs)
    nodes = sorted({x for e in simple for x in e})
    return [t for t in itertools.combinations(nodes, 3)
            if {(t[0], t[1]), (t[0], t[2]), (t[1], t[2])} <= simple]


@examples
@given(graphs, st.sampled_from([1, 2, 5, 1 << 18]), st.sampled_from([0, 4, 10, 30, 1 << 26]),
       st.sampled_from(["searchsorted", "ranges"]))
def test_triangles_match_brute_force(xp, pairs, chunk_rows, table_bytes, method):
    src, dst = i64(xp, [a for a, _ in pairs]), i64(xp, [b for _, b in pairs])
    want = brute_triangles(pairs)
    kw = {"chunk_rows": chunk_rows, "table_bytes": table_bytes, "method": method}
    assert gk.count_triangles(xp, src, dst, **kw) == len(want)
    a, b, c = gk.list_triangles(xp, src, dst, **kw)
    assert list(zip(host(xp, a), host(xp, b), host(xp, c))) == want


def test_triangles_edge_cases(xp):
    k4 = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    src, dst = i64(xp, [a for a, _ in k4]), i64(xp, [b for _, b in k4])
    assert gk.count_triangles(xp, src, dst) == 4
    assert gk.count_triangles(xp, dst, src, chunk_rows=1, table_bytes=0) == 4
    assert gk.count_triangles(xp, i64(xp, []), i64(xp, [])) == 0
    assert gk.count_triangles(xp, i64(xp, [3, 3]), i64(xp, [3, 3])) == 0  # loops only
    assert [host(xp, x) for x in gk.list_triangles(xp, i64(xp, []), i64(xp, []))] == [[]] * 3
    with pytest.raises(ValueError, match="unknown method"):
        gk.count_triangles(xp, src, dst, method="hash")
    with pytest.raises(ValueError, match="chunk_rows"):
        gk.count_triangles(xp, src, dst, chunk_rows=0)


@pytest.mark.parametrize("name, triangles", [("facebook_combined", 1_612_010),
                                             ("Wiki-Vote", 608_389)])
def test_snap_triangle_counts(name, triangles):
    edges = np.loadtxt(DATA / f"{name}.txt", comments="#", dtype=np.int64)
    xp = gk.namespace("numpy")
    assert gk.count_triangles(xp, edges[:, 0], edges[:, 1]) == triangles
    assert gk.count_triangles(xp, edges[:, 1], edges[:, 0], method="ranges",
                              chunk_rows=1 << 16, table_bytes=1 << 20) == triangles


# R-MAT ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_edges", [0, 1, 10, 1000, 40_000])
def test_rmat_simple_exact_and_deterministic(n_edges):
    src, dst = rmat.rmat_edges(n_edges, seed=7)
    assert src.dtype == dst.dtype == np.int64 and len(src) == len(dst) == n_edges
    assert np.all(src < dst) and np.all(src >= 0)
    key = list(zip(src.tolist(), dst.tolist()))
    assert key == sorted(set(key))  # sorted, no duplicates
    again = rmat.rmat_edges(n_edges, seed=7)
    assert np.array_equal(src, again[0]) and np.array_equal(dst, again[1])
    if n_edges >= 1000:
        other = rmat.rmat_edges(n_edges, seed=8)
        assert not np.array_equal(src, other[0])


def test_rmat_skew_scale_and_refusals():
    src, dst = rmat.rmat_edges(40_000, seed=1)
    degree = np.bincount(np.concatenate([src, dst]))
    assert len(degree) <= 2**13 and degree.max() > 20 * degree.mean()  # scale 13, heavy hubs
    assert rmat.rmat_edges(100, seed=1, scale=5)[0].max() < 32
    with pytest.raises(ValueError, match="cannot hold"):
        rmat.rmat_edges(100, seed=1, scale=3)
    with pytest.raises(ValueError, match="probabilities"):
        rmat.rmat_edges(10, seed=1, a=0.9, b=0.2)


def test_rmat_main_writes_parquet_and_snap(tmp_path):
    rmat.main(["--edges", "500", "--seed", "3", "--out", str(tmp_path / "g.parquet")])
    table = pq.read_table(tmp_path / "g.parquet")
    src, dst = rmat.rmat_edges(500, seed=3)
    assert table.column("src").to_pylist() == src.tolist()
    assert table.column("dst").to_pylist() == dst.tolist()
    rmat.main(["--edges", "500", "--seed", "3", "--out", str(tmp_path / "g.txt")])
    text = np.loadtxt(tmp_path / "g.txt", comments="#", dtype=np.int64)
    assert np.array_equal(text[:, 0], src) and np.array_equal(text[:, 1], dst)
