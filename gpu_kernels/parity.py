"""Every public kernel run on two array namespaces with the same seeded inputs, results compared
on the host: cupy against numpy on a GPU (`python -m executor gpu-check`), array_api_strict
against numpy in CI (tests/test_gpu_readiness.py), so a kernel that leaves the standard or
computes differently on a device is named, not discovered in a Spark job.

A case builds host (numpy) inputs of about `n` rows from a seeded generator; `run` moves them
to `xp` and calls the kernel. The same cases size the kernel benchmark (benchmarks/kernels.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Callable

import numpy as np

from . import arrow, band, csr, diffs, intersect, timed_index, times, wcoj
from .backend import to_numpy
from .consolidate import (consolidate, consolidation, distinct, group_ids, group_starts,
                          sort_by)
from .diffs import parents
from .expand import compose, dense, expand, gather

# Modules whose public functions are kernels (backend.py holds namespace plumbing). By
# import_module: the package re-exports functions named like two of its modules.
KERNEL_MODULES = tuple(import_module(f"{__package__}.{m}") for m in (
    "arrow", "band", "consolidate", "csr", "diffs", "expand", "intersect", "timed_index", "times",
    "wcoj"))


@dataclass(frozen=True)
class Case:
    inputs: Callable[[np.random.Generator, int], dict]  # host arrays (and plain values)
    run: Callable[[object, dict], object]  # (xp, inputs moved to xp) -> result


def _ints(rng, n, lo, hi):
    return rng.integers(lo, hi, n, dtype=np.int64)


def _sorted_pairs(rng, n, keys):
    """Distinct (src, dst) pairs sorted by (src, dst)."""
    code = np.unique(_ints(rng, n, 0, keys * keys))
    return code // keys, code % keys


def _stage(rng, n_in):
    counts = _ints(rng, n_in, 0, 3)
    m = int(counts.sum())
    return {"counts": counts, "t0": _ints(rng, m, 0, 9), "t1": _ints(rng, m, 0, 9),
            "d": _ints(rng, m, -3, 4)}


def _two_stages(rng, n):
    """A stage over n rows, then one (keys prefixed "s") over the first one's outputs."""
    first = _stage(rng, n)
    second = _stage(rng, first["counts"].sum())
    return {**first, **{"s" + k: v for k, v in second.items()}}


def _stage_on(xp, a, prefix=""):
    parent = parents(xp, a[prefix + "counts"])
    return parent, (a[prefix + "t0"], a[prefix + "t1"]), a[prefix + "d"]


def _csr_inputs(rng, n):
    """About n edges over n / 8 sources (8 targets each); n queries, some unknown keys."""
    k = max(4, n // 8)
    src, dst = _sorted_pairs(rng, n, k)
    return {"src": src, "dst": dst, "q": _ints(rng, n, -1, k + 1), "c": _ints(rng, n, 0, k)}


def _directory_inputs(rng, n):
    """A sorted column of n + 1 values over about n / 4 keys (some absent), and n keys to
    look up in and around its range (a directory needs one value at least)."""
    k = max(2, n // 4)
    return {"v": np.sort(_ints(rng, n + 1, 0, k)), "q": _ints(rng, n, -2, k + 2)}


def _ranges(xp, a):
    """(CSR of the edges, lo, hi): each query key's range of targets."""
    index = csr.build_csr(xp, a["src"], a["dst"])
    lo, hi = csr.row_ranges(xp, index, a["q"])
    return index, lo, hi


def _targets_ranges(xp, a):
    index, lo, hi = _ranges(xp, a)
    return index.targets, lo, hi


def _equal_range(xp, a):
    targets, lo, hi = _targets_ranges(xp, a)
    return intersect.equal_range(xp, (targets,), lo, hi, (a["c"],))


def _bands(rng, n):
    """n bands over rows 0..n+8 in three groups, opening and closing at random (some empty),
    weights of both signs: the ranges of bands that overlap partly cancel."""
    first = _ints(rng, n, 0, n + 8)
    return {"g": _ints(rng, n, 0, 3), "first": first, "stop": first + _ints(rng, n, -1, 6),
            "w": _ints(rng, n, -2, 3)}


def _timed_inputs(rng, n):
    k = max(3, n // 8)  # about 8 updates per key
    return {"key": _ints(rng, n, 0, k), "value": _ints(rng, n, 0, k), "time": _ints(rng, n, 0, 5),
            "diff": _ints(rng, n, -2, 3), "q": _ints(rng, n, 0, k), "v": _ints(rng, n, 0, k),
            "t": _ints(rng, n, 0, 6), "pd": _ints(rng, n, -2, 3)}


def _timed_index(xp, a, later=0):
    return timed_index.build_timed_index(xp, a["key"], a["value"], a["time"] + later, a["diff"])


def _graph(rng, n):
    k = max(8, n // 8)  # average degree 16
    return {"src": _ints(rng, n, 0, k), "dst": _ints(rng, n, 0, k)}


def _arrow_round_trip(xp, a):
    import pyarrow as pa

    batch = pa.RecordBatch.from_pydict({"k": to_numpy(xp, a["k"]), "w": to_numpy(xp, a["w"]),
                                        "b": to_numpy(xp, a["b"])})
    cols = arrow.batch_to_arrays(batch, xp)
    cols["k"] = cols["k"] * 2
    return [c.to_numpy(zero_copy_only=False) for c in
            arrow.arrays_to_batch(cols, batch.schema, xp).columns]


def _arrow_inputs(rng, n):
    return {"k": _ints(rng, n, -50, 50), "w": rng.random(n), "b": rng.random(n) < 0.5}


def _segments(rng, n):
    diff = _ints(rng, n, -5, 6)
    starts = np.unique(np.concatenate([[0], _ints(rng, n // 3, 0, max(n, 1))])) if n else \
        np.zeros(0, np.int64)
    return {"diff": diff, "starts": starts}


def _sorted_keys(xp, a):
    perm = sort_by(xp, [a["k0"], a["k1"]])
    return [xp.take(a["k0"], perm), xp.take(a["k1"], perm)]


def _keys(rng, n):
    return {"k0": _ints(rng, n, 0, 7), "k1": _ints(rng, n, 0, 5), "d": _ints(rng, n, -2, 3)}


def _times(rng, n):
    return {"a0": _ints(rng, n, 0, 9), "a1": _ints(rng, n, 0, 9), "b0": _ints(rng, n, 0, 9),
            "b1": _ints(rng, n, 0, 9)}


def _pair_times(a):
    return (a["a0"], a["a1"]), (a["b0"], a["b1"])


CASES: dict[str, Case] = {
    "parents": Case(lambda r, n: {"counts": _ints(r, n, 0, 4)},
                    lambda xp, a: parents(xp, a["counts"])),
    "gather": Case(lambda r, n: {"x": _ints(r, n, -9, 9), "p": np.sort(_ints(r, n, 0, max(n, 1)))},
                   lambda xp, a: gather(xp, (a["x"], a["x"] * 3), a["p"])),
    "expand": Case(lambda r, n: {"u0": _ints(r, n, 0, 9), "u1": _ints(r, n, 0, 9),
                                 "ud": _ints(r, n, -3, 4), **_stage(r, n)},
                   lambda xp, a: expand(xp, (a["u0"], a["u1"]), a["ud"], _stage_on(xp, a))),
    "compose": Case(_two_stages,
                    lambda xp, a: compose(xp, _stage_on(xp, a), _stage_on(xp, a, "s"))),
    "join_times": Case(_times, lambda xp, a: times.join_times(xp, *_pair_times(a))),
    "meet_times": Case(_times, lambda xp, a: times.meet_times(xp, *_pair_times(a))),
    "less_equal": Case(_times, lambda xp, a: times.less_equal(xp, *_pair_times(a))),
    "advance_by": Case(_times, lambda xp, a: times.advance_by(xp, _pair_times(a)[0], (4, 2))),
    "multiply_diffs": Case(lambda r, n: {"a": _ints(r, n, -2**20, 2**20),
                                         "b": _ints(r, n, -99, 99)},
                           lambda xp, a: diffs.multiply_diffs(xp, a["a"], a["b"])),
    "add_diffs": Case(lambda r, n: {"a": _ints(r, n, -2**62, 2**62),
                                    "b": _ints(r, n, -2**61, 2**61)},
                      lambda xp, a: diffs.add_diffs(xp, a["a"], a["b"])),
    "sum_segments": Case(_segments, lambda xp, a: diffs.sum_segments(xp, a["diff"], a["starts"])),
    "running_segments": Case(_segments, lambda xp, a: diffs.running_segments(
        xp, a["diff"], a["starts"])),
    "segment_ids": Case(_segments, lambda xp, a: diffs.segment_ids(
        xp, a["starts"], a["diff"].shape[0])),
    "sort_by": Case(_keys, lambda xp, a: sort_by(xp, [a["k0"], a["k1"]])),
    "group_starts": Case(_keys, lambda xp, a: group_starts(xp, _sorted_keys(xp, a))),
    "distinct": Case(_keys, lambda xp, a: distinct(xp, a["k0"])),
    "group_ids": Case(_keys, lambda xp, a: group_ids(xp, [a["k0"], a["k1"]])),
    "consolidate": Case(_keys, lambda xp, a: consolidate(xp, [a["k0"], a["k1"]], a["d"])),
    "consolidation": Case(_keys, lambda xp, a: consolidation(xp, [a["k0"], a["k1"]], a["d"])),
    "build_csr": Case(_csr_inputs, lambda xp, a: tuple(csr.build_csr(xp, a["src"], a["dst"]))),
    "row_ranges": Case(_csr_inputs, lambda xp, a: _ranges(xp, a)[1:]),
    "build_directory": Case(_directory_inputs,
                            lambda xp, a: tuple(csr.build_directory(xp, a["v"]))),
    "directory_ranges": Case(_directory_inputs, lambda xp, a: csr.directory_ranges(
        xp, csr.build_directory(xp, a["v"]), a["q"])),
    "neighbours": Case(_csr_inputs, lambda xp, a: csr.neighbours(xp, *_targets_ranges(xp, a))),
    "spans": Case(_csr_inputs, lambda xp, a: csr.spans(xp, *_ranges(xp, a)[1:])),
    "contains": Case(_csr_inputs, lambda xp, a: intersect.contains(
        xp, *_targets_ranges(xp, a), a["c"])),
    "lower_bound": Case(_csr_inputs, lambda xp, a: intersect.lower_bound(
        xp, *_targets_ranges(xp, a), a["c"])),
    "equal_range": Case(_csr_inputs, lambda xp, a: _equal_range(xp, a)),
    "between": Case(_csr_inputs, lambda xp, a: intersect.between(
        xp, *_targets_ranges(xp, a), a["c"], a["c"] + 2)),
    "band_segments": Case(_bands, lambda xp, a: band.band_segments(
        xp, [a["g"]], a["first"], a["stop"], a["w"])),
    "extend": Case(_csr_inputs, lambda xp, a: wcoj.extend(
        xp, [a["q"], a["c"]], [_ranges(xp, a)[0], csr.build_csr(xp, a["src"], a["dst"])])),
    "orient": Case(_graph, lambda xp, a: wcoj.orient(xp, a["src"], a["dst"])),
    "count_triangles": Case(_graph, lambda xp, a: wcoj.count_triangles(xp, a["src"], a["dst"])),
    "list_triangles": Case(_graph, lambda xp, a: wcoj.list_triangles(xp, a["src"], a["dst"])),
    "batch_to_arrays": Case(_arrow_inputs, _arrow_round_trip),
    "arrays_to_batch": Case(_arrow_inputs, _arrow_round_trip),
    "build_timed_index": Case(_timed_inputs, lambda xp, a: tuple(
        (*ix.csr, ix.times, ix.diffs, ix.running) for ix in [_timed_index(xp, a)])[0]),
    "visible": Case(_times, lambda xp, a: (timed_index.visible(xp, a["a0"], a["b0"], "new"),
                                           timed_index.visible(xp, a["a0"], a["b0"], "old"))),
    "multiplicity": Case(_timed_inputs, lambda xp, a: _multiplicity(xp, a)),
    "key_ranks": Case(_timed_inputs, lambda xp, a: timed_index.key_ranks(
        xp, _timed_index(xp, a), csr.row_ranges(xp, _timed_index(xp, a).csr, a["q"])[0])),
    "extend_as_of": Case(_timed_inputs, lambda xp, a: (timed_index.extend_as_of(
        xp, [a["q"], a["v"]], a["t"], a["pd"], [_timed_index(xp, a), _timed_index(xp, a, 1)],
        ["new", "old"]), _settled_extension(xp, a))),
    "dense": Case(lambda r, n: {"at": np.unique(_ints(r, n, 0, 4 * n + 1)),
                                "x": _ints(r, n, 1, 256)},
                  lambda xp, a: dense(xp, a["at"], xp.astype(a["x"][:a["at"].shape[0]], xp.uint8),
                                      int(a["at"][-1]) + 3 if a["at"].shape[0] else 2)),
}


def _settled_extension(xp, a):
    """Through two settled indexes, one with presence bits for its heaviest keys (as big
    steps build them) and one with unit diffs."""
    ones = xp.ones_like(a["diff"])
    bits = timed_index.build_timed_index(xp, a["key"], a["value"], a["time"], a["diff"],
                                         True, hub_bits=4 * int(a["key"].shape[0]))
    unit = timed_index.build_timed_index(xp, a["key"], a["value"], a["time"], ones, True,
                                         hub_bits=2 * int(a["key"].shape[0]))
    return timed_index.extend_as_of(xp, [a["q"], a["v"]], a["t"], a["pd"], [bits, unit],
                                    ["new", "new"])


def _multiplicity(xp, a):
    """As of each time, and from a settled index (one row per pair, times ignored)."""
    out = []
    for settled in (False, True):
        ix = timed_index.build_timed_index(xp, a["key"], a["value"], a["time"], a["diff"],
                                           settled)
        lo, hi = csr.row_ranges(xp, ix.csr, a["q"])
        out += [timed_index.multiplicity(xp, ix, lo, hi, a["v"], a["t"], reads)
                for reads in ("new", "old")]
    return tuple(out)


def public_kernels() -> set[str]:
    """Names of the public functions defined in the kernel modules."""
    return {name for module in KERNEL_MODULES for name, obj in vars(module).items()
            if callable(obj) and not name.startswith("_") and not isinstance(obj, type)
            and getattr(obj, "__module__", None) == module.__name__}


def on_host(xp, value):
    """A kernel result as plain host values: arrays to lists, tuples kept, ints as ints."""
    if isinstance(value, (tuple, list)):
        return [on_host(xp, v) for v in value]
    if isinstance(value, dict):
        return {k: on_host(xp, v) for k, v in value.items()}
    if value is None or isinstance(value, (int, float, bool, str)):
        return value
    if isinstance(value, np.ndarray):  # host already (the Arrow glue's output)
        return value.tolist()
    return to_numpy(xp, value).tolist()


def case_inputs(name: str, n: int, seed: int = 0) -> dict:
    """Host inputs of kernel `name`'s case for (n, seed)."""
    return CASES[name].inputs(np.random.default_rng(seed), n)


def call(xp, name: str, host: dict):
    """Kernel `name` on `xp` with `host` inputs moved there; the result stays on `xp`."""
    moved = {k: xp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in host.items()}
    return CASES[name].run(xp, moved)


def run_case(xp, name: str, n: int, seed: int = 0):
    """Kernel `name` on `xp` with the case's inputs for (n, seed), as host values."""
    return on_host(xp, call(xp, name, case_inputs(name, n, seed)))


def compare(xp, baseline, sizes=(0, 1, 17, 1000), seed: int = 0) -> list[tuple[str, bool, str]]:
    """(kernel, equal, detail) for every case: `xp` against `baseline` at each size. An
    exception on either side is a mismatch whose detail names it."""
    report = []
    for name in sorted(CASES):
        ok, detail = True, f"sizes {', '.join(map(str, sizes))}"
        for n in sizes:
            try:
                got, want = run_case(xp, name, n, seed), run_case(baseline, name, n, seed)
            except Exception as e:  # noqa: BLE001 - the report names any failure
                ok, detail = False, f"n={n}: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                break
            if got != want:
                ok, detail = False, f"n={n}: results differ"
                break
        report.append((name, ok, detail))
    return report
