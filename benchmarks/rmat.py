"""Graph500-style R-MAT (Kronecker) graphs for the triangle / worst-case-optimal-join benchmarks.

Why: skewed degrees are where a worst-case optimal join beats pairwise joins, and R-MAT is the
standard reproducible generator with such skew (Graph500 reference: a, b, c = 0.57, 0.19, 0.19).

Each raw edge picks one quadrant per bit of the vertex id (vectorised over all edges, one
step per bit, as in the Graph500 octave generator); vertex ids are then permuted with the seed
(as Graph500 does, so ids carry no degree information). Unlike Graph500 the result is a simple
undirected graph: self loops dropped, duplicates and both directions merged, src < dst.

Size: `scale` defaults to ceil(log2(n_edges / 8)), i.e. 2**scale >= n_edges / 8 vertices and
an average degree of 8 to 16 over the distinct undirected edges (Graph500's edge factor 16
counts raw directed edges before merging). Small graphs get a larger scale so that
n_edges is at most an eighth of all possible pairs. Raw edges are drawn in rounds until at
least n_edges distinct edges exist, then a uniform sample of exactly n_edges is kept, all from
one seeded generator: the result depends only on (n_edges, seed, scale, a, b, c).

    python -m benchmarks.rmat --edges 5000000 --seed 1 --out rmat5m.parquet   # or .txt (SNAP)
"""
from __future__ import annotations

import argparse
import math

import numpy as np


def rmat_edges(n_edges, seed, scale=None, a=0.57, b=0.19, c=0.19):
    """(src, dst): n_edges distinct undirected R-MAT edges as int64 arrays, src < dst,
    sorted by (src, dst)."""
    if n_edges < 0 or min(a, b, c) < 0 or a + b <= 0 or a + b + c >= 1:
        raise ValueError("need n_edges >= 0 and probabilities with a + b < 1, a + b + c < 1")
    if scale is None:
        scale = max(math.ceil(math.log2(max(n_edges, 1) / 8)), 1)
        while 2**scale * (2**scale - 1) < 16 * n_edges:  # pairs / 2 >= 8 * n_edges
            scale += 1
    n = 2**scale
    if n * (n - 1) // 2 < n_edges or n > 2**31:
        raise ValueError(f"scale {scale} cannot hold {n_edges} distinct edges")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n).astype(np.int64)
    keys = np.zeros(0, dtype=np.int64)  # distinct lo * n + hi, ascending
    want = n_edges + n_edges // 8 + 64  # raw edges: a little extra for loops and duplicates
    while keys.shape[0] < n_edges:
        i, j = _kronecker(rng, scale, want, a, b, c)
        i, j = perm[i], perm[j]
        raw = np.minimum(i, j) * n + np.maximum(i, j)
        keys = np.sort(np.concatenate([keys, raw[i != j]]))
        keys = keys[np.diff(keys, prepend=-1) != 0]  # distinct (keys >= 0)
        want = 2 * (n_edges - keys.shape[0]) + 64  # top up: later draws repeat more often
    if keys.shape[0] > n_edges:  # trim a seeded uniform sample of the surplus
        keys = keys[np.sort(rng.choice(keys.shape[0], n_edges, replace=False))]
    return keys // n, keys % n


def _kronecker(rng, scale, m, a, b, c):
    """m raw (i, j) vertex pairs in [0, 2**scale): per bit one uniform draw picks quadrant
    a (0, 0), b (0, 1), c (1, 0) or d (1, 1); the same distribution as Graph500's two draws
    per bit (P(i bit) = c + d, P(j bit | i bit) = d / (c + d), ...), at half the draws."""
    i = np.zeros(m, dtype=np.int64)
    j = np.zeros(m, dtype=np.int64)
    for _ in range(scale):
        r = rng.random(m)
        i <<= 1
        i += r >= a + b
        j <<= 1
        j += ((r >= a) & (r < a + b)) | (r >= a + b + c)
    return i, j


def write_edges(src, dst, path, fmt=None):
    """Parquet (columns src, dst: int64) or SNAP text (tab-separated, '#' header)."""
    import pyarrow as pa

    table = pa.table({"src": pa.array(src, pa.int64()), "dst": pa.array(dst, pa.int64())})
    fmt = fmt or ("parquet" if str(path).endswith(".parquet") else "snap")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
        return
    import pyarrow.csv as pcsv

    nodes = int(np.unique(np.concatenate([src, dst])).shape[0])
    with open(path, "wb") as f:
        f.write(f"# Undirected R-MAT graph (src < dst)\n# Nodes: {nodes} Edges: {len(src)}\n"
                "# FromNodeId\tToNodeId\n".encode())
        pcsv.write_csv(table, f, pcsv.WriteOptions(include_header=False, delimiter="\t"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--edges", type=int, required=True, help="distinct undirected edges")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scale", type=int, default=None, help="log2 of the vertex count")
    p.add_argument("--out", required=True, help="*.parquet for Parquet, anything else SNAP text")
    p.add_argument("--format", choices=["parquet", "snap"], default=None)
    args = p.parse_args(argv)
    src, dst = rmat_edges(args.edges, args.seed, scale=args.scale)
    write_edges(src, dst, args.out, args.format)
    print(f"wrote {len(src)} edges to {args.out}")


if __name__ == "__main__":
    main()
