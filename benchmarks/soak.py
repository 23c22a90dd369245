"""Soak: many small steps through a join, a reduction and an iteration (plans/examples/
soak.py), fed as files to an in-process `follow` (executor/apps/follow.py) with a durable
state, recording per step its metrics record (executor/apps/metrics.py: seconds, lag,
trace records and bytes, driver RSS), the JVM's heap in use and the placement (a step on
the driver has no Spark lineage; a Spark step's traces are checkpointed, so lineage depth
stays bounded either way: recorded as the placement). A line fitted to each series over the
steps after the warm-up must not rise by more than the tolerance across the run.

    python benchmarks/soak.py [--steps 1000] [--changes 100] [--png]

Writes benchmarks/results/soak.json (+ soak.png with --png). Inputs change with bounded
live sets (inserts balanced by retractions once full), so a flat trend is the right answer.
"""
from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402

PLAN = common.ROOT / "plans" / "examples" / "soak.py"
SCHEMAS = {"orders": ("user", "item"), "prices": ("item", "price"), "edges": ("src", "dst")}
SHARES = {"orders": 0.6, "prices": 0.1, "edges": 0.3}
LIVE = {"orders": 2000, "prices": 200, "edges": 1500}  # live rows kept at most


class Changes:
    """Step files: step 0 loads every input's live set (LIVE rows), every later step has
    `changes` updates, half inserts, half retractions of live rows (multiplicities never
    negative), so the live sets keep their size."""

    def __init__(self, changes: int, seed: int):
        self.rng, self.changes = random.Random(seed), changes
        self.live = {name: [] for name in SCHEMAS}

    def step(self, t: int) -> dict[str, pa.Table]:
        out = {}
        for name, share in SHARES.items():
            live = self.live[name]
            n = LIVE[name] if t == 0 else max(2, int(self.changes * share))
            rows = [live.pop(self.rng.randrange(len(live))) + (t, -1)
                    for _ in range(0 if t == 0 else n // 2)]
            while len(rows) < n:
                live.append(self._row(name))
                rows.append(live[-1] + (t, 1))
            columns = list(zip(*rows))
            out[name] = pa.table({c: pa.array(v, pa.int64()) for c, v in
                                  zip(SCHEMAS[name] + ("time", "diff"), columns)})
        return out

    def _row(self, name: str) -> tuple:
        r = self.rng.randrange
        return {"orders": lambda: (r(1000), r(200)), "prices": lambda: (r(200), r(1, 100)),
                "edges": lambda: (r(1000), r(1000))}[name]()


def soak(spark, conf: dict, steps: int, changes: int, seed: int = 7, say=print) -> list[dict]:
    """Run `steps` steps of `changes` updates; one record per step."""
    from executor import Runner
    from executor.apps.cli import load_plan
    from executor.apps.follow import Follower, follow_conf

    work = Path(tempfile.mkdtemp(prefix="soak-"))
    folders = {name: work / name for name in SCHEMAS}
    for folder in folders.values():
        folder.mkdir()
    records: list[dict] = []
    runner = Runner(load_plan(str(PLAN)), conf=follow_conf(conf), spark=spark,
                    state=str(work / "state"))
    jvm = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    follower = Follower(runner, {n: str(f) for n, f in folders.items()}, str(work / "out"),
                        say=lambda *a, **k: None, metrics=records.append)
    gen = Changes(changes, seed)
    try:
        for t in range(steps):
            for name, table in gen.step(t).items():
                tmp = folders[name] / f".{t:06d}.parquet"
                pq.write_table(table, tmp)
                os.replace(tmp, folders[name] / f"{t:06d}.parquet")
            follower.step(follower.new_files())
            record = records[-1]
            record["jvm_heap_bytes"] = jvm.totalMemory() - jvm.freeMemory()
            record["state_frames"] = len(runner._store.manifest["frames"])
            if say and (t + 1) % max(1, steps // 20) == 0:
                say(f"step {t + 1}/{steps}: {record['seconds']['total']:.3f}s lag "
                    f"{record['lag_seconds']['max']:.3f}s rss "
                    f"{record['driver_rss_bytes'] / 2**20:.0f} MiB", flush=True)
    finally:
        runner.release_state()
    return records


def series(records: list[dict]) -> dict[str, list[float]]:
    """The per-step values whose trend is checked."""
    traces = [r["traces"].values() for r in records]
    return {"seconds": [r["seconds"]["total"] for r in records],
            "driver_rss_mib": [r["driver_rss_bytes"] / 2**20 for r in records],
            "jvm_heap_mib": [r["jvm_heap_bytes"] / 2**20 for r in records],
            "state_frames": [r["state_frames"] for r in records],
            "trace_records": [sum(x["records"] for x in t) for t in traces],
            "trace_mib": [sum(x["bytes"] + x["mirror_bytes"] for x in t) / 2**20
                          for t in traces]}


def trends(values: dict[str, list[float]], warmup: int) -> dict[str, dict]:
    """Per series after the warm-up: the fitted slope per step, the median, and the rise
    the slope makes across the run relative to the median. The slope is Theil-Sen's (the
    median of the slopes between every two steps): a leak rises step after step, while a
    few slow steps at one end (a pause of the machine) would swing a least-squares line."""
    out = {}
    for name, ys in values.items():
        y = np.asarray(ys[warmup:], dtype=float)
        i, j = np.triu_indices(len(y), 1)
        slope = float(np.median((y[j] - y[i]) / (j - i))) if len(y) > 1 else 0.0
        median = float(np.median(y)) if len(y) else 0.0
        rise = slope * len(y) / median if median else 0.0
        out[name] = {"slope_per_step": slope, "median": median, "relative_rise": rise}
    return out


def rising(found: dict[str, dict], tolerance: dict[str, float]) -> list[str]:
    """The series whose fitted rise across the run exceeds their tolerance."""
    return [f"{name}: fitted rise {t['relative_rise']:.0%} of its median over the run "
            f"(tolerance {tolerance[name]:.0%})" for name, t in found.items()
            if t["relative_rise"] > tolerance[name]]


# Latency is noisy on a shared machine; memory, traces and the frames the durable state
# names (one a step had been kept, issue 20) should be flat.
TOLERANCE = {"seconds": 0.5, "driver_rss_mib": 0.2, "jvm_heap_mib": 1.0,
             "state_frames": 0.25, "trace_records": 0.25, "trace_mib": 0.5}


def main(argv=None, spark=None) -> dict:
    p = common.base_parser(__doc__, 0)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--changes", type=int, default=100, help="updates per step (default 100)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    spark, conf = common.session(args.profile, args.conf, spark)
    records = soak(spark, conf, args.steps, args.changes, args.seed)
    warmup = max(1, args.steps // 10)
    values = series(records)
    found = trends(values, warmup)
    lags = [r["lag_seconds"]["max"] for r in records[warmup:]]
    payload = {**common.header("soak", argv, spark, conf), "steps": args.steps,
               "changes": args.changes, "warmup": warmup, "tolerance": TOLERANCE,
               "trends": found, "rising": rising(found, TOLERANCE),
               "placements": sorted({r["placement"] for r in records}),
               "lag_seconds": {"median": float(np.median(lags)), "p95":
                               float(np.percentile(lags, 95)), "max": float(max(lags))},
               "traces_after_warmup": records[warmup]["traces"],
               "traces_at_end": records[-1]["traces"], "series": values}
    path = common.save_json(common.results_path("soak", args.out), payload)
    print(f"wrote {path}")
    for name, t in found.items():
        print(f"{name}: median {t['median']:.3f}, slope {t['slope_per_step']:.3g}/step, "
              f"rise {t['relative_rise']:+.0%}")
    print("trend: " + ("; ".join(payload["rising"]) or "flat within tolerance"))
    if args.png:
        plot(values, path.with_suffix(".png"))
    return payload


def report(payload: dict) -> str:
    lag = payload["lag_seconds"]
    rows = [(name, t["median"], f"{t['slope_per_step']:.3g}", f"{t['relative_rise']:+.0%}",
             f"{payload['tolerance'][name]:.0%}") for name, t in payload["trends"].items()]
    return (f"{payload['steps']} steps of {payload['changes']} changes (join + sum + iterate, "
            f"durable, placement {', '.join(payload['placements'])}); trend fitted after "
            f"{payload['warmup']} warm-up steps\n\n"
            + common.markdown_table(["series", "median", "slope per step", "rise over run",
                                     "tolerance"], rows)
            + f"\n\nlag (file mtime to outputs written, no polling): median "
              f"{lag['median']:.3f} s, p95 {lag['p95']:.3f} s; trend: "
            + ("; ".join(payload["rising"]) or "flat within tolerance") + "\n")


def plot(values: dict[str, list[float]], path: Path) -> None:
    plt = common.pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(len(values), 1, figsize=(8, 2 * len(values)), sharex=True)
    for ax, (name, ys) in zip(axes, values.items()):
        ax.plot(ys, lw=0.8)
        ax.set_ylabel(name, fontsize=8)
    axes[-1].set_xlabel("step")
    common.save_figure(fig, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
