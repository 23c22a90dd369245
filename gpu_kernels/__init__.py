"""diffspark's per-partition array kernels, written once against the array API namespace `xp`.

numpy runs them on the CPU, cupy on the GPU, array_api_strict in tests; this package imports
no Spark (DESIGN §3, §7). Pick `xp` with `namespace(name)`.
"""
from .arrow import arrays_to_batch, batch_to_arrays
from .backend import BACKENDS, namespace, to_numpy
from .band import band_segments
from .consolidate import (consolidate, consolidation, distinct, group_ids, group_starts,
                          sort_by)
from .csr import (CSR, Directory, build_csr, build_directory, directory_ranges, neighbours,
                  row_ranges, spans)
from .diffs import (DiffOverflow, add_diffs, multiply_diffs, parents, running_segments,
                    segment_ids, sum_segments)
from .expand import compose, expand, gather
from .intersect import between, contains, equal_range
from .times import advance_by, join_times, less_equal, meet_times
from .wcoj import count_triangles, extend, list_triangles, orient

__all__ = [
    "BACKENDS", "CSR", "DiffOverflow", "Directory", "add_diffs", "advance_by", "arrays_to_batch",
    "band_segments", "batch_to_arrays", "between", "build_csr", "build_directory", "compose",
    "consolidate", "consolidation", "contains", "count_triangles", "directory_ranges", "distinct",
    "equal_range", "expand", "extend", "gather", "group_ids", "group_starts", "join_times",
    "less_equal", "list_triangles", "meet_times", "multiply_diffs", "namespace", "neighbours",
    "orient", "parents", "row_ranges", "running_segments", "segment_ids", "sort_by", "spans",
    "sum_segments", "to_numpy",
]
