"""Optimizer benchmark (issue 6): the same dataflows run as written (`optimize=False`) and as
the e-graph optimizer rewrites them, in the same session:

(a) a chain of 10 linear operators (fusion: one Spark projection instead of ten);
(b) 4 outputs that arrange one filtered input, written four ways (a consolidate, a filter
    above a join, a filter on an arrangement): sharing and pushdown make it one arrangement;
(c) triangles written as the naive binary self-join `join(join(g1, g2), g3)`: the optimizer
    derives the delta-query plan (one rule per atom, no intermediate join arranged).

Per variant: the optimizer's own time, the first step (loading the input), one incremental
step of `--changes` updates (half deletions), the shuffle bytes written by those steps (from
Spark's status store) and the records kept in arrangements. Both variants must give the same
output. Inputs are generated in Spark, cached and counted before timing; each part runs once
at a small size first as a warm-up.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.arrangements import cached, edges  # noqa: E402

EDGES = "src BIGINT, dst BIGINT"
PARTS = ("chain", "shared", "triangles")


def parse_args(argv):
    p = common.base_parser(__doc__, default_rows=200_000)
    p.add_argument("--edges", type=int, default=3_000, help="graph edges for (c)")
    p.add_argument("--changes", type=int, default=200, help="updates per incremental step")
    p.add_argument("--parts", default=",".join(PARTS), help="which parts to run")
    p.add_argument("--warmup-rows", type=int, default=2_000)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


# --------------------------------------------------------------------------- dataflows
def chain_flow():
    from plans import Dataflow
    flow = Dataflow()
    c = flow.input("e", EDGES)
    for i in range(10):
        c = c.filter(f"src % 7 != {i % 7}") if i % 2 else c.map("src", f"dst + {i} AS dst")
    flow.output("chain", c)
    return flow


def shared_flow():
    from plans import Dataflow
    flow = Dataflow()
    e, w = flow.input("e", EDGES), flow.input("w", EDGES)
    live = "dst % 3 != 0"
    flow.output("count", e.filter(live).count(by=["src"]))
    flow.output("sum", e.filter(live).consolidate().sum("dst", by=["src"]))
    flow.output("join", e.join(w.map("src", "dst AS weight"), on=["src"]).filter(live))
    flow.output("max", e.arrange_by_key("src").filter(live).max("dst", by=["src"]))
    return flow


def triangle_flow():
    from plans import Dataflow
    flow = Dataflow()
    g = flow.input("g", EDGES)
    a, b = g.map("src AS x", "dst AS y"), g.map("src AS y", "dst AS z")
    c = g.map("src AS x", "dst AS z")
    flow.output("triangles", a.join(b, on=["y"]).join(c, on=["x", "z"]).count())
    return flow


# --------------------------------------------------------------------------- measuring
def shuffle_bytes(spark) -> int:
    """Shuffle bytes written so far by every executor (Spark's status store, UI or not)."""
    executors = spark.sparkContext._jsc.sc().statusStore().executorList(False)
    return sum(int(executors.apply(i).totalShuffleWrite()) for i in range(executors.size()))


def run_variant(spark, conf, flow, feeds, optimize: bool) -> dict:
    """Build a Runner, run the first step and one incremental step; what each cost."""
    from executor import Runner
    from plans.optimizer import _optimize

    started = time.perf_counter()
    if optimize:  # uncached: the optimizer's own time
        _optimize(dict(flow.outputs), ("pushdown", "sharing", "fusion", "incremental"))
    optimizer_s = time.perf_counter() - started
    runner = Runner(flow, conf=conf, spark=spark, optimize=optimize)
    before = shuffle_bytes(spark)
    first = common.measure("first", "", lambda: runner.step(feeds[0], upto=1), verbose=False)
    step = common.measure("step", "", lambda: runner.step(feeds[1], upto=2), verbose=False)
    stats = runner.stats().values()
    outputs = {n: sorted(tuple(r) for r in runner.output(n).collect()) for n in runner.plan}
    return {"optimizer_s": round(optimizer_s, 3), "first_s": round(first.best, 3),
            "step_s": round(step.best, 3), "shuffle_bytes": shuffle_bytes(spark) - before,
            "state_records": sum(s["records"] for s in stats),
            "arrangements": len(stats), "outputs": outputs,
            "operators": len(__import__("plans").ir.topological(list(runner.plan.values())))}


def inputs(spark, part: str, n: int, changes: int, seed: int) -> list[dict]:
    """[first step's feeds, incremental step's feeds] of a part, cached and counted."""
    nodes = max(4, n // 8) if part != "triangles" else max(4, int(n ** 0.5) * 2)
    base, _ = cached(edges(spark, n, nodes, seed))
    adds, _ = cached(edges(spark, changes // 2, nodes, seed, first_id=n, time=1))
    dels, _ = cached(edges(spark, changes - changes // 2, nodes, seed, time=1, diff=-1))
    change, _ = cached(adds.unionByName(dels))
    if part == "triangles":
        return [{"g": base}, {"g": change}]
    if part == "shared":
        w, _ = cached(edges(spark, n // 4, nodes, seed + 5))
        return [{"e": base, "w": w}, {"e": change}]
    return [{"e": base}, {"e": change}]


def run_part(spark, conf, part: str, n: int, changes: int, seed: int) -> dict:
    flow = {"chain": chain_flow, "shared": shared_flow, "triangles": triangle_flow}[part]()
    feeds = inputs(spark, part, n, changes, seed)
    got = {v: run_variant(spark, conf, flow, feeds, v == "optimized")
           for v in ("written", "optimized")}
    equal = got["written"].pop("outputs") == got["optimized"].pop("outputs")
    if not equal:
        raise SystemExit(f"({part}): written and optimized outputs differ")
    return {"part": part, "records": n, **{f"{v}_{k}": x for v in got for k, x in got[v].items()},
            "first_speedup": common.ratio(got["written"]["first_s"], got["optimized"]["first_s"]),
            "step_speedup": common.ratio(got["written"]["step_s"], got["optimized"]["step_s"]),
            "equal": equal}


def table(rows: list[dict]) -> str:
    body = []
    for r in rows:
        for v in ("written", "optimized"):
            body.append([r["part"], r["records"], v, r[f"{v}_operators"], r[f"{v}_first_s"],
                         r[f"{v}_step_s"], round(r[f"{v}_shuffle_bytes"] / 2**20, 2),
                         r[f"{v}_state_records"], r[f"{v}_optimizer_s"]])
        body.append([r["part"], "", "written/optimized", "", f"{r['first_speedup']}x",
                     f"{r['step_speedup']}x", "", "", ""])
    return common.markdown_table(["part", "records", "plan", "operators", "first s", "step s",
                                  "shuffle MiB", "state records", "optimizer s"], body)


def main(argv: Optional[Sequence[str]] = None, spark=None) -> dict:
    args = parse_args(argv)
    spark, conf = common.session(args.profile, args.conf, spark)
    head = common.header("optimizer", argv, spark, conf)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"unknown parts {unknown}; known: {', '.join(PARTS)}")
    size = {p: args.edges if p == "triangles" else args.rows for p in parts}
    with common.phase("warm-up"):
        for p in parts:
            run_part(spark, conf, p, min(args.warmup_rows, size[p]), 20, args.seed + 1)
    rows = []
    for p in parts:
        with common.phase(f"({p}) {size[p]:,} records"):
            rows.append(run_part(spark, conf, p, size[p], args.changes, args.seed))
    text = table(rows)
    print(text)
    payload = {**head, "rows": rows, "changes": args.changes, "table": text,
               "note": "the CPU is shared with other work: times are noisy"}
    path = common.save_json(common.results_path("optimizer", args.out), payload)
    print(f"wrote {path}")
    return payload


def report(payload: dict) -> str:
    """The saved table (what the run printed) from the JSON."""
    return table(payload["rows"])


if __name__ == "__main__":
    main()
