"""A relational view kept up to date: orders joined with customers (STRING, DATE, DECIMAL,
TIMESTAMP columns), revenue and order counts per segment, the top customers per segment by
revenue, and the customers without orders, under steps of order inserts, deletes and
updates (issue "One engine, part 1", first goal: a 1,000-change step against 1M orders in
at most 50 ms).

    PYTHONPATH=. .venv/bin/python benchmarks/relational.py --rows 1000000 --steps 10

`--rows` is the number of orders (a tenth as many customers). `--views revenue` keeps a
subset of the views (there: a join + sum alone), for every system; `--conf
diffspark.host.step_rows=0` runs diffspark's every step on the Spark placement (issue "One
engine, part 2": a join + sum step on that placement at 1M and 4M orders). `--conf
diffspark.host.step_rows=100000 --conf diffspark.host.lookup_rows=0` loads on Spark and
leaves the traces in Spark's batches: each small step then runs on the driver and reads only
the keys it touches from them (one Spark job per lookup).

Each system runs in its own process on the same seeded data and steps:
- diffspark: one Runner, the load as a first step, then each step's changes as a pyarrow
  Table; a step is timed until every output's changes are in hand as Arrow. `--feed parquet`
  hands each step's changes to `step` as a Parquet file instead (written before the step's
  clock starts, as a producer would have), `--feed frame` as `spark.read.parquet(file)`.
- DuckDB (the peer a skilled user would reach for): the tables loaded once with a primary
  key on o_id, each step's deletes and inserts applied in place, then the four queries
  recomputed in full.
- Spark SQL: the tables as cached DataFrames, each step's changes applied by an anti join on
  o_id plus a union (re-cached, counted), then the four queries recomputed and collected.
After every step each system's answers are reduced to one digest per query; diffspark's
must equal DuckDB's and Spark's, or the benchmark fails.
"""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402

SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
STATUS = ["F", "O", "P"]
TOP = 3
ORDERS = ("o_id BIGINT, c_id BIGINT, status STRING, total DECIMAL(12,2), placed DATE, "
          "at TIMESTAMP")
CUSTOMERS = "c_id BIGINT, name STRING, segment STRING, since DATE"
QUERIES = {
    "revenue": "SELECT c.segment, sum(o.total) AS total FROM orders o JOIN customers c "
               "ON o.c_id = c.c_id GROUP BY c.segment",
    "orders_per_segment": "SELECT c.segment, count(*) AS count FROM orders o JOIN customers c "
                          "ON o.c_id = c.c_id GROUP BY c.segment",
    "top_customers": f"""SELECT segment, c_id, total FROM (
        SELECT segment, c_id, total, row_number() OVER (PARTITION BY segment
               ORDER BY total DESC, c_id) AS r
        FROM (SELECT c.segment, o.c_id, sum(o.total) AS total FROM orders o
              JOIN customers c ON o.c_id = c.c_id GROUP BY c.segment, o.c_id) t) r
        WHERE r <= {TOP}""",
    "idle_customers": "SELECT c.c_id, c.name, c.segment, c.since FROM customers c WHERE NOT "
                      "EXISTS (SELECT 1 FROM orders o WHERE o.c_id = c.c_id)",
}


class Workload:
    """The seeded data and steps: every process regenerates the same tables and changes."""

    def __init__(self, orders: int, steps: int, changes: int, seed: int):
        import pyarrow as pa

        self.pa, self.steps, self.changes = pa, steps, changes
        self.rng = np.random.default_rng(seed)
        n_cust = max(10, orders // 10)
        self.n_cust = n_cust
        rng = self.rng
        self.customers = pa.table({
            "c_id": np.arange(n_cust, dtype=np.int64),
            "name": [f"Customer#{i:09d}" for i in range(n_cust)],
            "segment": np.array(SEGMENTS)[rng.integers(0, len(SEGMENTS), n_cust)],
            "since": pa.array(rng.integers(8000, 11000, n_cust).astype(np.int32)).cast(
                pa.date32())})
        self.next_id = orders
        self.orders = self._orders(np.arange(orders, dtype=np.int64))

    def _orders(self, ids):
        pa, rng, n = self.pa, self.rng, len(ids)
        # a tenth of the customers never order (the antijoin has something to show)
        c_id = rng.integers(0, self.n_cust, n) // 10 * 10 + rng.integers(1, 10, n)
        c_id = np.minimum(c_id, self.n_cust - 1)
        cents = rng.integers(100, 50_000_000, n)
        return pa.table({
            "o_id": ids, "c_id": c_id.astype(np.int64),
            "status": np.array(STATUS)[rng.integers(0, len(STATUS), n)],
            "total": pa.array([Decimal(int(c)).scaleb(-2) for c in cents],
                              type=pa.decimal128(12, 2)),
            "placed": pa.array(rng.integers(8000, 11000, n).astype(np.int32)).cast(pa.date32()),
            "at": pa.array(rng.integers(0, 2 ** 50, n)).cast(pa.timestamp("us", tz="UTC"))})

    def step(self):
        """(deleted orders, inserted orders) of the next step: half the changes delete
        present orders, a quarter insert new ones, a quarter update (delete + insert)."""
        pa, k = self.pa, self.changes
        n_del, n_new = k // 2, k // 4
        n_upd = (k - n_del - n_new) // 2
        live = self.orders.num_rows
        pick = self.rng.choice(live, n_del + n_upd, replace=False)
        gone = self.orders.take(pa.array(pick))
        updated = gone.slice(n_del)
        fresh = self._orders(np.arange(self.next_id, self.next_id + n_new, dtype=np.int64))
        self.next_id += n_new
        changed = self._orders(updated.column("o_id").to_numpy())
        new = pa.concat_tables([fresh, changed])
        keep = np.ones(live, dtype=bool)
        keep[pick] = False
        self.orders = pa.concat_tables([self.orders.filter(pa.array(keep)), new])
        return gone, new


def digest(rows) -> str:
    """One hash of a multiset of rows, whatever system produced them (values as text)."""
    lines = sorted("|".join("" if v is None else str(v) for v in r) for r in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- the systems
def run_diffspark(args) -> dict:
    import pyarrow as pa

    from executor import Runner
    from plans import Dataflow

    work = Workload(args.orders, args.steps, args.changes, args.seed)
    flow = Dataflow()
    o = flow.input("orders", ORDERS)
    c = flow.input("customers", CUSTOMERS)
    joined = o.arrange_by_key("c_id").join(c.arrange_by_key("c_id"), on=["c_id"])
    views = {
        "revenue": lambda: joined.sum("total", by=["segment"]),
        "orders_per_segment": lambda: joined.count(by=["segment"]),
        "top_customers": lambda: joined.sum("total", by=["segment", "c_id"]).top_k(
            TOP, order_by="total DESC", by=["segment"]),
        "idle_customers": lambda: c.antijoin(o, on=["c_id"])}
    for name in args.views:
        flow.output(name, views[name]())
    overrides = [f"diffspark.host.step_rows={max(100_000, args.orders + 1)}", *args.conf]
    runner = Runner(flow, conf=args.profile, overrides=overrides)
    state = {name: {} for name in args.views}

    def absorb(result) -> dict:
        for name in args.views:
            table = result.arrow(name)
            cols = [c for c in table.column_names if c not in ("time", "diff")]
            rows = zip(*[table.column(c).to_pylist() for c in cols + ["diff"]])
            acc = state[name]
            for *rec, d in rows:
                key = tuple(rec)
                acc[key] = acc.get(key, 0) + d
                if acc[key] == 0:
                    del acc[key]
        return {name: digest([k for k, m in acc.items() for _ in range(m)])
                for name, acc in state.items()}

    files = tempfile.mkdtemp(prefix="relational-feed-")
    started = time.perf_counter()
    result = runner.step({"orders": work.orders, "customers": work.customers}, upto=1)
    tables = {name: result.arrow(name) for name in args.views}
    load = time.perf_counter() - started
    out = {"load_s": load, "load_on_driver": result.host, "steps": [],
           "digests": [absorb(result)]}
    del tables
    for t in range(1, args.steps + 1):
        gone, new = work.step()
        batch = pa.concat_tables([
            gone.append_column("diff", pa.array(np.full(gone.num_rows, -1, dtype=np.int64))),
            new.append_column("diff", pa.array(np.ones(new.num_rows, dtype=np.int64)))])
        batch = batch.append_column("time", pa.array(np.full(batch.num_rows, t, np.int64)))
        source = fed(runner, batch, args.feed, files, t)
        started = time.perf_counter()
        result = runner.step({"orders": source}, upto=t + 1)
        answers = {name: result.arrow(name) for name in args.views}
        seconds = time.perf_counter() - started
        del answers
        out["steps"].append({"seconds": seconds, "on_driver": result.host,
                             "changes": batch.num_rows})
        out["digests"].append(absorb(result))
    out["state"] = {k: {"records": v["records"], "mirror_records": v["mirror_records"],
                        "remote_records": v["remote_records"],
                        "mirror_bytes": v["mirror_bytes"], "columns": v["mirror_columns"]}
                    for k, v in runner.stats().items()}
    out["dictionary_values"] = runner.encoder.size()
    shutil.rmtree(files, ignore_errors=True)
    return out


def fed(runner, batch, feed: str, folder: str, t: int):
    """A step's changes as `--feed` hands them to `step`: the table, a Parquet file of it, or
    Spark's frame over that file."""
    if feed == "table":
        return batch
    import pyarrow.parquet as pq

    path = os.path.join(folder, f"step-{t}.parquet")
    pq.write_table(batch, path)
    return path if feed == "parquet" else runner.spark.read.parquet(path)


def memory(state: dict) -> dict:
    """The driver placement's state against the issue's yardstick: the raw int64 size of
    the arranged record columns (records x columns x 8 bytes), per trace and in all. The
    mirrors also hold a time and a diff per update, and runs not yet merged."""
    raw = sum(v["records"] * v["columns"] * 8 for v in state.values())
    held = sum(v["mirror_bytes"] for v in state.values())
    return {"state_bytes": held, "raw_int64_bytes": raw,
            "state_vs_raw_int64": common.ratio(held, raw),
            "goal_memory_2x_met": raw > 0 and held <= 2 * raw}


def run_duckdb(args) -> dict:
    import duckdb

    work = Workload(args.orders, args.steps, args.changes, args.seed)
    con = duckdb.connect()
    load_orders, load_customers = work.orders, work.customers  # noqa: F841 - read by name
    started = time.perf_counter()
    con.execute("CREATE TABLE customers AS SELECT * FROM load_customers")
    con.execute('CREATE TABLE orders (o_id BIGINT PRIMARY KEY, c_id BIGINT, status VARCHAR, '
                'total DECIMAL(12,2), placed DATE, "at" TIMESTAMPTZ)')
    con.execute("INSERT INTO orders SELECT * FROM load_orders")
    answers = {name: con.execute(QUERIES[name]).fetchall() for name in args.views}
    out = {"load_s": time.perf_counter() - started, "steps": [],
           "digests": [{n: digest(rows) for n, rows in answers.items()}]}
    for _ in range(args.steps):
        gone, new = work.step()  # noqa: F841 - read by DuckDB by name
        started = time.perf_counter()
        con.execute("DELETE FROM orders WHERE o_id IN (SELECT o_id FROM gone)")
        con.execute("INSERT INTO orders SELECT * FROM new")
        answers = {name: con.execute(QUERIES[name]).fetchall() for name in args.views}
        out["steps"].append({"seconds": time.perf_counter() - started})
        out["digests"].append({n: digest(rows) for n, rows in answers.items()})
    out["version"] = duckdb.__version__
    return out


def run_spark_sql(args) -> dict:
    from pyspark.sql import functions as F

    from benchmarks.common import session

    spark, _ = session(args.profile, args.conf)
    work = Workload(args.orders, args.steps, args.changes, args.seed)
    started = time.perf_counter()
    customers = spark.createDataFrame(work.customers).cache()
    orders = spark.createDataFrame(work.orders).cache()
    customers.count(), orders.count()
    customers.createOrReplaceTempView("customers")

    def answer(frame):
        frame.createOrReplaceTempView("orders")
        return {name: digest(tuple(r) for r in spark.sql(QUERIES[name]).collect())
                for name in args.views}

    out = {"load_s": None, "steps": [], "digests": [answer(orders)]}
    out["load_s"] = time.perf_counter() - started
    for _ in range(args.steps):
        gone, new = work.step()
        started = time.perf_counter()
        ids = spark.createDataFrame(gone.select(["o_id"]))
        updated = orders.join(F.broadcast(ids), "o_id", "left_anti") \
            .unionByName(spark.createDataFrame(new)).cache()
        updated.count()
        orders.unpersist()
        orders = updated
        digests = answer(orders)
        out["steps"].append({"seconds": time.perf_counter() - started})
        out["digests"].append(digests)
    spark.stop()
    return out


SYSTEMS = {"diffspark": run_diffspark, "duckdb": run_duckdb, "spark_sql": run_spark_sql}


def _child(name: str, args, queue) -> None:
    try:
        queue.put((name, SYSTEMS[name](args), None))
    except Exception as e:  # noqa: BLE001 - reported by the parent, with the system's name
        import traceback
        queue.put((name, None, traceback.format_exc()))


def run_alone(name: str, args) -> dict:
    """One system in its own spawned process (its memory and JVM its own)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(name, args, queue))
    proc.start()
    got, result, error = queue.get()
    proc.join()
    if error:
        raise RuntimeError(f"{got} failed:\n{error}")
    return result


def _median(steps) -> Optional[float]:
    return statistics.median(s["seconds"] for s in steps) if steps else None


def _p90(steps) -> Optional[float]:
    xs = sorted(s["seconds"] for s in steps)
    return xs[min(len(xs) - 1, int(0.9 * len(xs)))] if xs else None


def main(argv: Optional[Sequence[str]] = None) -> dict:
    parser = common.base_parser(__doc__.splitlines()[0], 1_000_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--feed", choices=("table", "parquet", "frame"), default="table",
                        help="how each step's changes reach diffspark's step (see above)")
    parser.add_argument("--peers", default="duckdb,spark_sql",
                        help="comma-separated peers to run beside diffspark")
    parser.add_argument("--views", default=",".join(QUERIES),
                        help=f"comma-separated views to keep (of {', '.join(QUERIES)})")
    args = parser.parse_args(argv)
    args.orders = args.rows
    args.views = [v for v in args.views.split(",") if v]
    unknown = sorted(set(args.views) - set(QUERIES))
    if unknown or not args.views:
        parser.error(f"--views: unknown {unknown}; choose from {', '.join(QUERIES)}")
    payload = common.header("relational", argv, peers=("duckdb",))
    payload["params"] = {"orders": args.orders, "steps": args.steps, "changes": args.changes,
                         "seed": args.seed, "top": TOP, "feed": args.feed,
                         "views": args.views}
    results = {"diffspark": run_alone("diffspark", args)}
    for peer in [p for p in args.peers.split(",") if p]:
        results[peer] = run_alone(peer, args)
    mine = results["diffspark"]
    correct = {peer: results[peer]["digests"] == mine["digests"] for peer in results}
    summary = {"diffspark_load_s": mine["load_s"],
               "diffspark_median_step_s": _median(mine["steps"]),
               "diffspark_p90_step_s": _p90(mine["steps"]),
               "steps_on_driver": sum(s["on_driver"] for s in mine["steps"]),
               **memory(mine["state"])}
    for peer in results:
        if peer != "diffspark":
            med = _median(results[peer]["steps"])
            summary[f"{peer}_load_s"] = results[peer]["load_s"]
            summary[f"{peer}_median_step_s"] = med
            summary[f"{peer}_over_diffspark"] = common.ratio(med, summary[
                "diffspark_median_step_s"])
    payload.update({"summary": summary, "correct": correct, "results": results})
    path = common.save_json(common.results_path("relational", args.out), payload)
    for key, value in summary.items():
        print(f"  {key}: {value if not isinstance(value, float) else round(value, 4)}")
    print(f"  answers equal to diffspark's: {correct}; saved {path}")
    if not all(correct.values()):
        raise SystemExit("relational: answers differ (see the JSON's digests)")
    return payload


def report(payload: dict) -> str:
    """The README's table for this benchmark."""
    s = payload["summary"]
    ms = (lambda v: None if v is None else round(1000 * v, 1))
    p = payload["params"]
    on_driver = s["steps_on_driver"]
    placement = "driver placement" if on_driver == p["steps"] else \
        "Spark placement" if on_driver == 0 else "driver and Spark placements"
    state = payload["results"]["diffspark"]["state"].values()
    if on_driver and any(v.get("remote_records") for v in state):
        placement += ", traces left on Spark"
    rows = [[f"diffspark ({placement})", s["diffspark_load_s"],
             ms(s["diffspark_median_step_s"]), ms(s["diffspark_p90_step_s"]), None]]
    for peer, label in (("duckdb", "DuckDB, recomputed"), ("spark_sql", "Spark SQL, recomputed")):
        if f"{peer}_median_step_s" in s:
            rows.append([label, s[f"{peer}_load_s"], ms(s[f"{peer}_median_step_s"]), None,
                         s[f"{peer}_over_diffspark"]])
    feed = {"table": "", "parquet": " (each given to `step` as a Parquet file)",
            "frame": " (each given to `step` as `spark.read.parquet(file)`)"}[
        p.get("feed", "table")]
    views = p.get("views", list(QUERIES))
    kept = "" if views == list(QUERIES) else f"; views: {', '.join(views)}"
    title = (f"{p['orders']:,} orders, {p['steps']} steps of {p['changes']:,} changes{feed}"
             f"{kept}; "
             f"{s['steps_on_driver']} steps on the driver; answers equal to diffspark's: "
             f"{', '.join(k for k, ok in payload['correct'].items() if ok and k != 'diffspark')}")
    table = common.markdown_table(
        ["system", "load s", "median step ms", "p90 step ms", "peer / diffspark"], rows)
    lines = [title, table]
    if s.get("raw_int64_bytes"):  # state on the driver (none when every step ran on Spark)
        lines.append(f"State on the driver after the last step: {s['state_bytes'] / 2**20:,.1f} "
                     f"MiB in the traces' mirrors, {s['state_vs_raw_int64']}x the raw int64 "
                     f"size of their arranged columns (goal <= 2x: "
                     f"{'met' if s['goal_memory_2x_met'] else 'NOT met'}); "
                     f"{payload['results']['diffspark']['dictionary_values']:,} distinct "
                     f"STRING values in the dictionary.")
    return "\n\n".join(lines)


if __name__ == "__main__":
    main()
