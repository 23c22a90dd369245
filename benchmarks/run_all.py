"""Every benchmark of the project in one run, one Spark session: JSON and PNG plots in
benchmarks/results/, and the README's results table regenerated between its markers.

    PYTHONPATH=. .venv/bin/python benchmarks/run_all.py            # full sizes, README updated
    PYTHONPATH=. .venv/bin/python benchmarks/run_all.py --quick    # CI smoke sizes, results/quick/
    PYTHONPATH=. .venv/bin/python benchmarks/run_all.py --report-only   # README from saved JSON

Each benchmark names its CPU baseline (plain Spark SQL on the same session, or numpy on this
CPU for the kernels) and its peers, all measured in the same run; the table gives diffspark's
seconds, the baseline's, and baseline / diffspark (above 1: diffspark is faster). --quick
writes to benchmarks/results/quick/ and leaves the README alone unless --readme is given.
"""
from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from executor.progress import progress  # noqa: E402

START, END = "<!-- results:start -->", "<!-- results:end -->"
README = common.ROOT / "README.md"


@dataclass(frozen=True)
class Bench:
    name: str
    quick: tuple[str, ...]  # arguments for the CI smoke run
    full: tuple[str, ...]  # arguments for the README figures
    baseline: str
    peers: str
    summary: Callable[[dict], list[tuple]]
    # (case, diffspark s, baseline s, peers' seconds as text[, baseline stopped early])
    table: Optional[Callable[[dict], str]] = None  # the benchmark's own table instead


def _linear(p: dict) -> list:
    best = {k: m["best_s"] for k, m in p["measurements"].items()}
    return [("5-operator chain, fused SQL expressions", best["expr_fused"],
             best["expr_unfused_mat"], ""),
            ("the chain as one fused mapInArrow kernel", best["kernel_fused"],
             best["expr_fused"], ""),
            ("consolidation by per-partition kernel", best["consolidate_kernel"],
             best["consolidate_sql"], "")]


def _arrangements(p: dict) -> list:
    rows = [(f"{r['k']} {'query' if r['k'] == 1 else 'queries'} sharing one arrangement, "
             "first step", r["shared_first_s"],
             r["own_first_s"], "") for r in p.get("sharing", [])]
    if p.get("attach"):
        a = p["attach"]
        rows.append((f"2-hop query attached to a live arrangement, {a['edges']:,} edges",
                     a["attached_s"], a["scratch_s"], ""))
    rows += [(f"1 step of updates, {r['records']:,} records joined and counted",
              r["incremental_s"], r["recompute_s"], "") for r in p.get("incremental", [])]
    return rows


def _triangles(p: dict) -> list:
    by_size: dict[int, dict[str, dict]] = {}
    for r in p.get("static", []):
        by_size.setdefault(r["edges"], {})[r["system"]] = r
    rows = []
    own = ("diffspark kernel", "diffspark verb (Spark read + kernel)", "Spark SQL binary joins")
    for edges, systems in sorted(by_size.items()):
        peers = ", ".join(f"{name} {_seconds(r)}" for name, r in systems.items()
                          if name not in own)
        sql = systems.get("Spark SQL binary joins", {})
        verb = systems.get("diffspark verb (Spark read + kernel)", {}).get("seconds")
        if verb is not None:
            rows.append((f"static triangle count, R-MAT {edges:,} edges", verb,
                         sql.get("seconds"), peers, sql.get("triangles") is None))
    inc = p.get("incremental")
    if inc and inc.get("batches"):
        b = inc["batches"]
        rows.append((f"incremental, {inc['batch_size']:,} changes per batch "
                     f"({inc['edges']:,} edges), median",
                     statistics.median(x["diffspark_s"] for x in b),
                     statistics.median(x["kernel_recount_s"] for x in b),
                     f"DuckDB delta SQL {statistics.median(x['duckdb_delta_s'] for x in b):.2f} s"
                     if all(x.get("duckdb_delta_s") is not None for x in b) else ""))
    return rows


def _seconds(row: dict) -> str:
    """A peer's time; a run stopped at the time limit has no count."""
    if row.get("triangles") is None:
        return f"stopped at {row['seconds']:.0f} s"
    return f"{row['seconds']:.2f} s"


def _ratio(s: float, base: Optional[float], stopped: bool) -> str:
    if not base or not s:
        return ""
    r = base / s
    return (">" if stopped else "") + (f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x")


def _kernels(p: dict) -> list:
    return [(f"{r['kernel']}, {r['rows']:,} rows", r["best_s"], r["h100_roofline_s"],
             "H100 roofline") for r in p["kernels"]]


def _kernels_table(p: dict) -> str:
    from benchmarks import kernels

    return kernels.report(p)


SMOKE_CONF = ("--conf", "diffspark.partitions=2")
BENCHMARKS = (
    Bench("kernels", ("--rows", "2000", "--repeat", "1"), ("--rows", "1000000", "--repeat", "3"),
          "numpy on this CPU", "H100 roofline (3 TB/s; gpu_kernels/roofline.py)", _kernels,
          _kernels_table),
    Bench("linear", ("--rows", "20000", "--warmup-rows", "2000", *SMOKE_CONF),
          ("--rows", "10000000"),
          "Spark SQL on the same session (operator at a time; SQL expressions; SQL aggregate)",
          "none", _linear),
    Bench("arrangements", ("--rows", "3000", "--sharing-rows", "3000", "--ks", "1,2",
                           "--sizes", "3000", "--changes", "100", *SMOKE_CONF),
          ("--ks", "1,2,4,8"),
          "the same queries without sharing, and a recompute in plain Spark SQL", "none",
          _arrangements),
    Bench("triangles", ("--sizes", "3000", "--batches", "0", *SMOKE_CONF),
          ("--sizes", "1000000,5000000", "--rows", "100000", "--batches", "3",
           "--spark-timeout", "150"),
          "Spark SQL binary joins on the same session (incremental: a kernel recount)",
          "DuckDB, networkit, kuzu (benchmarks/requirements-peers.txt, when installed)",
          _triangles),
)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="CI smoke sizes")
    p.add_argument("--only", default="", help="comma-separated benchmarks (default: all)")
    p.add_argument("--results", default=None,
                   help="results folder (default benchmarks/results, --quick: .../quick)")
    p.add_argument("--readme", default=None,
                   help="README to update (default README.md; with --quick: none)")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: tables, plots and README from the saved JSON")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="Spark/diffspark overrides of the cpu profile for the shared session")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None, spark=None) -> dict:
    args = parse_args(argv)
    chosen = [b for b in BENCHMARKS if not args.only or b.name in args.only.split(",")]
    results = Path(args.results) if args.results else (
        common.RESULTS_DIR / "quick" if args.quick else common.RESULTS_DIR)
    readme = Path(args.readme) if args.readme else (None if args.quick else README)
    payloads: dict[str, dict] = {}
    run_file = results / "run_all.json"
    if args.report_only:
        quick = json.loads(run_file.read_text())["quick"] if run_file.is_file() else args.quick
    else:
        quick = args.quick
        own = spark is None
        spark, _ = common.session("cpu", args.conf, spark)
        try:
            for b in progress(chosen, desc="benchmarks"):
                module = importlib.import_module(f"benchmarks.{b.name}")
                sizes = b.quick if args.quick else b.full
                print(f"== {b.name}: {' '.join(sizes)}", flush=True)
                payloads[b.name] = module.main(
                    [*sizes, "--out", str(results / f"{b.name}.json"), "--png"], spark=spark)
        finally:
            if own:
                spark.stop()
        common.save_json(run_file, {"quick": quick, "command": common.command_line(argv),
                                    "benchmarks": sorted(payloads)})
    # the table shows every benchmark with results, saved ones where not run now (so a
    # partial run, --only, still writes the whole README table); --report-only shows `chosen`
    shown = chosen if args.report_only else BENCHMARKS
    for b in shown:
        path = results / f"{b.name}.json"
        if b.name not in payloads and path.is_file():
            payloads[b.name] = json.loads(path.read_text())
    tables = {b.name: b.summary(payloads[b.name]) for b in shown if b.name in payloads}
    # a benchmark with its own table has its own plot (--png); the others get diffspark vs
    # baseline per case
    plots = {b.name: results / f"{b.name}.png" if b.table else
             save_plot(results / f"{b.name}_vs_baseline.png", b.name, tables[b.name])
             for b in shown if b.name in tables}
    text = results_markdown(tables, plots, payloads, args, quick, readme)
    print(text)
    if readme is not None:
        update_readme(readme, text)
    return {"tables": tables, "plots": {k: str(v) for k, v in plots.items() if v}}


def results_markdown(tables: dict, plots: dict, payloads: dict, args, quick: bool,
                     readme: Optional[Path]) -> str:
    """One table per benchmark, its baseline and peers named, and its plot."""
    cmd = "PYTHONPATH=. .venv/bin/python benchmarks/run_all.py" + (" --quick" if quick else "")
    lines = [f"Produced by `{cmd}` (tables regenerated from the JSON by `--report-only`); "
             "machine, versions and settings in each JSON's `machine`. On a shared 2-core "
             "machine these figures are noisy; none was taken on a GPU (GPU figures: see "
             "\"GPU status, plainly\").", ""]
    for b in BENCHMARKS:
        if b.name not in tables:
            if not args.only or b.name in args.only.split(","):
                lines += [f"**{b.name}**: not measured yet (`{cmd} --only {b.name}`).", ""]
            continue
        lines += [f"**{b.name}** (baseline: {b.baseline}; peers: {b.peers})", "",
                  b.table(payloads[b.name]) if b.table else summary_table(tables[b.name]), ""]
        if plots.get(b.name) and readme is not None:
            rel = Path(plots[b.name]).resolve()
            try:
                rel = rel.relative_to(readme.resolve().parent)
            except ValueError:
                pass
            lines += [f"![{b.name}]({rel.as_posix()})", ""]
    return "\n".join(lines).rstrip() + "\n"


def summary_table(rows: list) -> str:
    """case | diffspark s | baseline s | baseline / diffspark | peers."""
    cells = []
    for row in rows:
        case, s, base, peers, stopped = tuple(row) + (False,) * (5 - len(row))
        cells.append([case, s, f"stopped at {base:.0f}" if stopped else base,
                      _ratio(s, base, stopped), peers])
    return common.markdown_table(["case", "diffspark s", "baseline s", "baseline / diffspark",
                                  "peers"], cells)


def update_readme(path: Path, block: str) -> None:
    """Replace what lies between the results markers; the markers must be there."""
    text = path.read_text()
    if START not in text or END not in text or text.index(START) > text.index(END):
        raise SystemExit(f"{path}: needs the markers {START} and {END} (in that order)")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{block}{END}{tail}")


def save_plot(path: Path, name: str, rows: list) -> Optional[Path]:
    """diffspark vs baseline seconds per case (log scale)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not rows:
        return None
    cases = [r[0] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.6))
    ys = range(len(cases))
    ax.barh([y + 0.2 for y in ys], [r[1] for r in rows][::-1], 0.4, label="diffspark")
    ax.barh([y - 0.2 for y in ys], [r[2] or 0 for r in rows][::-1], 0.4, label="baseline")
    ax.set_yticks(list(ys), cases, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("seconds (log)")
    ax.set_title(f"{name}: diffspark vs baseline")
    ax.legend()
    return common.save_figure(fig, path)


if __name__ == "__main__":
    main()
