"""Every array kernel alone, measured against its roofline (gpu_kernels/roofline.py).

    PYTHONPATH=. .venv/bin/python benchmarks/kernels.py [--rows 1000000] [--repeat 3]
        [--backend numpy|cupy] [--kernels a,b] [--graphs snap,1000000] [--out PATH] [--png]

Each kernel runs on its parity case's inputs (gpu_kernels/parity.py: seeded, about --rows
rows; inputs are built and moved to the device before timing), once untimed (warm-up), then
--repeat times; the table shows the best. Baseline: numpy on this CPU. Peer: the H100
roofline, the time the kernel's bytes take at 3 TB/s (or its int64 operations at peak,
whichever is longer): "x roofline" is how many times slower than that limit the run is.
With --backend cupy the same rows measure a GPU (device synchronised before the clock
stops). No Spark is started (pyspark need not be installed).

--graphs adds the flagship kernel on real inputs: count_triangles on the SNAP graphs of
../shared/data ("snap") and on seeded R-MAT graphs of the given edge counts, on --backend and
on numpy in the same run (numpy is the baseline, up to --numpy-max-edges), counts compared.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from executor.apps.progress import progress  # noqa: E402

NAME = "kernels"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows per kernel input")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per kernel (best shown)")
    p.add_argument("--backend", default="numpy", choices=["numpy", "cupy"])
    p.add_argument("--kernels", default="", help="comma-separated kernels (default: all)")
    p.add_argument("--graphs", default="",
                   help="triangle counts: 'snap' and/or R-MAT edge counts, comma-separated")
    p.add_argument("--numpy-max-edges", type=int, default=5_000_000,
                   help="largest graph also counted on numpy (the baseline)")
    p.add_argument("--out", default=None,
                   help="JSON path (default benchmarks/results/kernels.json)")
    p.add_argument("--png", action="store_true", help="also write a plot next to the JSON")
    return p.parse_args(argv)


def _synchronize(xp):
    import array_api_compat

    if array_api_compat.is_cupy_namespace(xp):
        import cupy

        cupy.cuda.runtime.deviceSynchronize()


def timed(xp, fn, repeat: int) -> tuple[object, list[float]]:
    """(result of an untimed warm-up call, seconds of `repeat` timed calls) of `fn()`, the
    device synchronised before each clock reading."""
    output = fn()
    times = []
    for _ in range(max(1, repeat)):
        _synchronize(xp)
        start = time.perf_counter()
        fn()
        _synchronize(xp)
        times.append(time.perf_counter() - start)
    return output, times


def measure_kernel(xp, name: str, rows: int, repeat: int) -> dict:
    """Best seconds of kernel `name` over `repeat` runs, with its roofline."""
    from gpu_kernels import parity, roofline

    host = parity.case_inputs(name, rows)
    moved = {k: xp.asarray(v) if hasattr(v, "dtype") else v for k, v in host.items()}
    output, times = timed(xp, lambda: parity.CASES[name].run(xp, moved), repeat)
    moved_bytes, ops = roofline.cost(name, host, output)
    limit = roofline.roofline_seconds(moved_bytes, ops)
    best = min(times)
    return {"kernel": name, "rows": rows, "seconds": [round(t, 6) for t in times],
            "best_s": round(best, 6), "bytes": moved_bytes, "ops": ops,
            "gb_per_s": round(moved_bytes / best / 1e9, 3) if best > 0 else None,
            "h100_roofline_s": limit, "x_roofline": round(best / limit, 1) if limit else None,
            "model": roofline.MODELS[name].what}


SNAP = {"facebook_combined": 1_612_010, "Wiki-Vote": 608_389}  # published triangle counts


def graphs(spec: str) -> dict:
    """name -> (src, dst, known count or None) for the --graphs spec."""
    import numpy as np

    from benchmarks.rmat import rmat_edges

    out = {}
    for item in (i for i in spec.split(",") if i):
        if item == "snap":
            data = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
            for name, known in SNAP.items():
                if (data / f"{name}.txt").exists():
                    a = np.loadtxt(data / f"{name}.txt", comments="#", dtype=np.int64)
                    out[name] = (a[:, 0].copy(), a[:, 1].copy(), known)
        else:
            out[f"rmat-{int(item)}"] = (*rmat_edges(int(item), 1), None)
    return out


def measure_triangles(xp, src, dst, repeat: int) -> tuple[int, float]:
    """(count, best seconds) of count_triangles on arrays already on xp's device."""
    from gpu_kernels.wcoj import count_triangles

    count, times = timed(xp, lambda: count_triangles(xp, src, dst), repeat)
    return count, min(times)


def triangle_rows(backend: str, spec: str, repeat: int, numpy_max: int) -> list[dict]:
    """One row per graph: the count and seconds on `backend` and (baseline) on numpy."""
    import gpu_kernels as gk

    rows = []
    for name, (src, dst, known) in progress(graphs(spec).items(), desc="graphs"):
        row = {"graph": name, "edges": int(src.shape[0]), "published": known}
        for b in dict.fromkeys([backend, "numpy"]):
            if b == "numpy" and b != backend and src.shape[0] > numpy_max:
                continue
            xp = gk.namespace(b)
            row[b], row[f"{b}_s"] = measure_triangles(xp, xp.asarray(src), xp.asarray(dst),
                                                      repeat if b == backend else 1)
        counts = {row[b] for b in (backend, "numpy") if b in row}
        if len(counts) > 1 or (known is not None and counts != {known}):
            raise SystemExit(f"kernels benchmark: triangle counts disagree on {name}: {row}")
        row["speedup"] = (common.ratio(row["numpy_s"], row[f"{backend}_s"])
                          if "numpy_s" in row else None)
        rows.append(row)
    return rows


def main(argv: Optional[Sequence[str]] = None, spark=None) -> dict:
    """Run the benchmark; `spark` is accepted (run_all passes its session) and unused."""
    import gpu_kernels as gk
    from gpu_kernels import parity

    args = parse_args(argv)
    names = [n for n in args.kernels.split(",") if n] or sorted(parity.CASES)
    unknown = sorted(set(names) - set(parity.CASES))
    if unknown:
        raise SystemExit(f"kernels benchmark: unknown kernels {unknown}")
    xp = gk.namespace(args.backend)
    rows = [measure_kernel(xp, n, args.rows, args.repeat)
            for n in progress(names, desc="kernels")]
    payload = {**common.header(NAME, argv, peers=("cupy",) if args.backend == "cupy" else ()),
               "rows": args.rows, "backend": args.backend,
               "baseline": f"{args.backend} on this machine",
               "peers": ["H100 roofline (3 TB/s HBM)"], "kernels": rows}
    if args.graphs:
        payload["triangles"] = triangle_rows(args.backend, args.graphs, args.repeat,
                                             args.numpy_max_edges)
    path = common.results_path(NAME, args.out)
    if args.png:
        payload["png"] = str(save_plot(path.with_suffix(".png"), rows, args.backend))
    common.save_json(path, payload)
    print(report(payload))
    return payload


def report(payload: dict) -> str:
    rows = [[r["kernel"], r["rows"], round(r["bytes"] / 1e6, 1), r["best_s"] * 1e3,
             r["gb_per_s"], r["h100_roofline_s"] * 1e6, f"{r['x_roofline']:.0f}x"]
            for r in payload["kernels"]]
    b = payload["backend"]
    table = common.markdown_table(
        ["kernel", "rows", "MB moved", f"{b} ms", "GB/s", "H100 roofline us", "x roofline"],
        rows)
    if payload.get("triangles"):
        table += "\n\n" + common.markdown_table(
            ["graph", "edges", "triangles", f"{b} s", "numpy s", "numpy / " + b],
            [[r["graph"], r["edges"], r[b], r[f"{b}_s"], r.get("numpy_s"), r["speedup"]]
             for r in payload["triangles"]])
    return table


def save_plot(path: Path, rows: list[dict], backend: str) -> Optional[Path]:
    """Measured and roofline milliseconds per kernel, log scale."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = [r["kernel"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(rows) + 1.5))
    ys = range(len(names))
    ax.barh([y + 0.2 for y in ys], [r["best_s"] * 1e3 for r in rows][::-1], 0.4,
            label=f"{backend} (measured)")
    ax.barh([y - 0.2 for y in ys], [r["h100_roofline_s"] * 1e3 for r in rows][::-1], 0.4,
            label="H100 roofline")
    ax.set_yticks(list(ys), names)
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log)")
    ax.set_title(f"kernels at {rows[0]['rows']:,} rows" if rows else "kernels")
    ax.legend()
    return common.save_figure(fig, path)


if __name__ == "__main__":
    main()
