"""Every benchmark of the project, each in a process of its own: JSON and PNG plots in
benchmarks/results/, and every results block of the README regenerated from that JSON.

    PYTHONPATH=. .venv/bin/python benchmarks/run_all.py            # full sizes, README updated
    PYTHONPATH=. .venv/bin/python benchmarks/run_all.py --quick    # CI smoke sizes, results/quick/
    PYTHONPATH=. .venv/bin/python benchmarks/run_all.py --report-only   # README from saved JSON

A run is one entry of BENCHMARKS: its JSON (benchmarks/results/NAME.json), the script that
writes it, its quick and full arguments. Adding a benchmark is adding an entry. Each runs as
`python benchmarks/SCRIPT.py ARGS --out ... --png` in a subprocess, so one failure does not
stop the others and no peer's memory weighs on the next. The README holds one block per
entry between `<!-- results:NAME:start -->` and `<!-- results:NAME:end -->` (the script's
report() of the saved JSON, under the command, commit and machine it came from), and an
overview between `<!-- results:start -->` and `<!-- results:end -->`: diffspark's seconds, the
baseline's and their ratio per case. Nothing else in the README states a measured figure.
--quick writes to benchmarks/results/quick/ and leaves the README alone unless --readme is
given.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from executor.apps.progress import progress  # noqa: E402
from gpu_kernels.backend import gpu_visible  # noqa: E402

START, END = "<!-- results:start -->", "<!-- results:end -->"
README = common.ROOT / "README.md"


def block_markers(name: str) -> tuple[str, str]:
    """The README markers around the block generated from benchmarks/results/NAME.json."""
    return f"<!-- results:{name}:start -->", f"<!-- results:{name}:end -->"


@dataclass(frozen=True)
class Bench:
    name: str  # the JSON's name (benchmarks/results/NAME.json) and the README block's
    quick: tuple[str, ...]  # arguments for the CI smoke run
    full: tuple[str, ...]  # arguments for the README figures
    baseline: str
    peers: str
    summary: Optional[Callable[[dict], list[tuple]]] = None
    # overview rows: (case, diffspark s, baseline s, peers' seconds as text[, baseline
    # stopped early]); None: the benchmark has its block only
    script: str = ""  # benchmarks/SCRIPT.py (default: the name)
    gpu: bool = False  # runs only where cupy sees a GPU; elsewhere its saved JSON is reported


    @property
    def module(self) -> str:
        return self.script or self.name


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
    rows += [(f"arranging {r['updates']:,} updates ({r['columns']}) by the per-bucket kernel",
              r["kernel_s"], r["sql_s"], "") for r in p.get("method", [])]
    return rows


def _triangles(p: dict) -> list:
    from benchmarks import triangles

    by_size: dict[int, dict[str, dict]] = {}
    for r in p.get("static", []):
        by_size.setdefault(r["edges"], {})[r["system"]] = r
    rows = []
    own = ("diffspark kernel", triangles.VERB, triangles.VERB_BEFORE, triangles.SPARK_SQL,
           triangles.SPARK_SQL_BEFORE)
    for edges, systems in sorted(by_size.items()):
        peers = ", ".join(f"{name} {triangles.seconds_text(r, ' s')}"
                          for name, r in systems.items() if name not in own)
        sql = systems.get(triangles.SPARK_SQL) or systems.get(triangles.SPARK_SQL_BEFORE, {})
        verb = (systems.get(triangles.VERB) or systems.get(triangles.VERB_BEFORE, {})).get(
            "seconds")
        if verb is not None:
            rows.append((f"static triangle count, R-MAT {edges:,} edges", verb,
                         sql.get("seconds"), peers, sql.get("triangles") is None))
    return rows


def _triangles_incremental(p: dict) -> list:
    from benchmarks import triangles

    inc = p.get("incremental")
    if not inc or not inc.get("batches"):
        return []
    b = inc["batches"]
    duck = [x.get("duckdb_delta_s") for x in b]
    first = inc.get("duckdb_first")
    rows = [(f"first step, the whole graph at one time ({inc['edges']:,} edges)",
             inc["load_s"], None, f"DuckDB load + degree-ordered count {first['seconds']:.2f} s")
            ] if first else []
    return rows + [(f"incremental, {inc['batch_size']:,} changes per batch ({inc['edges']:,} "
                    f"edges), median of {len(b)}", statistics.median(x["diffspark_s"] for x in b),
                    statistics.median(x["kernel_recount_s"] for x in b),
                    f"DuckDB delta SQL {statistics.median(duck):.2f} s "
                    f"({triangles.duckdb_form(inc)})" if None not in duck else "")]


def _triangles_spark(p: dict) -> list:
    return [(f"first step on the Spark placement, per bucket ({r['edges']:,} edges)",
             r["kernel_s"], r["sql_s"], "") for r in p.get("spark_first", [])]


def _ratio(s: float, base: Optional[float], stopped: bool) -> str:
    if not base or not s:
        return ""
    r = base / s
    return (">" if stopped else "") + (f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x")


SMOKE_CONF = ("--conf", "diffspark.partitions=2")
TRIANGLES_PEERS = "DuckDB, networkit, kuzu (benchmarks/requirements-peers.txt, when installed)"
BENCHMARKS = (
    Bench("kernels", ("--rows", "2000", "--repeat", "1"), ("--rows", "1000000", "--repeat", "3"),
          "numpy on this CPU", "H100 roofline (3 TB/s; gpu_kernels/roofline.py)"),
    Bench("kernels_h100", ("--backend", "cupy", "--rows", "2000", "--repeat", "1"),
          ("--backend", "cupy", "--rows", "10000000", "--repeat", "3", "--graphs",
           "snap,1000000,5000000,20000000"),
          "numpy on the same machine (triangle counts)",
          "H100 roofline (3 TB/s; gpu_kernels/roofline.py)", script="kernels", gpu=True),
    Bench("linear", ("--rows", "20000", "--warmup-rows", "2000", *SMOKE_CONF),
          ("--rows", "10000000"),
          "Spark SQL on the same session (operator at a time; SQL expressions; SQL aggregate)",
          "none", _linear),
    Bench("arrangements", ("--rows", "3000", "--sharing-rows", "3000", "--ks", "1,2",
                           "--sizes", "3000", "--changes", "100", *SMOKE_CONF),
          ("--ks", "1,2,4,8"),
          "the same queries without sharing, and a recompute in plain Spark SQL", "none",
          _arrangements),
    Bench("arrangements_attach_5m", ("--parts", "b", "--rows", "3000", *SMOKE_CONF),
          ("--parts", "b", "--rows", "5000000"),
          "the same query built from scratch", "none", _arrangements, script="arrangements"),
    Bench("arrangements_method", ("--parts", "d", "--arrange-sizes", "3000", *SMOKE_CONF),
          ("--parts", "d", "--repeat", "3"), "Spark SQL's aggregate and sort of the same batch",
          "none", _arrangements, script="arrangements"),
    Bench("triangles", ("--sizes", "3000", "--batches", "0", "--plans-rows", "0", *SMOKE_CONF),
          ("--sizes", "1000000,5000000", "--batches", "0", "--plans-rows", "0",
           "--spark-timeout", "150"),
          "Spark SQL degree-ordered joins on the same session", TRIANGLES_PEERS, _triangles),
    *[Bench(name, ("--sizes", "", "--rows", "3000", "--batches", "2", "--batch-size", "100",
                   "--plans-rows", quick_plans, *SMOKE_CONF),
            ("--sizes", "", "--rows", rows, "--batches", batches, "--plans-rows", plans,
             "--incremental-conf", "spark.driver.memory=1500m"),
            "a kernel recount of the whole graph", "DuckDB delta SQL", _triangles_incremental,
            script="triangles")
      for name, rows, batches, plans, quick_plans in (
          ("triangles_incremental", "1000000", "100", "20000", "2000"),
          ("triangles_incremental_5m", "5000000", "10", "0", "0"))],
    Bench("triangles_spark", ("--sizes", "", "--batches", "0", "--plans-rows", "0",
                              "--spark-first", "3000", *SMOKE_CONF),
          ("--sizes", "", "--batches", "0", "--plans-rows", "0",
           "--spark-first", "100000,1000000"),
          "the query's extensions as Spark SQL joins", "none", _triangles_spark,
          script="triangles"),
    Bench("step_jobs", ("--rows", "500", "--batches", "2", "--batch-size", "20", *SMOKE_CONF),
          ("--rows", "5000", "--batches", "4"), "the same steps on Spark", "none"),
    Bench("expressions", ("--sizes", "1000", "--repeat", "3", *SMOKE_CONF),
          ("--sizes", "1000", "100000", "--repeat", "20"),
          "Catalyst evaluating the same chain over the same local rows (no job)", "none"),
    Bench("relational", ("--rows", "3000", "--steps", "2", "--changes", "100", *SMOKE_CONF),
          ("--rows", "1000000", "--steps", "10", "--changes", "1000"),
          "DuckDB recomputing the queries (tables updated in place)", "DuckDB, Spark SQL"),
    Bench("relational_files", ("--rows", "3000", "--steps", "2", "--changes", "100",
                               "--feed", "parquet", "--peers", "duckdb", *SMOKE_CONF),
          ("--rows", "1000000", "--steps", "10", "--changes", "1000", "--feed", "parquet",
           "--peers", "duckdb"),
          "DuckDB recomputing the queries (tables updated in place)", "DuckDB",
          script="relational"),
    *[Bench(f"relational_spark_{size}", ("--rows", "3000", "--steps", "2", "--changes", "100",
                                         "--views", "revenue", "--conf",
                                         "diffspark.host.step_rows=0", "--peers", "spark_sql",
                                         *SMOKE_CONF),
            ("--rows", rows, "--steps", "15", "--changes", "1000", "--views", "revenue",
             "--conf", "diffspark.host.step_rows=0", "--peers", "spark_sql"),
            "Spark SQL recomputing the join + sum (cached tables)", "Spark SQL",
            script="relational") for size, rows in (("1m", "1000000"), ("4m", "4000000"))],
    *[Bench(f"relational_lookups_{size}",
            ("--rows", "3000", "--steps", "2", "--changes", "100", "--views", "revenue",
             "--conf", "diffspark.host.step_rows=1000", "--conf", "diffspark.host.lookup_rows=0",
             "--peers", "spark_sql", *SMOKE_CONF),
            ("--rows", rows, "--steps", "10", "--changes", "1000", "--views", "revenue",
             "--conf", "diffspark.host.step_rows=100000", "--conf",
             "diffspark.host.lookup_rows=0", "--peers", "spark_sql"),
            "Spark SQL recomputing the join + sum (cached tables)", "Spark SQL",
            script="relational") for size, rows in (("1m", "1000000"), ("4m", "4000000"))],
    Bench("big_steps", ("--rows", "20000", "--keys", "1000", *SMOKE_CONF),
          ("--rows", "10000000", "--keys", "1000000"),
          "DuckDB GROUP BY and Spark SQL groupBy over the same table", "DuckDB, Spark SQL"),
    Bench("tpch", ("--scale", "0.01", "--steps", "2", "--queries", "q01,q06,q13", *SMOKE_CONF),
          ("--scale", "0.1", "--steps", "3"),
          "DuckDB and Spark SQL recomputing each query (tables loaded, cached)",
          "DuckDB, Spark SQL"),
    Bench("tpch_sf1", ("--scale", "0.01", "--steps", "2", "--queries", "q01,q06", *SMOKE_CONF),
          ("--scale", "1", "--steps", "5", "--conf", "spark.driver.memory=8g"),
          "DuckDB and Spark SQL recomputing each query (tables loaded, cached)",
          "DuckDB, Spark SQL", script="tpch"),
    Bench("optimizer", ("--rows", "400", "--edges", "60", "--changes", "10",
                        "--warmup-rows", "50", *SMOKE_CONF),
          ("--rows", "100000", "--edges", "2000", "--changes", "200"),
          "each dataflow as written (optimize=False)", "none"),
    Bench("iterate", ("--rows", "200", "--changes", "4", "--warm-up-rows", "0", *SMOKE_CONF),
          ("--rows", "1000000"),
          "diffspark recomputing from scratch", "networkit BFS"),
    Bench("durability", ("--rows", "500", "--edges", "200", "--steps", "1", "--changes", "20",
                         "--sizes", "200", "--layout-records", "2000", "--repeat", "1",
                         *SMOKE_CONF),
          ("--rows", "20000", "--edges", "2000", "--steps", "2", "--changes", "200",
           "--sizes", "5000,50000,500000", "--layout-records", "2000000", "--repeat", "3",
           "--conf", "spark.master=local[2]"),
          "the same steps without a state directory", "none"),
    Bench("soak", ("--steps", "12", "--changes", "20", *SMOKE_CONF), ("--steps", "1000"),
          "none (trends over the run)", "none"),
    Bench("follow_lag", ("--files", "2", "--changes", "100", "--every", "0.2", *SMOKE_CONF),
          ("--files", "30", "--changes", "1000"), "none (issue 20's goal: median <= 1 s)",
          "none"),
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
                   help="run nothing: tables and README from the saved JSON")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="Spark/diffspark overrides of the cpu profile, passed to each benchmark")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    unknown = only - {b.name for b in BENCHMARKS}
    if unknown:
        raise SystemExit(f"run_all: unknown benchmarks {sorted(unknown)}; known: "
                         f"{', '.join(b.name for b in BENCHMARKS)}")
    chosen = [b for b in BENCHMARKS if not only or b.name in only]
    results = Path(args.results) if args.results else (
        common.RESULTS_DIR / "quick" if args.quick else common.RESULTS_DIR)
    readme = Path(args.readme) if args.readme else (None if args.quick else README)
    run_file = results / "run_all.json"
    failed: dict[str, int] = {}
    if args.report_only:
        quick = json.loads(run_file.read_text())["quick"] if run_file.is_file() else args.quick
    else:
        quick = args.quick
        for b in progress(chosen, desc="benchmarks"):
            if b.gpu and not gpu_visible():
                print(f"== {b.name}: skipped, no GPU visible to cupy here (its saved JSON, "
                      "if any, is still reported)", flush=True)
                continue
            code = run_one(b, results, quick, args.conf)
            if code:
                failed[b.name] = code
        common.save_json(run_file, {"quick": quick, "command": common.command_line(argv),
                                    "benchmarks": [b.name for b in chosen], "failed": failed})
    # every benchmark with saved JSON is shown (a partial run, --only, still writes the whole
    # README); the overview's plots are drawn only after a run, never by --report-only
    payloads = {b.name: json.loads((results / f"{b.name}.json").read_text())
                for b in BENCHMARKS if (results / f"{b.name}.json").is_file()}
    tables = {b.name: b.summary(payloads[b.name]) for b in BENCHMARKS
              if b.summary and b.name in payloads}
    if not args.report_only:
        for b in chosen:
            if b.name in tables:
                save_plot(results / f"{b.name}_vs_baseline.png", b.name, tables[b.name])
    plots = {b.name: path for b in BENCHMARKS for path in plot_paths(b, results, payloads)}
    text = results_markdown(tables, plots, payloads, quick, readme)
    blocks = {b.name: benchmark_block(b, payloads[b.name]) for b in BENCHMARKS
              if b.name in payloads}
    print(text)
    if readme is not None:
        update_readme(readme, text, blocks)
    if failed:
        raise SystemExit(f"run_all: benchmarks failed (exit status): {failed}")
    return {"tables": tables, "blocks": blocks, "plots": {k: str(v) for k, v in plots.items()}}


def run_one(b: Bench, results: Path, quick: bool, conf: Sequence[str]) -> int:
    """`python benchmarks/SCRIPT.py ARGS --out results/NAME.json --png` in its own process;
    its exit status."""
    sizes = b.quick if quick else b.full
    extra = [x for kv in conf for x in ("--conf", kv)] if b.module != "kernels" else []
    out = os.path.relpath(results / f"{b.name}.json", common.ROOT)  # the JSON's command as
    cmd = [sys.executable, f"benchmarks/{b.module}.py", *sizes, *extra, "--out", out,  # typed
           "--png"]
    print(f"== {b.name}: {' '.join(cmd[1:])}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(common.ROOT), os.environ.get("PYTHONPATH")]))}
    code = subprocess.run(cmd, cwd=common.ROOT, env=env).returncode
    if code:
        print(f"== {b.name}: FAILED (exit status {code})", flush=True)
    return code


def plot_paths(b: Bench, results: Path, payloads: dict) -> list[Path]:
    """The overview's plot for a benchmark, diffspark vs baseline, where it exists."""
    path = results / f"{b.name}_vs_baseline.png"
    return [path] if b.name in payloads and b.summary and path.is_file() else []


def provenance(payload: dict) -> str:
    """Where a table came from: the command, the commit, the machine and its load."""
    m = payload.get("machine", {})
    cpu = m.get("cpu_model") or m.get("processor") or "CPU"
    load = m.get("load_average")
    when = (m.get("started") or "")[:10]
    gpu = m.get("gpu") or {}
    return (f"`{payload.get('command', '?')}` at commit {common.commit_label(m)}"
            f"{', ' + when if when else ''}: {m.get('nproc', '?')} cores ({cpu}), "
            f"{m.get('mem_total_gib', '?')} GiB"
            + (f", GPU {gpu['name']} ({gpu['memory_gib']} GiB)" if gpu else "")
            + (f", load average {load[0]} at the start" if load else "") + ".")


def benchmark_block(b: Bench, payload: dict) -> str:
    """A benchmark's README block: its report of the saved JSON, under its provenance."""
    module = importlib.import_module(f"benchmarks.{b.module}")
    return (f"From `benchmarks/results/{b.name}.json`, written by {provenance(payload)}\n\n"
            f"{module.report(payload).rstrip()}\n")


def results_markdown(tables: dict, plots: dict, payloads: dict, quick: bool,
                     readme: Optional[Path]) -> str:
    """One table per benchmark, its baseline, peers and commit named, and its plot."""
    cmd = "PYTHONPATH=. .venv/bin/python benchmarks/run_all.py" + (" --quick" if quick else "")
    lines = [f"Produced by `{cmd}` (tables regenerated from the JSON by `--report-only`); "
             "machine, versions and settings in each JSON's `machine`. On a shared 2-core "
             "machine these figures are noisy; none was taken on a GPU (GPU figures: see "
             "\"GPU status, plainly\").", ""]
    for b in BENCHMARKS:
        if not b.summary:
            continue
        if b.name not in tables:
            lines += [f"**{b.name}**: not measured yet (`{cmd} --only {b.name}`).", ""]
            continue
        commit = common.commit_label(payloads[b.name].get("machine", {}))
        lines += [f"**{b.name}** (baseline: {b.baseline}; peers: {b.peers}; commit {commit})",
                  "", summary_table(tables[b.name]), ""]
        if plots.get(b.name) and readme is not None:
            lines += [f"![{b.name}]({link(Path(plots[b.name]), readme)})", ""]
    return "\n".join(lines).rstrip() + "\n"


def link(path: Path, readme: Path) -> str:
    """A plot's path as the README links it: from the README's folder, else from the
    repository's root (a copy of the README elsewhere links the same files)."""
    path = path.resolve()
    for base in (readme.resolve().parent, common.ROOT):
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            pass
    return path.as_posix()


def summary_table(rows: list) -> str:
    """case | diffspark s | baseline s | baseline / diffspark | peers."""
    cells = []
    for row in rows:
        case, s, base, peers, stopped = tuple(row) + (False,) * (5 - len(row))
        cells.append([case, s, f"stopped at {base:.0f}" if stopped else base,
                      _ratio(s, base, stopped), peers])
    return common.markdown_table(["case", "diffspark s", "baseline s", "baseline / diffspark",
                                  "peers"], cells)


def replace_block(text: str, start: str, end: str, block: str) -> Optional[str]:
    """`text` with what lies between the markers replaced by `block`; None without them."""
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(text):
        return None
    return pattern.sub(lambda _: f"{start}\n{block}{end}", text, count=1)


def regenerate(text: str, overview: str, blocks: dict[str, str]) -> str:
    """The README text with the overview and every benchmark block it marks regenerated; the
    overview's markers must be there."""
    out = replace_block(text, START, END, overview)
    if out is None:
        raise SystemExit(f"README: needs the markers {START} and {END} (in that order)")
    for name, block in blocks.items():
        out = replace_block(out, *block_markers(name), block) or out
    return out


def update_readme(path: Path, overview: str, blocks: Optional[dict[str, str]] = None) -> None:
    """Rewrite the README's generated blocks in place; a README without the overview's
    markers is refused and left as it is."""
    try:
        text = regenerate(path.read_text(), overview, blocks or {})
    except SystemExit as e:
        raise SystemExit(f"{path}: {e}") from None
    path.write_text(text)


def save_plot(path: Path, name: str, rows: list) -> Optional[Path]:
    """diffspark vs baseline seconds per case (log scale)."""
    plt = common.pyplot()
    if plt is None or not rows:
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
