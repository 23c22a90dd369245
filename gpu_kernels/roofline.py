"""Roofline of every kernel: bytes it must move and integer operations it must do for given
inputs, and the time those take at a device's peak, so a measured run can say how far it is
from the limit (benchmarks/kernels.py prints "measured vs roofline"; ROOFLINE.md explains).

The bytes are counted from the actual arrays: `passes` full streams over the kernel's inputs
and outputs (1 for an element-wise kernel; a 64-bit radix sort streams its keys and index
8 times per key), plus, for searching kernels, one 32-byte memory sector per binary-search
probe (log2 of the searched range per query: dependent random reads, so they are latency
bound, and this bound is optimistic). The triangle kernels add ~120 bytes per wedge (the
module note of executor/operators/query/spark.py). Operations are int64 operations per row. Every kernel here is
memory bound (well under one operation per byte), so its roofline time is bytes / bandwidth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

H100_BYTES_PER_S = 3.0e12  # HBM3 of an H100 SXM, ~3.35 TB/s peak; ~3 TB/s reachable
H100_INT64_OPS_PER_S = 15e12  # int64 add/compare/select: ~2 instructions each on int32 units


@dataclass(frozen=True)
class Model:
    passes: float  # full streams over inputs + outputs
    ops_per_row: float  # int64 operations per row of the largest input
    search: str = ""  # input whose rows each run a binary search ("" = none)
    what: str = ""


SORT = 8  # passes per 64-bit sort key (8-bit radix digits, keys + permutation)

MODELS: dict[str, Model] = {
    "parents": Model(2, 2, what="prefix sum of counts, then one write per output row"),
    "gather": Model(1, 1, what="one random read per output element"),
    "dense": Model(3, 3, what="gaps and values interleaved, then one repeat into the table"),
    "expand": Model(2, 4, what="gather parents' times and diffs, max and checked multiply"),
    "compose": Model(3, 6, what="gather, then expand"),
    "join_times": Model(1, 1, what="element-wise max per coordinate"),
    "meet_times": Model(1, 1, what="element-wise min per coordinate"),
    "less_equal": Model(1, 2, what="compare per coordinate, and"),
    "advance_by": Model(1, 1, what="max with a constant per coordinate"),
    "multiply_diffs": Model(1, 8, what="multiply with an exact overflow check"),
    "add_diffs": Model(1, 5, what="add with a sign-based overflow check"),
    "visible": Model(1, 1, what="one comparison"),
    "sum_segments": Model(4, 8, what="hi/lo split, two prefix sums, differences at starts"),
    "running_segments": Model(5, 10, what="hi/lo split, two prefix sums, minus segment starts"),
    "segment_ids": Model(2, 2, what="segment lengths, then one write per row"),
    "sort_by": Model(2 * SORT, 2,
                     what="stable sort by the first packed word of keys, tied rows by the rest"),
    "group_starts": Model(2, 2, what="neighbour compare per key, compaction"),
    "distinct": Model(SORT + 2, 2, what="sort, neighbour compare, compaction"),
    "group_ids": Model(2 * SORT + 5, 6,
                       what="sort, group starts, rank per row, inverse permutation"),
    "consolidate": Model(2 * SORT + 6, 12, what="sort, gather, group, segment sums, drop zeros"),
    "consolidation": Model(2 * SORT + 5, 12, what="as consolidate, the rows kept, not the keys"),
    "build_csr": Model(2, 2, what="group starts of sorted sources, offsets"),
    "row_ranges": Model(1, 4, search="q", what="binary search of each key among CSR keys"),
    "build_directory": Model(3, 3, what="count each value's rows, prefix sum of the counts"),
    "directory_ranges": Model(2, 4, what="range check, two random reads per key"),
    "neighbours": Model(2, 4, search="q", what="ranges, then one write per neighbour"),
    "spans": Model(2, 3, what="prefix sum of counts, then one position per output row"),
    "contains": Model(1, 4, search="q", what="binary search in each range"),
    "lower_bound": Model(1, 4, search="q", what="binary search in each range"),
    "equal_range": Model(2, 8, search="q", what="two binary searches in each range"),
    "between": Model(2, 8, search="q", what="two binary searches in each range"),
    "band_segments": Model(2 * SORT + 10, 14, what="consolidate opening and closing events, "
                           "running sum, the ranges of non-zero weight"),
    "extend": Model(4, 8, search="q", what="count, propose, validate by search"),
    "orient": Model(3 * SORT, 6, what="degrees, rank, sort edges by rank"),
    "count_triangles": Model(3 * SORT, 8, what="orient, then ~120 bytes per wedge"),
    "list_triangles": Model(3 * SORT, 10, what="as count_triangles, triangles written"),
    "batch_to_arrays": Model(2, 1, what="Arrow buffers to arrays (a copy on a device)"),
    "arrays_to_batch": Model(2, 1, what="arrays to Arrow buffers (a copy from a device)"),
    "build_timed_index": Model(3 * SORT + 4, 6, what="sort by (key, value, time), running sums"),
    "multiplicity": Model(2, 8, search="q", what="two lexicographic searches per query "
                          "(one on a settled index)"),
    "key_ranks": Model(1, 2, search="q", what="one search over the key offsets per query"),
    "extend_as_of": Model(6, 12, search="q", what="propose, filter by time, validate by search"),
}
WEDGE_BYTES = 120  # gpu_kernels/wcoj.py: streamed per wedge (generate, table, count)


def _nbytes(value) -> int:
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if hasattr(value, "nbytes"):  # numpy, cupy, Arrow
        return int(value.nbytes)
    return 8 if isinstance(value, (int, float, bool)) else 0


def _rows(inputs: dict) -> int:
    return max((v.shape[0] for v in inputs.values() if isinstance(v, np.ndarray)), default=0)


def wedges(src: np.ndarray, dst: np.ndarray) -> int:
    """Wedges the triangle kernels close: pairs of out-neighbours in the degree orientation."""
    from .backend import namespace
    from .wcoj import orient

    u, _ = orient(namespace("numpy"), src, dst)
    out = np.bincount(np.searchsorted(np.unique(u), u)) if u.shape[0] else np.zeros(0, np.int64)
    return int((out * (out - 1) // 2).sum())


def cost(name: str, inputs: dict, output) -> tuple[int, int]:
    """(bytes, operations) kernel `name` must move and do for its parity case's host
    `inputs` and its `output` (arrays on any namespace)."""
    model = MODELS[name]
    rows = _rows(inputs)
    moved = model.passes * (_nbytes(inputs) + _nbytes(output))
    ops = model.ops_per_row * rows
    if model.search:
        probes = inputs[model.search].shape[0] * max(1, math.ceil(math.log2(rows + 1)))
        moved += 32 * probes
        ops += 4 * probes
    if name in ("count_triangles", "list_triangles"):
        w = wedges(inputs["src"], inputs["dst"])
        moved += WEDGE_BYTES * w
        ops += 8 * w
    return int(moved), int(ops)


def roofline_seconds(moved: int, ops: int, bandwidth: float = H100_BYTES_PER_S,
                     ops_per_s: float = H100_INT64_OPS_PER_S) -> float:
    """The time at the device's peak: the larger of memory and compute time."""
    return max(moved / bandwidth, ops / ops_per_s)


def table(rows: int = 1_000_000) -> str:
    """The roofline of every kernel on its parity case at `rows` rows, as markdown (numpy
    computes the outputs whose sizes count)."""
    from .backend import namespace
    from .parity import CASES, call, case_inputs

    xp = namespace("numpy")
    lines = ["| kernel | what it streams | passes | search | MB | M int64 ops | H100 us |",
             "|---|---|--:|---|--:|--:|--:|"]
    for name in sorted(CASES):
        host = case_inputs(name, rows)
        moved, ops = cost(name, host, call(xp, name, host))
        m = MODELS[name]
        lines.append(f"| `{name}` | {m.what} | {m.passes:g} | {'yes' if m.search else ''} | "
                     f"{moved / 1e6:,.0f} | {ops / 1e6:,.0f} | "
                     f"{roofline_seconds(moved, ops) * 1e6:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(table(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
