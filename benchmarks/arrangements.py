"""Arrangements benchmark (issue 3): what sharing and keeping arranged state buys.

(a) k = 1..8 queries joining one arranged edge collection (one dataflow, one arrangement)
    vs k dataflows that each arrange their own copy: time of the first step and of one
    incremental step, and the records and bytes the arrangements hold.
(b) A 2-hop-neighbour query attached to a live arranged graph (`flow.import_trace`) vs the
    same query built from scratch on the same edges (goal: attaching >= 3x faster).
(c) One incremental step of 1,000 updates (half deletions) against an arranged collection
    of facts (k, v) joined with dims (k, g) and counted per g (n/20 groups) vs recomputing
    the same join + count with plain Spark SQL from scratch, at several sizes (goal: the
    ratio grows with size). Plotted as PNG with --png.
(d) Arranging n updates on Spark (one batch of a trace: hash-partitioned by key, sorted,
    consolidated, checkpointed) by the per-bucket kernel (executor/arrange/buckets.py) vs
    Spark SQL's aggregate and sort, over integer columns, over integers with a STRING and
    over a DECIMAL and a DATE, at several sizes: where the kernel starts to win is
    buckets.KERNEL_ROWS. Not in the default --parts.

Inputs are generated in Spark from hashes of row ids (seeded), cached and counted before
timing; a warm-up runs every part once on a small input first. Every pair of variants is
checked to give the same result.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import functions as F  # noqa: E402

from benchmarks import common  # noqa: E402

EDGES = "src BIGINT, dst BIGINT"
PART_A, PART_B, PART_C, PART_D = "sharing", "attach", "incremental", "method"


def parse_args(argv):
    p = common.base_parser(__doc__, default_rows=1_000_000)
    p.add_argument("--ks", default="1,2,3,4,5,6,7,8", help="query counts for (a)")
    p.add_argument("--sharing-rows", type=int, default=200_000, help="edges in (a)")
    p.add_argument("--sizes", default="1000000,3000000,10000000",
                   help="collection sizes for (c), comma separated")
    p.add_argument("--changes", type=int, default=1000, help="updates per incremental step")
    p.add_argument("--parts", default="a,b,c", help="which parts to run (a,b,c,d)")
    p.add_argument("--arrange-sizes", default="100000,1000000,3000000,6000000",
                   help="updates per batch for (d), comma separated")
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


# --------------------------------------------------------------------------- inputs
def _hash(seed: int, col="id"):
    return F.xxhash64(F.col(col), F.lit(seed))


def edges(spark, n: int, nodes: int, seed: int, first_id: int = 0, time: int = 0,
          diff: int = 1):
    """n pseudo-random edges over `nodes` nodes, as updates at `time` with `diff`."""
    return (spark.range(first_id, first_id + n)
            .select(F.pmod(_hash(seed), F.lit(nodes)).alias("src"),
                    F.pmod(_hash(seed + 1), F.lit(nodes)).alias("dst"),
                    F.lit(time).cast("bigint").alias("time"),
                    F.lit(diff).cast("bigint").alias("diff")))


def cached(df):
    df = df.cache()
    return df, df.count()


def _rows(df) -> list:
    return sorted(tuple(r) for r in df.collect())


# --------------------------------------------------------------------------- (a) sharing
def _probe_flow(k: int, shared: bool):
    """k queries; query i joins edges (by src) with its own probe set p{i}."""
    from plans import Dataflow

    flow = Dataflow()
    e = flow.input("e", EDGES)
    by_src = e.arrange_by_key("src")
    for i in range(k):
        probe = flow.input(f"p{i}", "src BIGINT, tag BIGINT")
        flow.output(f"q{i}", (by_src if shared else e.arrange_by_key("src")).join(probe, ["src"]))
    return flow


def _probes(spark, i: int, nodes: int, seed: int, time: int = 0):
    return (spark.range(1000).select(F.pmod(_hash(seed + 100 + i), F.lit(nodes)).alias("src"),
                                     F.lit(i).cast("bigint").alias("tag"),
                                     F.lit(time).cast("bigint").alias("time"),
                                     F.lit(1).cast("bigint").alias("diff")))


def run_sharing(spark, conf, args, ks) -> list[dict]:
    from executor import Runner

    n = args.sharing_rows
    nodes = max(1, n // 8)
    base, _ = cached(edges(spark, n, nodes, args.seed))
    change, _ = cached(edges(spark, args.changes, nodes, args.seed, first_id=n, time=1))
    rows = []
    for k in ks:
        probes = [cached(_probes(spark, i, nodes, args.seed))[0] for i in range(k)]
        results = {}
        for variant in ("shared", "own"):
            before = common.persistent_rdd_ids(spark)
            if variant == "shared":
                runners = [Runner(_probe_flow(k, True), conf=conf, spark=spark)]
                feeds = [{"e": base, **{f"p{i}": probes[i] for i in range(k)}}]
            else:
                runners = [Runner(_probe_flow(1, True), conf=conf, spark=spark)
                           for _ in range(k)]
                feeds = [{"e": base, "p0": probes[i].withColumn("tag", F.lit(i).cast("bigint"))}
                         for i in range(k)]
            first = common.measure(f"{variant} k={k} first", "", lambda: [
                r.step(f, upto=1) for r, f in zip(runners, feeds)])
            inc = common.measure(f"{variant} k={k} step", "", lambda: [
                r.step({"e": change}, upto=2) for r in runners])
            stats = [s for r in runners for s in r.stats().values()]
            outs = [r.output(n) for r in runners for n in r.plan]
            results[variant] = {"first_s": round(first.best, 3), "step_s": round(inc.best, 3),
                                "arranged_records": sum(s["records"] for s in stats),
                                "arranged_bytes": sum(s["bytes"] for s in stats),
                                "arrangements": len(stats),
                                "check": sorted(n for o in outs for n in [o.count()])}
            common.release_rdds_since(spark, before)
        for p in probes:
            p.unpersist()
        same = results["shared"]["check"] == results["own"]["check"]
        rows.append({"k": k, **{f"{v}_{m}": results[v][m] for v in results
                                for m in ("first_s", "step_s", "arranged_records",
                                          "arranged_bytes", "arrangements")},
                     "speedup_first": common.ratio(results["own"]["first_s"],
                                                   results["shared"]["first_s"]),
                     "equal": same})
        if not same:
            raise SystemExit(f"(a) k={k}: shared and own outputs differ")
    base.unpersist()
    change.unpersist()
    return rows


# --------------------------------------------------------------------------- (b) attach
def _two_hop(flow, arranged, roots):
    """(mid, root, dst): nodes two hops from each root."""
    first = arranged.join(roots.map("node AS src"), on=["src"])
    return arranged.join(first.map("dst AS src", "src AS root"), on=["src"])


def run_attach(spark, conf, args) -> dict:
    from executor import Runner
    from plans import Dataflow

    nodes = max(1, args.rows // 8)
    base, _ = cached(edges(spark, args.rows, nodes, args.seed))
    roots, _ = cached(spark.range(100).select(
        F.pmod(_hash(args.seed + 9), F.lit(nodes)).alias("node"),
        F.lit(0).cast("bigint").alias("time"), F.lit(1).cast("bigint").alias("diff")))
    owner_flow = Dataflow()
    owner_flow.output("edges", owner_flow.input("e", EDGES).arrange_by_key("src"))
    owner = Runner(owner_flow, conf=conf, spark=spark)
    with common.phase("(b) owner arranges the graph"):
        owner.step({"e": base}, upto=1)

    def attached():
        flow = Dataflow()
        arr = flow.import_trace("edges", owner.arrangement("edges"))
        flow.output("two_hop", _two_hop(flow, arr, flow.input("roots", "node BIGINT")))
        runner = Runner(flow, conf=conf, spark=spark)
        runner.step({"roots": roots}, upto=1)
        return runner

    def scratch():
        flow = Dataflow()
        arr = flow.input("e", EDGES).arrange_by_key("src")
        flow.output("two_hop", _two_hop(flow, arr, flow.input("roots", "node BIGINT")))
        runner = Runner(flow, conf=conf, spark=spark)
        runner.step({"e": base, "roots": roots}, upto=1)
        return runner

    got = {}
    ms = {}
    for name, fn in (("attached", attached), ("scratch", scratch)):
        ms[name] = common.measure(name, "", lambda: got.__setitem__(name, fn()), args.repeat)
    a, s = (_rows(got[n].output("two_hop")) for n in ("attached", "scratch"))
    if a != s:
        raise SystemExit("(b) attached and scratch two-hop outputs differ")
    base.unpersist()
    roots.unpersist()
    speedup = common.ratio(ms["scratch"].best, ms["attached"].best)
    return {"edges": args.rows, "roots": 100, "two_hop_rows": len(a),
            "attached_s": round(ms["attached"].best, 3),
            "scratch_s": round(ms["scratch"].best, 3), "speedup": speedup,
            "goal_3x_met": speedup is not None and speedup >= 3}


# --------------------------------------------------------------------------- (c) incremental
def _facts(spark, n: int, keys: int, seed: int, first_id: int = 0, time: int = 0,
           diff: int = 1):
    """n records (k, v = row id) with k among `keys` keys."""
    return (spark.range(first_id, first_id + n)
            .select(F.pmod(_hash(seed), F.lit(keys)).alias("k"), F.col("id").alias("v"),
                    F.lit(time).cast("bigint").alias("time"),
                    F.lit(diff).cast("bigint").alias("diff")))


def run_incremental(spark, conf, args, sizes) -> list[dict]:
    from executor import Runner
    from plans import Dataflow

    rows = []
    for n in sizes:
        before = common.persistent_rdd_ids(spark)
        keys = max(1, n // 10)
        facts, _ = cached(_facts(spark, n, keys, args.seed))
        dims, _ = cached(spark.range(keys).select(
            F.col("id").alias("k"), F.floor(F.col("id") / 2).alias("g"),
            F.lit(0).cast("bigint").alias("time"), F.lit(1).cast("bigint").alias("diff")))
        half = args.changes // 2
        inserts = _facts(spark, half, keys, args.seed, first_id=n, time=1)
        deletes = _facts(spark, args.changes - half, keys, args.seed, time=1, diff=-1)
        change, _ = cached(inserts.unionByName(deletes))
        # the collection after the change, for the plain-SQL recomputation
        current, _ = cached(facts.join(deletes.select("v"), "v", "left_anti")
                            .unionByName(inserts).select("k", "v"))

        flow = Dataflow()
        f, d = flow.input("facts", "k BIGINT, v BIGINT"), flow.input("dims", "k BIGINT, g BIGINT")
        flow.output("counts", f.join(d, on=["k"]).count(by=["g"]))
        runner = Runner(flow, conf=conf, spark=spark)
        build = common.measure(f"n={n:,} build (first step)", "",
                               lambda: runner.step({"facts": facts, "dims": dims}, upto=1))
        step = common.measure(f"n={n:,} incremental step ({args.changes} updates)", "",
                              lambda: runner.step({"facts": change}, upto=2))
        plain = {}
        recompute = common.measure(
            f"n={n:,} recompute with Spark SQL", "",
            lambda: plain.__setitem__("rows", _rows(
                current.join(dims.select("k", "g"), "k").groupBy("g").count())), args.repeat)
        ours = _rows(runner.snapshot("counts", 1).where("multiplicity = 1").select("g", "count"))
        if ours != plain["rows"]:
            raise SystemExit(f"(c) n={n}: incremental counts differ from the recomputation")
        stats = runner.stats()
        rows.append({"records": n, "build_s": round(build.best, 3),
                     "incremental_s": round(step.best, 3),
                     "recompute_s": round(recompute.best, 3),
                     "ratio": common.ratio(recompute.best, step.best),
                     "arranged_records": sum(s["records"] for s in stats.values()),
                     "arranged_bytes": sum(s["bytes"] for s in stats.values())})
        for df in (facts, dims, change, current):
            df.unpersist()
        common.release_rdds_since(spark, before)
    return rows


# --------------------------------------------------------------------------- (d) method
KINDS = ("ints", "string", "decimal")  # the column sets (d) arranges


def _updates(spark, n: int, seed: int, kind: str):
    """n updates (k, [s,] v), or (k, p, d) of TPC-H lineitem's kinds (DECIMAL(15, 2), DATE),
    over n/6 keys and 7 values (some repeated: consolidation matters), at time 0 with
    diff 1, materialised."""
    cols = [F.pmod(_hash(seed), F.lit(max(1, n // 6))).alias("k"),
            F.pmod(_hash(seed + 1), F.lit(7)).alias("v")]
    if kind == "string":
        cols.insert(1, F.concat(F.lit("name-"), F.pmod(_hash(seed + 2), F.lit(5000))
                                .cast("string")).alias("s"))
    if kind == "decimal":
        cols[1:] = [(F.pmod(_hash(seed + 1), F.lit(7)) * 1000 + 0.25).cast("decimal(15,2)")
                    .alias("p"),
                    F.date_add(F.lit("1995-01-01").cast("date"),
                               F.pmod(_hash(seed + 2), F.lit(3)).cast("int")).alias("d")]
    df = spark.range(n).select(*cols, F.lit(0).cast("bigint").alias("time"),
                               F.lit(1).cast("bigint").alias("diff"))
    return cached(df)[0]


def _checksum(df) -> tuple:
    """(rows, a hash sum of every row with its diff): equal for equal batches."""
    row = df.select(F.count(F.lit(1)), F.sum(F.xxhash64(*df.columns).cast("decimal(38,0)"))
                    .cast("string")).first()
    return tuple(row)


def run_method(spark, conf, args, sizes) -> list[dict]:
    from executor.arrange import buckets
    from executor.arrange.trace import arrange
    from executor.runtime.config import partitions

    parts = partitions(conf)
    rows = []
    for kind in KINDS:
        for n in sizes:
            before = common.persistent_rdd_ids(spark)
            df = _updates(spark, n, args.seed, kind)
            records = [c for c in df.columns if c not in ("time", "diff")]
            made = {}
            ways = {"kernel": lambda: buckets.arrange(df, ["k"], records, ["time"], parts),
                    "sql": lambda: arrange(df, ["k"], ["time"], parts)}  # size unknown: SQL
            ms = {}
            for way, run in ways.items():
                ms[way] = common.measure(f"n={n:,} {kind} {way}", "",
                                         lambda: made.__setitem__(way, run()), args.repeat)
            same = _checksum(made["kernel"][0]) == _checksum(made["sql"][0])
            if not same:
                raise SystemExit(f"(d) n={n}: the kernel's and the aggregate's batches differ")
            rows.append({"updates": n, "columns": ", ".join(records), "records": made["sql"][1],
                         "kernel_s": round(ms["kernel"].best, 3),
                         "sql_s": round(ms["sql"].best, 3),
                         "sql_over_kernel": common.ratio(ms["sql"].best, ms["kernel"].best),
                         "equal": same})
            df.unpersist()
            common.release_rdds_since(spark, before)
    return rows


def argparse_copy(args, **changes):
    """The parsed arguments with some values replaced (the warm-up's small sizes)."""
    import argparse

    return argparse.Namespace(**{**vars(args), **changes, "repeat": 1})


def save_plot(path: Path, rows: list[dict]) -> Optional[Path]:
    plt = common.pyplot()
    if plt is None:
        return None
    xs = [r["records"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(xs, [r["incremental_s"] for r in rows], "o-", label="diffspark incremental step")
    ax.plot(xs, [r["recompute_s"] for r in rows], "s-", label="Spark SQL recompute")
    for r in rows:
        ax.annotate(f"{r['ratio']}x", (r["records"], r["recompute_s"]),
                    textcoords="offset points", xytext=(0, 6), ha="center")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records in the arranged collection")
    ax.set_ylabel("seconds")
    ax.set_title("join + count: 1,000 updates, incremental vs recompute")
    ax.legend()
    return common.save_figure(fig, path)


def main(argv: Optional[Sequence[str]] = None, spark=None) -> dict:
    args = parse_args(argv)
    ks = [int(k) for k in args.ks.split(",") if k]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    parts = set(args.parts.split(","))
    own_session = spark is None
    spark, conf = common.session(args.profile, args.conf, spark)
    print(f"arrangements benchmark: {args.rows:,} edges, parts {sorted(parts)}, "
          f"master={spark.sparkContext.master}", flush=True)
    payload = {**common.header("arrangements", argv, spark, conf), "rows": args.rows,
               "sharing_rows": args.sharing_rows}
    try:
        with common.phase("warm-up: every part once on a small input"):
            small = argparse_copy(args, sharing_rows=2000, rows=2000)
            run_sharing(spark, conf, small, [1])
            run_attach(spark, conf, small)
            run_incremental(spark, conf, small, [2000])
            if "d" in parts:
                run_method(spark, conf, small, [2000])
        if "a" in parts:
            with common.phase("(a) k queries sharing one arrangement vs each its own"):
                payload[PART_A] = run_sharing(spark, conf, args, ks)
        if "b" in parts:
            with common.phase("(b) attach to a live arrangement vs build from scratch"):
                payload[PART_B] = run_attach(spark, conf, args)
        if "c" in parts:
            with common.phase("(c) incremental step vs Spark SQL recompute"):
                payload[PART_C] = run_incremental(spark, conf, args, sizes)
        if "d" in parts:
            from executor.arrange import buckets

            with common.phase("(d) arranging by the per-bucket kernel vs the SQL aggregate"):
                payload[PART_D] = run_method(spark, conf, args, [
                    int(s) for s in args.arrange_sizes.split(",") if s])
                payload["kernel_rows"] = buckets.KERNEL_ROWS
    finally:
        if own_session:
            spark.stop()
    path = common.results_path("arrangements", args.out)
    if args.png and payload.get(PART_C):
        payload["png"] = str(save_plot(path.with_suffix(".png"), payload[PART_C]))
    common.save_json(path, payload)
    payload["json"] = str(path)
    print(report(payload))
    return payload


def report(payload: dict) -> str:
    out = []
    if PART_A in payload:
        out.append(f"(a) k queries on one shared arrangement of {payload['sharing_rows']:,} "
                   "edges vs each arranging its own")
        out.append(common.markdown_table(
            ["k", "shared first s", "own first s", "own/shared", "shared step s", "own step s",
             "shared records", "own records", "shared MiB", "own MiB"],
            [[r["k"], r["shared_first_s"], r["own_first_s"], f"{r['speedup_first']}x",
              r["shared_step_s"], r["own_step_s"], r["shared_arranged_records"],
              r["own_arranged_records"], round(r["shared_arranged_bytes"] / 2**20, 1),
              round(r["own_arranged_bytes"] / 2**20, 1)] for r in payload[PART_A]]))
    if PART_B in payload:
        b = payload[PART_B]
        out.append(f"(b) 2-hop query on {b['edges']:,} edges, {b['roots']} roots "
                   f"({b['two_hop_rows']:,} rows)")
        out.append(common.markdown_table(
            ["variant", "s", "speedup"],
            [["attached to the live arrangement", b["attached_s"], f"{b['speedup']}x"],
             ["built from scratch", b["scratch_s"], ""]]))
    if PART_C in payload:
        out.append("(c) 1,000-update step vs Spark SQL recompute of join + count")
        out.append(common.markdown_table(
            ["records", "build s", "incremental s", "recompute s", "recompute/incremental"],
            [[r["records"], r["build_s"], r["incremental_s"], r["recompute_s"],
              f"{r['ratio']}x"] for r in payload[PART_C]]))
    if PART_D in payload:
        out.append("(d) arranging one batch on Spark: the per-bucket kernel vs the SQL "
                   f"aggregate (the kernel is chosen from {payload['kernel_rows']:,} updates)")
        out.append(common.markdown_table(
            ["updates", "columns", "records", "kernel s", "SQL s", "SQL/kernel", "equal"],
            [[r["updates"], r["columns"], r["records"], r["kernel_s"], r["sql_s"],
              f"{r['sql_over_kernel']}x", "yes" if r["equal"] else "no"]
             for r in payload[PART_D]]))
    return "\n\n".join(out)


if __name__ == "__main__":
    main()
