"""Throughput of one big step: `count` per key over many updates at one time (issue "One
engine, part 2": >= 1M updates/s on 2 cores over >= 10M updates; differential dataflow's
published `count` is ~0.6-0.8M updates/s on 2 workers, `count_total` 2.2-2.8M).

    PYTHONPATH=. .venv/bin/python benchmarks/big_steps.py --rows 10000000 --keys 1000000

The updates (key BIGINT uniform over `--keys`, time 0, diff +1) are one Arrow table, built
before any clock starts. Each system runs in its own process on the same seeded table, once
untimed on 10,000 rows first (a warm session, as a service would have):
- diffspark, driver placement (`diffspark.host.step_rows` above the step), and Spark
  placement (`diffspark.host.step_rows=0`): a Runner over `input.count(by=["k"])`, the step
  timed until the counts' changes are in hand as Arrow;
- DuckDB: `SELECT k, count(*) ... GROUP BY k` over the registered Arrow table, fetched as Arrow;
- Spark SQL: `groupBy("k").count()` over `createDataFrame(table)`, collected as Arrow.
Every system's counts are summed to a checksum (sum of key * count) and must agree.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402

SCHEMA = "k BIGINT"
WARM_UP = 10_000  # rows of each system's first, untimed run (JVM, imports, caches)


def updates(rows: int, keys: int, seed: int):
    import pyarrow as pa

    k = np.random.default_rng(seed).integers(0, keys, rows, dtype=np.int64)
    zero = np.zeros(rows, np.int64)
    return pa.table({"k": k, "time": zero, "diff": zero + 1})


def checksum(table) -> int:
    """sum(key * count) of a (k, count[, time, diff]) table, diffs applied."""
    k = table.column("k").to_numpy().astype(object)
    n = table.column("count").to_numpy().astype(object)
    d = table.column("diff").to_numpy().astype(object) if "diff" in table.column_names \
        else np.ones(len(k), dtype=object)
    return int(np.sum(k * n * d)) if len(k) else 0


def run_diffspark(args, placement: str) -> dict:
    from executor import Runner
    from plans import Dataflow

    flow = Dataflow()
    flow.output("counts", flow.input("u", SCHEMA).count(by=["k"]))
    rows = 0 if placement == "spark" else args.rows + 1
    overrides = [f"diffspark.host.step_rows={rows}", f"diffspark.host.mirror_rows={args.rows + 1}",
                 *args.conf]
    spark = None
    for size in (WARM_UP, args.rows):  # the first, untimed, warms the session and imports
        table = updates(size, args.keys, args.seed)
        runner = Runner(flow, conf=args.profile, overrides=overrides, spark=spark)
        spark = runner.spark
        started = time.perf_counter()
        result = runner.step({"u": table}, upto=1)
        out = result.arrow("counts")
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "on_driver": result.host, "checksum": checksum(out),
            "groups": out.num_rows}


def run_duckdb(args) -> dict:
    import duckdb

    con = duckdb.connect()
    for size in (WARM_UP, args.rows):
        con.register("u", updates(size, args.keys, args.seed))
        started = time.perf_counter()
        out = con.execute('SELECT k, count(*) AS "count" FROM u GROUP BY k').fetch_arrow_table()
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "checksum": checksum(out), "groups": out.num_rows,
            "version": duckdb.__version__}


def run_spark_sql(args) -> dict:
    spark, _ = common.session(args.profile, args.conf)
    for size in (WARM_UP, args.rows):
        table = updates(size, args.keys, args.seed).select(["k"])
        started = time.perf_counter()
        out = spark.createDataFrame(table).groupBy("k").count().toArrow()
        seconds = time.perf_counter() - started
    spark.stop()
    return {"seconds": seconds, "checksum": checksum(out), "groups": out.num_rows}


SYSTEMS = {"diffspark (driver placement)": (run_diffspark, "driver"),
           "diffspark (Spark placement)": (run_diffspark, "spark"),
           "DuckDB GROUP BY": (run_duckdb,), "Spark SQL groupBy": (run_spark_sql,)}


def main(argv: Optional[Sequence[str]] = None) -> dict:
    parser = common.base_parser(__doc__.splitlines()[0], 10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    payload = common.header("big_steps", argv, peers=("duckdb",))
    payload["params"] = {"rows": args.rows, "keys": args.keys, "seed": args.seed}
    results = {}
    for name, (fn, *extra) in SYSTEMS.items():
        results[name] = common.isolated(fn, args, *extra)
        r = results[name]
        r["updates_per_s"] = round(args.rows / r["seconds"])
        print(f"  {name}: {r['seconds']:.2f} s, {r['updates_per_s']:,} updates/s", flush=True)
    sums = {r["checksum"] for r in results.values()}
    payload.update({"results": results, "correct": len(sums) == 1})
    path = common.save_json(common.results_path("big_steps", args.out), payload)
    print(report(payload))
    print(f"saved {path}")
    if not payload["correct"]:
        raise SystemExit("big_steps: the systems' counts differ (see the JSON's checksums)")
    return payload


def report(payload: dict) -> str:
    """The README's table for this benchmark."""
    p, res = payload["params"], payload["results"]
    title = (f"`count` per key of {p['rows']:,} updates at one time over {p['keys']:,} keys, "
             f"one step; every system's counts agree: {'yes' if payload['correct'] else 'NO'}")
    table = common.markdown_table(
        ["system", "s", "updates/s", "groups"],
        [[name, round(r["seconds"], 2), f"{r['updates_per_s']:,}", r["groups"]]
         for name, r in res.items()])
    return f"{title}\n\n{table}"


if __name__ == "__main__":
    main()
