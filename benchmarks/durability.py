"""Durability benchmark (issue 7): what `state=` (commit every step to a state directory)
costs per step, and how long a resume takes as the state grows.

(a) Step latency with and without a state directory, same session, same inputs, on two
    workloads: join + count (plans/examples/join_count.py: orders joined with prices, the
    join and a count per user) and the incremental triangle count (executor/apps/triangles.py's
    dataflow over a seeded random graph). A first step loads the base data, then `--steps`
    steps of `--changes` changes each (half deletions). Both runs must give the same outputs.
(b) Resume: for join + count at each of `--sizes`, a durable run of a load and two steps,
    then the time to open a new runner on the directory (lock, manifest, lazy restore) and
    to run one new step on it (which reads the traces back), against the state's bytes;
    `--repeat` resumes, each on a fresh copy of the directory (median reported).
(c) Restoring an arrangement: one arranged batch of `--layout-records` records (hash-
    partitioned by its key into P, sorted), written to disk and read back arranged three
    ways, `--repeat` times each in turn (median reported): plain Parquet re-arranged on load
    (`arrange`: shuffle, consolidate, sort; what resume did first, the baseline), plain
    Parquet re-partitioned and sorted on load (no consolidation), and a bucketed table (P
    buckets by the key; executor/durability/layout.py: a scan and a sort, no shuffle). Each
    restored batch is checked to hold the same rows and to join a live arrangement with no
    Exchange and no Sort.

Inputs are generated in Spark (hashes of row ids, seeded) and cached before timing; a
warm-up runs both modes once on a tiny input first. Small default sizes: the machine this
was written on is shared by other work, so figures are noisy (the load average is saved).
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import functions as F  # noqa: E402

from benchmarks import common  # noqa: E402

PLAN = Path(__file__).resolve().parent.parent / "plans" / "examples" / "join_count.py"


def parse_args(argv):
    p = common.base_parser(__doc__, default_rows=20_000)
    p.add_argument("--steps", type=int, default=3, help="incremental steps after the load")
    p.add_argument("--changes", type=int, default=200, help="changes per step")
    p.add_argument("--edges", type=int, default=3_000, help="graph edges for triangles")
    p.add_argument("--sizes", default="5000,20000,80000", help="orders for (b)")
    p.add_argument("--layout-records", type=int, default=2_000_000,
                   help="records of the arranged batch restored in (c)")
    p.add_argument("--parts", default="a,b,c", help="which parts to run")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- workloads
def _h(seed: int):
    return F.xxhash64(F.col("id"), F.lit(seed))


def join_count(spark, rows: int, steps: int, changes: int):
    """(flow, [per step: {input: DataFrame}]): orders over rows/10 users and rows/50 items."""
    from executor.apps.cli import load_plan
    items, users = max(1, rows // 50), max(1, rows // 10)

    def orders(lo, hi, t, diff):
        return spark.range(lo, hi).select(
            F.pmod(_h(1), F.lit(users)).alias("user"), F.pmod(_h(2), F.lit(items)).alias("item"),
            F.lit(t).cast("bigint").alias("time"), F.lit(diff).cast("bigint").alias("diff"))

    prices = spark.range(items).select(F.col("id").alias("item"),
                                       F.pmod(_h(3), F.lit(100)).alias("price"))
    batches = [{"orders": orders(0, rows, 0, 1), "prices": prices}]
    for t in range(1, steps + 1):  # delete the oldest orders, add new ones
        half = changes // 2
        gone = orders((t - 1) * half, t * half, t, -1)
        batches.append({"orders": gone.unionByName(orders(rows + (t - 1) * half,
                                                          rows + t * half, t, 1))})
    return load_plan(str(PLAN)), batches


def triangles(spark, edges: int, steps: int, changes: int):
    """(flow, batches): a random graph of `edges` edges over edges/4 nodes, then changes."""
    from executor.apps.triangles import NAME, triangle_flow
    nodes = max(4, edges // 4)

    def graph(lo, hi, t, diff):
        return spark.range(lo, hi).select(
            F.pmod(_h(4), F.lit(nodes)).alias("src"), F.pmod(_h(5), F.lit(nodes)).alias("dst"),
            F.lit(t).cast("bigint").alias("time"), F.lit(diff).cast("bigint").alias("diff"))

    batches = [{NAME: graph(0, edges, 0, 1)}]
    half = changes // 2
    for t in range(1, steps + 1):
        batches.append({NAME: graph((t - 1) * half, t * half, t, -1).unionByName(
            graph(edges + (t - 1) * half, edges + t * half, t, 1))})
    return triangle_flow(), batches


# --------------------------------------------------------------------------- runs
def cache(batches):
    out = []
    for b in batches:
        frames = {n: df.cache() for n, df in b.items()}
        for df in frames.values():
            df.count()
        out.append(frames)
    return out


def run(spark, conf, flow, batches, state: Optional[str]):
    """Step through the batches; (per step seconds, sorted output rows, runner)."""
    from executor import Runner
    runner = Runner(flow, conf=conf, spark=spark, state=state)
    seconds = []
    for t, batch in enumerate(batches):
        seconds.append(runner.step(batch, upto=t + 1).seconds)
    rows = {n: sorted(tuple(r) for r in runner.output(n).collect()) for n in runner.plan}
    return seconds, rows, runner


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def step_latency(spark, conf, name, flow, batches, scratch) -> dict:
    plain, want, _ = run(spark, conf, flow, batches, None)
    where = os.path.join(scratch, name)
    durable, got, runner = run(spark, conf, flow, batches, where)
    runner.release_state()
    if got != want:
        raise RuntimeError(f"{name}: outputs with and without state differ")
    row = {"workload": name, "plain_first_s": plain[0], "durable_first_s": durable[0],
           "plain_step_s": statistics.median(plain[1:]),
           "durable_step_s": statistics.median(durable[1:]),
           "plain_steps_s": plain, "durable_steps_s": durable, "state_bytes": du(where)}
    row["step_ratio"] = common.ratio(row["durable_step_s"], row["plain_step_s"])
    print(f"  {name}: plain {plain}, durable {durable}", flush=True)
    return row


def resume(spark, conf, rows: int, args, scratch) -> dict:
    from executor import Runner
    flow, batches = join_count(spark, rows, 3, args.changes)
    batches = cache(batches)
    where = os.path.join(scratch, f"resume-{rows}")
    _, _, first = run(spark, conf, flow, batches[:3], where)
    first.release_state()
    opened, stepped = [], []
    for i in range(max(1, args.repeat)):  # each resume on a fresh copy of the directory
        copy = f"{where}-{i}"
        shutil.copytree(where, copy)
        started = time.perf_counter()
        again = Runner(flow, conf=conf, spark=spark, state=copy)
        opened.append(time.perf_counter() - started)
        stepped.append(again.step(batches[3], upto=4).seconds)
        again.release_state()
        shutil.rmtree(copy)
    out = {"orders": rows, "state_bytes": du(where), "open_s": statistics.median(opened),
           "first_step_after_resume_s": statistics.median(stepped), "all_open_s": opened,
           "all_first_step_after_resume_s": stepped}
    print(f"  resume at {rows:,} orders: {out}", flush=True)
    return out


def restore_layouts(spark, conf, records: int, repeat: int, scratch) -> dict:
    """(c): write and restore one arranged batch in each layout, `repeat` rounds."""
    from executor.arrange.spine import materialise_counted
    from executor.arrange.trace import arrange
    from executor.durability import layout as state_layout
    from executor.durability.state import content_digest, digest_of
    parts, keys, times = int(conf["diffspark.partitions"]), ["user"], ["time"]
    updates = spark.range(records).select(
        F.pmod(_h(6), F.lit(max(1, records // 10))).alias("user"), F.col("id").alias("item"),
        F.pmod(_h(7), F.lit(10)).alias("time"), F.lit(1).cast("bigint").alias("diff"))
    batch, size = arrange(updates, keys, times, parts)
    schema, order = batch.schema, state_layout.order(batch.columns, keys, times)
    want = digest_of(batch.agg(*content_digest(batch.columns)).first())

    def repartition(path):
        return materialise_counted(spark.read.schema(schema).parquet(path)
                                   .repartition(parts, *keys).sortWithinPartitions(*order))

    def read(buckets):
        return lambda path: state_layout.read(spark, path, schema.json(), keys, times, parts,
                                              buckets)

    layouts = [("plain, arrange on load (baseline)", 0, read(0)),
               ("plain, repartition + sort on load", 0, repartition),
               ("bucketed by the key, sort on load", parts, read(parts))]
    timings = {name: {"write_s": [], "restore_s": []} for name, _, _ in layouts}
    for i in range(repeat):
        for j, (name, buckets, restore) in enumerate(layouts):
            path = os.path.join(scratch, f"layout-{i}-{j}")
            started = time.perf_counter()
            state_layout.write(batch, path, keys, times, buckets)
            timings[name]["write_s"].append(time.perf_counter() - started)
            started = time.perf_counter()
            restored, count = restore(path)
            timings[name]["restore_s"].append(time.perf_counter() - started)
            plan = common.plan_summary(restored.join(batch.hint("merge"), keys),
                                       ("SortMergeJoin", "Exchange", "Sort ["))
            got = digest_of(restored.agg(*content_digest(restored.columns)).first())
            if count != size or got != want or plan["Exchange"] or plan["Sort ["] or \
                    not plan["SortMergeJoin"]:
                raise RuntimeError(f"(c) {name}: restored {count} of {size} records, content "
                                   f"{got} vs {want}, join plan {plan}")
            restored.unpersist()
            shutil.rmtree(path)
            print(f"  {name}: round {i + 1}: {timings[name]}", flush=True)
    rows = [{"layout": name, "write_s": statistics.median(t["write_s"]),
             "restore_s": statistics.median(t["restore_s"]), **{
                 f"all_{k}": v for k, v in t.items()}} for name, t in timings.items()]
    base = rows[0]["restore_s"]
    for row in rows:
        row["restore_vs_baseline"] = common.ratio(row["restore_s"], base)
    return {"records": size, "partitions": parts, "repeat": repeat, "rows": rows}


def main(argv: Optional[Sequence[str]] = None, spark=None) -> dict:
    args = parse_args(argv)
    parts = set(args.parts.split(","))
    own = spark is None
    spark, conf = common.session(args.profile, args.conf, spark)
    scratch = tempfile.mkdtemp(prefix="diffspark-durability-")
    payload = {**common.header("durability", argv, spark, conf), "rows": args.rows,
               "steps": args.steps, "changes": args.changes, "edges": args.edges}
    try:
        with common.phase("warm-up: both modes on a tiny input"):
            flow, batches = join_count(spark, 200, 1, 20)
            step_latency(spark, conf, "warm-up", flow, cache(batches), scratch)
        if "a" in parts:
            with common.phase("(a) step latency with and without state"):
                payload["latency"] = [
                    step_latency(spark, conf, "join+count", *_cached(join_count(
                        spark, args.rows, args.steps, args.changes)), scratch),
                    step_latency(spark, conf, "triangles", *_cached(triangles(
                        spark, args.edges, args.steps, args.changes)), scratch)]
        if "b" in parts:
            with common.phase("(b) resume time vs state size"):
                payload["resume"] = [resume(spark, conf, int(s), args, scratch)
                                     for s in args.sizes.split(",") if s]
        if "c" in parts:
            with common.phase("(c) restoring an arrangement: layouts on disk"):
                payload["layouts"] = restore_layouts(spark, conf, args.layout_records,
                                                     max(1, args.repeat), scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if own:
            spark.stop()
    payload["machine"]["load_average_end"] = common.load_average()
    path = common.results_path("durability", args.out)
    common.save_json(path, payload)
    payload["json"] = str(path)
    print(report(payload))
    return payload


def _cached(pair):
    flow, batches = pair
    return flow, cache(batches)


def report(payload: dict) -> str:
    out = []
    if payload.get("latency"):
        out.append("(a) median step seconds after the load, with and without a state directory")
        out.append(common.markdown_table(
            ["workload", "plain first s", "durable first s", "plain step s", "durable step s",
             "durable/plain", "state MiB"],
            [(r["workload"], r["plain_first_s"], r["durable_first_s"], r["plain_step_s"],
              r["durable_step_s"], f"{r['step_ratio']:.2f}x", r["state_bytes"] / 2**20)
             for r in payload["latency"]]))
    if payload.get("resume"):
        out.append(f"(b) resume (open + first new step) vs state size, join + count: median "
                   f"of {len(payload['resume'][0]['all_open_s'])}")
        out.append(common.markdown_table(
            ["orders", "state MiB", "open s", "first step after resume s"],
            [(r["orders"], r["state_bytes"] / 2**20, r["open_s"],
              r["first_step_after_resume_s"]) for r in payload["resume"]]))
    if payload.get("layouts"):
        c = payload["layouts"]
        out.append(f"(c) one arranged batch of {c['records']:,} records, P={c['partitions']}: "
                   f"median seconds of {c['repeat']} rounds")
        out.append(common.markdown_table(
            ["layout on disk, restore", "write s", "restore s", "restore vs baseline"],
            [(r["layout"], r["write_s"], r["restore_s"], f"{r['restore_vs_baseline']:.2f}x")
             for r in c["rows"]]))
    out.append(f"load average at start: {payload['machine'].get('load_average')}, at end: "
               f"{payload['machine'].get('load_average_end')}")
    return "\n\n".join(out)


if __name__ == "__main__":
    main()
