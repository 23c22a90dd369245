"""TPC-H queries as incremental SQL views under refresh steps, against recomputing them.

    PYTHONPATH=. .venv/bin/python benchmarks/tpch.py --scale 1 --steps 5

tpchgen-cli's tables at `--scale` (generated once into $TMPDIR/diffspark-tpch-sfSCALE), the
queries the SQL front end supports (benchmarks/tpch_workload.py; the others are listed with
their refusal). A refresh step inserts `--fraction` of the orders (with their lineitems),
deletes as many with theirs, and updates a few customers and parts. Each system runs in its
own process (common.isolated) on the same seeded steps. Then `--floor-steps` refreshes of one
order each (one customer, one part) measure a step's floor: what a view's operators cost
however small the change. Where the floor alone exceeds a tenth of the faster recompute, no
refresh of that query can meet the goal on this engine:
- diffspark: one Runner per query; its first step (the load) and each refresh step timed until
  the view's changes are in hand as Arrow; the state records each view keeps (stats()),
  and of them those it derives (not an arrangement of an input: join outputs, reductions'
  inputs), the measure Materialize publishes per query.
- DuckDB: the tables loaded in-process; each refresh applied in place (not timed), then the
  query timed alone.
- Spark SQL: the tables as cached DataFrames read from Parquet, rewritten after each refresh
  (not timed), then the query timed (collected).
After every step each system's answer is reduced to a digest (numbers to 4 decimals: DuckDB
averages in DOUBLE); they must agree. Per query: refresh / faster recompute (goal <= 1/10).
"""
from __future__ import annotations

import hashlib
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Optional, Sequence

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks import tpch_workload as tpch  # noqa: E402


def digest(rows) -> str:
    """One hash of a multiset of rows, numbers to 4 decimals (DOUBLE and DECIMAL agree):
    first rounded to 6, the scale of Spark's DECIMAL quotients, so that DuckDB's DOUBLE
    quotient 0.03844999... and Spark's 0.038450 print alike (q08's share did not)."""
    def text(v):
        if v is None:
            return ""
        return f"{round(float(v), 6):.4f}" if isinstance(v, (float, Decimal)) else str(v)
    lines = sorted("|".join(text(v) for v in r) for r in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _steps(args):
    """(loaded tables, [changes of each refresh step]) for the run's seed: every process
    the same."""
    tables, refresh, orders = _refreshes(args)
    return tables, [refresh.step(n) for n in _sizes(args, orders)]


def _sizes(args, orders: int) -> list[int]:
    """Orders inserted (and deleted) per step: the refresh steps, then the floor's."""
    return [orders] * args.steps + [1] * args.floor_steps


def _refreshes(args):
    """(the loaded tables, their seeded Refreshes, orders inserted per step)."""
    tables = tpch.generate(args.scale, tpch.default_dir(args.scale, args.data))
    orders = max(1, round(args.fraction * tables["orders"].num_rows))
    return tables, tpch.Refreshes(tables, seed=args.seed), orders


def run_diffspark(args, name: str) -> dict:
    from executor import Runner
    from plans import Dataflow

    tables, steps = _steps(args)
    flow = Dataflow()
    tpch.views(flow, tables, names={name})
    runner = Runner(flow, conf=args.profile, overrides=list(args.conf))
    acc: dict = {}

    def absorb(result) -> str:
        table = result.arrow(name)
        cols = [c for c in table.column_names if c not in ("time", "diff")]
        for *rec, d in zip(*[table.column(c).to_pylist() for c in cols + ["diff"]]):
            acc[tuple(rec)] = acc.get(tuple(rec), 0) + d
            if acc[tuple(rec)] == 0:
                del acc[tuple(rec)]
        return digest([k for k, m in acc.items() for _ in range(m)])

    started = time.perf_counter()
    result = runner.step({n: tpch.with_diff(t, 1, 0) for n, t in tables.items()}, upto=1)
    result.arrow(name)
    out = {"first_step_s": time.perf_counter() - started, "steps": [],
           "digests": [absorb(result)]}
    for t, changes in enumerate(steps, start=1):
        updates = tpch.step_updates(changes, t)
        started = time.perf_counter()
        result = runner.step(updates, upto=t + 1)
        result.arrow(name)
        out["steps"].append({"seconds": time.perf_counter() - started, "on_driver": result.host,
                             "changes": sum(u.num_rows for u in updates.values())})
        out["digests"].append(absorb(result))
    stats = runner.stats().values()
    out["state_records"] = sum(v["records"] for v in stats)
    out["derived_records"] = sum(v["records"] for v in stats if v["input"] is None)
    runner.spark.stop()
    return out


def run_duckdb(args, names: Sequence[str]) -> dict:
    import duckdb
    import sqlglot

    tables, steps = _steps(args)
    texts = {n: sqlglot.transpile(t, read="spark", write="duckdb")[0]
             for n, t in tpch.queries().items() if n in names}
    con = duckdb.connect()
    for n, t in tables.items():
        con.register("load", t)
        con.execute(f"CREATE TABLE {n} AS SELECT * FROM load")
        con.unregister("load")
    out = {n: {"seconds": [], "digests": []} for n in names}

    def answer():
        for n, text in texts.items():
            started = time.perf_counter()
            rows = con.execute(text).fetchall()
            out[n]["seconds"].append(time.perf_counter() - started)
            out[n]["digests"].append(digest(rows))
    answer()
    for changes in steps:
        for n, (deleted, inserted) in changes.items():
            key = tpch._key(n)
            con.register("gone", deleted)
            con.register("new", inserted)
            con.execute(f"DELETE FROM {n} WHERE {key} IN (SELECT {key} FROM gone)")
            con.execute(f"INSERT INTO {n} SELECT * FROM new")
        answer()
    return {"queries": out, "version": duckdb.__version__}


def run_spark_sql(args, names: Sequence[str]) -> dict:
    from benchmarks.common import session

    spark, _ = session(args.profile, args.conf)
    _, refresh, orders = _refreshes(args)
    texts = {n: t for n, t in tpch.queries().items() if n in names}
    out = {n: {"seconds": [], "digests": []} for n in names}
    cached: dict = {}

    folder, versions = Path(tempfile.mkdtemp(prefix="diffspark-tpch-spark-")), itertools.count()

    def load(current):
        for n, t in current.items():
            if n in cached and cached[n][0] is t:
                continue
            if n in cached:
                cached[n][1].unpersist()
                cached[n][2].unlink()
            # as a Spark user keeps tables: Parquet files read by the executors
            # (createDataFrame of 6M lineitems ships them through the driver's heap)
            path = folder / f"{n}-{next(versions)}.parquet"
            pq.write_table(t, path)
            df = spark.read.parquet(str(path)).cache()
            df.count()
            df.createOrReplaceTempView(n)
            cached[n] = (t, df, path)
        for n, text in texts.items():
            started = time.perf_counter()
            rows = spark.sql(text).collect()
            out[n]["seconds"].append(time.perf_counter() - started)
            out[n]["digests"].append(digest(tuple(r) for r in rows))
    try:
        load(refresh.tables)
        for n in _sizes(args, orders):
            refresh.step(n)
            load(refresh.tables)
    finally:  # the tables' Parquet files are left behind otherwise
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return {"queries": out}


def main(argv: Optional[Sequence[str]] = None) -> dict:
    parser = common.base_parser(__doc__.splitlines()[0], 0)
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--steps", type=int, default=5, help="refresh steps")
    parser.add_argument("--fraction", type=float, default=0.001,
                        help="orders inserted (and as many deleted) per refresh step")
    parser.add_argument("--queries", default="", help="comma-separated (default: supported)")
    parser.add_argument("--data", default=None, help="folder for the generated tables")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--floor-steps", type=int, default=3,
                        help="steps of one order each after the refreshes (the floor)")
    parser.add_argument("--peers", default="duckdb,spark_sql")
    args = parser.parse_args(argv)
    from plans import Dataflow

    tables = tpch.generate(args.scale, tpch.default_dir(args.scale, args.data))
    built, refused = tpch.views(Dataflow(), tables)
    names = [n for n in built if not args.queries or n in args.queries.split(",")]
    payload = common.header("tpch", argv, peers=("duckdb", "tpchgen-cli"))
    payload["params"] = {"scale": args.scale, "steps": args.steps, "fraction": args.fraction,
                         "floor_steps": args.floor_steps,
                         "seed": args.seed, "orders": tables["orders"].num_rows}
    peers = {p: common.isolated(globals()[f"run_{p}"], args, names)
             for p in args.peers.split(",") if p}
    queries, correct = {}, True
    for n in names:
        mine = common.isolated(run_diffspark, args, n)
        refreshes, floor = mine["steps"][:args.steps], mine["steps"][args.steps:]
        row = {"first_step_s": mine["first_step_s"],
               "median_refresh_s": _median(refreshes),
               "floor_step_s": _median(floor),
               "refresh_steps_on_driver": sum(s["on_driver"] for s in refreshes),
               "floor_steps_on_driver": sum(s["on_driver"] for s in floor),
               "state_records": mine["state_records"],
               "derived_records": mine["derived_records"]}
        for p, res in peers.items():
            q = res["queries"][n]
            row[f"{p}_median_recompute_s"] = statistics.median(
                q["seconds"][1:1 + args.steps] or q["seconds"])
            row[f"{p}_equal"] = q["digests"] == mine["digests"]
            correct &= row[f"{p}_equal"]
        fastest = min((row[f"{p}_median_recompute_s"] for p in peers), default=None)
        row["refresh_over_fastest_recompute"] = (
            common.ratio(row["median_refresh_s"], fastest) if fastest and row[
                "median_refresh_s"] is not None else None)
        row["goal_tenth_met"] = row["refresh_over_fastest_recompute"] is not None and \
            row["refresh_over_fastest_recompute"] <= 0.1
        row["floor_over_fastest_recompute"] = (
            common.ratio(row["floor_step_s"], fastest) if fastest and row["floor_step_s"]
            is not None else None)
        queries[n] = row
        print(f"  {n}: " + ", ".join(f"{k}={round(v, 4) if isinstance(v, float) else v}"
                                     for k, v in row.items()), flush=True)
    payload.update({"queries": queries, "refused": refused, "correct": correct,
                    "peer_versions": {p: r.get("version") for p, r in peers.items()}})
    path = common.save_json(common.results_path("tpch", args.out), payload)
    print(f"  answers equal: {correct}; saved {path}")
    if not correct:
        raise SystemExit("tpch: answers differ (see the JSON's queries)")
    return payload


def _median(steps: list) -> Optional[float]:
    return statistics.median(s["seconds"] for s in steps) if steps else None


def report(payload: dict) -> str:
    """The README's table for this benchmark."""
    p, ms = payload["params"], (lambda v: None if v is None else round(1000 * v, 1))
    rows = [[n, q["first_step_s"], ms(q["median_refresh_s"]),
             ms(q.get("duckdb_median_recompute_s")), ms(q.get("spark_sql_median_recompute_s")),
             q["refresh_over_fastest_recompute"], ms(q.get("floor_step_s")),
             q.get("floor_over_fastest_recompute"), q["state_records"],
             q.get("derived_records")]
            for n, q in payload["queries"].items()]
    title = (f"TPC-H SF {p['scale']}, {p['steps']} refresh steps of {p['fraction']:.1%} of "
             f"{p['orders']:,} orders; refused: {', '.join(sorted(payload['refused'])) or 'none'}")
    return "\n\n".join([title, common.markdown_table(
        ["query", "first step s", "median refresh ms", "DuckDB ms", "Spark SQL ms",
         "refresh / fastest", "1-order step ms", "1-order / fastest", "state records",
         "of which derived"],
        rows)])


if __name__ == "__main__":
    main()
