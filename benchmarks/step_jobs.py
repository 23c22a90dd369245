"""Spark jobs per step of small steps: each job costs scheduling time whatever its size, so
a small step's latency is mostly its job count (DESIGN.md section 11).

The triangle dataflow over an R-MAT graph loaded at time 0, then batches of changes (half
deletions, as Arrow tables), a keyed count, and a temporal filter fed 3 rows a step (its
updates held for later times), each with small steps on the driver (executor/driver.py) and
with every step on Spark; per step: the number of Spark jobs (from the status tracker), the
seconds and the path; for the last step, each job's call site.

    PYTHONPATH=. .venv/bin/python benchmarks/step_jobs.py --rows 5000 --batches 4
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.rmat import rmat_edges  # noqa: E402

def parse_args(argv):
    p = common.base_parser(__doc__, default_rows=5000)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def batches(rows: int, count: int, size: int, seed: int) -> list[list[tuple]]:
    """The graph at time 0, then `count` batches of `size` changes (half deletions)."""
    src, dst = rmat_edges(rows, seed)
    rng = np.random.default_rng(seed)
    present = sorted(zip(src.tolist(), dst.tolist()))
    nodes = int(max(src.max(), dst.max())) + 1
    out = [[(a, b, 0, 1) for a, b in present]]
    for t in range(1, count + 1):
        gone = [present[i] for i in rng.choice(len(present), size // 2, replace=False)]
        new = {tuple(sorted(int(v) for v in rng.integers(0, nodes, 2))) for _ in range(size // 2)}
        new = sorted(e for e in new - set(present) if e[0] != e[1])
        present = sorted((set(present) - set(gone)) | set(new))
        out.append([(a, b, t, -1) for a, b in gone] + [(a, b, t, 1) for a, b in new])
    return out


def windows(count: int) -> list[list[tuple]]:
    """3 rows a step: records present from `src` to `dst` (one retracted), so each step
    emits some updates and holds others for later steps."""
    return [[(t, t + 2, t, 1), (t + 1, t + 5, t, 1), (t, t + 3, t, -1)] for t in range(count + 1)]


def run(spark, conf, flow, name: str, feeds: list[list[tuple]]) -> dict:
    """Jobs and seconds of each step; the last step's jobs by call site."""
    from executor.runner import Runner

    from executor.apps.triangles import change_table

    runner = Runner(flow, conf=conf, spark=spark)
    tracker = spark.sparkContext.statusTracker()
    steps, sites = [], []
    for t, rows in enumerate(feeds):
        before = set(tracker.getJobIdsForGroup(None))
        result = runner.step({name: change_table(rows)}, upto=t + 1)
        new = sorted(set(tracker.getJobIdsForGroup(None)) - before)
        steps.append({"jobs": len(new), "seconds": round(result.seconds, 3),
                      "host": result.host})
        sites = [_site(tracker, j) for j in new]
    return {"steps": steps, "last_step_jobs": sites}


def _site(tracker, job: int) -> str:
    info = tracker.getJobInfo(job)
    stages = [tracker.getStageInfo(s) for s in info.stageIds] if info else []
    names = [s.name for s in stages if s is not None]
    return names[-1] if names else "?"


def main(argv: Optional[Sequence[str]] = None, spark=None) -> dict:
    from executor.apps.triangles import NAME, triangle_flow
    from plans import Dataflow

    args = parse_args(argv)
    own_session = spark is None
    spark, conf = common.session(args.profile, args.conf, spark)
    feeds = batches(args.rows, args.batches, args.batch_size, args.seed)
    counting = Dataflow()
    counting.output("per_src", counting.input("e", "src BIGINT, dst BIGINT").count(by=["src"]))
    window = Dataflow()
    window.output("live", window.input("e", "src BIGINT, dst BIGINT").temporal_filter(
        lower="src", upper="dst"))
    payload = common.header("step_jobs", argv, spark, conf)
    spark_only = conf | {"diffspark.host.step_rows": "0"}
    parts = {"triangles": (conf, triangle_flow(), NAME, feeds),
             "count": (conf, counting, "e", feeds),
             "temporal filter": (conf, window, "e", windows(args.batches)),
             "triangles on spark": (spark_only, triangle_flow(), NAME, feeds),
             "count on spark": (spark_only, counting, "e", feeds),
             "temporal filter on spark": (spark_only, window, "e", windows(args.batches))}
    try:
        for part, (c, flow, name, steps) in parts.items():
            payload[part] = run(spark, c, flow, name, steps)
    finally:
        if own_session:
            spark.stop()
    common.save_json(common.results_path("step_jobs", args.out), payload)
    print(report(payload))
    return payload


def report(payload: dict) -> str:
    """Spark jobs and seconds per step of each part (the first step is the load), from the
    saved JSON."""
    parts = [k for k in ("triangles", "count", "temporal filter", "triangles on spark",
                         "count on spark", "temporal filter on spark") if k in payload]
    return common.markdown_table(
        ["part", "Spark jobs per step", "seconds per step", "on the driver"],
        [[part, ", ".join(str(s["jobs"]) for s in payload[part]["steps"]),
          ", ".join(f"{s['seconds']:.3f}" for s in payload[part]["steps"]),
          ", ".join({True: "yes", False: "no"}.get(s.get("host"), "?")
                    for s in payload[part]["steps"])]
         for part in parts])


if __name__ == "__main__":
    main()
