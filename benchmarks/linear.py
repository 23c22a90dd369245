"""Linear operators on Spark: fused vs unfused, SQL expressions vs array kernels, and
consolidation by Spark SQL aggregate vs by per-partition kernel (DESIGN.md sections 6, 7, 11).

    PYTHONPATH=. .venv/bin/python benchmarks/linear.py [--rows 10000000] [--repeat 1]
        [--conf key=value ...] [--skip ROW ...] [--warmup-rows N] [--no-check]
        [--out PATH] [--png]

Input (generated in Spark, cached and counted before anything is timed): N update triples
with records (user, lo, hi, w) BIGINT, `time` in [0, 100) and `diff` = +-1 (one in four -1),
all derived from xxhash64 of the row id, so the data does not depend on the partitioning.
user in [0, 1_000_000), lo in [0, 100), hi a duration in [-10, 50), w in 1..3. The input has
P = diffspark.partitions partitions (the runner's partition count).

The chain: five linear operators, each an instance of join_function (DESIGN section 6):

    1. filter          user % 10 <> 0                              (keeps ~90%)
    2. map             user, lo, lo + hi AS hi, w                  (hi becomes an end time)
    3. flat_map        two elements: (user, lo, hi, w) and (user DIV 16, lo + 1, hi, w)
    4. explode         one element (user, lo, hi) with diff w      (diff *= w)
    5. temporal_filter lower = lo, upper = hi                      (present in [lo, hi):
                       +1 at max(time, lo), -1 at max(time, hi); none when hi <= lo)

About 3N output updates (columns user, lo, hi, time, diff). The same logic is written twice:
as plan IR expression stages (Filter, Map, FlatMap, Explode, TemporalFilter) and as five
plans.ir.Kernel stages (fn(xp, cols) array kernels, executor/operators/linear/kernels.py contract). Both are
run by executor.operators.linear.spark.apply and give the same updates (checked, see "Checks").

Every row of the table is one Spark action per repeat that forces the full result into the
`noop` sink (computes every row and column, writes nothing), timed on the wall clock:

  expr_fused          linear.apply(input, all 5 expression stages): Catalyst plans the chain
                      as one pipeline (one job, one Spark stage, no shuffle, no Python);
                      physical_plans in the JSON counts the whole-stage codegen pipelines.
  expr_unfused_mat    operator at a time, as an engine without fusion runs them: each stage
                      applied alone and its output materialised (executor.arrange.spine.materialise =
                      localCheckpoint) before the next; the last one is forced with noop.
                      Five jobs, four materialised intermediates. (Applying the stages one
                      by one WITHOUT materialising is not a row: Catalyst re-fuses them into
                      the same plan as expr_fused.)
  kernel_fused        the 5 kernel stages in one mapInArrow: one Arrow round trip per batch.
  kernel_unfused      the 5 kernel stages applied one by one, not materialised: 5 chained
                      mapInArrow operators in one job, so 5 Arrow round trips per batch. The
                      difference to kernel_fused is the cost of the extra round trips.
  kernel_unfused_mat  as kernel_unfused, with each intermediate materialised like
                      expr_unfused_mat (five jobs).
  consolidate_sql     executor.arrange.consolidate.consolidate (groupBy(record, time).sum(diff),
                      drop zeros: partial aggregation, shuffle, final aggregation).
  consolidate_kernel  executor.arrange.consolidate.consolidate_by_kernel: repartition(P, record,
                      time), then the arrangement's bucket kernel (executor/arrange/buckets.py:
                      sort, segment sums) per partition in one mapInArrow over the whole
                      partition.

Both consolidations run on a second input: N update triples of the same shape, diff +1 or -1
with equal odds, whose (record, time) is drawn from about N/10 distinct values (~10 updates
per distinct (record, time); about one in seven of those sums to zero and is dropped).

Ratios: unfused/fused per path (the goal: fused >= 3x faster than unfused), kernel/expression
(fused), SQL/kernel consolidation; "faster consolidation" names the winner on this machine.

Checks (untimed): a warm-up on a small slice (min(N, 20000) rows) runs every row once first
(JIT, Python workers) and checks that all five chain variants give the same updates and both
consolidations the same result. At full size, expr_fused vs kernel_fused and the two
consolidations are checked again (--no-check skips those two full-size jobs each). A check
compares row count, sum(diff) and sum(diff * h(record, time)) for a hash h: equal multisets
of updates give equal values.

Memory: peak memory (PSS) of the Spark JVM and of the Python processes (this one and the
kernel workers), sampled every 0.5 s while a row runs (a JVM keeps the heap it has grown).
"""
from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # run as a script: import the repository, not benchmarks/ siblings
    if sys.path and Path(sys.path[0] or ".").resolve() == _ROOT / "benchmarks":
        sys.path[0] = str(_ROOT)
    elif str(_ROOT) not in sys.path:
        sys.path.insert(0, str(_ROOT))

from typing import Optional, Sequence  # noqa: E402

from benchmarks import common  # noqa: E402

NAME = "linear"
DEFAULT_ROWS = 10_000_000
TIME_COLS = ["time"]
USERS = 1_000_000
DUP_FACTOR = 10  # consolidation input: ~N/DUP_FACTOR distinct (record, time) values
WARMUP_ROWS = 20_000
GOAL = 3.0  # fused should be at least this many times faster than unfused

RECORD = "user BIGINT, lo BIGINT, hi BIGINT, w BIGINT"
ROWS = {
    "expr_fused": "expression, fused (1 pipeline)",
    "expr_unfused_mat": "expression, unfused (materialised per operator)",
    "kernel_fused": "kernel, fused (1 mapInArrow)",
    "kernel_unfused": "kernel, unfused (5 mapInArrow, not materialised)",
    "kernel_unfused_mat": "kernel, unfused (materialised per operator)",
    "consolidate_sql": "consolidate: Spark SQL aggregate",
    "consolidate_kernel": "consolidate: repartition + per-partition kernel",
}


# --------------------------------------------------------------------------- the chain
def expression_stages():
    from plans import ir

    return (
        ir.Filter("user % 10 <> 0"),
        ir.Map(("user", "lo", "lo + hi AS hi", "w")),
        ir.FlatMap("array(named_struct('user', user, 'lo', lo, 'hi', hi, 'w', w), "
                   "named_struct('user', user DIV 16, 'lo', lo + 1, 'hi', hi, 'w', w))"),
        ir.Explode("array(named_struct('user', user, 'lo', lo, 'hi', hi, 'diff', w))"),
        ir.TemporalFilter(lower="lo", upper="hi"),
    )


# The same five operators as array kernels (user >= 0, so % and // agree with Spark's).
def filter_kernel(xp, cols):
    keep = xp.nonzero(cols["user"] % 10 != 0)[0]
    return {"parent": keep, **{k: xp.take(v, keep) for k, v in cols.items()}}


def map_kernel(xp, cols):
    return {"user": cols["user"], "lo": cols["lo"], "hi": cols["lo"] + cols["hi"],
            "w": cols["w"]}


def flat_map_kernel(xp, cols):
    n = cols["user"].shape[0]
    rows = xp.arange(n, dtype=xp.int64)
    return {"parent": xp.concat([rows, rows]),
            "user": xp.concat([cols["user"], cols["user"] // 16]),
            "lo": xp.concat([cols["lo"], cols["lo"] + 1]),
            "hi": xp.concat([cols["hi"], cols["hi"]]),
            "w": xp.concat([cols["w"], cols["w"]])}


def explode_kernel(xp, cols):
    return {"user": cols["user"], "lo": cols["lo"], "hi": cols["hi"], "diff": cols["w"]}


def temporal_filter_kernel(xp, cols):
    live = xp.nonzero(cols["hi"] > cols["lo"])[0]
    lo, hi = xp.take(cols["lo"], live), xp.take(cols["hi"], live)
    user = xp.take(cols["user"], live)
    ones = xp.ones(live.shape[0], dtype=xp.int64)
    return {"parent": xp.concat([live, live]), "user": xp.concat([user, user]),
            "lo": xp.concat([lo, lo]), "hi": xp.concat([hi, hi]),
            "time": xp.concat([lo, hi]), "diff": xp.concat([ones, -ones])}


def kernel_stages():
    from plans import ir

    out3 = "user BIGINT, lo BIGINT, hi BIGINT"
    return (
        ir.Kernel(filter_kernel, RECORD),
        ir.Kernel(map_kernel, RECORD),
        ir.Kernel(flat_map_kernel, RECORD),
        ir.Kernel(explode_kernel, out3),
        ir.Kernel(temporal_filter_kernel, out3),
    )


# --------------------------------------------------------------------------- inputs
def chain_input(spark, rows: int, partitions: int):
    h = "xxhash64(id, {})"
    return spark.range(0, rows, 1, partitions).selectExpr(
        f"pmod({h.format(1)}, {USERS}) AS user",
        f"pmod({h.format(2)}, 100) AS lo",
        f"pmod({h.format(3)}, 60) - 10 AS hi",
        f"1 + pmod({h.format(4)}, 3) AS w",
        f"pmod({h.format(5)}, 100) AS time",
        f"IF(pmod({h.format(6)}, 4) = 0, -1L, 1L) AS diff")


def duplicates_input(spark, rows: int, partitions: int):
    """Like chain_input, but (record, time) is a function of k, one of ~rows/10 values."""
    distinct = max(1, rows // DUP_FACTOR)
    h = "xxhash64(k, {})"
    return (spark.range(0, rows, 1, partitions)
            .selectExpr(f"pmod(xxhash64(id, 11), {distinct}) AS k",
                        "IF(pmod(xxhash64(id, 16), 2) = 0, -1L, 1L) AS diff")
            .selectExpr(f"pmod({h.format(12)}, {USERS}) AS user",
                        f"pmod({h.format(13)}, 100) AS lo",
                        f"pmod({h.format(14)}, 60) - 10 AS hi",
                        f"1 + pmod({h.format(15)}, 3) AS w",
                        f"pmod({h.format(17)}, 100) AS time",
                        "diff"))


def cached(df):
    df = df.cache()
    n = df.count()
    return df, n


# --------------------------------------------------------------------------- variants
def variants(backend: str, partitions: int) -> dict:
    """Row name -> function(input DataFrame, keep) -> DataFrame to force. `keep` collects
    materialised intermediates (nothing to do: they are released by RDD id afterwards)."""
    from executor.arrange.consolidate import consolidate, consolidate_by_kernel
    from executor.arrange.spine import materialise
    from executor.operators.linear import spark as linear

    expr, kern = expression_stages(), kernel_stages()

    def one_by_one(stages, materialised):
        def build(df):
            for i, stage in enumerate(stages):
                df = linear.apply(df, (stage,), TIME_COLS, backend)
                if materialised and i < len(stages) - 1:
                    df = materialise(df)
            return df
        return build

    return {
        "expr_fused": lambda df: linear.apply(df, expr, TIME_COLS, backend),
        "expr_unfused_mat": one_by_one(expr, True),
        "kernel_fused": lambda df: linear.apply(df, kern, TIME_COLS, backend),
        "kernel_unfused": one_by_one(kern, False),
        "kernel_unfused_mat": one_by_one(kern, True),
        "consolidate_sql": lambda df: consolidate(df, TIME_COLS),
        "consolidate_kernel": lambda df: consolidate_by_kernel(df, TIME_COLS, partitions,
                                                               backend),
    }


CHAIN = ("expr_fused", "expr_unfused_mat", "kernel_fused", "kernel_unfused",
         "kernel_unfused_mat")
CONSOLIDATION = ("consolidate_sql", "consolidate_kernel")


def checksum(df) -> dict:
    """(rows, sum diff, sum diff * h(record, time)): equal update multisets, equal sums."""
    from pyspark.sql import functions as F

    cols = [F.col(f"`{c}`") for c in df.columns if c != "diff"]
    h = F.pmod(F.xxhash64(*cols), F.lit(1_000_003))
    row = df.agg(F.count(F.lit(1)).alias("rows"), F.sum("diff").alias("sum_diff"),
                 F.sum(F.col("diff") * h).alias("sum_hash")).collect()[0]
    return {k: int(row[k] or 0) for k in ("rows", "sum_diff", "sum_hash")}


def check_equal(label: str, sums: dict) -> dict:
    """The check's record; a disagreement is printed here and fails main() after the JSON
    is written (timings of variants that compute different things compare nothing)."""
    first = next(iter(sums.values()))
    equal = all(v == first for v in sums.values())
    if not equal:
        print(f"CHECK FAILED: {label}: variants disagree: {sums}", flush=True)
    return {"results": sums, "equal": equal}


# --------------------------------------------------------------------------- main
def parse_args(argv):
    head, _, rest = __doc__.partition("\n\n")
    p = common.base_parser(head, DEFAULT_ROWS)
    p.epilog = rest
    p.add_argument("--skip", action="append", default=[], choices=list(ROWS), metavar="ROW",
                   help=f"leave a row out (repeatable): {', '.join(ROWS)}")
    p.add_argument("--warmup-rows", type=int, default=WARMUP_ROWS,
                   help=f"rows of the untimed warm-up and check slice (default {WARMUP_ROWS:_})")
    p.add_argument("--no-check", action="store_true",
                   help="skip the full-size result checks (the warm-up checks still run)")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None, spark=None) -> dict:
    """Run the benchmark; returns the JSON payload (also written to --out)."""
    from executor.runtime.config import kernel_backend, partitions as partition_count

    args = parse_args(argv)
    if args.rows < 1 or args.repeat < 1:
        raise SystemExit("--rows and --repeat must be positive")
    own_session = spark is None
    spark, conf = common.session(args.profile, args.conf, spark)
    backend, parts = kernel_backend(conf), partition_count(conf)
    build = variants(backend, parts)
    wanted = [r for r in ROWS if r not in args.skip]
    print(f"linear benchmark: {args.rows:,} updates, P={parts}, backend={backend}, "
          f"master={spark.sparkContext.master}, repeat={args.repeat}", flush=True)
    head = common.header(NAME, argv, spark, conf)
    try:
        results = _run(spark, args, build, wanted, parts)
    finally:
        if own_session:
            spark.stop()
    head["machine"]["load_average_end"] = common.load_average()
    payload = _report(args, head, backend, parts, results)
    failed = [k for k, c in payload["checks"].items() if not c["equal"]]
    if failed:
        raise SystemExit(f"linear benchmark: results differ between variants ({failed}); "
                         f"see {payload['json']}")
    return payload


def _run(spark, args, build, wanted, parts) -> dict:
    chain_rows = [r for r in wanted if r in CHAIN]
    cons_rows = [r for r in wanted if r in CONSOLIDATION]
    out = {"measurements": {}, "checks": {}, "plans": {}, "inputs": {}}

    # warm-up on a small slice: every row once, all results compared
    with common.phase("warm-up and checks on a small slice"):
        small = max(1, min(args.rows, args.warmup_rows))
        for rows, make, names in ((chain_rows, chain_input, "chain"),
                                  (cons_rows, duplicates_input, "consolidation")):
            if not rows:
                continue
            before = common.persistent_rdd_ids(spark)
            df, _ = cached(make(spark, small, parts))
            sums = {}
            for r in rows:
                result = build[r](df)
                out["plans"][r] = common.plan_summary(result)
                common.force(result)
                sums[r] = checksum(result)
            out["checks"][f"warmup_{names}"] = {"rows": small,
                                                **check_equal(f"warm-up {names}", sums)}
            df.unpersist()
            common.release_rdds_since(spark, before)

    def timed(rows, df, rows_in):
        for r in rows:
            before = common.persistent_rdd_ids(spark)
            m = common.measure(r, ROWS[r], lambda: common.force(build[r](df)), args.repeat,
                               cleanup=lambda: common.release_rdds_since(spark, before))
            m.extra["rows_in"] = rows_in
            out["measurements"][r] = m

    def full_check(label, pair, df):
        pair = [r for r in pair if r in wanted]
        if args.no_check or len(pair) < 2:
            return
        with common.phase(f"check {' = '.join(pair)}"):
            before = common.persistent_rdd_ids(spark)
            sums = {r: checksum(build[r](df)) for r in pair}
            common.release_rdds_since(spark, before)
            out["checks"][label] = {"rows": args.rows, **check_equal(label, sums)}
            for r in pair:
                out["measurements"][r].extra["rows_out"] = sums[r]["rows"]

    if chain_rows:
        with common.phase("generate and cache the chain input"):
            df, n = cached(chain_input(spark, args.rows, parts))
        out["inputs"]["chain"] = n
        timed(chain_rows, df, n)
        full_check("chain", ("expr_fused", "kernel_fused"), df)
        df.unpersist()

    if cons_rows:
        with common.phase("generate and cache the consolidation input"):
            df, n = cached(duplicates_input(spark, args.rows, parts))
        out["inputs"]["consolidation"] = n
        timed(cons_rows, df, n)
        full_check("consolidation", CONSOLIDATION, df)
        df.unpersist()
    return out


BASELINE = {"expr_unfused_mat": "expr_fused", "kernel_unfused": "kernel_fused",
            "kernel_unfused_mat": "kernel_fused", "consolidate_kernel": "consolidate_sql"}


def report(payload: dict) -> str:
    """The table of every row (best seconds, throughput, each row against its baseline), the
    ratios and the goals, from the saved JSON."""
    ms = payload["measurements"]
    best = {r: m["best_s"] for r, m in ms.items()}
    table = []
    for r, m in ms.items():
        base = BASELINE.get(r)
        vs = f"{common.ratio(m['best_s'], best[base]):.2f}x {base}" if base in best else ""
        table.append([r, m["description"], m["best_s"], m["extra"].get("rows_in"),
                      m["extra"].get("rows_out"),
                      round(m["extra"]["rows_in"] / m["best_s"] / 1e6, 2),
                      vs, m["memory"].get("peak_jvm_mib"), m["memory"].get("peak_python_mib")])
    machine = payload["machine"]
    lines = [f"{payload['rows']:,} updates (best of {payload['repeat']}); nproc "
             f"{machine['nproc']}, load average {machine['load_average']} at start, "
             f"{machine.get('load_average_end')} at end",
             common.markdown_table(["row", "what", "best s", "rows in", "rows out", "M rows/s",
                                    "vs", "JVM MiB", "Python MiB"], table),
             "(rows out: where checked at full size; 'vs': best time over the baseline's)"]
    facts = [f"{k}: {v:.2f}" for k, v in payload["ratios"].items() if v is not None]
    facts += [f"goal fused >= {GOAL:g}x faster than unfused, {path} path: "
              f"{'met' if ok else 'NOT met'}"
              for path, ok in payload["goal_fused_at_least_3x_unfused"].items() if ok is not None]
    if payload.get("faster_consolidation"):
        facts.append(f"faster consolidation: {payload['faster_consolidation']}")
    return "\n\n".join(lines + ["\n".join(f"- {f}" for f in facts)])


def _report(args, head, backend, parts, results) -> dict:
    ms = results["measurements"]
    best = {r: m.best for r, m in ms.items()}

    def r_(a, b):
        return common.ratio(best[a], best[b]) if a in best and b in best else None

    ratios = {
        "expression_unfused_over_fused": r_("expr_unfused_mat", "expr_fused"),
        "kernel_unfused_over_fused": r_("kernel_unfused", "kernel_fused"),
        "kernel_unfused_mat_over_fused": r_("kernel_unfused_mat", "kernel_fused"),
        "kernel_over_expression_fused": r_("kernel_fused", "expr_fused"),
        "kernel_over_expression_unfused_mat": r_("kernel_unfused_mat", "expr_unfused_mat"),
        "consolidation_sql_over_kernel": r_("consolidate_sql", "consolidate_kernel"),
    }
    goals = {path: (None if ratios[key] is None else ratios[key] >= GOAL)
             for path, key in (("expression", "expression_unfused_over_fused"),
                               ("kernel", "kernel_unfused_over_fused"))}
    faster = None
    if ratios["consolidation_sql_over_kernel"] is not None:
        faster = "kernel" if ratios["consolidation_sql_over_kernel"] > 1 else "sql"

    payload = {
        **head,
        "rows": args.rows,
        "repeat": args.repeat,
        "partitions": parts,
        "backend": backend,
        "overrides": list(args.conf),
        "inputs": results["inputs"],
        "measurements": {r: m.as_dict() for r, m in ms.items()},
        "physical_plans": results["plans"],
        "physical_plans_note": "operator name counts in the executed plan of the forced "
                               "DataFrame (warm-up slice); for *_mat rows, of the last "
                               "operator over the materialised intermediate",
        "ratios": ratios,
        "goal_fused_at_least_3x_unfused": goals,
        "faster_consolidation": faster,
        "checks": results["checks"],
    }
    print()
    print(report(payload))
    path = common.results_path(NAME, args.out)
    payload["json"] = str(path)
    if args.png and ms:
        png = common.save_png(path.with_suffix(".png"), list(ms), [best[r] for r in ms],
                              f"linear operators, {args.rows:,} updates (seconds, best)")
        if png:
            payload["png"] = str(png)
            print(f"wrote {png}")
    common.save_json(path, payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
